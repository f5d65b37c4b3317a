package acpp

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSaxpyInPlace_L1_L2(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	const n = 100_000
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i), 1
	}
	x := must(NewBufferFrom(q, xs, R1(n)))
	y := must(NewBufferFrom(q, ys, R1(n)))
	ev := must(q.Submit(func(h *Handler) error {
		xa, ya := Read(h, x), ReadWrite(h, y)
		h.ParallelFor(R1(n), func(it Item) {
			i := it.ID(0)
			ya.Set(i, 2*xa.At(i)+ya.At(i))
		})
		return nil
	}))
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// L1: CPU kernels work in the user's slice itself.
	if ys[7] != 15 {
		t.Fatalf("ys[7] = %v right after the kernel, want 15 (linked allocation, no copy)", ys[7])
	}
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range ys {
		if ys[i] != 2*float32(i)+1 {
			t.Fatalf("ys[%d] = %v, want %v", i, ys[i], 2*float32(i)+1)
		}
	}
	if st := q.Stats(); st.Copies != 0 || st.BytesCopied != 0 {
		t.Errorf("Stats() = %+v, want no copies between host and CPU", st)
	}
}

// Options that cannot apply to a queue of local devices fail loudly: OnNode
// names a node of a cluster queue.
func TestOnNodeRefusedOnLocalQueue(t *testing.T) {
	q := newQueue(t)
	b := must(NewBuffer[int32](q, R1(4)))
	_, err := q.Submit(func(h *Handler) error { Fill(h, Write(h, b), 1); return nil }, OnNode("n0", DeviceID{Kind: CPU}))
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "use On") {
		t.Fatalf("OnNode on a local queue: %v, want ErrNoDevice saying to use On", err)
	}
}

// D1: an explicit dependency on a split group's event waits for all of its
// chunks (the event stands for every chunk).
func TestAfterSplitEventWaitsForEveryChunk_D1(t *testing.T) {
	q := newQueue(t, WithCPUDevices(3))
	const n = 300
	b := must(NewBuffer[int32](q, R1(n)))
	var done atomic.Int64 // items the split's chunks ran
	split := must(q.Submit(func(h *Handler) error {
		w := Write(h, b, NoInit, Map(OneToOne()))
		h.ParallelForChunks(R1(n), func(lo, hi ID) {
			time.Sleep(5 * time.Millisecond)
			for i := lo[0]; i < hi[0]; i++ {
				w.Set(i, 1)
			}
			done.Add(int64(hi[0] - lo[0]))
		})
		return nil
	}, Split()))
	var saw int64 = -1
	after := must(q.Submit(func(h *Handler) error {
		h.SingleTask(func() { saw = done.Load() }) // no accessor: only After orders it
		return nil
	}, After(split)))
	if err := after.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if saw != n || len(split.Chunks()) != 3 {
		t.Fatalf("the group after a split saw %d of its %d items done (chunks %d)", saw, n, len(split.Chunks()))
	}
}

// D1: an event of another queue cannot order a group (each queue's
// executor orders its own groups): After with one is refused instead of
// being ignored (review of 2026-11-25).
func TestAfterEventOfAnotherQueueRefused(t *testing.T) {
	q1, q2 := newQueue(t), newQueue(t)
	ev := must(q1.Submit(func(h *Handler) error { h.SingleTask(func() {}); return nil }))
	_, err := q2.Submit(func(h *Handler) error { h.SingleTask(func() {}); return nil }, After(ev))
	if err == nil || !strings.Contains(err.Error(), "another queue") {
		t.Fatalf("After(an event of another queue) = %v, want a refusal", err)
	}
}
