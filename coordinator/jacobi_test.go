package coordinator_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// A 2D Jacobi split by row blocks over three nodes gives bit for bit the
// plain Go result, and the nodes move exactly the halo rows between them
// (C3); with every block on one node nothing crosses between nodes.
func TestJacobiThreeNodesHaloMinimal_C3(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	const rows, cols, iters = 48, 64, 6
	in := jacobiInput(rows, cols)
	want := jacobiRef(in, rows, cols, iters)
	rowPages := coordinator.Dims{1, 1, cols} // one row per page: the halo minimum is one row

	t.Run("split over 3 nodes", func(t *testing.T) {
		j := openJob(t, c, nil)
		before := c.PeerBytes()
		a, err := j.NewBuffer(coordinator.BufferSpec{Name: "a", Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: rowPages, Init: f32bytes(in)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: rowPages})
		if err != nil {
			t.Fatal(err)
		}
		res := runJacobi(t, j, a, b, rows, cols, iters, &coordinator.Split{}, "")
		got, err := j.Read(testCtx(t), res, coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if g := bytesF32(got); !slices.Equal(g, want) {
			t.Fatalf("split Jacobi differs from plain Go (first difference at %d)", firstDiff(g, want))
		}
		// Iterations 2..iters read the other buffer's halo: each of the two
		// block boundaries moves one row each way.
		halo := int64((iters - 1) * 2 * 2 * cols * 4)
		if got := c.PeerBytes() - before; got != halo {
			t.Errorf("bytes between nodes = %d, want the halo minimum %d", got, halo)
		}
		st := j.Stats()
		t.Logf("peer bytes %d, stats %+v", c.PeerBytes()-before, st)
		var planned int64
		for link, n := range st.PlannedBytes {
			if link[:6] != "client" && link[len(link)-6:] != "client" {
				planned += n
			}
		}
		if planned != halo {
			t.Errorf("planned bytes between nodes = %d (%v), want %d", planned, st.PlannedBytes, halo)
		}
	})

	t.Run("one node holds everything", func(t *testing.T) {
		j := openJob(t, c, nil)
		before := c.PeerBytes()
		a, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: rowPages, Init: f32bytes(in)})
		b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: rowPages})
		res := runJacobi(t, j, a, b, rows, cols, iters, &coordinator.Split{Devices: []string{"n1/cpu:0"}, Chunks: 3}, "")
		got, err := j.Read(testCtx(t), res, coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if g := bytesF32(got); !slices.Equal(g, want) {
			t.Fatalf("Jacobi on one node differs from plain Go (first difference at %d)", firstDiff(g, want))
		}
		if got := c.PeerBytes() - before; got != 0 {
			t.Errorf("bytes between nodes = %d, want 0", got)
		}
	})
}

func firstDiff(a, b []float32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// depsLog records, from the coordinator's debug log, the most
// dependencies any instruction it submitted listed.
type depsLog struct {
	mu  sync.Mutex
	max int
}

func (l *depsLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *depsLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *depsLog) WithGroup(string) slog.Handler            { return l }
func (l *depsLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "submit" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if deps, ok := a.Value.Any().([]uint64); ok && a.Key == "deps" {
			l.mu.Lock()
			l.max = max(l.max, len(deps))
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// A Jacobi split over eight nodes with every step submitted before the
// first finishes (a pipeline as deep as the run) gives the plain Go
// result; each instruction waits only for a few instructions on its own
// allocations, however many members and steps are in flight, and no
// launch is held back in the coordinator: every dependency is ordered by
// the data between them (D1, D3, C4).
func TestJacobiPipelinedOverEightNodes_D1_D3_C4(t *testing.T) {
	c := coordtest.Start(t, 8, coordtest.Options{})
	const rows, cols, iters = 64, 32, 12
	in := jacobiInput(rows, cols)
	want := jacobiRef(in, rows, cols, iters)
	deps := &depsLog{}
	j := openJob(t, c, func(cfg *coordinator.Config) { cfg.Logger = slog.New(deps) })
	pg := coordinator.Dims{1, 1, cols}
	a, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg, Init: f32bytes(in)})
	b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg})
	res := runJacobi(t, j, a, b, rows, cols, iters, &coordinator.Split{}, "")
	got, err := j.Read(testCtx(t), res, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	if g := bytesF32(got); !slices.Equal(g, want) {
		t.Fatalf("pipelined split Jacobi differs from plain Go (first difference at %d)", firstDiff(g, want))
	}
	st := j.Stats()
	if st.Gated != 0 {
		t.Errorf("%d chunk launches were gated; want none (their dependencies are ordered by the halos)", st.Gated)
	}
	deps.mu.Lock()
	defer deps.mu.Unlock()
	// A chunk's launch: its two halo recvs, the last writer of its rows of
	// the buffer it reads, and the readers and writers of its rows of the
	// one it writes (its own launches and its neighbours' sends).
	if deps.max == 0 || deps.max > 10 {
		t.Errorf("an instruction listed %d dependencies; want 1 to 10 at any number of members", deps.max)
	}
	t.Logf("most dependencies of one instruction: %d; %d groups", deps.max, st.Groups)
}
