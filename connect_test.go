package acpp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	base := c.Config()
	opts = append([]Option{WithCredentials(c.Dir, "alice"), WithCoordinator(func(cfg *coordinator.Config) {
		cfg.Client, cfg.Logger, cfg.LostTimeout, cfg.PollInterval = base.Client, base.Logger, base.LostTimeout, base.PollInterval
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
	ha, err := HostAccess(testCtx(t), a, ModeRead)
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(ha.Slice())
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
		"Fill":          func(h *Handler) error { Fill(h, Write(h, b), 2); return nil },
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
	if _, err := Connect(context.Background(), c.Addrs(), WithWorkers(2)); err == nil || !strings.Contains(err.Error(), "WithCredentials") {
		t.Errorf("Connect without credentials and with WithWorkers: %v", err)
	}
}

// A node lost while it holds the only copy of a buffer fails the group
// that needs it, on its event and on Wait, with an error matching
// coordinator.ErrNodeLost; nothing hangs (C5).
func TestConnectNodeLostFailsEvent_C5(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	const n = 4096
	d, _ := NewBuffer[float32](q, R1(n))
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
	t.Logf("reported after %v: %v", time.Since(stopped), err)
	if err := q.Wait(ctx); !errors.Is(err, coordinator.ErrNodeLost) {
		t.Errorf("Wait after the loss = %v", err)
	}
	if err := q.Close(); !errors.Is(err, coordinator.ErrNodeLost) {
		t.Errorf("Close after the loss = %v, want the loss", err)
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
