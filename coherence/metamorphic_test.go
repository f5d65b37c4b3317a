package coherence

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestMetamorphicPageSizes_P1_T1_T3_D3 runs one seeded sequence of
// element-level accessors under several page sizes. Every plan is executed on
// simulated element memories, groups running in a random order that the
// returned DAG allows; every element a kernel reads must hold the value that
// sequential execution in submission order gives, whatever the page size.
// Unaligned discard accessors go through Geometry.DiscardPages, so elements
// outside them survive. Re-run one seed with -run TestMetamorphic/seed=N.
func TestMetamorphicPageSizes_P1_T1_T3_D3(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			ext := Dims{1, 1 + rng.IntN(12), 1 + rng.IntN(12)}
			ops := genElemOps(rng, ext, 60)
			for _, ps := range []Dims{{1, 1, 1}, {1, 2, 3}, {1, 3, 5}, {1, 1, ext[2]}, ext} {
				runElemOps(t, ext, ps, ops, uint64(seed))
			}
		})
	}
}

type elemOp struct {
	complete bool // complete a random ready group instead of submitting
	off, rng Dims
	mode     Mode
	discard  bool
	target   AllocID
	readAt   AllocID // a second, read-only accessor on another allocation
}

var metaAllocs = []AllocID{{0, HostMem}, {0, 1}, {0, 2}, {1, 1}}

func genElemOps(rng *rand.Rand, ext Dims, n int) []elemOp {
	var ops []elemOp
	for range n {
		if rng.IntN(3) == 0 {
			ops = append(ops, elemOp{complete: true})
			continue
		}
		var op elemOp
		op.off, op.rng = Dims{0, 0, 0}, Dims{1, 1, 1}
		for d := 1; d < 3; d++ {
			op.off[d] = rng.IntN(ext[d])
			op.rng[d] = 1 + rng.IntN(ext[d]-op.off[d])
		}
		op.mode = []Mode{Read, Read, Write, ReadWrite}[rng.IntN(4)]
		op.discard = op.mode == Write && rng.IntN(2) == 0
		op.target = metaAllocs[rng.IntN(len(metaAllocs))]
		op.readAt = metaAllocs[rng.IntN(len(metaAllocs))]
		ops = append(ops, op)
	}
	return ops
}

type elemGroup struct {
	id       CGID
	step     Step
	op       elemOp
	expect   []int // values the accessor must read (by element of its range)
	readAlso bool
	done     bool
}

func runElemOps(t *testing.T, ext Dims, ps Dims, ops []elemOp, seed uint64) {
	t.Helper()
	geo, err := NewGeometry(ext, 4, ps)
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{})
	h := metaAllocs[0]
	if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo, HostData: &h}); err != nil {
		t.Fatal(err)
	}
	n := ext.Volume()
	idx := func(y, x int) int { return y*ext[2] + x }
	ref := make([]int, n) // sequential semantics; initial host data is 0
	mem := map[AllocID][]int{h: make([]int, n)}
	var groups []*elemGroup
	rng := rand.New(rand.NewPCG(seed, 99))
	forEach := func(off, r Dims, fn func(i int)) {
		for y := off[1]; y < off[1]+r[1]; y++ {
			for x := off[2]; x < off[2]+r[2]; x++ {
				fn(idx(y, x))
			}
		}
	}
	execute := func(g *elemGroup) {
		for _, al := range g.step.Allocate {
			if mem[al.Alloc] != nil {
				continue // another group listing it ran first (idempotent)
			}
			m := make([]int, n)
			for i := range m {
				m[i] = -1 // garbage
			}
			mem[al.Alloc] = m
		}
		type w struct {
			dst  []int
			i, v int
		}
		var writes []w
		for _, cp := range g.step.Copies {
			src, dst := mem[cp.Src], mem[cp.Dst]
			for _, b := range cp.Boxes {
				eb := geo.ElementBox(b)
				forEach(eb.Lo, eb.Size(), func(i int) { writes = append(writes, w{dst, i, src[i]}) })
			}
		}
		for _, x := range writes {
			x.dst[x.i] = x.v
		}
		op := g.op
		tm := mem[op.target]
		if tm == nil || g.readAlso && mem[op.readAt] == nil {
			t.Fatalf("page size %v: group %d runs on %v before it is allocated (Allocate %v, deps %v)", ps, g.id, op.target, g.step.Allocate, g.step.Deps)
		}
		k := 0
		forEach(op.off, op.rng, func(i int) {
			if !op.discard && tm[i] != g.expect[k] {
				t.Fatalf("page size %v: group %d %v on %v reads element %d = %d, want %d", ps, g.id, op.mode, op.target, i, tm[i], g.expect[k])
			}
			if g.readAlso && mem[op.readAt][i] != g.expect[k] {
				t.Fatalf("page size %v: group %d read on %v: element %d = %d, want %d", ps, g.id, op.readAt, i, mem[op.readAt][i], g.expect[k])
			}
			switch op.mode {
			case Write:
				tm[i] = int(g.id)*1000 + i
			case ReadWrite:
				tm[i] = tm[i]*31 + int(g.id)
			}
			k++
		})
		g.done = true
		c.Complete(g.id)
	}
	ready := func() []*elemGroup {
		var out []*elemGroup
		for _, g := range groups {
			if g.done {
				continue
			}
			ok := true
			for _, d := range g.step.Deps {
				if !groups[d-1].done {
					ok = false
				}
			}
			if ok {
				out = append(out, g)
			}
		}
		return out
	}
	for _, op := range ops {
		if op.complete {
			if r := ready(); len(r) > 0 {
				execute(r[rng.IntN(len(r))])
			}
			continue
		}
		id := CGID(len(groups) + 1)
		var acc []Access
		if op.discard {
			full, partial, err := geo.DiscardPages(op.off, op.rng)
			if err != nil {
				t.Fatal(err)
			}
			if !full.Empty() {
				acc = append(acc, Access{Buffer: 1, Pages: full, Mode: Write, Discard: true, Target: op.target})
			}
			for _, b := range partial {
				acc = append(acc, Access{Buffer: 1, Pages: b, Mode: Write, Target: op.target})
			}
		} else {
			pages, err := geo.PageRange(op.off, op.rng)
			if err != nil {
				t.Fatal(err)
			}
			acc = append(acc, Access{Buffer: 1, Pages: pages, Mode: op.mode, Target: op.target})
		}
		g := &elemGroup{id: id, op: op}
		if op.mode != Write && op.readAt != op.target {
			pages, _ := geo.PageRange(op.off, op.rng)
			acc = append(acc, Access{Buffer: 1, Pages: pages, Mode: Read, Target: op.readAt})
			g.readAlso = true
		}
		st, err := c.Submit(CommandGroup{ID: id, Accesses: acc})
		if err != nil {
			t.Fatalf("page size %v: Submit(%d): %v", ps, id, err)
		}
		g.step = st
		forEach(op.off, op.rng, func(i int) {
			g.expect = append(g.expect, ref[i])
			switch op.mode {
			case Write:
				ref[i] = int(id)*1000 + i
			case ReadWrite:
				ref[i] = ref[i]*31 + int(id)
			}
		})
		groups = append(groups, g)
	}
	for {
		r := ready()
		if len(r) == 0 {
			break
		}
		execute(r[rng.IntN(len(r))])
	}
	for _, g := range groups {
		if !g.done {
			t.Fatalf("page size %v: group %d never ready (deps %v)", ps, g.id, g.step.Deps)
		}
	}
	// Finally the host must be able to read everything, equal to ref.
	pages := geo.All()
	st, err := c.Submit(CommandGroup{ID: CGID(len(groups) + 1), Accesses: []Access{{Buffer: 1, Pages: pages, Mode: Read, Target: h}}})
	if err != nil {
		t.Fatal(err)
	}
	groups = append(groups, &elemGroup{id: st.ID, step: st, op: elemOp{off: Dims{}, rng: ext, mode: Read, target: h, readAt: h}, expect: ref})
	execute(groups[len(groups)-1])
}
