package coherence

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// Core is the coherence state of all buffers of one runtime or job: page
// states per allocation and the conflict-tracking history. It is not safe for
// concurrent use. The zero Core is ready to use, like New(Config{}).
type Core struct {
	cost     CostModel
	bufs     map[BufferID]*buffer
	last     CGID
	started  bool
	live     infoTable // submitted, not completed
	alive    liveSet   // the keys of live, for fast tests
	memo     regionMemo
	memoFill regionMemo // successors of regions that also record a fill
	scratch  []CGID     // applyAccess's live lists
	// depScratch holds conflictDeps's result; touch sinks the loads that
	// bring a chunk's regions into cache.
	depScratch []CGID
	touch      uintptr

	completions int    // since the last history sweep
	sweepAt     int    // conflict segments after the last sweep
	gens        uint64 // allocation generations handed out

	// Per-Submit scratch, reused so that planning a group allocates little:
	// freeInfo recycles the cgInfo of completed groups, depBuf and planBuf
	// hold Submit's dependency list and planned pages while it is built,
	// and idSlab is carved into the returned Step.Deps (many small lists
	// per allocation; pointer-free, so the GC does not scan it).
	freeInfo   []*cgInfo
	depBuf     []CGID
	planBuf    []plannedTo
	bufScratch []*buffer // Submit's buffer per access
	idSlab     []CGID
}

// idSlabLen is the number of IDs one idSlab allocation holds.
const idSlabLen = 256

// keepIDs returns a copy of ids carved from idSlab (nil when empty), capped
// so that appending to it never writes into a neighbour's entries.
func (c *Core) keepIDs(ids []CGID) []CGID {
	if len(ids) == 0 {
		return nil
	}
	if cap(c.idSlab)-len(c.idSlab) < len(ids) {
		c.idSlab = make([]CGID, 0, max(idSlabLen, len(ids)))
	}
	n := len(c.idSlab)
	c.idSlab = append(c.idSlab, ids...)
	return c.idSlab[n : n+len(ids) : n+len(ids)]
}

// newInfo returns a cleared cgInfo for group id, recycled when one is free.
func (c *Core) newInfo(id CGID) *cgInfo {
	var info *cgInfo
	if n := len(c.freeInfo); n > 0 {
		info = c.freeInfo[n-1]
		c.freeInfo[n-1] = nil
		c.freeInfo = c.freeInfo[:n-1]
	} else {
		info = new(cgInfo)
	}
	info.id = id
	info.uses = info.usesBuf[:0]
	return info
}

// maxFreeInfo bounds the free list (the core keeps at most this many
// recycled records beyond the live ones).
const maxFreeInfo = 1024

func (c *Core) recycleInfo(info *cgInfo) {
	if len(c.freeInfo) >= maxFreeInfo {
		return
	}
	*info = cgInfo{}
	c.freeInfo = append(c.freeInfo, info)
}

// cgInfo is what the core remembers of an incomplete group.
type cgInfo struct {
	id CGID
	// uses lists the allocations (by buffer and generation) the group's
	// kernel or copies touch; a later group that depends on it needs no
	// separate edge to the group that allocated them.
	uses []allocRef
	// covers is set for a Release: it waited for every earlier user of
	// this buffer, so every allocation created before it.
	covers *buffer
	// deps is the group's Step.Deps (sorted).
	deps []CGID
	// usesBuf is uses' storage for groups of up to two allocations.
	usesBuf [2]allocRef
}

type allocRef struct {
	buf BufferID
	gen uint64
}

// buffer is one buffer's state.
type buffer struct {
	id     BufferID
	geo    Geometry
	pages  Dims
	n      int
	slots  []slot   // by slot; grows to the highest slot used
	used   slotMask // live slots
	states *pageStates
	conf   *imap[*region]
	lost   []lostRecord
}

type slot struct {
	alloc AllocID
	gen   uint64
	// by is the group whose Step.Allocate creates the allocation (hasBy
	// false for HostData): until it completes, later users of the
	// allocation depend on it, so nobody touches memory that is not there
	// yet.
	by    CGID
	hasBy bool
}

type lostRecord struct {
	node  NodeID
	spans []span
}

// New returns an empty Core.
func New(cfg Config) *Core {
	cost := cfg.Cost
	if cost == nil {
		cost = DefaultCost{}
	}
	return &Core{cost: cost, bufs: map[BufferID]*buffer{}}
}

func (c *Core) isLive(id CGID) bool { return c.alive.has(id) }

// AddBuffer registers a buffer. With HostData set, that allocation exists and
// holds every page up to date (B5); otherwise the buffer holds no initialised
// data and no transfer happens until something writes it (T2). Errors wrap
// ErrBufferExists (the ID is in use) or ErrBadGeometry.
func (c *Core) AddBuffer(s BufferSpec) error {
	if _, ok := c.bufs[s.ID]; ok {
		return fmt.Errorf("%w: buffer %d; pick a fresh BufferID (or RemoveBuffer the old one first)", ErrBufferExists, s.ID)
	}
	if err := s.Geometry.validate(); err != nil {
		return fmt.Errorf("buffer %d: %w", s.ID, err)
	}
	if c.bufs == nil { // a zero Core: nothing is planned before a buffer exists
		c.bufs, c.cost = map[BufferID]*buffer{}, DefaultCost{}
	}
	b := &buffer{id: s.ID, geo: s.Geometry, pages: s.Geometry.Pages()}
	b.n = b.pages.Volume()
	var initial slotMask
	if s.HostData != nil {
		initial = slotBit(b.addSlot(*s.HostData, c.newGen()))
	}
	b.states = newPageStates(b.n, initial)
	b.conf = newIMap[*region](b.n)
	c.bufs[s.ID] = b
	return nil
}

func (b *buffer) slotOf(a AllocID) (int, bool) {
	// Words written out (no iterator): this runs several times per access.
	for w, x := range b.used {
		for ; x != 0; x &= x - 1 {
			if s := w<<6 | bits.TrailingZeros64(x); b.slots[s].alloc == a {
				return s, true
			}
		}
	}
	return -1, false
}

// addSlot gives allocation a a free slot and a generation unique in the
// core (so fill and allocation records never match a later allocation, even
// of a buffer re-added under the same ID).
func (b *buffer) addSlot(a AllocID, gen uint64) int {
	s := b.used.firstFree()
	b.used.add(s)
	for len(b.slots) <= s { // the lost pseudo-slot (63) has an unused entry
		b.slots = append(b.slots, slot{})
	}
	b.slots[s] = slot{alloc: a, gen: gen}
	return s
}

func (c *Core) newGen() uint64 {
	c.gens++
	return c.gens
}

func (b *buffer) allocation(s int) Allocation {
	return Allocation{Buffer: b.id, Alloc: b.slots[s].alloc, Bytes: b.geo.Bytes()}
}

func (b *buffer) allocs() []AllocID {
	var out []AllocID
	for s := range b.used.all() {
		out = append(out, b.slots[s].alloc)
	}
	slices.SortFunc(out, compareAlloc)
	return out
}

// RemoveBuffer forgets a buffer and returns the allocations to free, sorted.
// The caller must have waited for every command group that uses it.
func (c *Core) RemoveBuffer(id BufferID) ([]Allocation, error) {
	b, err := c.buffer(id)
	if err != nil {
		return nil, err
	}
	var out []Allocation
	for _, a := range b.allocs() {
		out = append(out, Allocation{Buffer: id, Alloc: a, Bytes: b.geo.Bytes()})
	}
	delete(c.bufs, id)
	return out, nil
}

func (c *Core) buffer(id BufferID) (*buffer, error) {
	b, ok := c.bufs[id]
	if !ok {
		return nil, fmt.Errorf("%w: buffer %d; add it with AddBuffer before using it (or it was removed)", ErrUnknownBuffer, id)
	}
	return b, nil
}

// Allocations lists a buffer's allocations, sorted (nil for an unknown buffer).
func (c *Core) Allocations(buf BufferID) []AllocID {
	b, ok := c.bufs[buf]
	if !ok {
		return nil
	}
	return b.allocs()
}

// Outdated returns the pages of the box that are not up to date on alloc,
// as disjoint boxes sorted by (Lo, Hi) (P2). On an allocation that does not
// exist every page is outdated.
func (c *Core) Outdated(buf BufferID, alloc AllocID, pages Box) ([]Box, error) {
	b, err := c.buffer(buf)
	if err != nil {
		return nil, err
	}
	if err := b.checkBox(pages); err != nil {
		return nil, err
	}
	s, ok := b.slotOf(alloc)
	var out []span
	boxSpans(b.pages, pages, func(lo, hi int) {
		b.states.visit(lo, hi, func(lo, hi int, m slotMask) {
			if !ok || !m.has(s) {
				out = appendSpan(out, lo, hi)
			}
		})
	})
	return spansToBoxes(b.pages, out), nil
}

func appendSpan(s []span, lo, hi int) []span {
	if n := len(s); n > 0 && s[n-1].hi == lo {
		s[n-1].hi = hi
		return s
	}
	return append(s, span{lo, hi})
}

func (b *buffer) checkBox(x Box) error {
	if x.Empty() && x == (Box{}) {
		return nil
	}
	for d := range 3 {
		if x.Lo[d] < 0 || x.Lo[d] > x.Hi[d] || x.Hi[d] > b.pages[d] {
			return fmt.Errorf("%w: buffer %d: page box %v, dimension %d, leaves the page grid %v; map accessors with Geometry.PageRange",
				ErrOutOfRange, b.id, x, d, b.pages)
		}
	}
	return nil
}

// copyKey names one Copy being built.
type copyKey struct {
	buf      *buffer
	src, dst int // slots
}

type copyAcc struct {
	key   copyKey
	spans []span
}

// Submit plans a command group: DAG edges, allocations to make on first use
// (B5), page copies (T1–T4, C3), and records its effects as if it had run
// (accessed pages up to date on the target; written pages outdated elsewhere,
// P3, P4). Command groups are planned in submission order.
//
// On error the core is unchanged (the ID is not consumed): invalid input wraps
// ErrUnknownBuffer, ErrOutOfRange, ErrOrder, ErrBadAccess or
// ErrTooManyAllocations; pages with no valid copy left wrap ErrLostPages, and
// the returned Step lists them in Lost.
func (c *Core) Submit(cg CommandGroup) (Step, error) {
	if err := c.checkID(cg.ID); err != nil {
		return Step{}, err
	}
	// Each access's buffer, looked up once by validate.
	bs, err := c.validate(cg, c.bufScratch[:0])
	c.bufScratch = bs
	if err != nil {
		return Step{}, err
	}
	anyLost := false
	for _, b := range bs {
		anyLost = anyLost || len(b.lost) > 0
	}
	if anyLost {
		if lost := c.lostNeeded(cg); len(lost) > 0 {
			clear(bs)
			return Step{ID: cg.ID, Lost: lost}, lostError(cg.ID, lost)
		}
	}
	c.last, c.started = cg.ID, true
	info := c.newInfo(cg.ID)
	c.live.put(cg.ID, info)
	c.alive.add(cg.ID)

	step := Step{ID: cg.ID}
	// B5: first use of a buffer on an allocation creates it.
	for i, a := range cg.Accesses {
		b := bs[i]
		if _, ok := b.slotOf(a.Target); !ok {
			s := b.addSlot(a.Target, c.newGen())
			b.slots[s].by, b.slots[s].hasBy = cg.ID, true
			step.Allocate = append(step.Allocate, b.allocation(s))
		}
	}
	// Transfers, in access order, planned against the page states as they
	// were before this group: a copy must never read from pages that another
	// copy of the same group is still bringing in (copies run in any order).
	// A page planned once for a target is not planned again (nothing is sent
	// twice).
	deps := c.depBuf[:0]
	var copies []*copyAcc
	planned := c.planBuf[:0]
	for i, a := range cg.Accesses {
		if a.Discard {
			continue
		}
		b := bs[i]
		t, _ := b.slotOf(a.Target)
		deps = c.planAccess(b, a.Pages, t, &copies, &planned, deps)
	}
	// Conflicts, recording in the same pass the in-flight fills of readers
	// and reducers (a later reader on the allocation must wait for them;
	// writers are waited for anyway).
	for i, a := range cg.Accesses {
		b := bs[i]
		t, _ := b.slotOf(a.Target)
		x := accessCtx{self: cg.ID, mode: a.Mode, op: a.Op, target: a.Target, gen: b.slots[t].gen, discard: a.Discard}
		var filled []span
		if !a.Discard && (a.Mode == Read || a.Mode == Reduce) {
			for i := range planned {
				if planned[i].buf == b && planned[i].t == t {
					filled = planned[i].spans
				}
			}
		}
		deps = c.conflictPass(b, a.Pages, &x, filled, deps)
	}
	for i, a := range cg.Accesses {
		if a.Discard || a.Mode != Read {
			// Non-read-only accesses set their pages to exactly the target
			// below (P3), which overwrites this update: skip it.
			continue
		}
		b := bs[i]
		t, _ := b.slotOf(a.Target)
		op := stateOp{kind: opOrIfInit, m: slotBit(t)}
		boxSpans(b.pages, a.Pages, func(lo, hi int) { b.states.update(lo, hi, op) })
	}
	// In-flight allocations. A target that an incomplete group's Allocate
	// creates is listed in this group's Allocate too, instead of ordering
	// it after that group: allocation is idempotent (whichever of them
	// runs first makes it, B5), and memory being made is no reason to
	// order groups that do not conflict (D1, D4). It is not listed when
	// another dependency used the allocation (and so made sure it exists).
	// Copy sources need neither: pages are valid on an allocation only
	// once a group wrote or copied them there, and this group depends on
	// that group (a conflict or an in-flight fill) unless it completed, so
	// the source exists by the time the copy runs.
	for i, a := range cg.Accesses {
		b := bs[i]
		t, _ := b.slotOf(a.Target)
		info.use(b, t)
	}
	ntargets := len(info.uses)
	for _, cp := range copies {
		info.use(cp.key.buf, cp.key.src)
	}
	for _, u := range info.uses[:ntargets] {
		if by, ok := c.allocPending(u, cg.ID, deps); ok && by != cg.ID {
			b := c.bufs[u.buf]
			step.Allocate = append(step.Allocate, b.allocation(b.slotOfGen(u.gen)))
		}
	}
	for _, cp := range copies {
		step.Copies = append(step.Copies, makeCopy(cp.key.buf, cp))
	}
	// P3: non-read-only accesses leave their pages valid only on the target.
	for i, a := range cg.Accesses {
		if a.Mode == Read {
			continue
		}
		b := bs[i]
		t, _ := b.slotOf(a.Target)
		op := stateOp{kind: opSet, m: slotBit(t)}
		boxSpans(b.pages, a.Pages, func(lo, hi int) { b.states.update(lo, hi, op) })
	}
	step.Deps = c.keepIDs(c.reduceDeps(finishDeps(deps, cg.ID)))
	c.depBuf = deps[:0]
	for i := range planned {
		if planned[i].spans != nil {
			planned[i].spans = nil
		}
	}
	c.planBuf = planned[:0]
	info.deps = step.Deps
	sortStep(&step)
	return step, nil
}

func makeCopy(b *buffer, cp *copyAcc) Copy {
	slices.SortFunc(cp.spans, func(x, y span) int { return cmpInt(x.lo, y.lo) })
	boxes := spansToBoxes(b.pages, cp.spans)
	n := 0
	for _, x := range boxes {
		n += x.Volume()
	}
	return Copy{Buffer: b.id, Src: b.slots[cp.key.src].alloc, Dst: b.slots[cp.key.dst].alloc, Boxes: boxes, Pages: n}
}

// plannedTo is the set of pages a group already copies to one allocation.
type plannedTo struct {
	buf   *buffer
	t     int
	spans []span // sorted, disjoint
}

// planAccess plans the copies that make the box up to date on slot t (pages
// outdated there, with a valid copy elsewhere, not yet planned by this group),
// adds them to copies, and returns deps extended by the in-flight fills of the
// chosen sources. It does not change the page states.
func (c *Core) planAccess(b *buffer, box Box, t int, copies *[]*copyAcc, planned *[]plannedTo, deps []CGID) []CGID {
	if m, ok := b.states.uniform(b.pages, box); ok && (m.has(t) || !m.hasReal()) {
		// Fast path: the box lies in one run of the page states, up to date
		// on t or with no valid copy: nothing to copy.
		return deps
	}
	var pl *plannedTo
	for i := range *planned {
		if (*planned)[i].buf == b && (*planned)[i].t == t {
			pl = &(*planned)[i]
		}
	}
	if pl == nil {
		*planned = append(*planned, plannedTo{buf: b, t: t})
		pl = &(*planned)[len(*planned)-1]
	}
	dst := b.slots[t].alloc
	prev := -1
	var newly []span
	emit := func(lo, hi, src int) {
		prev = src
		acc := findCopy(copies, copyKey{b, src, t})
		acc.spans = appendSpan(acc.spans, lo, hi)
		newly = appendSpan(newly, lo, hi)
		// Sources must hold the pages when the copy runs: wait for
		// in-flight fills into them.
		deps = c.fillDeps(b, lo, hi, b.slots[src].gen, deps)
	}
	take := func(lo, hi int, real *slotMask) {
		cands := c.cheapest(b, real, dst)
		if cands.single() {
			emit(lo, hi, cands.first())
			return
		}
		// Several equally cheap sources: decide per conflict region, so
		// that pages still being filled somewhere come from elsewhere.
		b.conf.visit(lo, hi, func(lo, hi int, r *region) {
			emit(lo, hi, c.pickSource(b, cands, r, prev))
		})
	}
	boxSpans(b.pages, box, func(lo, hi int) {
		b.states.visit(lo, hi, func(lo, hi int, m slotMask) {
			real := m.real()
			if m.has(t) || real.isZero() {
				return
			}
			// Subtract what this group already copies to t.
			ps := pl.spans
			i, _ := slices.BinarySearchFunc(ps, lo, func(s span, x int) int { return cmpInt(s.hi, x+1) })
			for ; i < len(ps) && ps[i].lo < hi && lo < hi; i++ {
				if ps[i].lo > lo {
					take(lo, ps[i].lo, &real)
				}
				lo = max(lo, ps[i].hi)
			}
			if lo < hi {
				take(lo, hi, &real)
			}
		})
	})
	if len(newly) > 0 {
		pl.spans = mergeSpans(pl.spans, newly)
	}
	return deps
}

// mergeSpans merges two sorted lists of disjoint spans.
func mergeSpans(a, b []span) []span {
	out := make([]span, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var s span
		if j >= len(b) || (i < len(a) && a[i].lo < b[j].lo) {
			s = a[i]
			i++
		} else {
			s = b[j]
			j++
		}
		out = appendSpan(out, s.lo, s.hi)
	}
	return out
}

func (info *cgInfo) use(b *buffer, s int) {
	r := allocRef{b.id, b.slots[s].gen}
	if !slices.Contains(info.uses, r) {
		info.uses = append(info.uses, r)
	}
}

// allocDep adds the group that creates allocation u while it is incomplete,
// unless one of others used u too.
func (c *Core) allocDep(u allocRef, self CGID, others, deps []CGID) []CGID {
	if by, ok := c.allocPending(u, self, others); ok {
		return append(deps, by)
	}
	return deps
}

// allocPending reports whether allocation u may not exist yet for group
// self, and the group whose Allocate creates it: that group is incomplete
// and none of others (self's dependencies) is it, used u, or is a release
// of u's buffer that came after it (each of those waited for u to exist).
func (c *Core) allocPending(u allocRef, self CGID, others []CGID) (CGID, bool) {
	b := c.bufs[u.buf]
	var by CGID
	found := false
	for w, x := range b.used {
		for ; x != 0; x &= x - 1 {
			if s := w<<6 | bits.TrailingZeros64(x); b.slots[s].gen == u.gen && b.slots[s].hasBy {
				by, found = b.slots[s].by, true
			}
		}
	}
	if !found || !c.isLive(by) {
		return 0, false
	}
	for _, d := range others {
		if d == self {
			continue
		}
		if d == by {
			return 0, false
		}
		if info := c.live.get(d); info != nil && (slices.Contains(info.uses, u) || info.covers == b && d > by) {
			return 0, false
		}
	}
	return by, true
}

// slotOfGen is the slot of the allocation with generation gen, which
// must exist.
func (b *buffer) slotOfGen(gen uint64) int {
	for s := range b.used.all() {
		if b.slots[s].gen == gen {
			return s
		}
	}
	panic(fmt.Sprintf("coherence: buffer %d has no allocation of generation %d", b.id, gen))
}

func findCopy(copies *[]*copyAcc, k copyKey) *copyAcc {
	for _, cp := range *copies {
		if cp.key == k {
			return cp
		}
	}
	cp := &copyAcc{key: k}
	*copies = append(*copies, cp)
	return cp
}

// cheapest is the set of slots in mask with the lowest cost to dst.
func (c *Core) cheapest(b *buffer, mask *slotMask, dst AllocID) slotMask {
	if mask.single() {
		return *mask
	}
	var cands slotMask
	bestCost := 0
	for s := range mask.all() {
		cost := c.cost.Cost(b.slots[s].alloc, dst)
		switch {
		case cands.isZero() || cost < bestCost:
			cands, bestCost = slotBit(s), cost
		case cost == bestCost:
			cands.add(s)
		}
	}
	return cands
}

// pickSource chooses among equally cheap sources for pages of region r: one
// that no in-flight copy is still filling (no extra ordering), then the
// previous segment's source (keeping boxes large), then the lowest AllocID.
func (c *Core) pickSource(b *buffer, cands slotMask, r *region, prev int) int {
	if r != nil {
		var settled slotMask
		for s := range cands.all() {
			filling := false
			for _, f := range r.fills {
				if f.gen == b.slots[s].gen && c.isLive(f.cg) {
					filling = true
					break
				}
			}
			if !filling {
				settled.add(s)
			}
		}
		if !settled.isZero() {
			cands = settled
		}
	}
	if prev >= 0 && cands.has(prev) {
		return prev
	}
	best := -1
	for s := range cands.all() {
		if best < 0 || b.slots[s].alloc.less(b.slots[best].alloc) {
			best = s
		}
	}
	return best
}

// reduceDeps drops the dependencies that another one already has as a direct
// dependency (one-hop transitive reduction: cheap, and waiting for the
// other implies waiting for them).
func (c *Core) reduceDeps(deps []CGID) []CGID {
	if len(deps) < 2 {
		return deps
	}
	out := deps[:0]
	for i, d := range deps {
		implied := false
		for _, e := range deps[i+1:] { // only later groups can depend on d
			if info := c.live.get(e); info != nil {
				if _, ok := slices.BinarySearch(info.deps, d); ok {
					implied = true
					break
				}
			}
		}
		if !implied {
			out = append(out, d)
		}
	}
	return out
}

func finishDeps(deps []CGID, self CGID) []CGID {
	if len(deps) <= 1 {
		if len(deps) == 0 || deps[0] == self {
			return nil
		}
		return deps
	}
	slices.Sort(deps)
	deps = slices.Compact(deps)
	if i, ok := slices.BinarySearch(deps, self); ok {
		deps = slices.Delete(deps, i, i+1)
	}
	if len(deps) == 0 {
		return nil
	}
	return deps
}

func sortStep(s *Step) {
	cmpAllocation := func(x, y Allocation) int {
		if x.Buffer != y.Buffer {
			return cmp.Compare(x.Buffer, y.Buffer)
		}
		return compareAlloc(x.Alloc, y.Alloc)
	}
	if len(s.Allocate) > 1 {
		slices.SortFunc(s.Allocate, cmpAllocation)
	}
	if len(s.Free) > 1 {
		slices.SortFunc(s.Free, cmpAllocation)
	}
	if len(s.Copies) < 2 {
		return
	}
	slices.SortFunc(s.Copies, func(x, y Copy) int {
		if x.Buffer != y.Buffer {
			return cmp.Compare(x.Buffer, y.Buffer)
		}
		if c := compareAlloc(x.Dst, y.Dst); c != 0 {
			return c
		}
		return compareAlloc(x.Src, y.Src)
	})
}

func (c *Core) checkID(id CGID) error {
	if c.started && id <= c.last {
		return fmt.Errorf("%w: command group %d submitted after %d; IDs must strictly increase in submission order", ErrOrder, id, c.last)
	}
	return nil
}

// validate checks cg's accesses and appends each one's buffer to bs (nil
// for an unknown buffer).
func (c *Core) validate(cg CommandGroup, bs []*buffer) ([]*buffer, error) {
	var errs []error
	type newAlloc struct {
		b *buffer
		a AllocID
	}
	var fresh []newAlloc // (buffer, allocation) pairs this group creates
	for i, a := range cg.Accesses {
		b, err := c.buffer(a.Buffer)
		bs = append(bs, b)
		if err != nil {
			errs = append(errs, fmt.Errorf("command group %d, access %d: %w", cg.ID, i, err))
			continue
		}
		if a.Mode < Read || a.Mode > Reduce {
			errs = append(errs, fmt.Errorf("%w: command group %d, access %d: mode %v; use Read, Write, ReadWrite or Reduce", ErrBadAccess, cg.ID, i, a.Mode))
		}
		if a.Mode == Read && a.Discard {
			errs = append(errs, fmt.Errorf("%w: command group %d, access %d: a Read access cannot be Discard (it would read pages it never brought in); drop Discard, or use Write",
				ErrBadAccess, cg.ID, i))
		}
		if err := b.checkBox(a.Pages); err != nil {
			errs = append(errs, fmt.Errorf("command group %d, access %d: %w", cg.ID, i, err))
		}
		if _, ok := b.slotOf(a.Target); !ok && !slices.Contains(fresh, newAlloc{b, a.Target}) {
			fresh = append(fresh, newAlloc{b, a.Target})
			n := 0
			for _, f := range fresh {
				if f.b == b {
					n++
				}
			}
			if b.used.count()+n == maxSlots+1 {
				errs = append(errs, fmt.Errorf("%w: buffer %d would need more than %d allocations; release some with Core.Release",
					ErrTooManyAllocations, b.id, maxSlots))
			}
		}
	}
	if errs != nil {
		return bs, errors.Join(errs...)
	}
	return bs, nil
}

// lostNeeded lists the pages non-discard accesses need that have no valid
// copy left (C5), per buffer in ID order.
func (c *Core) lostNeeded(cg CommandGroup) []LostPages {
	var bufs []*buffer
	var spans [][]span
	for _, a := range cg.Accesses {
		if a.Discard {
			continue
		}
		b := c.bufs[a.Buffer]
		if len(b.lost) == 0 {
			continue // no page of b was ever lost
		}
		var sp []span
		boxSpans(b.pages, a.Pages, func(lo, hi int) {
			b.states.visit(lo, hi, func(lo, hi int, m slotMask) {
				if m == lostBit {
					sp = appendSpan(sp, lo, hi)
				}
			})
		})
		if len(sp) == 0 {
			continue
		}
		i := slices.Index(bufs, b)
		if i < 0 {
			bufs, spans = append(bufs, b), append(spans, nil)
			i = len(bufs) - 1
		}
		spans[i] = unionSpans(spans[i], sp)
	}
	var out []LostPages
	for i, b := range bufs {
		out = append(out, LostPages{Buffer: b.id, Boxes: spansToBoxes(b.pages, spans[i]), Nodes: b.lostNodes(spans[i])})
	}
	slices.SortFunc(out, func(x, y LostPages) int { return cmp.Compare(x.Buffer, y.Buffer) })
	return out
}

// unionSpans merges two sorted span lists that may overlap.
func unionSpans(a, b []span) []span {
	out := make([]span, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var s span
		if j >= len(b) || (i < len(a) && a[i].lo < b[j].lo) {
			s = a[i]
			i++
		} else {
			s = b[j]
			j++
		}
		if n := len(out); n > 0 && out[n-1].hi >= s.lo {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

func (b *buffer) lostNodes(sp []span) []NodeID {
	var nodes []NodeID
	for _, r := range b.lost {
		if spansOverlap(r.spans, sp) && !slices.Contains(nodes, r.node) {
			nodes = append(nodes, r.node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

func spansOverlap(a, b []span) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i].hi <= b[j].lo {
			i++
		} else if b[j].hi <= a[i].lo {
			j++
		} else {
			return true
		}
	}
	return false
}

func lostError(id CGID, lost []LostPages) error {
	var sb strings.Builder
	for i, lp := range lost {
		if i > 0 {
			sb.WriteString("; ")
		}
		fmt.Fprintf(&sb, "buffer %d pages", lp.Buffer)
		for j, b := range lp.Boxes {
			if j == 8 {
				fmt.Fprintf(&sb, " …(%d boxes)", len(lp.Boxes))
				break
			}
			sb.WriteString(" ")
			sb.WriteString(b.String())
		}
		if len(lp.Nodes) > 0 {
			fmt.Fprintf(&sb, " (last copies on lost node(s) %v)", lp.Nodes)
		}
	}
	return fmt.Errorf("%w: command group %d: %s; re-run the command groups that produced them, or overwrite them with a Discard access",
		ErrLostPages, id, sb.String())
}

// Complete tells the core a command group (and its copies) finished. It
// leaves the tracking state; later groups no longer depend on it. Completing
// an unknown or already completed group does nothing.
func (c *Core) Complete(id CGID) {
	info := c.live.remove(id)
	if info == nil {
		return
	}
	c.recycleInfo(info)
	c.alive.remove(id)
	c.completions++
	c.maybeSweep()
}

// maybeSweep drops completed groups from every region once the completions
// since the last sweep reach the size of the conflict maps at that sweep
// (at least 1024), so the amortised cost per completion is O(1) and
// references to completed groups stay bounded. (Regions touched in between
// are pruned on the spot.)
func (c *Core) maybeSweep() {
	if c.completions < max(c.sweepAt, 1024) {
		return
	}
	c.sweep()
}

func (c *Core) sweep() {
	c.completions = 0
	segs := 0
	ids := make([]BufferID, 0, len(c.bufs))
	for id := range c.bufs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b := c.bufs[id]
		memo := map[*region]*region{}
		b.conf.rewriteAll(func(r *region) *region {
			if n, ok := memo[r]; ok {
				return n
			}
			n := c.pruned(r)
			memo[r] = n
			return n
		})
		segs += b.conf.segments()
	}
	c.sweepAt = segs
}

// Release plans the explicit release of one allocation of a buffer (B1): a
// step ordered after every earlier user of the buffer (it counts as a write
// of every page, so later groups order after it), whose Copies move pages
// whose only valid copy is there to the host allocation of the same node
// (Allocate lists that one if it did not exist yet), and whose Free lists the
// allocation. Afterwards the allocation no longer exists; a later use
// allocates it again (B5). id is a fresh command group ID.
//
// Releasing a host allocation that holds the only copy of some pages fails
// with ErrLastCopy: there is nowhere to evacuate them. An id not above
// every earlier group's fails with ErrOrder, as for Submit.
func (c *Core) Release(id CGID, buf BufferID, alloc AllocID) (Step, error) {
	if err := c.checkID(id); err != nil {
		return Step{}, err
	}
	b, err := c.buffer(buf)
	if err != nil {
		return Step{}, err
	}
	s, ok := b.slotOf(alloc)
	if !ok {
		return Step{}, fmt.Errorf("%w: buffer %d has no allocation on %v; see Core.Allocations", ErrNoAllocation, buf, alloc)
	}
	sbit := slotBit(s)
	var only []span
	b.states.visit(0, b.n, func(lo, hi int, m slotMask) {
		if m == sbit {
			only = appendSpan(only, lo, hi)
		}
	})
	host := AllocID{Node: alloc.Node, Mem: HostMem}
	if len(only) > 0 && alloc == host {
		return Step{}, fmt.Errorf("%w: buffer %d: %v holds the only valid copy of %d page box(es); release device allocations instead, or remove the buffer",
			ErrLastCopy, buf, alloc, len(spansToBoxes(b.pages, only)))
	}
	if len(only) > 0 && b.used.count() >= maxSlots {
		if _, ok := b.slotOf(host); !ok {
			return Step{}, fmt.Errorf("%w: buffer %d: no slot left for the host allocation the release evacuates to; release another allocation first",
				ErrTooManyAllocations, buf)
		}
	}
	c.last, c.started = id, true
	info := c.newInfo(id)
	info.covers = b
	c.live.put(id, info)
	c.alive.add(id)
	step := Step{ID: id}
	x := accessCtx{self: id, mode: release, target: alloc, gen: b.slots[s].gen}
	deps := c.conflictPass(b, b.geo.All(), &x, nil, c.depBuf[:0])
	// Every incomplete user of the allocation to free runs first: the
	// conflicts above cover those that access pages, this covers the rest
	// (an empty access still lists the allocation in its Allocate, and
	// several groups may list it: whichever runs first makes it).
	u := allocRef{b.id, b.slots[s].gen}
	c.live.each(func(d CGID, di *cgInfo) {
		if slices.Contains(di.uses, u) {
			deps = append(deps, d)
		}
	})
	info.use(b, s)
	nconf := len(deps)
	if len(only) > 0 {
		h, ok := b.slotOf(host)
		if !ok {
			h = b.addSlot(host, c.newGen())
			b.slots[h].by, b.slots[h].hasBy = id, true
			step.Allocate = append(step.Allocate, b.allocation(h))
		} else {
			deps = c.allocDep(allocRef{b.id, b.slots[h].gen}, id, deps[:nconf], deps)
		}
		info.use(b, h)
		for _, sp := range only {
			b.states.update(sp.lo, sp.hi, stateOp{kind: opSet, m: slotBit(h)})
		}
		step.Copies = append(step.Copies, makeCopy(b, &copyAcc{key: copyKey{b, s, h}, spans: only}))
	}
	b.states.update(0, b.n, stateOp{kind: opLose, m: sbit})
	step.Free = []Allocation{b.allocation(s)}
	b.used.remove(s)
	b.slots[s] = slot{}
	step.Deps = c.keepIDs(c.reduceDeps(finishDeps(deps, id)))
	c.depBuf = deps[:0]
	info.deps = step.Deps
	sortStep(&step)
	return step, nil
}

// LoseNode removes every allocation on node n (it left or died, C5) and
// returns, per buffer (sorted), the pages that no longer have a valid copy
// anywhere. Those pages are remembered as lost: a later Submit that needs them
// fails with ErrLostPages, and a Discard write heals them. Groups that were
// running on the node will not complete by themselves; the caller decides
// their fate (Complete them once abandoned, so later groups do not wait).
func (c *Core) LoseNode(n NodeID) []LostPages {
	ids := make([]BufferID, 0, len(c.bufs))
	for id := range c.bufs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []LostPages
	for _, id := range ids {
		b := c.bufs[id]
		var m slotMask
		for s := range b.used.all() {
			if b.slots[s].alloc.Node == n {
				m.add(s)
			}
		}
		if m.isZero() {
			continue
		}
		var lost []span
		b.states.visit(0, b.n, func(lo, hi int, mask slotMask) {
			if mask.meets(m) && mask.andNot(m).isZero() {
				lost = appendSpan(lost, lo, hi)
			}
		})
		b.states.update(0, b.n, stateOp{kind: opLose, m: m})
		for s := range m.all() {
			b.slots[s] = slot{}
		}
		b.used = b.used.andNot(m)
		if len(lost) > 0 {
			b.lost = append(b.lost, lostRecord{node: n, spans: lost})
			out = append(out, LostPages{Buffer: id, Boxes: spansToBoxes(b.pages, lost), Nodes: []NodeID{n}})
		}
	}
	return out
}

// Stats describes the core's memory use and history, for metrics and tests.
type Stats struct {
	Buffers     int // registered buffers
	Pages       int // pages over all buffers
	Allocations int // existing allocations over all buffers
	// StateBytes is the heap held by page states (P2): run lists and dense
	// chunk bitmaps, with their headers.
	StateBytes int
	// DenseChunks is the number of 4096-page chunks held as bitmaps.
	DenseChunks int
	// Regions is the number of conflict-tracking segments (history size).
	Regions int
	// Live is the number of submitted, not completed command groups.
	Live int
	// PageAllocs is the sum over buffers of pages × allocations.
	PageAllocs int
}

// StateBitsPerPage is StateBytes×8 per page per allocation (0 if empty).
func (s Stats) StateBitsPerPage() float64 {
	if s.PageAllocs == 0 {
		return 0
	}
	return float64(s.StateBytes*8) / float64(s.PageAllocs)
}

// Stats returns the current Stats.
func (c *Core) Stats() Stats {
	s := Stats{Buffers: len(c.bufs), Live: c.live.len()}
	for _, b := range c.bufs {
		s.Pages += b.n
		s.Allocations += b.used.count()
		s.PageAllocs += b.n * b.used.count()
		s.StateBytes += b.states.memBytes()
		s.DenseChunks += b.states.denseChunks()
		s.Regions += b.conf.segments()
	}
	return s
}

// BufferInfo describes one buffer's page states, for status tables and
// debugging (acpp-submit status, metrics).
type BufferInfo struct {
	ID       BufferID
	Geometry Geometry
	// Allocations lists every allocation with the number of pages up to
	// date there, sorted by AllocID.
	Allocations []AllocInfo
	// Uninitialised counts pages no one has written (T2); Lost counts pages
	// whose last copies were on lost nodes (C5).
	Uninitialised, Lost int
}

// AllocInfo is one allocation's share of a buffer.
type AllocInfo struct {
	Alloc      AllocID
	ValidPages int
}

// Buffers describes every buffer, sorted by ID. It visits every page run, so
// it costs O(state size); call it for status, not per command group.
func (c *Core) Buffers() []BufferInfo {
	ids := make([]BufferID, 0, len(c.bufs))
	for id := range c.bufs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]BufferInfo, 0, len(ids))
	for _, id := range ids {
		b := c.bufs[id]
		info := BufferInfo{ID: id, Geometry: b.geo}
		valid := make([]int, len(b.slots))
		b.states.visit(0, b.n, func(lo, hi int, m slotMask) {
			switch {
			case m.isZero():
				info.Uninitialised += hi - lo
			case m == lostBit:
				info.Lost += hi - lo
			}
			for s := range m.real().all() {
				valid[s] += hi - lo
			}
		})
		for s := range b.used.all() {
			info.Allocations = append(info.Allocations, AllocInfo{Alloc: b.slots[s].alloc, ValidPages: valid[s]})
		}
		slices.SortFunc(info.Allocations, func(x, y AllocInfo) int { return compareAlloc(x.Alloc, y.Alloc) })
		out = append(out, info)
	}
	return out
}
