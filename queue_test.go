package acpp

import (
	"context"
	"testing"
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
