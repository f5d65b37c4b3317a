package liveview_test

import (
	"context"
	"testing"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/liveview/queueview"
)

// One view's page grids of an embedded queue with two buffers of 2^24
// pages each, the middle half of each written (so its page states are
// several runs): the core's read and the aggregation, per view. On a
// CPU-only machine every device shares the host memory: one allocation
// per buffer. It reports µs-locked/view, the engine's read of the page
// states (Queue.PageStates: the planner's lock is held for all of it but
// the conversion to the public types), µs/view with the aggregation into cells, and
// %-locked-at-4/s, the share of the planner's time that four views a
// second (the live view's most) hold its lock: what a running job can
// lose to the view's reads at most, while its planner waits for them.
func BenchmarkEmbeddedBuffers(b *testing.B) {
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithCPUDevices(2))
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	const n = 1 << 24
	for range 2 {
		buf, err := acpp.NewBuffer[float32](q, acpp.R1(n), acpp.PageSize(1))
		if err != nil {
			b.Fatal(err)
		}
		ev, err := q.Submit(func(h *acpp.Handler) error {
			acpp.WriteRange(h, buf, acpp.R1(n/2), acpp.ID{n / 4})
			h.ParallelFor(acpp.R1(1), func(acpp.Item) {})
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := ev.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if got, err := queueview.Buffers(q, nil); err != nil || len(got) != 2 || got[0].Pages[0]*got[0].Pages[1]*got[0].Pages[2] != n {
		b.Fatalf("Buffers = %d buffers (%+v), %v; want 2 of 2^24 pages", len(got), got, err)
	}
	b.ReportAllocs()
	var locked time.Duration
	for b.Loop() {
		t := time.Now()
		q.PageStates()
		locked += time.Since(t)
		queueview.Buffers(q, nil)
	}
	// Each iteration reads the page states twice: alone, then inside
	// queueview.Buffers.
	perView := float64(b.Elapsed()-locked) / float64(b.N) / 1e3
	lockedPerView := float64(locked) / float64(b.N) / 1e3
	b.ReportMetric(lockedPerView, "µs-locked/view")
	b.ReportMetric(perView, "µs/view")
	b.ReportMetric(lockedPerView*4/1e6*100, "%-locked-at-4/s")
	b.ReportMetric(0, "ns/op")
}
