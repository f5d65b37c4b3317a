package coherence

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// refConflictDeps is the conflict query written plainly: every region of
// every access, read through its pointer, rules applied as in applyAccess.
func refConflictDeps(c *Core, cg CommandGroup) []CGID {
	var deps []CGID
	for _, a := range cg.Accesses {
		b := c.bufs[a.Buffer]
		boxSpans(b.pages, a.Pages, func(lo, hi int) {
			b.conf.visit(lo, hi, func(_, _ int, r *region) {
				if r == nil {
					return
				}
				live := func(gs []CGID) {
					for _, g := range gs {
						if c.isLive(g) {
							deps = append(deps, g)
						}
					}
				}
				anyLive := func(gs []CGID) bool {
					for _, g := range gs {
						if c.isLive(g) {
							return true
						}
					}
					return false
				}
				switch {
				case a.Mode == Read:
					live(r.writers)
				case a.Mode == Reduce && r.reduce && r.op == a.Op && r.target == a.Target && !anyLive(r.readers):
					live(r.before)
				case anyLive(r.readers):
					live(r.readers)
				default:
					live(r.writers)
				}
			})
		})
	}
	return finishDeps(deps, cg.ID)
}

// TestConflictDepsMatchesReference_D1: the optimised detection query
// (head-bitmap lookup, no closures, deduplication while appending) returns
// what the plain per-region reading does, over a random history with
// reductions, wide and narrow accesses and completions out of order.
func TestConflictDepsMatchesReference_D1(t *testing.T) {
	const n = 1 << 12
	groups := CGID(20000)
	if testing.Short() {
		groups = 3000
	}
	geo, _ := NewGeometry(Dims{1, 1, n}, 4, Dims{1, 1, 1})
	c := New(Config{})
	for id := BufferID(1); id <= 2; id++ {
		h := host0
		c.AddBuffer(BufferSpec{ID: id, Geometry: geo, HostData: &h})
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for id := CGID(1); id < groups; id++ {
		cg := CommandGroup{ID: id}
		dev := AllocID{Node: NodeID(rng.IntN(2)), Mem: MemID(1 + rng.IntN(2))}
		for k := range 4 {
			lo := rng.IntN(n - 600)
			a := Access{Buffer: BufferID(1 + k%2), Pages: span1(lo, lo+1+rng.IntN(1+rng.IntN(600))),
				Mode: []Mode{Read, Read, Read, Write, ReadWrite, Reduce}[rng.IntN(6)], Target: dev}
			if a.Mode == Reduce {
				a.Op = ReduceOp(rng.IntN(2))
			}
			cg.Accesses = append(cg.Accesses, a)
		}
		want := refConflictDeps(c, cg)
		got := slices.Clone(c.conflictDeps(cg))
		if !slices.Equal(got, want) {
			t.Fatalf("group %d: conflictDeps = %v, reference %v", id, got, want)
		}
		if _, err := c.Submit(cg); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(3) > 0 {
			c.Complete(id - CGID(rng.IntN(100)))
		}
	}
}
