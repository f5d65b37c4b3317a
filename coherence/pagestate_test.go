package coherence

import (
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestPageStatesAgainstDense_P2 checks the chunked run/dense representation
// against a plain []slotMask over random updates that cross chunk boundaries
// and fragment chunks until they switch to the dense form.
func TestPageStatesAgainstDense_P2(t *testing.T) {
	denseSeen := 0
	defer func() {
		if !t.Failed() && !testing.Short() && denseSeen == 0 {
			t.Errorf("no run reached the dense form; the test does not cover it")
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		// Sizes and the op sequence come from a seeded PRNG (rapid biases
		// towards small values): uniform and long enough to fragment chunks
		// into the dense form.
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
		n := 1 + rng.IntN(2*chunkLen+100)
		maxSteps := 200
		if rapid.Bool().Draw(t, "small") {
			n = 1 + rng.IntN(700)
			maxSteps = 1200
		}
		// Slots are either the first few or spread over every word of the
		// mask (the last one next to the lost pseudo-slot).
		slotOf := func(i int) int { return i }
		if rng.IntN(2) == 0 {
			spread := []int{0, 62, 64, 127, 128, 191, 200, 255, 1}
			slotOf = func(i int) int { return spread[i] }
		}
		init := []slotMask{{}, slotBit(slotOf(0)), slotBit(slotOf(0)).or(slotBit(slotOf(1)))}[rng.IntN(3)]
		ps := newPageStates(n, init)
		ref := make([]slotMask, n)
		for i := range ref {
			ref[i] = init
		}
		slots := 1 + rng.IntN(8)
		steps := 1 + rng.IntN(maxSteps)
		for range steps {
			lo := rng.IntN(n)
			var hi int
			if rng.IntN(60) == 0 {
				hi = lo + 1 + rng.IntN(n-lo)
			} else {
				hi = min(n, lo+1+rng.IntN(5))
			}
			s := rng.IntN(slots)
			var op stateOp
			switch rng.IntN(5) {
			case 0, 1:
				op = stateOp{kind: opSet, m: slotBit(slotOf(s))}
			case 2, 3:
				op = stateOp{kind: opOrIfInit, m: slotBit(slotOf(s))}
			default:
				op = stateOp{kind: opLose, m: slotBit(slotOf(s)).or(slotBit(slotOf((s + 1) % slots)))}
			}
			ps.update(lo, hi, op)
			for p := lo; p < hi; p++ {
				ref[p] = op.apply(ref[p])
			}
		}
		if err := ps.check(); err != nil {
			t.Fatal(err)
		}
		denseSeen += ps.denseChunks()
		// A slot that appears only now (new allocation) enters dense chunks.
		for range 20 {
			lo := rng.IntN(n)
			hi := min(n, lo+1+rng.IntN(3))
			op := stateOp{kind: []opKind{opSet, opOrIfInit}[rng.IntN(2)], m: slotBit(slotOf(slots))}
			ps.update(lo, hi, op)
			for p := lo; p < hi; p++ {
				ref[p] = op.apply(ref[p])
			}
		}
		// Full visit matches, and sub-range visits are clipped correctly.
		check := func(lo, hi int) {
			p := lo
			ps.visit(lo, hi, func(a, b int, m slotMask) {
				if a != p || b <= a || b > hi {
					t.Fatalf("visit(%d,%d): run [%d,%d) after %d", lo, hi, a, b, p)
				}
				for q := a; q < b; q++ {
					if ref[q] != m {
						t.Fatalf("page %d: mask %v, want %v (dense chunk: %v)", q, m, ref[q], ps.chunks[q>>chunkShift].dense != nil)
					}
				}
				p = b
			})
			if p != hi {
				t.Fatalf("visit(%d,%d) stopped at %d", lo, hi, p)
			}
		}
		check(0, n)
		a := rapid.IntRange(0, n-1).Draw(t, "qlo")
		check(a, rapid.IntRange(a+1, n).Draw(t, "qhi"))
	})
}

// TestPageStatesDenseFallback_P2 fragments one chunk completely and checks
// that it switches to one bit per page per slot and back to one run when a
// write covers it.
func TestPageStatesDenseFallback_P2(t *testing.T) {
	ps := newPageStates(chunkLen, slotBit(0))
	for p := 0; p < chunkLen; p += 2 {
		ps.update(p, p+1, stateOp{kind: opSet, m: slotBit(1)})
	}
	if ps.denseChunks() != 1 {
		t.Fatalf("fully fragmented chunk: dense chunks = %d, want 1", ps.denseChunks())
	}
	if bits := float64(ps.memBytes()*8) / float64(chunkLen*2); bits > 1.2 {
		t.Fatalf("dense chunk with 2 slots: %.2f bits/page/slot, want ≤ 1.2", bits)
	}
	ps.update(0, chunkLen, stateOp{kind: opSet, m: slotBit(2)})
	if ps.denseChunks() != 0 || len(ps.chunks[0].starts) != 1 {
		t.Fatalf("covering write: dense=%d runs=%d, want one run", ps.denseChunks(), len(ps.chunks[0].starts))
	}
}

func TestIMapAgainstSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 2*chunkLen+50).Draw(t, "n")
		m := newIMap[int](n)
		ref := make([]int, n)
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			lo := rapid.IntRange(0, n-1).Draw(t, "lo")
			hi := rapid.IntRange(lo+1, min(n, lo+rapid.SampledFrom([]int{3, 50, n}).Draw(t, "w"))).Draw(t, "hi")
			add := rapid.IntRange(0, 3).Draw(t, "add")
			m.update(lo, hi, func(v int) int { return v%4 + add })
			for p := lo; p < hi; p++ {
				ref[p] = ref[p]%4 + add
			}
		}
		p := 0
		m.visit(0, n, func(a, b, v int) {
			if a != p {
				t.Fatalf("gap at %d", p)
			}
			for q := a; q < b; q++ {
				if ref[q] != v {
					t.Fatalf("imap[%d] = %d, want %d", q, v, ref[q])
				}
			}
			p = b
		})
		// heads mirrors starts.
		for ci, c := range m.chunks {
			var want [imLen / 64]uint64
			for _, st := range c.starts {
				want[st>>6] |= 1 << (st & 63)
			}
			if c.heads != want {
				t.Fatalf("chunk %d: heads %x, starts %v", ci, c.heads, c.starts)
			}
		}
		// Coalesced: adjacent stored segments of one chunk differ.
		for _, c := range m.chunks {
			for i := 1; i < len(c.vals); i++ {
				if c.vals[i] == c.vals[i-1] {
					t.Fatalf("adjacent equal segments not coalesced")
				}
			}
		}
	})
}

// TestSpansToBoxesExactAndMerged_T4: the boxes cover exactly the spans'
// pages, are disjoint and sorted, and a box-shaped set becomes one box.
func TestSpansToBoxesExactAndMerged_T4(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var p Dims
		for d := range 3 {
			p[d] = rapid.IntRange(1, 7).Draw(t, "p")
		}
		n := p.Volume()
		in := make([]bool, n)
		for range rapid.IntRange(0, 6).Draw(t, "k") {
			lo := rapid.IntRange(0, n-1).Draw(t, "lo")
			hi := rapid.IntRange(lo+1, n).Draw(t, "hi")
			for q := lo; q < hi; q++ {
				in[q] = true
			}
		}
		var spans []span
		for q := range n {
			if in[q] {
				spans = appendSpan(spans, q, q+1)
			}
		}
		boxes := spansToBoxes(p, spans)
		got := make([]bool, n)
		for i, b := range boxes {
			if i > 0 && compareBox(boxes[i-1], b) >= 0 {
				t.Fatalf("boxes not sorted: %v", boxes)
			}
			for _, q := range boxPages(p, b) {
				if got[q] {
					t.Fatalf("page %d in two boxes: %v", q, boxes)
				}
				got[q] = true
			}
		}
		if !slices.Equal(got, in) {
			t.Fatalf("spansToBoxes(%v, %v) = %v: pages differ", p, spans, boxes)
		}
		// A box-shaped input is one box.
		var lo, hi Dims
		for d := range 3 {
			lo[d] = rapid.IntRange(0, p[d]-1).Draw(t, "blo")
			hi[d] = rapid.IntRange(lo[d]+1, p[d]).Draw(t, "bhi")
		}
		box := Box{Lo: lo, Hi: hi}
		var bs []span
		boxSpans(p, box, func(a, b int) { bs = appendSpan(bs, a, b) })
		if got := spansToBoxes(p, bs); len(got) != 1 || got[0] != box {
			t.Fatalf("spansToBoxes(box %v) = %v, want the box", box, got)
		}
	})
}

// TestHotPathsDoNotAllocate guards the P3 update and the plan step.
func TestHotPathsDoNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	c, buf := bigCore(t, 1<<20)
	tslot, _ := buf.slotOf(gpu1)
	i := 0
	markWritten := func() {
		lo := (i * 7919) % (1<<20 - 4096)
		buf.states.update(lo, lo+4096, stateOp{kind: opSet, m: slotBit(i % 3)})
		i++
	}
	for range 5000 { // reach the steady fragmentation (run lists stop growing)
		markWritten()
	}
	if n := testing.AllocsPerRun(200, markWritten); n > 0.1 {
		t.Errorf("mark written: %.2f allocs/op, want 0", n)
	}
	var copies []*copyAcc
	var planned []plannedTo
	var deps []CGID
	if n := testing.AllocsPerRun(100, func() {
		lo := (i * 7919) % (1<<20 - 4096)
		copies, planned, deps = copies[:0], planned[:0], deps[:0]
		deps = c.planAccess(buf, span1(lo, lo+4096), tslot, &copies, &planned, deps)
		i++
	}); n > 6 {
		t.Errorf("plan: %.1f allocs/op, want ≤ 6", n)
	}
}

// TestUniformMatchesVisit_P2: the planner's fast path (pageStates.uniform)
// reports a mask only where every page of the box has that mask, on random
// states and boxes (2D and 3D grids, several chunks).
func TestUniformMatchesVisit_P2(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ext := Dims{rapid.IntRange(1, 3).Draw(t, "z"), rapid.IntRange(1, 40).Draw(t, "y"), rapid.IntRange(1, 300).Draw(t, "x")}
		n := ext.Volume()
		ps := newPageStates(n, slotBit(0))
		for range rapid.IntRange(0, 6).Draw(t, "updates") {
			lo := rapid.IntRange(0, n-1).Draw(t, "lo")
			hi := rapid.IntRange(lo+1, n).Draw(t, "hi")
			ps.update(lo, hi, stateOp{kind: opSet, m: slotBit(rapid.IntRange(0, 3).Draw(t, "slot"))})
		}
		var box Box
		for d := range 3 {
			box.Lo[d] = rapid.IntRange(0, ext[d]-1).Draw(t, "blo")
			box.Hi[d] = rapid.IntRange(box.Lo[d]+1, ext[d]).Draw(t, "bhi")
		}
		m, ok := ps.uniform(ext, box)
		if !ok {
			return // the caller walks the states instead
		}
		boxSpans(ext, box, func(lo, hi int) {
			ps.visit(lo, hi, func(a, b int, got slotMask) {
				if got != m {
					t.Fatalf("uniform(%v) = %v, but pages [%d,%d) have %v", box, m, a, b, got)
				}
			})
		})
	})
}
