package coordinator_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/node"
)

// Host writes replace a region in the client's copy (whole pages without a
// fetch, partial pages after bringing them back), later groups upload the
// new pages; Release frees the allocations on the nodes (B1); every
// finished group is reported once.
func TestHostWriteAndRelease_B1_T1(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	ctx := testCtx(t)
	var mu sync.Mutex
	var traces []coordinator.GroupTrace
	j := openJob(t, c, func(cfg *coordinator.Config) {
		cfg.OnGroupDone = func(tr coordinator.GroupTrace) { mu.Lock(); traces = append(traces, tr); mu.Unlock() }
	})
	const n = 64
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 16}})
	fill(t, j, x, n, 1, "n1/cpu:0")
	fromN1 := func() int64 { return c.Sent(1)["client"] }
	before := fromN1()
	// Whole pages [16, 32): no fetch.
	if err := j.Write(ctx, x, coordinator.Dims{0, 0, 16}, coordinator.Dims{1, 1, 16}, f32bytes(slices.Repeat([]float32{2}, 16))); err != nil {
		t.Fatal(err)
	}
	if moved := fromN1() - before; moved != 0 {
		t.Errorf("a whole-page host write fetched %d bytes, want 0 (T1)", moved)
	}
	// Part of page [32, 48): that page comes back first.
	if err := j.Write(ctx, x, coordinator.Dims{0, 0, 40}, coordinator.Dims{1, 1, 4}, f32bytes([]float32{3, 3, 3, 3})); err != nil {
		t.Fatal(err)
	}
	if moved := fromN1() - before; moved != 16*4 {
		t.Errorf("a partial-page host write fetched %d bytes, want one page (64)", moved)
	}
	// A kernel on n0 reads it all: pages from n1 and from the client.
	y, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "copy_f32", Range: coordinator.Dims{1, 1, n}, Device: "n0/cpu:0",
		Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Read}), coordinator.Acc(coordinator.Accessor{Buffer: y, Mode: coordinator.Write, NoInit: true})}}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Read(ctx, y, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Repeat([]float32{1}, n)
	for i := 16; i < 32; i++ {
		want[i] = 2
	}
	for i := 40; i < 44; i++ {
		want[i] = 3
	}
	if g := bytesF32(got); !slices.Equal(g, want) {
		t.Fatalf("after host writes y = %v, want %v", g, want)
	}
	if err := j.Write(ctx, x, coordinator.Dims{}, coordinator.Dims{1, 1, 2}, make([]byte, 3)); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("Write with the wrong byte count = %v, want ErrInvalid", err)
	}
	held := c.Nodes[0].Allocated() + c.Nodes[1].Allocated()
	if err := j.Release(ctx, x); err != nil {
		t.Fatal(err)
	}
	if err := j.Release(ctx, y); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Nodes[0].Allocated()+c.Nodes[1].Allocated() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nodes still hold %d bytes after Release (held %d before)", c.Nodes[0].Allocated()+c.Nodes[1].Allocated(), held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := j.Read(ctx, x, coordinator.Dims{}, coordinator.Dims{}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("Read of a released buffer = %v, want ErrInvalid", err)
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	st := j.Stats()
	if len(traces) != st.Completed || st.Completed != st.Groups {
		t.Errorf("OnGroupDone called %d times; stats %d completed of %d", len(traces), st.Completed, st.Groups)
	}
	for _, tr := range traces {
		if tr.Done.Before(tr.Submitted) {
			t.Errorf("group %d done %v before it was submitted", tr.ID, tr.Submitted.Sub(tr.Done))
		}
	}
}

// Completed groups leave the coherence core, so its history stays bounded
// over a long pipelined run (D3).
func TestHistoryBounded_D3(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	const n = 64
	x, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 8}, Init: f32bytes(make([]float32, n))})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 8}, Init: f32bytes(make([]float32, n))})
	for i := range 300 {
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "saxpy", Range: coordinator.Dims{1, 1, n}, Split: &coordinator.Split{},
			Args: []coordinator.Arg{coordinator.ScalarF32(1),
				coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Read, Map: coordinator.OneToOne()}),
				coordinator.Acc(coordinator.Accessor{Buffer: y, Mode: coordinator.ReadWrite, Map: coordinator.OneToOne()})}}); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	st := j.Stats()
	if st.Live != 0 || st.CoreLive != 0 || st.Completed != st.Groups {
		t.Errorf("after Wait: %d live groups, %d live in the core, %d of %d completed; want all completed", st.Live, st.CoreLive, st.Completed, st.Groups)
	}
	if st.CoreRegions > 16 {
		t.Errorf("core history holds %d regions after 600 completed groups, want it bounded (≤ 16)", st.CoreRegions)
	}
	for i, ns := range j.Nodes() {
		if ns.Pending != 0 {
			t.Errorf("node %d still has %d instructions pending in the coordinator", i, ns.Pending)
		}
	}
}

// A node's memory limit fails the allocation, and the job reports it (the
// node's message names the limit); nothing hangs.
func TestMemoryLimitFailsJob(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{Modify: func(_ int, cfg *node.Config) { cfg.MaxJobBytes = 1024 }})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	x, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 4096}, ElemSize: 4})
	fill(t, j, x, 4096, 1, "n0/cpu:0")
	err := j.Wait(ctx)
	if !errors.Is(err, coordinator.ErrJobFailed) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Wait = %v, want ErrJobFailed naming the memory limit", err)
	}
}

// TestNoInitKeepsRestOfEdgePages_T1_T3: a no_init accessor that covers pages
// only in part must not lose the rest of them. x is valid on n1; a copy into
// x[8, 40) with no_init runs on n0 (pages of 16: page 0 in part, page 1
// whole, page 2 in part). The whole page moves nowhere (T1); the two edge
// pages come from n1 first (T3), so x keeps its values outside the copy.
func TestNoInitKeepsRestOfEdgePages_T1_T3(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	const n = 64
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 16}})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Name: "y", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 16}})
	fill(t, j, x, n, 1, "n1/cpu:0")
	fill(t, j, y, n, 5, "n0/cpu:0")
	before := c.Sent(1)["n0"]
	off, rng := coordinator.Dims{0, 0, 8}, coordinator.Dims{1, 1, 32}
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "copy_f32", Range: rng, Device: "n0/cpu:0",
		Args: []coordinator.Arg{
			coordinator.Acc(coordinator.Accessor{Buffer: y, Mode: coordinator.Read, Offset: off, Range: rng}),
			coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Write, Offset: off, Range: rng, NoInit: true}),
		}}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Read(ctx, x, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Repeat([]float32{1}, n)
	for i := 8; i < 40; i++ {
		want[i] = 5
	}
	if g := bytesF32(got); !slices.Equal(g, want) {
		t.Fatalf("x = %v, want %v (elements outside the no_init accessor lost?)", g, want)
	}
	if moved := c.Sent(1)["n0"] - before; moved != 2*16*4 {
		t.Errorf("n1 sent n0 %d bytes for the copy, want %d (the two edge pages only)", moved, 2*16*4)
	}
}
