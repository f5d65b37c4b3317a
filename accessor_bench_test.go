package acpp

import (
	"testing"

	"github.com/acpp/acpp/internal/engine"
)

// BenchmarkAccessorIndexing compares, on one goroutine over 1 Mi float32,
// a per-item kernel call and a chunk loop through raw and unranged
// accessors with a plain loop: accessors must compile to the same code as
// slices (they are register-sized), and the per-item form pays one
// indirect call per item.
func BenchmarkAccessorIndexing(b *testing.B) {
	n := 1 << 20
	xs, ys := make([]float32, n), make([]float32, n)
	xa, ya := RawRO[float32]{p: xs}, Raw[float32]{p: ys}
	ua, ub := UnrangedRO[float32]{p: xs, rq: &req{s1: 1, s2: n, Access: engine.Access{BRange: [3]int{1, 1, n}}}}, Unranged[float32]{p: ys, rq: &req{s1: 1, s2: n}}
	a := float32(0.5)
	rr := &[3]int{n, 1, 1}
	k := func(it Item) { i := it.ID(0); ya.Set(i, a*xa.At(i)+ya.At(i)) }
	ku := func(it Item) { i := it.ID(0); ub.Set(i, a*ua.At(i)+ub.At(i)) }
	chunkRaw := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ya.Set(i, a*xa.At(i)+ya.At(i))
		}
	}
	chunkUnr := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ub.Set(i, a*ua.At(i)+ub.At(i))
		}
	}
	b.Run("items_raw", func(b *testing.B) {
		for b.Loop() {
			for i := 0; i < n; i++ {
				k(Item{i: i, r: rr})
			}
		}
	})
	b.Run("items_unranged", func(b *testing.B) {
		for b.Loop() {
			for i := 0; i < n; i++ {
				ku(Item{i: i, r: rr})
			}
		}
	})
	b.Run("chunk_raw", func(b *testing.B) {
		for b.Loop() {
			chunkRaw(0, n)
		}
	})
	b.Run("chunk_unranged", func(b *testing.B) {
		for b.Loop() {
			chunkUnr(0, n)
		}
	})
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			for i := range xs {
				ys[i] = a*xs[i] + ys[i]
			}
		}
	})
	// Reading a whole read accessor: At in a loop and range-over-func
	// (Values) must cost what a loop over a slice costs (the read-only
	// accessors have no slice to range over, V2).
	var sink float32
	b.Run("sum_at", func(b *testing.B) {
		for b.Loop() {
			var s float32
			for i := 0; i < n; i++ {
				s += ua.At(i)
			}
			sink += s
		}
	})
	b.Run("sum_values", func(b *testing.B) {
		for b.Loop() {
			var s float32
			for v := range ua.Values() {
				s += v
			}
			sink += s
		}
	})
	b.Run("sum_hand", func(b *testing.B) {
		for b.Loop() {
			var s float32
			for _, v := range xs {
				s += v
			}
			sink += s
		}
	})
	_ = sink
}
