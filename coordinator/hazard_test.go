package coordinator

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/acpp/acpp/coherence"
)

func pageBox(lo, hi int) coherence.Box {
	return coherence.Box{Lo: coherence.Dims{0, lo, 0}, Hi: coherence.Dims{1, hi, 1}}
}

// An allocation's hazard table orders conflicting accesses only (D1, D3:
// a read waits for the writers of its pages, a write for their readers and
// writers; D2, D4: other pages never wait), forgets finished instructions,
// and drops accesses a later write covers (the writer waited for them).
func TestAllocHazards_D1_D2_D3_D4(t *testing.T) {
	ns := &nodeState{instrs: map[uint64]instrRef{}}
	h := &allocHazards{}
	issue := func(pages coherence.Box, write bool) (uint64, []uint64) {
		var after []*groupState
		deps := h.waitFor(ns, pages, write, nil, &after)
		ns.nextInstr++
		id := ns.nextInstr
		ns.instrs[id] = instrRef{}
		h.record(ns, pages, id, write)
		slices.Sort(deps)
		return id, deps
	}
	w1, deps := issue(pageBox(0, 4), true)
	if len(deps) != 0 {
		t.Fatalf("first write waits for %v", deps)
	}
	r1, deps := issue(pageBox(2, 6), false)
	if !slices.Equal(deps, []uint64{w1}) {
		t.Fatalf("read after write waits for %v, want [%d]", deps, w1)
	}
	r2, deps := issue(pageBox(3, 4), false)
	if !slices.Equal(deps, []uint64{w1}) {
		t.Fatalf("second read waits for %v, want only the writer [%d] (reads do not conflict)", deps, w1)
	}
	if _, deps = issue(pageBox(6, 8), true); len(deps) != 0 {
		t.Fatalf("write of other pages waits for %v", deps)
	}
	w2, deps := issue(pageBox(0, 6), true)
	if !slices.Equal(deps, []uint64{w1, r1, r2}) {
		t.Fatalf("write waits for %v, want the writer and both readers [%d %d %d]", deps, w1, r1, r2)
	}
	// w2 covers w1, r1 and r2: a read of any of their pages waits for w2
	// alone, which waited for them.
	if _, deps = issue(pageBox(0, 1), false); !slices.Equal(deps, []uint64{w2}) {
		t.Fatalf("read after the covering write waits for %v, want [%d]", deps, w2)
	}
	// A write of part of a read's pages trims the read to the rest: a
	// later write of the written part waits for that writer, not for the
	// read; one of the rest waits for both.
	rd, _ := issue(pageBox(20, 30), false)
	w3, deps := issue(pageBox(22, 28), true)
	if !slices.Equal(deps, []uint64{rd}) {
		t.Fatalf("write inside a read waits for %v, want [%d]", deps, rd)
	}
	if _, deps = issue(pageBox(23, 24), true); !slices.Equal(deps, []uint64{w3}) {
		t.Fatalf("write of the written part waits for %v, want [%d]", deps, w3)
	}
	if _, deps = issue(pageBox(21, 23), true); !slices.Equal(deps, []uint64{rd, w3}) {
		t.Fatalf("write across the rest waits for %v, want [%d %d]", deps, rd, w3)
	}
	if _, deps = issue(pageBox(29, 30), true); !slices.Equal(deps, []uint64{rd}) {
		t.Fatalf("write of the other rest waits for %v, want [%d]", deps, rd)
	}
	delete(ns.instrs, w2) // finished
	if _, deps = issue(pageBox(0, 6), false); len(deps) != 0 {
		t.Fatalf("read after the writer finished waits for %v", deps)
	}
	// Finished accesses are swept, so the table stays as long as what is
	// pending however long the run.
	for range 1000 {
		id, _ := issue(pageBox(10, 11), true)
		delete(ns.instrs, id)
	}
	if len(h.accs) > 40 {
		t.Errorf("table holds %d accesses after 1000 finished writes", len(h.accs))
	}
}

// The lineage (the producers a NodeLostError names for lost pages, C5)
// keeps, per buffer, exactly the writes no later single write covers, as
// a plain scan of every record would; random 3D writes, checked after
// each one.
func TestLineageKeepsUncoveredWrites_C5(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	j := &Job{lineage: map[coherence.BufferID][]writeRec{}}
	var model []writeRec
	randBox := func() coherence.Box {
		var b coherence.Box
		for d := range 3 {
			lo := r.IntN(6)
			b.Lo[d], b.Hi[d] = lo, lo+1+r.IntN(6-lo)
		}
		if r.IntN(3) == 0 { // rows of a split, as Jacobi writes them
			b.Lo[0], b.Hi[0], b.Lo[2], b.Hi[2] = 0, 1, 0, 6
		}
		return b
	}
	for g := range GroupID(2000) {
		pages := randBox()
		j.recordWriteLocked(1, g, pages)
		keep := model[:0]
		for _, w := range model {
			if w.pages.Intersect(pages) != w.pages {
				keep = append(keep, w)
			}
		}
		model = append(keep, writeRec{g: g, pages: pages})
		got := slices.Clone(j.lineage[1])
		byGroup := func(a, b writeRec) int { return int(a.g) - int(b.g) }
		slices.SortFunc(got, byGroup)
		if !slices.Equal(got, model) {
			t.Fatalf("after write %d of %v: lineage %v, want %v", g, pages, got, model)
		}
		if !slices.IsSortedFunc(j.lineage[1], func(a, b writeRec) int { return cmpDims(a.pages.Lo, b.pages.Lo) }) {
			t.Fatalf("after write %d: lineage not sorted by low corner: %v", g, j.lineage[1])
		}
	}
}
