package acpp

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

// Test kernels with Go implementations that work on any device's memory
// through Work.Data (so they also run on non-host-visible fakes).
var registerOnce sync.Once

func f32s(b []byte) func(i int) (get func() float32, set func(float32)) {
	return func(i int) (func() float32, func(float32)) {
		return func() float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) },
			func(v float32) { binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v)) }
	}
}

func registerTestKernels() {
	registerOnce.Do(func() {
		// acpptest.add: a[i] += s over the launch's 1D range (linear index
		// into the accessor's buffer, plus its access offset when ranged).
		device.MustRegister(device.Kernel{
			Name: "acpptest.add",
			Params: []device.Param{
				{Name: "a", Kind: device.ArgRangedAccessor, Space: device.Global, ElemSize: 4},
				{Name: "s", Kind: device.ArgScalar, Space: device.Private, ElemSize: 4},
			},
			Go: func(w *device.Work) {
				a := w.Args[0]
				s := math.Float32frombits(binary.LittleEndian.Uint32(w.Args[1].Scalar))
				at := f32s(w.Data[0])
				base := (a.AccessOffset[0]*a.Range[1]+a.AccessOffset[1])*a.Range[2] + a.AccessOffset[2]
				for i := w.Lo[2]; i < w.Hi[2]; i++ {
					get, set := at(base + i)
					set(get() + s)
				}
			},
		})
		// acpptest.args records the kinds of its arguments.
		device.MustRegister(device.Kernel{
			Name: "acpptest.args",
			Params: []device.Param{
				{Name: "raw", Kind: device.ArgPointer, Space: device.GlobalDevice},
				{Name: "unranged", Kind: device.ArgAccessor, Space: device.Global},
				{Name: "ranged", Kind: device.ArgRangedAccessor, Space: device.Generic},
				{Name: "local", Kind: device.ArgLocal, Space: device.Local},
			},
			Go: func(w *device.Work) {
				seenMu.Lock()
				defer seenMu.Unlock()
				seen = append([]device.Arg(nil), w.Args...)
			},
		})
		// acpptest.hostptr takes a host USM pointer.
		device.MustRegister(device.Kernel{
			Name:   "acpptest.devptr",
			Params: []device.Param{{Name: "p", Kind: device.ArgPointer, Space: device.GlobalDevice}},
			Go:     func(*device.Work) {},
		})
		// acpptest.ptxonly has no Go implementation.
		device.MustRegister(device.Kernel{
			Name: "acpptest.ptxonly",
			PTX:  &device.PTX{Module: []byte("// none"), Entry: "k"},
		})
	})
}

var (
	seenMu sync.Mutex
	seen   []device.Arg
)

// gpuQueue is a queue whose default device is a non-host-unified fake (a
// discrete GPU stand-in), with the CPU as second device.
func gpuQueue(t *testing.T, opts ...Option) (*Queue, *devicetest.Fake) {
	t.Helper()
	registerTestKernels()
	f := devicetest.NewFake(devicetest.FakeConfig{Queues: 2})
	t.Cleanup(func() { f.Close() })
	q := newQueue(t, append([]Option{WithDevices(f), WithDevice(device.KindFake, 0), WithDevice(CPU, 0)}, opts...)...)
	return q, f
}

var fakeID = DeviceID{Kind: device.KindFake, Index: 0}
var cpuID = DeviceID{Kind: CPU, Index: 0}

// add submits acpptest.add over the whole of b on device id.
func add(t *testing.T, q *Queue, b *Buffer[float32], s float32, id DeviceID, noInit bool) *Event {
	t.Helper()
	var o []AccessOption
	if noInit {
		o = append(o, NoInit)
	}
	return must(q.Submit(func(h *Handler) error {
		a := ReadWrite(h, b, o...)
		h.Launch("acpptest.add", R1(b.Len()), a, Scalar(s))
		return nil
	}, On(id)))
}

func waitAll(t *testing.T, q *Queue) {
	t.Helper()
	if err := q.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// WithAcceleratorsFirst: with an accelerator in the queue (a fake GPU) it is
// the default device and the CPU follows; without one the CPU stays the
// default; a selection (WithKind, WithDevice) overrides it.
func TestAcceleratorsFirst(t *testing.T) {
	f := devicetest.NewFake(devicetest.FakeConfig{})
	t.Cleanup(func() { f.Close() })
	var got []string
	for _, opts := range [][]Option{
		{WithDevices(f), WithAcceleratorsFirst()},
		{WithDevices(f)},
		{WithAcceleratorsFirst()},
		{WithDevices(f), WithAcceleratorsFirst(), WithKind(CPU)},
	} {
		q := newQueue(t, opts...)
		var ids []string
		for _, d := range q.Devices() {
			if d.ID.Kind == CPU || d.ID.Kind == device.KindFake { // GPUs come after the fake (gpu builds)
				ids = append(ids, d.ID.String())
			}
		}
		got = append(got, strings.Join(ids, " "))
	}
	want := []string{"fake:0 cpu:0", "cpu:0 fake:0", "cpu:0", "cpu:0"}
	if !slices.Equal(got, want) {
		t.Errorf("queue devices %q, want %q", got, want)
	}
}
