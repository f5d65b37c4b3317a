package acpp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// connect opens a cluster queue on c's nodes with client alice's
// credentials (by directory, as acpp-submit's --credentials/--client) and
// the cluster's shared client; it is closed when the test ends.
func connect(t *testing.T, c *coordtest.Cluster, opts ...Option) *Queue {
	t.Helper()
	return connectTraced(t, c, nil, opts...)
}

// connectTraced is connect with onDone called with each finished group's
// trace.
func connectTraced(t *testing.T, c *coordtest.Cluster, onDone func(coordinator.GroupTrace), opts ...Option) *Queue {
	t.Helper()
	base := c.Config()
	opts = append([]Option{WithCredentials(c.Dir, "alice"), WithCoordinator(func(cfg *coordinator.Config) {
		cfg.Client, cfg.Logger, cfg.LostTimeout, cfg.PollInterval = base.Client, base.Logger, base.LostTimeout, base.PollInterval
		cfg.OnGroupDone = onDone
	})}, opts...)
	q, err := Connect(testCtx(t), c.Addrs(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// saxpyProgram is the same program for an embedded and a cluster queue: it
// runs y = a*x + y three times with named kernels, pinning each run to one
// of pins (nil: the default device / placement), and returns ys after
// Close wrote the buffer back into it.
func saxpyProgram(t *testing.T, q *Queue, n int, pins []SubmitOption) []float32 {
	t.Helper()
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i)*0.5+0.25, float32(n-i)/3
	}
	x, err := NewBufferFrom(q, xs, R1(n))
	if err != nil {
		t.Fatal(err)
	}
	y, err := NewBufferFrom(q, ys, R1(n))
	if err != nil {
		t.Fatal(err)
	}
	var last *Event
	for it := range 3 {
		var opts []SubmitOption
		if len(pins) > 0 {
			opts = append(opts, pins[it%len(pins)])
		}
		last, err = q.Submit(func(h *Handler) error {
			h.Launch("saxpy", R1(n), Scalar(float32(1.5)), ReadRaw(h, x), ReadWriteRaw(h, y))
			return nil
		}, append(opts, Named("saxpy"))...)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := last.Wait(testCtx(t)); err != nil {
		t.Fatalf("event: %v", err)
	}
	if last.Status() != Complete || last.Timing().Ended.IsZero() {
		t.Errorf("finished event: status %v, timing %+v", last.Status(), last.Timing())
	}
	got, err := y.Read(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ys) {
		t.Errorf("Buffer.Read and the written-back slice differ")
	}
	return ys
}

// jacobiProgram runs iters Jacobi sweeps with the jacobi2d kernel over a
// rows×cols grid (one row per page), pinning sweep i to pins[i%len(pins)].
func jacobiProgram(t *testing.T, q *Queue, rows, cols, iters int, pins []SubmitOption) []float32 {
	t.Helper()
	in := make([]float32, rows*cols)
	for i := range in {
		in[i] = float32((i*7919)%1000) / 10
	}
	a, err := NewBufferFrom(q, in, R2(rows, cols), CopyData(), PageSize(1, cols))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBuffer[float32](q, R2(rows, cols), PageSize(1, cols))
	if err != nil {
		t.Fatal(err)
	}
	for i := range iters {
		var opts []SubmitOption
		if len(pins) > 0 {
			opts = append(opts, pins[i%len(pins)])
		}
		if _, err := q.Submit(func(h *Handler) error {
			h.Launch("jacobi2d", R2(rows, cols), Read(h, a), Write(h, b, NoInit))
			return nil
		}, opts...); err != nil {
			t.Fatal(err)
		}
		a, b = b, a
	}
	ha, err := HostRead(testCtx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	out := ha.Copy()
	ha.Close()
	if err := q.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return out
}

// The same programs (named kernels, accessors, scalars, host reads and
// write-back) give bit for bit the embedded results on a three-node
// cluster, placed by the coordinator or pinned node by node.
func TestConnectSameProgramAsEmbedded_C3(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	local := newQueue(t)
	const n = 10000
	const rows, cols, iters = 24, 32, 5
	wantSaxpy := saxpyProgram(t, local, n, nil)
	wantJacobi := jacobiProgram(t, local, rows, cols, iters, nil)
	nodes := []SubmitOption{OnNode("n0", DeviceID{Kind: CPU}), OnNode("n1", DeviceID{Kind: CPU}), OnNode("n2", DeviceID{Kind: CPU})}

	q := connect(t, c)
	if got := q.ClusterDevices(); !slices.Equal(got, []string{"n0/cpu:0", "n1/cpu:0", "n2/cpu:0"}) {
		t.Fatalf("ClusterDevices = %v", got)
	}
	if d := q.Device(); d.ID != (DeviceID{Kind: CPU}) || d.Name != "n0/cpu:0" {
		t.Errorf("Device() = %+v", d)
	}
	for _, pins := range [][]SubmitOption{nil, nodes} {
		if got := saxpyProgram(t, q, n, pins); !slices.Equal(got, wantSaxpy) {
			t.Errorf("saxpy on the cluster (pinned %v) differs from embedded", pins != nil)
		}
		if got := jacobiProgram(t, q, rows, cols, iters, pins); !slices.Equal(got, wantJacobi) {
			t.Errorf("Jacobi on the cluster (pinned %v) differs from embedded", pins != nil)
		}
	}
	if c.PeerBytes() == 0 {
		t.Errorf("pinned sweeps on three nodes moved no pages between them")
	}
	if err := q.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// Go closures and host-side copies are refused at Submit with an error
// that says what to do; selection options work; options of the other
// constructor are refused.
func TestConnectRefusesClosures(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c, WithNodes("n1"), WithKind(CPU))
	if got := q.ClusterDevices(); !slices.Equal(got, []string{"n1/cpu:0"}) {
		t.Errorf("WithNodes(n1): devices %v", got)
	}
	b, err := NewBuffer[float32](q, R1(64))
	if err != nil {
		t.Fatal(err)
	}
	for name, cgf := range map[string]func(h *Handler) error{
		"ParallelFor": func(h *Handler) error {
			a := Write(h, b)
			h.ParallelFor(R1(64), func(it Item) { a.Set(it.ID(0), 1) })
			return nil
		},
		"SingleTask":    func(h *Handler) error { h.SingleTask(func() {}); return nil },
		"ParallelForND": func(h *Handler) error { h.ParallelForND(R1(64), R1(16), func(Group) {}); return nil },
	} {
		_, err := q.Submit(cgf)
		if !errors.Is(err, ErrClosureOnCluster) || !strings.Contains(err.Error(), "closures cannot run on a cluster; register a named kernel with Go and PTX implementations and use h.Launch") {
			t.Errorf("%s on a cluster queue: %v, want ErrClosureOnCluster", name, err)
		}
	}
	if _, err := Malloc[float32](q, 4, 1); !errors.Is(err, ErrNotOnCluster) {
		t.Errorf("Malloc on a cluster queue: %v", err)
	}
	if _, err := q.Submit(func(h *Handler) error {
		h.Launch("fill_f32", R1(64), Write(h, b, NoInit), Scalar(float32(2)))
		return nil
	}, On(DeviceID{Kind: CPU})); err != nil {
		t.Fatalf("named kernel after refusals: %v", err)
	}
	// Ranged placeholders travel as ranged accessors.
	b2, err := NewBuffer[float32](q, R1(64))
	if err != nil {
		t.Fatal(err)
	}
	src, dst := ReadPlaceholderRange(b, R1(32), I1(0)), WritePlaceholderRange(b2, R1(32), I1(32), NoInit)
	if _, err := q.Submit(func(h *Handler) error {
		h.Launch("copy_f32", R1(32), src.Require(h), dst.Require(h))
		return nil
	}); err != nil {
		t.Fatalf("named kernel with placeholders: %v", err)
	}
	if got, err := b2.Read(testCtx(t)); err != nil || got[32] != 2 || got[63] != 2 {
		t.Fatalf("ranged copy on the cluster: %v, %v", got[32:], err)
	}
	got, err := b.Read(testCtx(t))
	if err != nil || got[0] != 2 || got[63] != 2 {
		t.Fatalf("Read = %v, %v", got[:2], err)
	}
	if _, err := q.Submit(func(h *Handler) error { h.Launch("empty", R1(1)); return nil }, OnNode("n0", DeviceID{Kind: CPU})); !errors.Is(err, ErrNoDevice) {
		t.Errorf("pinned to a node outside the selection: %v", err)
	}
	if _, err := NewQueue(context.Background(), WithNodes("n0")); err == nil {
		t.Errorf("NewQueue took WithNodes")
	}
	// A selection no device of the cluster matches is acpp.ErrNoDevice (and
	// the coordinator's, which names what was asked).
	if _, err := Connect(testCtx(t), c.Addrs(), WithCredentials(c.Dir, "alice"), WithNodes("n9")); !errors.Is(err, ErrNoDevice) || !errors.Is(err, coordinator.ErrNoDevice) {
		t.Errorf("Connect with WithNodes(n9): %v, want ErrNoDevice", err)
	}
	if _, err := Connect(context.Background(), c.Addrs(), WithWorkers(2)); err == nil || !strings.Contains(err.Error(), "WithCredentials") {
		t.Errorf("Connect without credentials and with WithWorkers: %v", err)
	}
}

// A node lost while it holds the only copy of a buffer fails the group
// that needs it, on its event and on Wait, with an error matching
// coordinator.ErrNodeLost; nothing hangs (C5).
func TestConnectNodeLostFailsEvent_C5(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c, WithNodeLoss(FailOnNodeLoss))
	const n = 4096
	d, _ := NewBuffer[float32](q, R1(n), BufferName("grid"))
	out, _ := NewBuffer[float32](q, R1(n))
	ev, err := q.Submit(func(h *Handler) error {
		h.Launch("fill_f32", R1(n), Write(h, d, NoInit), Scalar(float32(3)))
		return nil
	}, OnNode("n1", DeviceID{Kind: CPU}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.Stop(1)
	stopped := time.Now()
	ev, err = q.Submit(func(h *Handler) error {
		h.Launch("copy_f32", R1(n), ReadRange(h, d, R1(n), I1(0)), WriteRange(h, out, R1(n), I1(0), NoInit))
		return nil
	}, OnNode("n0", DeviceID{Kind: CPU}))
	if err == nil {
		err = ev.Wait(ctx)
		if ev.Status() != Failed || !errors.Is(ev.Err(), coordinator.ErrNodeLost) {
			t.Errorf("event after the loss: status %v, Err %v", ev.Status(), ev.Err())
		}
	}
	var nl *coordinator.NodeLostError
	if !errors.As(err, &nl) || !errors.Is(err, coordinator.ErrNodeLost) || nl.Node != "n1" {
		t.Fatalf("group needing n1's only copy: %v, want a *NodeLostError for n1", err)
	}
	if !strings.Contains(err.Error(), `buffer "grid" lost`) { // BufferName
		t.Errorf("the error %q does not name the lost buffer by its BufferName", err)
	}
	t.Logf("reported after %v: %v", time.Since(stopped), err)
	if err := q.Wait(ctx); !errors.Is(err, coordinator.ErrNodeLost) {
		t.Errorf("Wait after the loss = %v", err)
	}
	if err := q.Close(); !errors.Is(err, coordinator.ErrNodeLost) {
		t.Errorf("Close after the loss = %v, want the loss", err)
	}
}

// The default policy: the same loss is recovered from. The group that
// needed n1's only copy completes with the right data, computed again on
// n0 (C5, issue 15).
func TestConnectRecoversLostNode_C5(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c, WithCheckpoints(1))
	const n = 4096
	d, _ := NewBuffer[float32](q, R1(n))
	out, _ := NewBuffer[float32](q, R1(n))
	ctx := testCtx(t)
	ev, err := q.Submit(func(h *Handler) error {
		h.Launch("fill_f32", R1(n), Write(h, d, NoInit), Scalar(float32(3)))
		return nil
	}, OnNode("n1", DeviceID{Kind: CPU}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.Stop(1)
	ev, err = q.Submit(func(h *Handler) error {
		h.Launch("copy_f32", R1(n), ReadRange(h, d, R1(n), I1(0)), WriteRange(h, out, R1(n), I1(0), NoInit))
		return nil
	}, OnNode("n0", DeviceID{Kind: CPU}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(ctx); err != nil {
		t.Fatalf("group needing n1's only copy after the loss: %v, want it recovered", err)
	}
	got, err := out.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 3 {
			t.Fatalf("out[%d] = %v after recovery, want 3", i, v)
		}
	}
	if _, err := NewQueue(context.Background(), WithNodeLoss(FailOnNodeLoss)); err == nil || !strings.Contains(err.Error(), "WithNodeLoss") {
		t.Errorf("NewQueue with WithNodeLoss = %v, want it refused", err)
	}
	if _, err := Connect(ctx, c.Addrs(), WithCredentials(c.Dir, "alice"), WithCheckpoints(-5)); err == nil || !strings.Contains(err.Error(), "Checkpoint") {
		t.Errorf("Connect with WithCheckpoints(-5) = %v, want it refused", err)
	}
}

func ExampleConnect() {
	ctx := context.Background()
	q, err := Connect(ctx, []string{"10.0.0.1:7947", "10.0.0.2:7947"}, WithCredentials("/etc/acpp", "alice"), WithKind(CUDA))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()
}

// C4: a split Launch on a cluster queue (the coordinator makes the chunks,
// each accessor with its range mapper) gives bit for bit the unsplit
// embedded result, for saxpy and a Jacobi stencil, in every form of
// SplitOpts; the chunks run on the three nodes' devices and the stencil's
// halos move between nodes.
func TestConnectSplitEqualsUnsplit_C4(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	local := newQueue(t)
	const n, rows, cols, iters = 3001, 30, 40, 4
	wantS := saxpyRun(t, local, n, false)
	wantJ := jacobiRun(t, local, rows, cols, iters, false)
	var mu sync.Mutex
	placed := map[string]int{}
	groups := map[coordinator.GroupID]bool{}
	q := connectTraced(t, c, func(tr coordinator.GroupTrace) {
		mu.Lock()
		defer mu.Unlock()
		if tr.Device != "" {
			placed[tr.Device]++
			groups[tr.ID] = true
		}
	})
	for name, opt := range map[string]SubmitOption{
		"all devices":         Split(),
		"cpu:0 of every node": Split(DeviceID{Kind: CPU}),
		"7 chunks":            SplitWith(SplitOpts{Chunks: 7}),
		"7 chunks interleave": SplitWith(SplitOpts{Chunks: 7, Interleave: true}),
		"two named devices":   SplitWith(SplitOpts{ClusterDevices: []string{"n2/cpu:0", "n0/cpu:0"}}),
	} {
		if got := saxpyRun(t, q, n, false, opt); !slices.Equal(got, wantS) {
			t.Errorf("%s: split saxpy on the cluster differs from unsplit embedded", name)
		}
		if got := jacobiRun(t, q, rows, cols, iters, false, opt); !slices.Equal(got, wantJ) {
			t.Errorf("%s: split Jacobi on the cluster differs from unsplit embedded", name)
		}
	}
	mu.Lock()
	for _, d := range []string{"n0/cpu:0", "n1/cpu:0", "n2/cpu:0"} {
		if placed[d] == 0 {
			t.Errorf("no chunk ran on %s: %v", d, placed)
		}
	}
	mu.Unlock()
	if c.PeerBytes() == 0 {
		t.Errorf("split stencils on three nodes moved no halo pages between them")
	}
	// One event for all chunks.
	b := must(NewBuffer[float32](q, R1(99)))
	mu.Lock()
	before := len(groups)
	mu.Unlock()
	ev, err := q.Submit(func(h *Handler) error {
		h.Launch("fill_f32", R1(99), Write(h, b, NoInit, Map(OneToOne())), Scalar(float32(4)))
		return nil
	}, Split())
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(testCtx(t)); err != nil || ev.Status() != Complete {
		t.Fatalf("split fill: %v, status %v", err, ev.Status())
	}
	mu.Lock()
	if n := len(groups) - before; n != 3 {
		t.Errorf("split fill ran as %d groups, want one per node's device (3)", n)
	}
	mu.Unlock()
	if got := readAll(t, b); got[0] != 4 || got[98] != 4 {
		t.Errorf("split fill wrote %v", got)
	}
}

// C4: a cluster queue refuses bad split input at Submit, with ErrSplit or
// ErrNoDevice and what to do.
func TestConnectSplitRefusesBadInput_C4(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	b := must(NewBuffer[float32](q, R1(64)))
	fill := func(opts ...AccessOption) func(h *Handler) error {
		return func(h *Handler) error {
			h.Launch("fill_f32", R1(64), Write(h, b, opts...), Scalar(float32(1)))
			return nil
		}
	}
	one := Map(OneToOne())
	for _, tc := range []submitCase{
		{"mapper on an unsplit group", fill(one), nil, ErrSplit, "not split"},
		{"no mapper", fill(), []SubmitOption{Split()}, ErrSplit, "without a range mapper"},
		{"negative chunk count", fill(one), []SubmitOption{SplitWith(SplitOpts{Chunks: -2})}, ErrSplit, "Chunks is -2"},
		{"unknown device", fill(one), []SubmitOption{Split(DeviceID{Kind: CUDA})}, ErrNoDevice, "cuda:0 is on no node"},
		{"unknown cluster device", fill(one), []SubmitOption{SplitWith(SplitOpts{ClusterDevices: []string{"n9/cpu:0"}})}, ErrNoDevice, "n9/cpu:0"},
		{"split and OnNode", fill(one), []SubmitOption{Split(), OnNode("n0", DeviceID{Kind: CPU})}, ErrSplit, "both choose devices"},
		{"single task", func(h *Handler) error { h.SingleTask(func() {}); return nil }, []SubmitOption{Split()}, ErrClosureOnCluster, ""},
	} {
		_, err := q.Submit(tc.cgf, tc.opts...)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Submit = %v, want %v with %q", tc.name, err, tc.want, tc.msg)
		}
	}
	if g := q.Stats().Groups; g != 0 {
		t.Errorf("refused splits submitted %d groups", g)
	}
}

// P5, C3: raw accessors of reshaped views travel to a cluster (the region
// becomes the element box of the view's pages) and compute what the
// embedded queue computes; accessors that would hand the kernel the
// buffer's shape instead of the view's are refused with what to do.
func TestConnectViewsTravel_P5_C3(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	const rows, cols = 8, 16
	program := func(q *Queue) []float32 {
		xs, ys := make([]float32, rows*cols), make([]float32, rows*cols)
		for i := range xs {
			xs[i], ys[i] = float32(i)*0.5, float32(i%7)
		}
		x := must(NewBufferFrom(q, xs, R2(rows, cols), CopyData(), PageSize(1, cols)))
		y := must(NewBufferFrom(q, ys, R2(rows, cols), CopyData(), PageSize(1, cols)))
		xv, yv := must(x.Reshape(R1(rows*cols))), must(y.Reshape(R1(rows*cols)))
		for i, a := range []float32{2, -1} {
			var pin []SubmitOption
			if q.ClusterDevices() != nil {
				pin = append(pin, OnNode(fmt.Sprintf("n%d", i), DeviceID{Kind: CPU}))
			}
			if _, err := q.Submit(func(h *Handler) error {
				h.Launch("saxpy", R1(rows*cols), Scalar(a), ReadRaw(h, xv), ReadWriteRaw(h, yv))
				return nil
			}, pin...); err != nil {
				t.Fatal(err)
			}
		}
		return readAll(t, y)
	}
	want := program(newQueue(t))
	q := connect(t, c)
	if got := program(q); !slices.Equal(got, want) {
		t.Fatalf("saxpy through reshaped raw views on the cluster differs from embedded")
	}
	if c.PeerBytes() == 0 {
		t.Errorf("the view's pages did not move from n0 to n1")
	}
	a := must(NewBuffer[float32](q, R1(rows*cols)))
	av := must(a.Reshape(R2(rows, cols)))
	pairs := must(NewBuffer[[2]float32](q, R1(rows*cols/2)))
	pv := must(Reinterpret[float32](pairs, R1(rows*cols)))
	for name, cgf := range map[string]func(h *Handler) error{
		"accessor of a reshaped view": func(h *Handler) error {
			h.Launch("jacobi2d", R2(rows, cols), Read(h, av), Write(h, av))
			return nil
		},
		"raw view with other elements": func(h *Handler) error {
			h.Launch("saxpy", R1(rows*cols), Scalar(float32(1)), ReadRaw(h, pv), ReadWriteRaw(h, pv))
			return nil
		},
	} {
		_, err := q.Submit(cgf)
		if !errors.Is(err, ErrNotOnCluster) || !strings.Contains(err.Error(), "raw") {
			t.Errorf("%s: Submit = %v, want ErrNotOnCluster saying what to do", name, err)
		}
	}
}

// The same program of copies and fills on an embedded and a cluster queue
// gives the same buffers: Fill, Copy, CopyToHost and CopyFromHost run on a
// cluster too, as the nodes' fill_f32 and copy_f32 kernels for 4-byte
// elements (any 4-byte type: they move bytes) and through the client for
// other sizes, whole buffers and regions (T3).
func TestClusterCopyAndFill(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	program := func(q *Queue) (f32 []float32, i32 []int32, f64 []float64, host []float64) {
		a := must(NewBuffer[float32](q, R2(6, 10)))
		b := must(NewBuffer[float32](q, R2(6, 10)))
		n := must(NewBuffer[int32](q, R1(40)))
		x := must(NewBuffer[float64](q, R2(4, 8)))
		y := must(NewBuffer[float64](q, R2(4, 8)))
		host = make([]float64, 2*3)
		src := []float64{1, 2, 3, 4, 5, 6}
		for _, cgf := range []func(h *Handler) error{
			func(h *Handler) error { Fill(h, Write(h, a, NoInit), 1.5); return nil },
			func(h *Handler) error { Fill(h, WriteRange(h, a, R2(2, 3), I2(1, 4)), -2); return nil },
			func(h *Handler) error { Fill(h, Write(h, b), 7); return nil },
			func(h *Handler) error {
				Copy(h, ReadRange(h, a, R2(3, 5), I2(0, 2)), WriteRange(h, b, R2(3, 5), I2(2, 5)))
				return nil
			},
			func(h *Handler) error { Fill(h, Write(h, n, NoInit), -9); return nil },
			func(h *Handler) error { Fill(h, WriteRange(h, n, R1(5), I1(30)), 1<<30); return nil },
			func(h *Handler) error { Fill(h, Write(h, x, NoInit), 0.25); return nil },
			func(h *Handler) error { CopyFromHost(h, src, WriteRange(h, x, R2(2, 3), I2(1, 2))); return nil },
			func(h *Handler) error { Fill(h, Write(h, y, NoInit), -1); return nil },
			func(h *Handler) error {
				Copy(h, ReadRange(h, x, R2(3, 4), I2(0, 1)), WriteRange(h, y, R2(3, 4), I2(1, 4)))
				return nil
			},
			func(h *Handler) error { CopyToHost(h, ReadRange(h, y, R2(2, 3), I2(2, 4)), host); return nil },
		} {
			ev, err := q.Submit(cgf)
			if err != nil {
				t.Fatal(err)
			}
			if err := ev.Wait(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		return readAll(t, b), readAll(t, n), readAll(t, y), host
	}
	wf, wi, wd, wh := program(newQueue(t))
	var mu sync.Mutex
	kernels := map[string]int{}
	q := connectTraced(t, c, func(tr coordinator.GroupTrace) {
		mu.Lock()
		kernels[tr.Kernel]++
		mu.Unlock()
	})
	gf, gi, gd, gh := program(q)
	if !slices.Equal(gf, wf) || !slices.Equal(gi, wi) || !slices.Equal(gd, wd) || !slices.Equal(gh, wh) {
		t.Fatalf("copies and fills on the cluster differ from embedded:\nfloat32 %v\nwant    %v\nint32 %v\nwant  %v\nfloat64 %v\nwant    %v\nhost %v\nwant %v", gf, wf, gi, wi, gd, wd, gh, wh)
	}
	if slices.Contains(wh, 0) {
		t.Errorf("CopyToHost left zeros: %v", wh)
	}
	mu.Lock()
	defer mu.Unlock()
	if kernels["fill_f32"] != 5 || kernels["copy_f32"] != 1 {
		t.Errorf("node-side groups %v, want 5 fill_f32 (float32 and int32) and 1 copy_f32", kernels)
	}
}

// P5: the whole of a reshaped or reinterpreted view reads and writes on a
// cluster as embedded (the view's bytes are the buffer's); review of
// 2026-11-25: the view's range was taken as the buffer's region.
func TestClusterWholeViewHostAccess_P5(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	program := func(q *Queue) ([][2]float32, []float32) {
		xs := make([]float32, 8*16)
		for i := range xs {
			xs[i] = float32(i)
		}
		b := must(NewBufferFrom(q, xs, R2(8, 16), CopyData()))
		pairs := must(Reinterpret[[2]float32](b, R1(64)))
		flat := must(b.Reshape(R1(128)))
		p := must(pairs.Read(testCtx(t)))
		if err := flat.Write(testCtx(t), slices.Repeat([]float32{2.5}, 128)); err != nil {
			t.Fatal(err)
		}
		return p, readAll(t, b)
	}
	wp, wb := program(newQueue(t))
	gp, gb := program(connect(t, c))
	if !slices.Equal(gp, wp) || !slices.Equal(gb, wb) {
		t.Fatalf("whole-view host access on a cluster differs from embedded:\n%v\nwant %v\n%v\nwant %v", gp[30:34], wp[30:34], gb[:4], wb[:4])
	}
}

// q.Wait on a cluster queue returns once every event it waited for is
// done, and returns ctx's error when ctx ends first, with an async handler
// too (review of 2026-11-25).
func TestClusterWaitMeansEventsDone(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	var got []error
	var mu sync.Mutex
	q := connect(t, c, WithAsyncHandler(func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() }))
	b := must(NewBuffer[float32](q, R1(1024)))
	for round := range 100 {
		var evs []*Event
		for range 4 {
			evs = append(evs, must(q.Submit(func(h *Handler) error {
				h.Launch("fill_f32", R1(1024), Write(h, b, NoInit), Scalar(float32(round)))
				return nil
			})))
		}
		if err := q.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			select {
			case <-ev.Done():
			default:
				t.Fatalf("round %d: event %d not done after q.Wait returned", round, i)
			}
		}
	}
	// With work in flight, a cancelled ctx is Wait's own error, not a
	// group's: it goes to the caller, not to the async handler.
	big := must(NewBuffer[float32](q, R1(16<<20)))
	must(q.Submit(func(h *Handler) error {
		h.Launch("fill_f32", R1(16<<20), Write(h, big, NoInit), Scalar(float32(1)))
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Wait(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("q.Wait(cancelled ctx) = %v, want nil (all done) or context.Canceled", err)
	}
	if err := q.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Errorf("the async handler got %v", got)
	}
}

// A kernel registered nowhere (not in this process, on no node) is
// acpp.ErrUnknownKernel on a cluster queue too, as on an embedded one
// (TestSubmitErrors), and the message names each node's reason.
func TestConnectUnknownKernel(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	b, err := NewBuffer[float32](q, R1(8))
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Submit(func(h *Handler) error {
		h.Launch("acpptest.nowhere", R1(8), WriteRaw(h, b, NoInit))
		return nil
	})
	if !errors.Is(err, ErrUnknownKernel) || !strings.Contains(err.Error(), `"acpptest.nowhere"`) || !strings.Contains(err.Error(), "build a node that registers") {
		t.Fatalf("Submit of an unknown kernel on a cluster queue = %v, want ErrUnknownKernel naming it and what to do", err)
	}
	// A kernel the nodes have is not unknown, wherever it runs.
	if _, err := q.Submit(func(h *Handler) error {
		h.Launch("fill_f32", R1(8), Write(h, b, NoInit), Scalar(float32(1)))
		return nil
	}); err != nil {
		t.Fatalf("fill_f32 after the refusal: %v", err)
	}
}

// Connect refuses every NewQueue-only option with ErrOption, naming it;
// WithAcceleratorsFirst and WithMemoryLimit were once taken and ignored.
func TestConnectRefusesNewQueueOptions(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	for _, tc := range []struct {
		opt  Option
		name string
	}{
		{WithAcceleratorsFirst(), "WithAcceleratorsFirst applies to NewQueue only"},
		{WithMemoryLimit(MemoryLimit{Bytes: 1 << 30}), "WithMemoryLimit applies to NewQueue only"},
		{WithMemoryLimit(MemoryLimit{}), "WithMemoryLimit applies to NewQueue only"},
		{WithWorkers(2), "WithWorkers"},
		{WithDevice(CPU, 0), "WithDevice applies to NewQueue only"},
	} {
		q, err := Connect(testCtx(t), c.Addrs(), WithCredentials(c.Dir, "alice"), tc.opt)
		if err == nil {
			q.Close()
		}
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Connect with %s: %v, want ErrOption naming it", tc.name, err)
		}
	}
	// NewQueue refuses Connect's options the same way, naming the ones
	// given (each once), not every cluster option.
	for _, tc := range []struct {
		opts      []Option
		want, not string
	}{
		{[]Option{WithNodeLoss(FailOnNodeLoss)}, "WithNodeLoss applies to Connect only", "WithNodes"},
		{[]Option{WithNodes("n1"), WithCPUDevices(2), WithNodes("n2"), WithCheckpoints(3)}, "WithNodes, WithCheckpoints apply to Connect only", "WithCredentials"},
		{[]Option{WithCredentials("creds", "alice")}, "WithCredentials applies to Connect only", "WithCoordinator"},
		{[]Option{WithClientCredentials(nil), WithLabels(nil, "gpu"), WithCoordinator(func(*coordinator.Config) {})}, "WithClientCredentials, WithLabels, WithCoordinator apply to Connect only", "WithNodeLoss"},
	} {
		q, err := NewQueue(context.Background(), tc.opts...)
		if err == nil {
			q.Close()
		}
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.not) {
			t.Errorf("NewQueue(%s) = %v, want ErrOption naming just those", tc.want, err)
		}
	}
}

// Every cluster option either takes effect or makes Connect fail with
// ErrOption naming it (docs/API.md, "Running on a cluster"): an unknown
// loss policy or checkpoint setting, checkpoints with FailOnNodeLoss,
// two ways of naming credentials, half of WithCredentials. A selection
// that matches no device names the options that made it.
func TestConnectRefusesBadClusterOptions(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	creds := WithCredentials(c.Dir, "alice")
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{creds, WithNodeLoss(7)}, "WithNodeLoss(7)"},
		{[]Option{creds, WithCheckpoints(-2)}, "WithCheckpoints(-2)"},
		{[]Option{creds, WithCheckpoints(3), WithNodeLoss(FailOnNodeLoss)}, "WithCheckpoints(3) has no effect with WithNodeLoss(FailOnNodeLoss)"},
		{[]Option{creds, WithClientCredentials(c.Creds)}, "WithCredentials and WithClientCredentials"},
		{[]Option{WithCredentials("", "alice")}, `WithCredentials("", "alice")`},
		{[]Option{WithCredentials(c.Dir, "")}, "the client name are needed"},
	} {
		q, err := Connect(testCtx(t), c.Addrs(), tc.opts...)
		if err == nil {
			q.Close()
		}
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Connect(%s): %v, want ErrOption naming it", tc.want, err)
		}
	}
	_, err := Connect(testCtx(t), c.Addrs(), creds, WithKind(CUDA), WithNodes("n0"))
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "WithKind(cuda), WithNodes(n0) select none") {
		t.Errorf("Connect(WithKind(CUDA)) on CPU nodes: %v, want ErrNoDevice naming WithKind and WithNodes", err)
	}
	_, err = Connect(testCtx(t), c.Addrs(), creds, WithKind(CUDA))
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "WithKind(cuda) selects none of the cluster's devices (n0/cpu:0") || strings.Contains(err.Error(), "Config.Devices") {
		t.Errorf("Connect(WithKind(CUDA)) on CPU nodes: %v, want ErrNoDevice naming WithKind (one option: selects) and the devices, not coordinator.Config.Devices", err)
	}
}

// Several WithCoordinator options all apply, in order, after the other
// options filled in the config (the last one used to replace the others).
func TestConnectAppliesEveryWithCoordinator(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	var seen []string
	var checkpoint int
	q := connect(t, c, WithCheckpoints(4),
		WithCoordinator(func(cfg *coordinator.Config) { seen = append(seen, "first"); checkpoint = cfg.Checkpoint }),
		WithCoordinator(func(cfg *coordinator.Config) { seen = append(seen, "second") }))
	if !slices.Equal(seen, []string{"first", "second"}) {
		t.Errorf("WithCoordinator functions applied: %v, want [first second]", seen)
	}
	if checkpoint != 4 {
		t.Errorf("WithCoordinator saw Checkpoint %d, want WithCheckpoints' 4", checkpoint)
	}
	_ = q
}

// A split a cluster queue cannot make is acpp.ErrSplit, as on an embedded
// queue (docs/API.md, "Splitting a kernel"), whether the root package or
// the coordinator sees it.
func TestConnectSplitErrorsMatchErrSplit_C4(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	const n = 1024
	x, _ := NewBuffer[float32](q, R1(n))
	y, _ := NewBuffer[float32](q, R1(n))
	for _, so := range []SplitOpts{
		{Borders: 1, Interleave: true},
		{Borders: 1, Chunks: 3},
		{Borders: -1},
	} {
		_, err := q.Submit(func(h *Handler) error {
			h.Launch("saxpy", R1(n), Scalar(float32(1.5)), ReadRaw(h, x, Map(OneToOne())), ReadWriteRaw(h, y, Map(OneToOne())))
			return nil
		}, SplitWith(so))
		if !errors.Is(err, ErrSplit) || !strings.Contains(err.Error(), "Borders") {
			t.Errorf("Submit with SplitWith(%+v): %v, want ErrSplit naming Borders", so, err)
		}
	}
}

// Stats.Groups counts the program's command groups: a cluster queue's
// checkpoints (the job's own reads of every buffer) are not among them
// (docs/API.md, "Running on a cluster": "q.Stats() counts Groups").
func TestConnectStatsGroupsLeaveOutCheckpoints(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	var mu sync.Mutex
	checkpoints := 0
	q := connect(t, c, WithCheckpoints(1), WithCoordinator(func(cfg *coordinator.Config) {
		cfg.OnCheckpoint = func(coordinator.CheckpointReport) { mu.Lock(); checkpoints++; mu.Unlock() }
	}))
	const n = 4096
	x, _ := NewBufferFrom(q, make([]float32, n), R1(n), PageSize(1024))
	y, _ := NewBufferFrom(q, make([]float32, n), R1(n), PageSize(1024))
	for range 3 {
		if _, err := q.Submit(func(h *Handler) error {
			h.Launch("saxpy", R1(n), Scalar(float32(1.5)), ReadRaw(h, x), ReadWriteRaw(h, y))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if checkpoints == 0 {
		t.Fatalf("WithCheckpoints(1) took no checkpoint")
	}
	if g := q.Stats().Groups; g != 3 {
		t.Errorf("Stats().Groups = %d after 3 groups and %d checkpoints, want 3", g, checkpoints)
	}
}

// A group pinned to a node the job lost (and went on without) is refused
// with acpp.ErrNoDevice saying the node is lost (docs/COORDINATOR.md,
// "Node loss": "groups pinned there get ErrNoDevice"); it used to match
// only coordinator.ErrNoDevice and say the device could not run the kernel.
func TestConnectPinnedToLostNode_C5(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	b, err := NewBuffer[float32](q, R1(8))
	if err != nil {
		t.Fatal(err)
	}
	c.Stop(1)
	ctx := testCtx(t)
	for {
		_, err = q.Submit(func(h *Handler) error {
			h.Launch("fill_f32", R1(8), Write(h, b, NoInit), Scalar(float32(1)))
			return nil
		}, OnNode("n1", DeviceID{Kind: CPU}))
		if err != nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err, ErrNoDevice) || !errors.Is(err, coordinator.ErrNoDevice) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("Submit pinned to lost n1: %v, want ErrNoDevice saying the node is lost", err)
	}
	if err := q.Wait(ctx); err != nil {
		t.Errorf("Wait after the refusal: %v (the job goes on without n1)", err)
	}
}
