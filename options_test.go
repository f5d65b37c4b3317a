package acpp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

// Options audit (2026-11-28): every option NewQueue or Connect accepts
// takes effect, or the constructor fails with ErrOption naming it.

// The runtime knows a device by its ID, so NewQueue refuses a nil device
// and two devices with one ID (WithDevices(f, f), two fakes of one index,
// one that takes an ID of the queue's own devices) with ErrOption; before,
// a nil device panicked and the others opened a queue listing fake:0
// twice, whose memories shared one name. WithDevice naming a device twice
// selects it once, as WithKind does (it was listed twice, and Split gave
// it two chunks).
func TestQueueDevicesNeedDistinctIDs(t *testing.T) {
	f := devicetest.NewFake(devicetest.FakeConfig{})
	same := devicetest.NewFake(devicetest.FakeConfig{})
	t.Cleanup(func() { f.Close(); same.Close() })
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"nil device", []Option{WithDevices(f, nil)}, "nil device (argument 1)"},
		{"one device twice", []Option{WithDevices(f, f)}, "two devices of the queue are fake:0"},
		{"two devices of one ID", []Option{WithDevices(f), WithDevices(same)}, "two devices of the queue are fake:0"},
	} {
		var q *Queue
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = errors.New("panic")
				}
			}()
			q, err = NewQueue(context.Background(), tc.opts...)
		}()
		if q != nil {
			q.Close()
		}
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewQueue with %s: %v, want ErrOption saying %q", tc.name, err, tc.want)
		}
	}
	q := newQueue(t, WithDevice(CPU, 0), WithDevice(CPU, 0))
	var ids []string
	for _, d := range q.Devices() {
		ids = append(ids, d.ID.String())
	}
	if !slices.Equal(ids, []string{"cpu:0"}) {
		t.Errorf("WithDevice(CPU, 0) twice: queue devices %v, want [cpu:0]", ids)
	}
}

// WithKind of no device kind is ErrOption naming it on both engines; a
// queue of local devices called it ErrNoDevice ("none of kinds") and a
// cluster queue coordinator.ErrInvalidConfig, neither ErrOption.
func TestWithKindOfNoKindRefusedOnBothEngines(t *testing.T) {
	const want = "WithKind(kind(9)) is no device kind"
	q, err := NewQueue(context.Background(), WithKind(device.Kind(9)))
	if q != nil {
		q.Close()
	}
	if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), want) {
		t.Errorf("NewQueue(WithKind(9)) = %v, want ErrOption saying %q", err, want)
	}
	c := coordtest.Start(t, 1, coordtest.Options{})
	q, err = Connect(testCtx(t), c.Addrs(), WithCredentials(c.Dir, "alice"), WithKind(device.Kind(9)))
	if q != nil {
		q.Close()
	}
	if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), want) {
		t.Errorf("Connect(WithKind(9)) = %v, want ErrOption saying %q", err, want)
	}
}

// WithLabels: labels without a label to match are refused (they selected
// every node, the labels ignored); the labels of several WithLabels add
// up (the last map replaced the earlier ones, so a node that carried
// both labels, given by two calls, was not selected).
func TestWithLabelsTakesEffect(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	creds := WithCredentials(c.Dir, "alice")
	q, err := Connect(testCtx(t), c.Addrs(), creds, WithLabels(map[string][]string{"n0": {"gpu"}}))
	if q != nil {
		q.Close()
	}
	if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "WithLabels names no label to match") {
		t.Errorf("Connect(WithLabels(labels)) = %v, want ErrOption saying it names no label to match", err)
	}
	q = connect(t, c, WithLabels(map[string][]string{"n0": {"gpu"}, "n1": {"gpu"}}, "gpu"),
		WithLabels(map[string][]string{"n1": {"fast"}}, "fast"))
	if got := q.ClusterDevices(); !slices.Equal(got, []string{"n1/cpu:0"}) {
		t.Errorf("WithLabels(gpu on n0, n1), WithLabels(fast on n1): devices %v, want [n1/cpu:0]", got)
	}
	q = connect(t, c, WithLabels(map[string][]string{"n0": {"gpu"}}), WithLabels(nil, "gpu"))
	if got := q.ClusterDevices(); !slices.Equal(got, []string{"n0/cpu:0"}) {
		t.Errorf("WithLabels(labels), WithLabels(nil, gpu): devices %v, want [n0/cpu:0]", got)
	}
}

// WithNodes with an empty name, or with none, is ErrOption before Connect
// dials anything (it was ErrNoDevice, "WithNodes() selects none", after
// connecting to every node).
func TestWithNodesOfNoNameRefused(t *testing.T) {
	for _, names := range [][]string{{""}, nil, {"n0", ""}} {
		q, err := Connect(testCtx(t), []string{"127.0.0.1:9"}, WithCredentials(t.TempDir(), "alice"), WithNodes(names...))
		if q != nil {
			q.Close()
		}
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "names no node") {
			t.Errorf("Connect(WithNodes(%q)) = %v, want ErrOption saying it names no node", names, err)
		}
	}
}

// The queue's context ending refuses new command groups on both engines,
// but the buffers can still be read, written back and closed: Close
// writes a slice-backed buffer back and frees its allocations. A queue of
// local devices refused the host groups these need ("queue context done,
// submit refused"), so Buffer.Close failed and kept its allocations (the
// budget stayed in use), while a cluster queue did all of it.
func TestBuffersCloseAfterQueueContextEnds(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	for _, eng := range []string{"embedded", "cluster"} {
		ctx, cancel := context.WithCancel(context.Background())
		var q *Queue
		var err error
		if eng == "embedded" {
			q, err = NewQueue(ctx, WithDevice(CPU, 0), WithMemoryLimit(MemoryLimit{Bytes: 1 << 20}))
		} else {
			q, err = Connect(ctx, c.Addrs(), WithCredentials(c.Dir, "alice"), WithCoordinator(func(cfg *coordinator.Config) {
				cfg.Client = c.Config().Client
			}))
		}
		if err != nil {
			t.Fatal(err)
		}
		data := make([]float32, 1024)
		b, err := NewBufferFrom(q, data, R1(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		other, err := NewBuffer[float32](q, R1(1024))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range []*Buffer[float32]{b, other} {
			if err := groupErr(context.Background(), q, func(h *Handler) error {
				h.Launch("fill_f32", R1(1024), Write(h, x, NoInit), Scalar(float32(2)))
				return nil
			}); err != nil {
				t.Fatalf("%s: fill: %v", eng, err)
			}
		}
		cancel()
		if _, err := q.Submit(func(h *Handler) error {
			h.Launch("fill_f32", R1(1024), Write(h, b, NoInit), Scalar(float32(3)))
			return nil
		}); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Submit after the queue's context ended: %v, want context.Canceled", eng, err)
		}
		if got, err := other.Read(context.Background()); err != nil || got[1023] != 2 {
			t.Errorf("%s: Read after the queue's context ended: %v (element 1023 = %v, want 2)", eng, err, got)
		}
		if err := other.Close(); err != nil {
			t.Errorf("%s: Close of a buffer after the queue's context ended: %v", eng, err)
		}
		if eng == "embedded" {
			if used := q.MemoryBudgets()[0].Used; used != 0 {
				t.Errorf("%s: %d bytes of the host budget in use after Close, want 0", eng, used)
			}
		}
		if err := q.Close(); err != nil {
			t.Errorf("%s: queue Close after its context ended: %v", eng, err)
		}
		if data[0] != 2 || data[1023] != 2 {
			t.Errorf("%s: the slice after Close holds %v … %v, want the group's 2", eng, data[0], data[1023])
		}
	}
}

// A split naming a device twice is ErrSplit on both engines; a queue of
// local devices gave that device two chunks and a cluster queue four (the
// DeviceID on each of two nodes, twice).
func TestSplitDeviceNamedTwiceRefused_C4(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	cpu0 := DeviceID{Kind: CPU}
	for _, tc := range []struct {
		eng  string
		q    *Queue
		opt  SubmitOption
		want string
	}{
		{"embedded", newQueue(t, WithCPUDevices(2)), Split(cpu0, cpu0), "Split names device cpu:0 twice"},
		{"cluster", connect(t, c), Split(cpu0, cpu0), "Split names device cpu:0 twice"},
		{"cluster", connect(t, c), SplitWith(SplitOpts{ClusterDevices: []string{"n1/cpu:0", "n0/cpu:0", "n1/cpu:0"}}), "ClusterDevices names n1/cpu:0 twice"},
	} {
		b, err := NewBuffer[float32](tc.q, R1(1024))
		if err != nil {
			t.Fatal(err)
		}
		before := tc.q.Stats().Groups
		_, err = tc.q.Submit(func(h *Handler) error {
			h.Launch("fill_f32", R1(1024), Write(h, b, NoInit, Map(OneToOne())), Scalar(float32(1)))
			return nil
		}, tc.opt)
		if !errors.Is(err, ErrSplit) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrSplit saying %q", tc.eng, err, tc.want)
		}
		tc.q.Wait(context.Background())
		if n := tc.q.Stats().Groups - before; n != 0 {
			t.Errorf("%s: %d groups ran", tc.eng, n)
		}
	}
}

// Buffer options given twice with different values are ErrOption naming
// them, as Submit's are (the later silently replaced the earlier), and so
// is PageSize() with no size (it meant the default); the same value twice
// is no error. Both engines.
func TestBufferOptionsGivenTwiceRefused(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	for _, q := range []*Queue{newQueue(t), connect(t, c)} {
		for _, tc := range []struct {
			opts []BufferOption
			want string
		}{
			{[]BufferOption{BufferName("a"), BufferName("b")}, "BufferName given more than once"},
			{[]BufferOption{PageSize(16, 16), BufferName("a"), PageSize(16, 32)}, "PageSize given more than once"},
			{[]BufferOption{PageSize(16, 16), PageSize(16)}, "PageSize given more than once"},
			{[]BufferOption{PageSize()}, "PageSize() names no size"},
		} {
			b, err := NewBuffer[float32](q, R2(64, 64), tc.opts...)
			if b != nil {
				b.Close()
			}
			if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewBuffer with %s: %v, want ErrOption", tc.want, err)
			}
			b, err = NewBufferFrom(q, make([]float32, 64*64), R2(64, 64), tc.opts...)
			if b != nil {
				b.Close()
			}
			if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewBufferFrom with %s: %v, want ErrOption", tc.want, err)
			}
		}
		b, err := NewBuffer[float32](q, R2(64, 64), BufferName("a"), PageSize(16, 64), BufferName("a"), PageSize(16, 64))
		if err != nil {
			t.Fatalf("the same options twice: %v", err)
		}
		if ps := b.PageSize(); ps[0] != 16 || ps[1] != 64 {
			t.Errorf("PageSize(16, 64) twice: page size %v", ps)
		}
		b.Close()
	}
}

// A group cancelled with the queue's context (not yet started) leaves its
// buffer as it was: the copies it planned still run, since coherence
// counts their pages valid where they go. They were skipped with the
// group, so a Read after the context ended returned what the device's
// memory held (zeros), and Close wrote that back over the program's slice.
func TestCancelledGroupLeavesBufferAsItWas(t *testing.T) {
	registerTestKernels()
	for _, inOrder := range []bool{false, true} {
		f := devicetest.NewFake(devicetest.FakeConfig{Queues: 2, InOrder: inOrder})
		t.Cleanup(func() { f.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		q, err := NewQueue(ctx, WithDevices(f), WithDevice(device.KindFake, 0), WithDevice(CPU, 0))
		if err != nil {
			t.Fatal(err)
		}
		data := make([]float32, 1024)
		for i := range data {
			data[i] = 1
		}
		b, err := NewBufferFrom(q, data, R1(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		// The group waits for the open host access: it starts only after
		// the context ended.
		acc, err := HostAccess(context.Background(), b, ModeReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		ev := add(t, q, b, 5, fakeID, false)
		cancel()
		acc.Close()
		if err := ev.Wait(context.Background()); !errors.Is(err, context.Canceled) {
			t.Errorf("in-order %v: the group after the context ended: %v, want context.Canceled", inOrder, err)
		}
		if got, err := b.Read(context.Background()); err != nil || got[0] != 1 || got[1023] != 1 {
			t.Errorf("in-order %v: Read after a cancelled group: %v, elements %v … %v, want 1 (the group did not run)", inOrder, err, got[0], got[1023])
		}
		if err := b.Close(); err != nil {
			t.Errorf("in-order %v: Close: %v", inOrder, err)
		}
		if data[0] != 1 || data[1023] != 1 {
			t.Errorf("in-order %v: the slice after Close holds %v … %v, want 1 (the group did not run)", inOrder, data[0], data[1023])
		}
		q.Close()
	}
}

// Within given twice with different regions to one accessor or host
// access, or Map given twice, is ErrOption: the later replaced the earlier
// without a word, as BufferName twice did.
func TestAccessOptionsGivenTwiceRefused(t *testing.T) {
	q := newQueue(t)
	b, err := NewBuffer[float32](q, R1(64))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		opts []AccessOption
		want string
	}{
		{[]AccessOption{Within(I1(0), R1(8)), Within(I1(8), R1(8))}, "Within given twice"},
		{[]AccessOption{Map(OneToOne()), Map(OneToOne())}, "Map given twice"},
	} {
		_, err := q.Submit(func(h *Handler) error {
			a := WriteRaw(h, b, tc.opts...)
			h.SingleTask(func() { _ = a })
			return nil
		})
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("an accessor with %s: Submit = %v, want ErrOption", tc.want, err)
		}
	}
	twice, err := HostRead(context.Background(), b, Within(I1(0), R1(8)), Within(I1(8), R1(8)))
	if err == nil {
		twice.Close() // taken: it would hold the buffer
	}
	if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "Within given twice") {
		t.Errorf("HostRead with Within twice = %v, want ErrOption", err)
	}
	// The same region twice is one region.
	ha, err := HostRead(context.Background(), b, Within(I1(0), R1(8)), Within(I1(0), R1(8)))
	if err != nil {
		t.Fatalf("HostRead with the same Within twice: %v", err)
	}
	ha.Close()
}
