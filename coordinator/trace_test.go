package coordinator_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// Every instruction the nodes run comes back on its group's trace with
// the node's start and end times: the transfers' bytes add up to what the
// nodes counted between them, each send has its recv on the peer, and a
// kernel starts only after the pages it waited for landed (C3, C4: the
// data behind acpp-submit's per-link trace tracks).
func TestGroupTraceHasInstructions_C3_C4(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	const rows, cols, iters = 16, 32, 4
	var mu sync.Mutex
	var traces []coordinator.GroupTrace
	j := openJob(t, c, func(cfg *coordinator.Config) {
		cfg.OnGroupDone = func(tr coordinator.GroupTrace) { mu.Lock(); traces = append(traces, tr); mu.Unlock() }
	})
	before := c.PeerBytes()
	pg := coordinator.Dims{1, 1, cols}
	a, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg, Init: f32bytes(jacobiInput(rows, cols))})
	if err != nil {
		t.Fatal(err)
	}
	b, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg})
	if err != nil {
		t.Fatal(err)
	}
	runJacobi(t, j, a, b, rows, cols, iters, &coordinator.Split{}, "")
	if err := j.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	peer := c.PeerBytes() - before

	mu.Lock()
	defer mu.Unlock()
	var sent, recvd int64
	sends := map[string]int{} // "from->to bytes"
	kernels := 0
	for _, tr := range traces {
		var recvEnd, kernelStart int64
		for _, in := range tr.Instrs {
			if in.Start.IsZero() || in.End.Before(in.Start) {
				t.Errorf("group %d: %s on %s has times %v..%v", tr.ID, in.Kind, in.Node, in.Start, in.End)
			}
			switch in.Kind {
			case "kernel":
				kernels++
				kernelStart = in.Start.UnixNano()
				if !strings.HasPrefix(tr.Device, in.Node+"/") {
					t.Errorf("group %d ran on %s but its kernel is traced on node %s", tr.ID, tr.Device, in.Node)
				}
			case "send":
				sent += in.Bytes
				sends[in.Node+"->"+in.Peer+" "+strconv.FormatInt(in.Bytes, 10)]++
			case "recv":
				recvd += in.Bytes
				sends[in.Peer+"->"+in.Node+" "+strconv.FormatInt(in.Bytes, 10)]--
				recvEnd = max(recvEnd, in.End.UnixNano())
			}
		}
		if recvEnd != 0 && kernelStart != 0 && kernelStart < recvEnd {
			t.Errorf("group %d: kernel started %d ns before its halo landed", tr.ID, recvEnd-kernelStart)
		}
	}
	if kernels != 2*iters {
		t.Errorf("%d kernels traced, want %d (2 chunks × %d iterations)", kernels, 2*iters, iters)
	}
	if sent != peer || recvd != peer || peer == 0 {
		t.Errorf("traced sends %d B, recvs %d B; the nodes counted %d B between them", sent, recvd, peer)
	}
	for k, n := range sends {
		if n != 0 {
			t.Errorf("transfer %s: %d more sends than recvs", k, n)
		}
	}
	// Each iteration is one Submit of two chunks with consecutive IDs:
	// every kernel trace says so, and the first chunk's ID is odd (the
	// buffers take no group IDs, so the chunks pair up from 1).
	chunks := map[coordinator.GroupID]bool{}
	for _, tr := range traces {
		if tr.Device == "" {
			continue
		}
		if tr.Chunks != 2 {
			t.Errorf("group %d (%s): Chunks = %d, want the 2 chunks of its split", tr.ID, tr.Kernel, tr.Chunks)
		}
		chunks[tr.ID] = true
	}
	for id := range chunks {
		if id%2 == 1 && !chunks[id+1] {
			t.Errorf("chunk %d has no sibling %d", id, id+1)
		}
	}
}

// GroupTrace.Gated marks the groups whose launch the coordinator held back
// for an earlier group on another node (discard writes of one buffer
// pinned round the nodes: no data path orders them, the gate does), as
// many as Stats.Gated counts; an unsplit group is one chunk (D3).
func TestGroupTraceGated_D3(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	var mu sync.Mutex
	var traces []coordinator.GroupTrace
	j := openJob(t, c, func(cfg *coordinator.Config) {
		cfg.OnGroupDone = func(tr coordinator.GroupTrace) { mu.Lock(); traces = append(traces, tr); mu.Unlock() }
	})
	ctx := testCtx(t)
	buf, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := range n {
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_mark", Range: coordinator.Dims{1, 1, 1}, Device: []string{"n0/cpu:0", "n1/cpu:0"}[i%2],
			Args: []coordinator.Arg{coordinator.ScalarU64(uint64(i + 1)), coordinator.Acc(coordinator.Accessor{Buffer: buf, Mode: coordinator.Write, NoInit: true})}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	takeSpans()
	mu.Lock()
	defer mu.Unlock()
	gated := 0
	for _, tr := range traces {
		if tr.Gated {
			gated++
		}
		if tr.Device != "" && tr.Chunks != 1 {
			t.Errorf("group %d: Chunks = %d, want 1 (not split)", tr.ID, tr.Chunks)
		}
	}
	if st := j.Stats(); gated != st.Gated || gated == 0 {
		t.Errorf("%d traces gated, Stats.Gated %d; want the same, at least 1", gated, st.Gated)
	}
}

// Wait returns once OnGroupDone has had the trace of every group it
// waited for: a caller that completes its own events there (the cluster
// engine behind acpp.Connect) sees them done.
func TestWaitAfterEveryTraceDelivered(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	var mu sync.Mutex
	seen := 0
	j := openJob(t, c, func(cfg *coordinator.Config) {
		cfg.OnGroupDone = func(tr coordinator.GroupTrace) {
			time.Sleep(200 * time.Microsecond) // a slow hook
			mu.Lock()
			seen++
			mu.Unlock()
		}
	})
	buf, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 64}, ElemSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	submitted := 0
	for round := range 20 {
		for range 5 {
			if _, err := j.Submit(testCtx(t), coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, 64},
				Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: buf, Mode: coordinator.Write, NoInit: true}), coordinator.ScalarF32(float32(round))}}); err != nil {
				t.Fatal(err)
			}
			submitted++
		}
		if err := j.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := seen
		mu.Unlock()
		if got != submitted {
			t.Fatalf("round %d: Wait returned with %d of %d traces delivered", round, got, submitted)
		}
	}
}
