package coherence

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// This file checks Core against a naive reference model (dense per-page,
// per-allocation bools; brute-force pairwise conflicts over every earlier
// incomplete group) and against a simulated execution that moves page values
// along the plans in a random order allowed by the returned DAG.
//
// Covered: P2 P3 P4 T1 T2 T3 D1 D2 D3 C2 C3 C4 C5 B5.

// val is the content of one page in one allocation: the last writer (base),
// and the set of reductions applied since (as xor hash and count, order
// independent like the reductions themselves). base -1 is garbage (fresh
// allocation memory).
type val struct {
	base int64
	h    uint64
	cnt  int
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

type mBuf struct {
	id    BufferID
	geo   Geometry
	p     Dims
	n     int
	valid map[AllocID][]bool // model page states
	lost  []bool
	init  []bool // ever initialised (host data or written)
	lv    []val  // latest value in submission order
	sim   map[AllocID][]val
	// made names the group whose Allocate created each allocation (absent
	// for HostData).
	made map[AllocID]CGID
}

type mAccess struct {
	a     Access
	pages []int
	exp   []val // expected input per page (for non-discard accesses)
}

type mGroup struct {
	id       CGID
	acc      []mAccess
	step     Step
	done     bool
	rel      bool
	relBuf   *mBuf
	relAlloc AllocID
}

type model struct {
	t      *rapid.T
	c      *Core
	bufs   []*mBuf
	groups []*mGroup
	byID   map[CGID]*mGroup
	next   CGID
	allocs []AllocID
}

func boxPages(p Dims, b Box) []int {
	var out []int
	for z := b.Lo[0]; z < b.Hi[0]; z++ {
		for y := b.Lo[1]; y < b.Hi[1]; y++ {
			for x := b.Lo[2]; x < b.Hi[2]; x++ {
				out = append(out, flatten(p, Dims{z, y, x}))
			}
		}
	}
	return out
}

func (m *model) anyValid(b *mBuf, p int) bool {
	for _, v := range b.valid {
		if v[p] {
			return true
		}
	}
	return false
}

func (m *model) ensure(b *mBuf, a AllocID) {
	if _, ok := b.valid[a]; !ok {
		b.valid[a] = make([]bool, b.n)
	}
}

// simAlloc creates fresh (garbage) memory when a step's Allocate runs,
// unless another group listing it ran first (allocation is idempotent).
func simAlloc(t *rapid.T, b *mBuf, a AllocID) {
	if b.sim[a] != nil {
		return
	}
	s := make([]val, b.n)
	for i := range s {
		s[i] = val{base: -1}
	}
	b.sim[a] = s
}

// drawAccess draws an access of b. A kernel runs on one device, so accesses
// that write use the group's target; reads may name another allocation
// (host accessors, copies).
func (m *model) drawAccess(t *rapid.T, b *mBuf, target AllocID) Access {
	var off, rng Dims
	for d := range 3 {
		off[d] = rapid.IntRange(0, b.geo.Range[d]-1).Draw(t, "off")
		rng[d] = rapid.IntRange(1, b.geo.Range[d]-off[d]).Draw(t, "rng")
	}
	pages, err := b.geo.PageRange(off, rng)
	if err != nil {
		t.Fatalf("PageRange(%v, %v): %v", off, rng, err)
	}
	mode := rapid.SampledFrom([]Mode{Read, Read, Write, ReadWrite, Reduce}).Draw(t, "mode")
	a := Access{Buffer: b.id, Pages: pages, Mode: mode, Target: target}
	if mode == Read && rapid.IntRange(0, 2).Draw(t, "othertarget") == 0 {
		a.Target = rapid.SampledFrom(m.allocs).Draw(t, "target")
	}
	if mode == Reduce {
		a.Op = ReduceOp(rapid.IntRange(1, 2).Draw(t, "op"))
	}
	if mode != Read && mode != Reduce {
		a.Discard = rapid.IntRange(0, 3).Draw(t, "discard") == 0
	}
	return a
}

func conflicts(x, y Access) bool {
	if x.Buffer != y.Buffer || !x.Pages.Overlaps(y.Pages) {
		return false
	}
	if x.Mode == Read && y.Mode == Read {
		return false
	}
	if x.Mode == Reduce && y.Mode == Reduce && x.Op == y.Op && x.Target == y.Target {
		return false
	}
	return true
}

func (m *model) bufOf(id BufferID) *mBuf {
	for _, b := range m.bufs {
		if b.id == id {
			return b
		}
	}
	return nil
}

// submit draws and submits a command group and checks the plan.
func (m *model) submit(t *rapid.T) {
	nacc := rapid.IntRange(1, 3).Draw(t, "naccesses")
	g := &mGroup{id: m.next}
	var cg CommandGroup
	cg.ID = m.next
	target := rapid.SampledFrom(m.allocs).Draw(t, "target")
	for range nacc {
		b := rapid.SampledFrom(m.bufs).Draw(t, "buffer")
		a := m.drawAccess(t, b, target)
		cg.Accesses = append(cg.Accesses, a)
	}
	// Expected lost pages.
	wantLost := map[BufferID][]int{}
	for _, a := range cg.Accesses {
		if a.Discard {
			continue
		}
		b := m.bufOf(a.Buffer)
		for _, p := range boxPages(b.p, a.Pages) {
			if b.lost[p] && (b.valid[a.Target] == nil || !b.valid[a.Target][p]) && !slices.Contains(wantLost[b.id], p) {
				wantLost[b.id] = append(wantLost[b.id], p)
			}
		}
	}
	step, err := m.c.Submit(cg)
	if len(wantLost) > 0 {
		if !errors.Is(err, ErrLostPages) {
			t.Fatalf("group %d needs lost pages %v: err = %v, want ErrLostPages", cg.ID, wantLost, err)
		}
		got := map[BufferID][]int{}
		for _, lp := range step.Lost {
			for _, bx := range lp.Boxes {
				got[lp.Buffer] = append(got[lp.Buffer], boxPages(m.bufOf(lp.Buffer).p, bx)...)
			}
		}
		for id := range wantLost {
			slices.Sort(wantLost[id])
			slices.Sort(got[id])
			if !slices.Equal(wantLost[id], got[id]) {
				t.Fatalf("group %d lost pages of buffer %d = %v, want %v", cg.ID, id, got[id], wantLost[id])
			}
		}
		return // nothing recorded; the ID may be reused
	}
	if err != nil {
		t.Fatalf("Submit(%d): %v", cg.ID, err)
	}
	m.next++
	g.step = step

	// Deps: subset of naive conflicts ∪ fill-allowed; closure covers conflicts.
	naive := map[CGID]bool{}
	for _, h := range m.groups {
		if h.done {
			continue
		}
		for _, x := range h.acc {
			for _, y := range cg.Accesses {
				if conflicts(x.a, y) {
					naive[h.id] = true
				}
			}
		}
	}
	for _, d := range step.Deps {
		if naive[d] {
			continue
		}
		h := m.byID[d]
		if h == nil || h.done || !m.fillAllowed(h, cg, step) {
			t.Fatalf("group %d: dep %d is neither a conflict nor an in-flight fill it relies on (naive conflicts %v, deps %v)", cg.ID, d, keys(naive), step.Deps)
		}
	}
	reach := m.closure(step.Deps)
	for h := range naive {
		if !reach[h] {
			t.Fatalf("group %d conflicts with %d but does not reach it through deps %v", cg.ID, h, step.Deps)
		}
	}

	// Allocations: every new (buffer, target) pair; besides, only targets
	// whose creating group is incomplete (listed instead of a dependency on
	// it, B5, D4; whether they exist when the group runs is checked by
	// execute).
	wantAlloc := map[[2]any]bool{}
	mayAlloc := map[[2]any]bool{}
	for _, a := range cg.Accesses {
		b := m.bufOf(a.Buffer)
		k := [2]any{a.Buffer, a.Target}
		if _, ok := b.valid[a.Target]; !ok {
			wantAlloc[k] = true
		} else if by, ok := b.made[a.Target]; ok && !m.byID[by].done {
			mayAlloc[k] = true
		}
	}
	gotAlloc := map[[2]any]bool{}
	for _, al := range step.Allocate {
		k := [2]any{al.Buffer, al.Alloc}
		if gotAlloc[k] || !wantAlloc[k] && !mayAlloc[k] || al.Bytes != m.bufOf(al.Buffer).geo.Bytes() {
			t.Fatalf("group %d Allocate %v unexpected (want %v, may %v)", cg.ID, al, wantAlloc, mayAlloc)
		}
		gotAlloc[k] = true
	}
	for k := range wantAlloc {
		if !gotAlloc[k] {
			t.Fatalf("group %d Allocate = %v, want %v", cg.ID, step.Allocate, wantAlloc)
		}
	}
	for _, a := range cg.Accesses {
		b := m.bufOf(a.Buffer)
		if _, ok := b.valid[a.Target]; !ok {
			b.made[a.Target] = cg.ID
		}
		m.ensure(b, a.Target)
	}

	// Transfers: naive choice = every outdated page of a non-discard access
	// that has a valid copy somewhere, once per target.
	type dp struct {
		buf BufferID
		dst AllocID
		p   int
	}
	want := map[dp]bool{}
	for _, a := range cg.Accesses {
		if a.Discard {
			continue
		}
		b := m.bufOf(a.Buffer)
		for _, p := range boxPages(b.p, a.Pages) {
			if !b.valid[a.Target][p] && m.anyValid(b, p) {
				want[dp{b.id, a.Target, p}] = true
			}
		}
	}
	got := map[dp]bool{}
	for _, cp := range step.Copies {
		b := m.bufOf(cp.Buffer)
		n := 0
		for i, bx := range cp.Boxes {
			if i > 0 && compareBox(cp.Boxes[i-1], bx) >= 0 {
				t.Fatalf("group %d copy %v: boxes not sorted", cg.ID, cp)
			}
			for _, p := range boxPages(b.p, bx) {
				k := dp{b.id, cp.Dst, p}
				if got[k] {
					t.Fatalf("group %d: page %d copied twice to %v", cg.ID, p, cp.Dst)
				}
				got[k] = true
				if !b.valid[cp.Src][p] {
					t.Fatalf("group %d: copy of page %d from %v, where it is outdated", cg.ID, p, cp.Src)
				}
				n++
			}
		}
		if n != cp.Pages {
			t.Fatalf("group %d copy %v: Pages = %d, boxes hold %d", cg.ID, cp, cp.Pages, n)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("group %d: %d pages copied, naive model wants %d", cg.ID, len(got), len(want))
	}
	for k := range want {
		if !got[k] {
			t.Fatalf("group %d: page %d of buffer %d not copied to %v", cg.ID, k.p, k.buf, k.dst)
		}
	}

	// Record expectations and apply the effects to the model.
	for _, a := range cg.Accesses {
		b := m.bufOf(a.Buffer)
		ma := mAccess{a: a, pages: boxPages(b.p, a.Pages)}
		if !a.Discard {
			for _, p := range ma.pages {
				e := b.lv[p]
				if !b.init[p] {
					e = val{base: -2} // uninitialised: anything goes
				}
				ma.exp = append(ma.exp, e)
			}
		}
		g.acc = append(g.acc, ma)
	}
	for k := range want {
		m.bufOf(k.buf).valid[k.dst][k.p] = true
	}
	for _, a := range cg.Accesses {
		if a.Mode == Read {
			continue
		}
		b := m.bufOf(a.Buffer)
		for _, p := range boxPages(b.p, a.Pages) {
			for _, v := range b.valid {
				v[p] = false
			}
			b.valid[a.Target][p] = true
			b.lost[p] = false
			if !b.init[p] {
				b.lv[p].base = -1 // garbage of a fresh allocation
			}
			b.init[p] = true
			if a.Mode == Reduce {
				b.lv[p] = val{base: b.lv[p].base, h: b.lv[p].h ^ mix(uint64(cg.ID)), cnt: b.lv[p].cnt + 1}
			} else {
				b.lv[p] = val{base: int64(cg.ID)}
			}
		}
	}
	m.groups = append(m.groups, g)
	m.byID[g.id] = g
}

func keys(s map[CGID]bool) []CGID {
	var out []CGID
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// fillAllowed: h copied pages into an allocation that cg reads there, or that
// cg's copies read from. (That h creates an allocation cg uses is no reason:
// cg lists it in its own Allocate instead, D4.)
func (m *model) fillAllowed(h *mGroup, cg CommandGroup, step Step) bool {
	for _, hc := range h.step.Copies {
		hb := m.bufOf(hc.Buffer)
		for _, hbx := range hc.Boxes {
			for _, a := range cg.Accesses {
				if !a.Discard && a.Buffer == hc.Buffer && a.Target == hc.Dst && a.Pages.Overlaps(hbx) {
					return true
				}
			}
			for _, c := range step.Copies {
				if c.Buffer == hc.Buffer && c.Src == hc.Dst {
					for _, bx := range c.Boxes {
						if bx.Overlaps(hbx) {
							return true
						}
					}
				}
			}
		}
		_ = hb
	}
	return false
}

// closure: groups reachable from deps through incomplete groups.
func (m *model) closure(deps []CGID) map[CGID]bool {
	seen := map[CGID]bool{}
	stack := slices.Clone(deps)
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[d] {
			continue
		}
		seen[d] = true
		if h := m.byID[d]; h != nil && !h.done {
			stack = append(stack, h.step.Deps...)
		}
	}
	return seen
}

func (m *model) ready() []*mGroup {
	var out []*mGroup
	for _, g := range m.groups {
		if g.done {
			continue
		}
		ok := true
		for _, d := range g.step.Deps {
			if h := m.byID[d]; h != nil && !h.done {
				ok = false
			}
		}
		if ok {
			out = append(out, g)
		}
	}
	return out
}

// execute runs a ready group on the simulated memories and completes it.
func (m *model) execute(t *rapid.T, g *mGroup) {
	// Copies read their sources before any destination is written.
	type w struct {
		dst []val
		p   int
		v   val
	}
	var writes []w
	for _, al := range g.step.Allocate {
		simAlloc(t, m.bufOf(al.Buffer), al.Alloc)
	}
	for _, ma := range g.acc {
		if b := m.bufOf(ma.a.Buffer); b.sim[ma.a.Target] == nil {
			t.Fatalf("group %d: %v on %v, which was not allocated yet (Allocate %v, deps %v)", g.id, ma.a.Mode, ma.a.Target, g.step.Allocate, g.step.Deps)
		}
	}
	for _, cp := range g.step.Copies {
		b := m.bufOf(cp.Buffer)
		src, dst := b.sim[cp.Src], b.sim[cp.Dst]
		if src == nil || dst == nil {
			t.Fatalf("group %d: copy %v between missing allocations", g.id, cp)
		}
		for _, bx := range cp.Boxes {
			for _, p := range boxPages(b.p, bx) {
				writes = append(writes, w{dst, p, src[p]})
			}
		}
	}
	for _, x := range writes {
		x.dst[x.p] = x.v
	}
	if g.rel {
		delete(g.relBuf.sim, g.relAlloc)
	}
	for _, ma := range g.acc {
		b := m.bufOf(ma.a.Buffer)
		mem := b.sim[ma.a.Target]
		for i, e := range ma.exp {
			p := ma.pages[i]
			got := mem[p]
			if e.base == -2 {
				continue
			}
			if ma.a.Mode == Reduce {
				if got.base != e.base {
					t.Fatalf("group %d reduce on %v page %d: input base %d, want %d", g.id, ma.a.Target, p, got.base, e.base)
				}
				continue
			}
			if got != e {
				t.Fatalf("group %d %v on %v page %d: sees %+v, want %+v (deps %v)", g.id, ma.a.Mode, ma.a.Target, p, got, e, g.step.Deps)
			}
		}
	}
	for _, ma := range g.acc {
		if ma.a.Mode == Read {
			continue
		}
		mem := m.bufOf(ma.a.Buffer).sim[ma.a.Target]
		for _, p := range ma.pages {
			if ma.a.Mode == Reduce {
				mem[p] = val{base: mem[p].base, h: mem[p].h ^ mix(uint64(g.id)), cnt: mem[p].cnt + 1}
			} else {
				mem[p] = val{base: int64(g.id)}
			}
		}
	}
	g.done = true
	m.c.Complete(g.id)
}

func (m *model) drain(t *rapid.T) {
	for {
		r := m.ready()
		if len(r) == 0 {
			for _, g := range m.groups {
				if !g.done {
					t.Fatalf("group %d never becomes ready (deps %v): cycle", g.id, g.step.Deps)
				}
			}
			return
		}
		m.execute(t, rapid.SampledFrom(r).Draw(t, "run"))
	}
}

func (m *model) release(t *rapid.T) {
	b := rapid.SampledFrom(m.bufs).Draw(t, "buffer")
	var as []AllocID
	for a := range b.valid {
		as = append(as, a)
	}
	if len(as) == 0 {
		return
	}
	slices.SortFunc(as, compareAlloc)
	a := rapid.SampledFrom(as).Draw(t, "release")
	step, err := m.c.Release(m.next, b.id, a)
	if errors.Is(err, ErrLastCopy) {
		return
	}
	if err != nil {
		t.Fatalf("Release(%v): %v", a, err)
	}
	g := &mGroup{id: m.next, step: step, rel: true, relBuf: b, relAlloc: a}
	m.next++
	host := AllocID{Node: a.Node}
	// Pages whose only copy is a move to host.
	for p := range b.n {
		if !b.valid[a][p] {
			continue
		}
		only := true
		for o, v := range b.valid {
			if o != a && v[p] {
				only = false
			}
		}
		if only {
			if _, ok := b.valid[host]; !ok {
				b.made[host] = g.id
			}
			m.ensure(b, host)
			b.valid[host][p] = true
		}
	}
	delete(b.valid, a)
	delete(b.made, a)
	if len(step.Free) != 1 || step.Free[0].Alloc != a {
		t.Fatalf("Release Free = %v", step.Free)
	}
	// Every earlier incomplete user of the buffer is reached.
	reach := m.closure(step.Deps)
	for _, h := range m.groups {
		if h.done {
			continue
		}
		for _, x := range h.acc {
			if x.a.Buffer == b.id && !reach[h.id] {
				t.Fatalf("release %d does not reach earlier user %d", g.id, h.id)
			}
		}
	}
	g.acc = []mAccess{{a: Access{Buffer: b.id, Pages: b.geo.All(), Mode: release, Target: a}}}
	m.groups = append(m.groups, g)
	m.byID[g.id] = g
}

func (m *model) loseNode(t *rapid.T) {
	m.drain(t)
	n := NodeID(rapid.IntRange(1, 2).Draw(t, "node"))
	lost := m.c.LoseNode(n)
	got := map[BufferID][]int{}
	for _, lp := range lost {
		for _, bx := range lp.Boxes {
			got[lp.Buffer] = append(got[lp.Buffer], boxPages(m.bufOf(lp.Buffer).p, bx)...)
		}
	}
	for _, b := range m.bufs {
		var want []int
		for p := range b.n {
			had, other := false, false
			for a, v := range b.valid {
				if v[p] {
					if a.Node == n {
						had = true
					} else {
						other = true
					}
				}
			}
			if had && !other {
				want = append(want, p)
				b.lost[p] = true
			}
		}
		for a := range b.valid {
			if a.Node == n {
				delete(b.valid, a)
				delete(b.sim, a)
				delete(b.made, a)
			}
		}
		slices.Sort(got[b.id])
		if !slices.Equal(got[b.id], want) {
			t.Fatalf("LoseNode(%d) buffer %d lost %v, want %v", n, b.id, got[b.id], want)
		}
	}
}

func (m *model) checkStates(t *rapid.T) {
	for _, b := range m.bufs {
		if err := m.c.bufs[b.id].states.check(); err != nil {
			t.Fatalf("buffer %d page states: %v", b.id, err)
		}
		allocs := m.c.Allocations(b.id)
		var want []AllocID
		for a := range b.valid {
			want = append(want, a)
		}
		slices.SortFunc(want, compareAlloc)
		if !slices.Equal(allocs, want) {
			t.Fatalf("Allocations(%d) = %v, want %v", b.id, allocs, want)
		}
		for _, a := range m.allocs {
			boxes, err := m.c.Outdated(b.id, a, b.geo.All())
			if err != nil {
				t.Fatal(err)
			}
			out := make([]bool, b.n)
			for _, bx := range boxes {
				for _, p := range boxPages(b.p, bx) {
					out[p] = true
				}
			}
			for p := range b.n {
				valid := b.valid[a] != nil && b.valid[a][p]
				if out[p] == valid {
					t.Fatalf("buffer %d page %d on %v: core outdated=%v, model valid=%v", b.id, p, a, out[p], valid)
				}
			}
		}
	}
}

func drawGeometry(t *rapid.T) Geometry {
	nd := rapid.IntRange(1, 3).Draw(t, "dims")
	rng := Dims{1, 1, 1}
	var ps Dims
	for d := 3 - nd; d < 3; d++ {
		hi := 9
		if nd == 1 {
			hi = 40
		}
		rng[d] = rapid.IntRange(1, hi).Draw(t, "range")
	}
	for d := range 3 {
		ps[d] = rapid.IntRange(1, min(rng[d], 4)).Draw(t, "pagesize")
	}
	g, err := NewGeometry(rng, 4, ps)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCoreAgainstNaiveModel_P2_P3_P4_T1_T2_T3_D1_D2_D3_C2_C3_C4_C5(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &model{t: t, c: New(Config{}), byID: map[CGID]*mGroup{}, next: 1}
		for n := range 3 {
			for mem := range 2 {
				m.allocs = append(m.allocs, AllocID{Node: NodeID(n), Mem: MemID(mem)})
			}
		}
		nb := rapid.IntRange(1, 2).Draw(t, "buffers")
		for i := range nb {
			geo := drawGeometry(t)
			b := &mBuf{id: BufferID(i + 1), geo: geo, p: geo.Pages(), n: geo.NumPages(), valid: map[AllocID][]bool{}, sim: map[AllocID][]val{}, made: map[AllocID]CGID{}}
			b.lost, b.init, b.lv = make([]bool, b.n), make([]bool, b.n), make([]val, b.n)
			spec := BufferSpec{ID: b.id, Geometry: geo}
			if rapid.Bool().Draw(t, "hostdata") {
				h := AllocID{}
				spec.HostData = &h
				m.ensure(b, h)
				simAlloc(t, b, h)
				for p := range b.n {
					b.valid[h][p] = true
					b.init[p] = true
					b.sim[h][p] = val{}
				}
			}
			if err := m.c.AddBuffer(spec); err != nil {
				t.Fatal(err)
			}
			m.bufs = append(m.bufs, b)
		}
		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for range steps {
			switch op := rapid.IntRange(0, 19).Draw(t, "op"); {
			case op < 11:
				m.submit(t)
			case op < 18:
				if r := m.ready(); len(r) > 0 {
					m.execute(t, rapid.SampledFrom(r).Draw(t, "run"))
				}
			case op < 19:
				m.release(t)
			default:
				m.loseNode(t)
			}
			m.checkStates(t)
		}
		m.drain(t)
	})
}

var _ = fmt.Sprint
