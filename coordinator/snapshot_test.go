package coordinator_test

import (
	"sync"
	"testing"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// A Snapshotter reads a running job (read-only, while groups are planned
// and complete: -race checks the locking) and, once it is quiet, reports
// each buffer's allocations with the pages valid there.
func TestSnapshotterReadsRunningJob(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	const rows, cols, iters = 48, 64, 6
	snaps := &coordinator.Snapshotter{}
	if _, ok := snaps.Snapshot(true); ok {
		t.Fatal("Snapshot before Open reported a job")
	}
	j := openJob(t, c, func(cfg *coordinator.Config) { cfg.Snapshots = snaps })
	rowPages := coordinator.Dims{1, 1, cols}
	a, err := j.NewBuffer(coordinator.BufferSpec{Name: "a", Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: rowPages, Init: f32bytes(jacobiInput(rows, cols))})
	if err != nil {
		t.Fatal(err)
	}
	b, err := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: rowPages})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var sawRunning bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s, ok := snaps.Snapshot(true)
			if !ok {
				t.Error("Snapshot of an open job reported none")
				return
			}
			sawRunning = sawRunning || len(s.Running) > 0
		}
	}()
	runJacobi(t, j, a, b, rows, cols, iters, &coordinator.Split{}, "")
	if err := j.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if !sawRunning {
		t.Error("no snapshot while the job ran showed a running group")
	}

	s, ok := snaps.Snapshot(true)
	if !ok || len(s.Nodes) != 3 || len(s.Devices) == 0 || s.Groups == 0 {
		t.Fatalf("Snapshot = %+v, %v; want 3 nodes, their devices, the groups", s, ok)
	}
	if len(s.Buffers) != 2 || s.Buffers[0].Name != "a" || s.Buffers[0].Pages != (coherence.Dims{1, rows, 1}) {
		t.Fatalf("buffers = %+v, want a and b of 1×%d×1 pages", s.Buffers, rows)
	}
	for _, bp := range s.Buffers {
		valid := 0
		for _, al := range bp.Allocs {
			n := rows
			for _, x := range al.Outdated {
				n -= x.Volume()
			}
			valid += n
			if len(al.Moving) != 0 {
				t.Errorf("%s on %s: %v moving with the job quiet", bp.Name, al.Name, al.Moving)
			}
		}
		if valid < rows {
			t.Errorf("%s: %d pages valid over its allocations, want every page somewhere", bp.Name, valid)
		}
	}
}
