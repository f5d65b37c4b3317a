package cpu

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/device"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func enqueueWait(t testing.TB, d device.Device, op device.Op) error {
	t.Helper()
	ch := make(chan error, 1)
	if err := d.Enqueue(0, op, func(err error) { ch <- err }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("op did not complete")
		return nil
	}
}

func TestFlatLaunchCoversEveryItemOnce(t *testing.T) {
	d := New(0, 3)
	defer d.Close()
	for _, g := range [][3]int{{1, 1, 1}, {1, 1, 5000}, {1, 1, 100000}, {1, 37, 300}, {7, 13, 11}, {1, 1, 0}} {
		n := g[0] * g[1] * g[2]
		hits := make([]atomic.Int32, n)
		op := device.LaunchOp{Name: "count", Range: device.NDRange{Global: g}, Func: func(w *device.Work) {
			for i := w.Lo[0]; i < w.Hi[0]; i++ {
				for j := w.Lo[1]; j < w.Hi[1]; j++ {
					for k := w.Lo[2]; k < w.Hi[2]; k++ {
						hits[(i*g[1]+j)*g[2]+k].Add(1)
					}
				}
			}
		}}
		if err := enqueueWait(t, d, op); err != nil {
			t.Fatalf("launch %v: %v", g, err)
		}
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("range %v: item %d ran %d times, want 1", g, i, h)
			}
		}
	}
}

func TestGroupedLaunchLocalMemoryPerGroup_A3(t *testing.T) {
	d := New(0, 2)
	defer d.Close()
	out, _ := d.Alloc(device.MemDevice, 8*8)
	// 8 groups of 16 items; phase 1 stores ids in local memory, phase 2
	// (after the barrier) sums them: any sharing between groups breaks it.
	op := device.LaunchOp{Name: "groupsum", Range: device.NDRange{Global: [3]int{1, 1, 128}, Local: [3]int{1, 1, 16}},
		Args: []device.Arg{{Kind: device.ArgPointer, Mem: out, ElemSize: 8}, {Kind: device.ArgLocal, LocalBytes: 16 * 8}},
		Func: func(w *device.Work) {
			loc := bytesAs[int64](w.Local[1])
			for i := w.Lo[2]; i < w.Hi[2]; i++ {
				loc[i-w.Lo[2]] = int64(i)
			}
			var s int64
			for i := range 16 {
				s += loc[i]
			}
			bytesAs[int64](w.Data[0])[w.Group[2]] = s
		}}
	if err := enqueueWait(t, d, op); err != nil {
		t.Fatal(err)
	}
	res := bytesAs[int64](out.Host)
	for g := range 8 {
		want := int64(16*16*g + 120)
		if res[g] != want {
			t.Errorf("group %d sum = %d, want %d", g, res[g], want)
		}
	}
}

func TestKernelPanicBecomesError(t *testing.T) {
	d := New(0, 2)
	defer d.Close()
	op := device.LaunchOp{Name: "oob", Range: device.NDRange{Global: [3]int{1, 1, 100000}}, Func: func(w *device.Work) {
		var s []int
		_ = s[w.Lo[2]+5]
	}}
	err := enqueueWait(t, d, op)
	if !errors.Is(err, device.ErrKernelPanic) {
		t.Fatalf("launch = %v, want ErrKernelPanic", err)
	}
	if err := enqueueWait(t, d, device.LaunchOp{Name: "ok", Range: device.NDRange{Global: [3]int{1, 1, 10}}, Func: func(*device.Work) {}}); err != nil {
		t.Fatalf("launch after a panic = %v", err)
	}
}

// A kernel that calls runtime.Goexit (t.Fatal in a kernel) ends its worker
// goroutine, which no recover stops: the launch fails instead of never
// finishing, and the device keeps all its workers.
func TestKernelGoexitFailsLaunch(t *testing.T) {
	d := New(0, 2)
	defer d.Close()
	for range 3 { // more than the workers: each Goexit costs the pool one
		op := device.LaunchOp{Name: "goexit", Range: device.NDRange{Global: [3]int{1, 1, 100000}}, Func: func(w *device.Work) {
			if w.Lo[2] == 0 {
				runtime.Goexit()
			}
		}}
		if err := enqueueWait(t, d, op); !errors.Is(err, device.ErrKernelPanic) || !strings.Contains(err.Error(), "Goexit") {
			t.Fatalf("launch = %v, want ErrKernelPanic naming Goexit", err)
		}
	}
	// Both workers still run: two ops that wait for each other finish.
	var started atomic.Int32
	op := device.LaunchOp{Name: "both", Range: device.NDRange{Global: [3]int{1, 1, 1}}, Func: func(*device.Work) {
		started.Add(1)
		for started.Load() < 2 {
			runtime.Gosched()
		}
	}}
	ch := make(chan error, 2)
	for q := range 2 {
		if err := d.Enqueue(q, op, func(err error) { ch <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("two ops on two workers did not both run: a worker was lost")
		}
	}
}

func TestIndependentOpsRunConcurrently_D4(t *testing.T) {
	d := New(0, 2)
	defer d.Close()
	started := make(chan struct{})
	release := make(chan struct{})
	a := device.LaunchOp{Name: "a", Range: device.NDRange{Global: [3]int{1, 1, 1}}, Func: func(*device.Work) {
		close(started)
		<-release
	}}
	b := device.LaunchOp{Name: "b", Range: device.NDRange{Global: [3]int{1, 1, 1}}, Func: func(*device.Work) {
		<-started
		close(release)
	}}
	ca, cb := make(chan error, 1), make(chan error, 1)
	if err := d.Enqueue(0, a, func(err error) { ca <- err }); err != nil {
		t.Fatal(err)
	}
	if err := d.Enqueue(1, b, func(err error) { cb <- err }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []chan error{ca, cb} {
		select {
		case err := <-c:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("two independent launches did not run at the same time")
		}
	}
}

func TestCopyFillAndErrors(t *testing.T) {
	devs, err := Open(context.Background(), device.OpenConfig{Devices: 2, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	defer devs[1].Close()
	d := devs[0]
	if !d.Info().Caps.HostUnified || d.Info().ID.String() != "cpu:0" || devs[1].Info().ID.String() != "cpu:1" {
		t.Fatalf("Info() = %+v", d.Info())
	}
	a, _ := d.Alloc(device.MemDevice, 64)
	b, _ := devs[1].Alloc(device.MemHost, 64)
	if a.Addr%8 != 0 || a.Addr == 0 {
		t.Errorf("address %#x not 8-byte aligned", a.Addr)
	}
	if err := enqueueWait(t, d, device.FillOp{Dst: a, Bytes: 64, Pattern: []byte{1, 2, 3, 4}}); err != nil {
		t.Fatal(err)
	}
	lin := func(m *device.Mem) device.Region { return device.Region{Mem: m, Extent: [3]int{1, 1, 16}} }
	if err := enqueueWait(t, d, device.CopyOp{Src: lin(a), Dst: lin(b), Size: [3]int{1, 1, 16}, ElemSize: 4}); err != nil {
		t.Fatal(err)
	}
	if b.Host[63] != 4 || b.Host[4] != 1 {
		t.Errorf("copy result %v", b.Host[:8])
	}
	foreign := &device.Mem{Device: device.ID{Kind: device.KindCUDA}, Bytes: 64}
	if err := d.Enqueue(0, device.FillOp{Dst: foreign, Bytes: 4, Pattern: []byte{0}}, nil); !errors.Is(err, device.ErrUnsupported) {
		t.Errorf("fill of device memory = %v, want ErrUnsupported", err)
	}
	if err := d.Enqueue(0, device.LaunchOp{Name: "k", Kernel: &device.Kernel{Name: "k"}}, nil); !errors.Is(err, device.ErrNoImplementation) {
		t.Errorf("launch without Go implementation = %v, want ErrNoImplementation", err)
	}
	if err := d.Enqueue(0, device.LaunchOp{Name: "k", Func: func(*device.Work) {}, Range: device.NDRange{Global: [3]int{1, 1, 10}, Local: [3]int{1, 1, 3}}}, nil); !errors.Is(err, device.ErrBadOp) {
		t.Errorf("launch with bad group size = %v, want ErrBadOp", err)
	}
	d.Close()
	if err := d.Enqueue(0, device.FillOp{Dst: a, Bytes: 4, Pattern: []byte{0}}, nil); !errors.Is(err, device.ErrClosed) {
		t.Errorf("enqueue after Close = %v, want ErrClosed", err)
	}
}

// A work-group's local memory is bounded by LocalMemBytes, which the device
// reports and enforces itself: 16 GiB of it once crashed the process with
// fatal out of memory (A3).
func TestLocalMemoryLimit_A3(t *testing.T) {
	d := New(0, 2)
	defer d.Close()
	if got := d.Info().Caps.LocalMemBytes; got != LocalMemBytes {
		t.Fatalf("Caps.LocalMemBytes = %d, want %d", got, LocalMemBytes)
	}
	launch := func(local ...int) device.LaunchOp {
		op := device.LaunchOp{Name: "loc", Range: device.NDRange{Global: [3]int{1, 1, 64}, Local: [3]int{1, 1, 16}},
			Func: func(w *device.Work) {
				for i, a := range w.Args {
					if len(w.Local[i]) != a.LocalBytes {
						panic("local memory of the wrong size")
					}
				}
			}}
		for _, n := range local {
			op.Args = append(op.Args, device.Arg{Kind: device.ArgLocal, LocalBytes: n})
		}
		return op
	}
	for _, local := range [][]int{{16 << 30}, {LocalMemBytes / 2, LocalMemBytes/2 + 1}, {-1}} {
		if err := enqueueWait(t, d, launch(local...)); !errors.Is(err, device.ErrBadOp) || !strings.Contains(err.Error(), "bytes of local memory a work-group of cpu:0 may have") {
			t.Errorf("launch with local memory %v = %v, want ErrBadOp naming the limit", local, err)
		}
	}
	if err := enqueueWait(t, d, launch(LocalMemBytes/2, LocalMemBytes/2)); err != nil {
		t.Errorf("launch with LocalMemBytes of local memory: %v", err)
	}
}
