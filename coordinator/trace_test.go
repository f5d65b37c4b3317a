package coordinator_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"

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
}
