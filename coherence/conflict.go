package coherence

import "slices"

// Conflict tracking (D1–D4, C4).
//
// Per buffer, an interval map over the linear page index holds, for every
// region of pages, the history that later accesses can conflict with:
//
//	writers  the last write epoch: one writer, or the reducers of one
//	         (operator, target) that run concurrently
//	before   for a reduce epoch: what its first reducer depended on, which a
//	         later reducer of the same epoch must also wait for
//	readers  the readers since that epoch
//	fills    in-flight copies into an allocation (by allocation generation):
//	         the group whose copies made these pages valid there
//
// A read depends on the writers; a write on the readers since the last epoch,
// or, when there are none, on the writers. Everything older is implied
// transitively (each reader depends on the writers it saw, each writer on what
// preceded it), so edges stay few. Completed groups are dropped whenever a
// region is touched and by periodic sweeps, so the history is bounded by the
// incomplete groups and by the number of regions, not by the run length.
//
// Regions are immutable and shared between segments; an update maps each old
// region to its successor once per access (memo), so a uniform range stays one
// segment.
//
// Groups are referenced by CGID; whether one is still incomplete is a bit
// test in the core's liveSet. A list of one group (a write's writer, a
// read's last writer) lives inside the region (small), so a region is
// usually one allocation of 128 bytes; longer lists get their own array.
//
// Readers are appended, not copied: a read's successor region shares its
// predecessor's reader list and adds one ID at its end in place (readerLog),
// so a stream of n readers costs O(n), not O(n²). A reader list may hold
// completed groups; every consumer filters by liveness, and writes, sweeps
// and a full log drop them.
type region struct {
	small   [1]CGID
	writers []CGID
	reduce  bool
	op      ReduceOp
	target  AllocID
	before  []CGID
	readers []CGID
	// rlog, when set, owns the backing array of readers (readers is a
	// prefix of rlog.ids): a successor may append in place while no other
	// successor did.
	rlog  *readerLog
	fills []fill
}

// readerLog is an append-only reader list shared by a chain of regions: each
// holds a prefix of ids. A region whose readers are the whole log may append
// to it; any other region (an older prefix, reached again through a segment
// the log's later appends did not cover) copies instead.
type readerLog struct {
	ids   []CGID
	first [6]CGID // ids' backing array until it grows
}

// appendReader returns the reader list rd (of a region with log lg) plus
// self, and the log that owns it. In place when rd is lg's whole log and
// there is room; otherwise into a fresh log that keeps only live readers
// (amortised O(1): a fresh log has room for at least as many appends as it
// copied entries).
func (c *Core) appendReader(rd []CGID, lg *readerLog, self CGID) ([]CGID, *readerLog) {
	if n := len(rd); n > 0 && rd[n-1] == self {
		return rd, lg // the group's second access to these pages
	}
	if lg != nil && len(lg.ids) == len(rd) && len(rd) < cap(lg.ids) {
		lg.ids = append(lg.ids, self)
		return lg.ids, lg
	}
	live := 0
	for _, g := range rd {
		if c.isLive(g) {
			live++
		}
	}
	nl := new(readerLog)
	if live+1 <= len(nl.first) {
		nl.ids = nl.first[:0]
	} else {
		nl.ids = make([]CGID, 0, 2*(live+1))
	}
	nl.ids = c.appendLive(nl.ids, rd)
	nl.ids = append(nl.ids, self)
	return nl.ids, nl
}

type fill struct {
	gen uint64
	cg  CGID
}

func appendIDs(deps []CGID, gs []CGID) []CGID { return append(deps, gs...) }

// allDone reports whether every group r names has completed.
func (c *Core) allDone(r *region) bool {
	// Newest readers first: the likeliest to be live.
	if c.anyLive(r.readers) || c.anyLive(r.writers) || c.anyLive(r.before) {
		return false
	}
	for _, f := range r.fills {
		if c.isLive(f.cg) {
			return false
		}
	}
	return true
}

func (r *region) empty() bool {
	return r == nil || len(r.writers) == 0 && len(r.before) == 0 && len(r.readers) == 0 && len(r.fills) == 0
}

// liveIDs returns gs without completed groups (a new slice only if needed).
func (c *Core) liveIDs(gs []CGID) []CGID {
	for i, g := range gs {
		if !c.isLive(g) {
			out := append([]CGID(nil), gs[:i]...)
			for _, g := range gs[i+1:] {
				if c.isLive(g) {
					out = append(out, g)
				}
			}
			return out
		}
	}
	return gs
}

func (c *Core) liveFills(fs []fill) []fill {
	for i, f := range fs {
		if !c.isLive(f.cg) {
			out := append([]fill(nil), fs[:i]...)
			for _, f := range fs[i+1:] {
				if c.isLive(f.cg) {
					out = append(out, f)
				}
			}
			return out
		}
	}
	return fs
}

// pruned is r without completed groups; nil if nothing is left.
func (c *Core) pruned(r *region) *region {
	if r == nil {
		return nil
	}
	w, bf, rd, fl := c.liveIDs(r.writers), c.liveIDs(r.before), c.liveIDs(r.readers), c.liveFills(r.fills)
	if len(w) == len(r.writers) && len(bf) == len(r.before) && len(rd) == len(r.readers) && len(fl) == len(r.fills) {
		return r
	}
	n := &region{writers: w, reduce: r.reduce, op: r.op, target: r.target, before: bf, readers: rd, fills: fl}
	if len(rd) == len(r.readers) {
		n.rlog = r.rlog // the same list: appends may go on in place
	}
	if n.empty() {
		return nil
	}
	return n
}

// accessCtx is one access being applied to the conflict map.
type accessCtx struct {
	self    CGID
	mode    Mode
	op      ReduceOp
	target  AllocID
	gen     uint64 // allocation generation of the target
	discard bool
}

// applyAccess computes the dependencies of access x on region r (appended to
// deps) and returns the region after x. Completed groups are dropped on the
// way; the successor costs one allocation for the struct and at most one for
// all its group lists.
func (c *Core) applyAccess(r *region, x *accessCtx, addFill bool, deps []CGID) (*region, []CGID) {
	return c.applyAccessInto(nil, r, x, addFill, deps)
}

// applyAccessInto is applyAccess writing the successor of a read or write
// into dst instead of a new region when dst is not nil. dst may be r itself
// (r is read completely before dst is written); the caller guarantees that
// nothing else refers to dst.
func (c *Core) applyAccessInto(dst, r *region, x *accessCtx, addFill bool, deps []CGID) (*region, []CGID) {
	reuse := func() *region {
		if dst == nil {
			return new(region)
		}
		*dst = region{}
		return dst
	}
	var old region
	if r != nil {
		old = *r
	}
	// Live views of the old lists, in scratch space. A read does not need
	// the live readers (it appends itself to the list as it is), so it does
	// not scan them.
	sc := c.scratch[:0]
	sc = c.appendLive(sc, old.writers)
	nw := len(sc)
	sc = c.appendLive(sc, old.before)
	nb := len(sc)
	if x.mode != Read {
		sc = c.appendLive(sc, old.readers)
	}
	c.scratch = sc
	w, bf, rd := sc[:nw:nw], sc[nw:nb:nb], sc[nb:]
	fl := c.liveFills(old.fills)
	withFill := func(fl []fill) []fill {
		if !addFill {
			return fl
		}
		if n := len(fl); n > 0 && fl[n-1].cg == x.self && fl[n-1].gen == x.gen {
			return fl
		}
		return append(fl[:len(fl):len(fl)], fill{gen: x.gen, cg: x.self})
	}

	fillDeps := func() {
		if x.discard {
			return
		}
		for _, f := range fl {
			if f.gen == x.gen {
				deps = append(deps, f.cg)
			}
		}
	}
	switch x.mode {
	case Read:
		deps = appendIDs(deps, w)
		fillDeps()
		n := reuse()
		n.reduce, n.op, n.target = old.reduce, old.op, old.target
		n.setLists(w, bf, nil)
		if fl = withFill(fl); len(fl) > 0 {
			n.fills = slices.Clone(fl)
		}
		n.readers, n.rlog = c.appendReader(old.readers, old.rlog, x.self)
		return n, deps
	case Reduce:
		if len(rd) == 0 && old.reduce && len(w) > 0 && old.op == x.op && old.target == x.target {
			deps = appendIDs(deps, bf)
			fillDeps()
			if w[len(w)-1] != x.self {
				w = append(w[:len(w):len(w)], x.self)
			}
			return newRegion(w, bf, nil, withFill(fl), true, x.op, x.target), deps
		}
		prev := rd
		if len(prev) == 0 {
			prev = w
		}
		deps = appendIDs(deps, prev)
		return newRegion([]CGID{x.self}, prev, nil, withFill(nil), true, x.op, x.target), deps
	default: // Write, ReadWrite, release
		if len(rd) > 0 {
			deps = appendIDs(deps, rd)
		} else {
			deps = appendIDs(deps, w)
		}
		n := reuse()
		n.small[0] = x.self
		n.writers = n.small[:1:1]
		return n, deps
	}
}

func (c *Core) appendLive(dst, gs []CGID) []CGID {
	for _, g := range gs {
		if c.isLive(g) {
			dst = append(dst, g)
		}
	}
	return dst
}

// newRegion copies the lists into one fresh backing array.
func newRegion(w, bf, rd []CGID, fl []fill, reduce bool, op ReduceOp, target AllocID) *region {
	if !reduce && len(w)+len(bf)+len(rd)+len(fl) == 0 {
		return nil
	}
	n := &region{reduce: reduce, op: op, target: target}
	n.setLists(w, bf, rd)
	if len(fl) > 0 {
		n.fills = slices.Clone(fl)
	}
	return n
}

// setLists sets n's writers, before and readers to copies of w, bf and rd,
// in one backing array (n.small when they fit).
func (n *region) setLists(w, bf, rd []CGID) {
	total := len(w) + len(bf) + len(rd)
	if total == 0 {
		return
	}
	var all []CGID
	if total <= len(n.small) {
		all = n.small[:0:total]
	} else {
		all = make([]CGID, 0, total)
	}
	all = append(all, w...)
	all = append(all, bf...)
	all = append(all, rd...)
	n.writers = all[:len(w):len(w)]
	n.before = all[len(w) : len(w)+len(bf) : len(w)+len(bf)]
	n.readers = all[len(w)+len(bf) : total : total]
}

// conflictPass applies access x over the page box of buffer b and returns
// the dependencies found, appended to deps. Pages in filled (sorted spans)
// are being copied to x's target by x's group: their regions also record the
// in-flight fill.
func (c *Core) conflictPass(b *buffer, box Box, x *accessCtx, filled []span, deps []CGID) []CGID {
	if len(filled) == 0 {
		// Fast path: the box is exactly one chunk of the conflict map, held
		// as one segment (a small buffer accessed whole): apply x to its
		// region directly, as update's own one-segment case would.
		if lo, hi, ok := contiguousSpan(b.pages, box); ok && lo&(imLen-1) == 0 {
			m := b.conf
			ci := lo >> imShift
			if ch := &m.chunks[ci]; hi-lo == m.chunkSize(ci) && len(ch.starts) == 1 {
				r := ch.vals[0]
				// The map's only chunk, one segment: its region is referenced
				// nowhere else and is updated in place (a small buffer
				// accessed whole allocates no region per access).
				var dst *region
				if len(m.chunks) == 1 {
					dst = r
				}
				if r != nil && c.allDone(r) {
					r = nil
				}
				ch.vals[0], deps = c.applyAccessInto(dst, r, x, false, deps)
				return deps
			}
		}
	}
	c.memo.reset()
	c.memoFill.reset()
	apply := func(lo, hi int, addFill bool) {
		memo := &c.memo
		if addFill {
			memo = &c.memoFill
		}
		b.conf.update(lo, hi, func(r *region) *region {
			if n, ok := memo.get(r); ok {
				return n
			}
			// Regions whose groups all completed share one successor, so
			// stale fragmentation coalesces.
			var n *region
			if r != nil && c.allDone(r) {
				if n, ok := memo.get(nil); ok {
					memo.put(r, n)
					return n
				}
				n, deps = c.applyAccess(nil, x, addFill, deps)
				memo.put(nil, n)
			} else {
				n, deps = c.applyAccess(r, x, addFill, deps)
			}
			memo.put(r, n)
			return n
		})
	}
	boxSpans(b.pages, box, func(lo, hi int) {
		if len(filled) == 0 {
			apply(lo, hi, false)
			return
		}
		i, _ := slices.BinarySearchFunc(filled, lo, func(s span, x int) int { return cmpInt(s.hi, x+1) })
		for ; i < len(filled) && filled[i].lo < hi && lo < hi; i++ {
			if filled[i].lo > lo {
				apply(lo, filled[i].lo, false)
				lo = filled[i].lo
			}
			e := min(hi, filled[i].hi)
			apply(lo, e, true)
			lo = e
		}
		if lo < hi {
			apply(lo, hi, false)
		}
	})
	return deps
}

// fillDeps appends the groups whose in-flight copies made [lo, hi) valid on
// the allocation of generation gen.
func (c *Core) fillDeps(b *buffer, lo, hi int, gen uint64, deps []CGID) []CGID {
	b.conf.visit(lo, hi, func(_, _ int, r *region) {
		if r == nil {
			return
		}
		for _, f := range r.fills {
			if f.gen == gen && c.isLive(f.cg) {
				deps = append(deps, f.cg)
			}
		}
	})
	return deps
}

// regionMemo maps old regions to their successors during one update pass.
// Most passes see a handful of distinct regions: a short slice, with a map
// (made per pass, so its size never leaks into later passes) beyond that.
type regionMemo struct {
	pairs [][2]*region
	big   map[*region]*region
}

const memoLinear = 16

func (m *regionMemo) reset() {
	clear(m.pairs)
	m.pairs = m.pairs[:0]
	m.big = nil
}

func (m *regionMemo) get(r *region) (*region, bool) {
	if m.big != nil {
		n, ok := m.big[r]
		return n, ok
	}
	for _, p := range m.pairs {
		if p[0] == r {
			return p[1], true
		}
	}
	return nil, false
}

func (m *regionMemo) put(r, n *region) {
	if m.big == nil && len(m.pairs) < memoLinear {
		m.pairs = append(m.pairs, [2]*region{r, n})
		return
	}
	if m.big == nil {
		m.big = make(map[*region]*region, 2*memoLinear)
		for _, p := range m.pairs {
			m.big[p[0]] = p[1]
		}
	}
	m.big[r] = n
}

// conflictDeps is the D1 part of Submit's dependencies for cg, computed
// without recording anything: for each access, the groups its regions say it
// must wait for (deduplicated, sorted, without fills or allocations). It is
// the detection step the conflict benchmark measures. The result lives in
// the core's scratch space: valid until the next call.
//
// The lookup allocates nothing and calls no closure per region; it finds a
// chunk's segments from the head bitmap in the chunk header, and it loads
// all the regions it will read before applying the rules to any (independent
// loads, so their cache misses overlap instead of queueing one by one).
func (c *Core) conflictDeps(cg CommandGroup) []CGID {
	deps := c.depScratch[:0]
	for i := range cg.Accesses {
		a := &cg.Accesses[i]
		b := c.bufs[a.Buffer]
		if b == nil {
			continue
		}
		boxSpans(b.pages, a.Pages, func(lo, hi int) {
			deps = c.spanDeps(b.conf, lo, hi, a, deps)
		})
	}
	c.depScratch = deps
	// deps is sorted and unique already (appendLiveNew).
	if i, ok := slices.BinarySearch(deps, cg.ID); ok {
		deps = slices.Delete(deps, i, i+1)
	}
	if len(deps) == 0 {
		return nil
	}
	return deps
}

// spanDeps appends the conflict dependencies of access a on pages [lo, hi).
func (c *Core) spanDeps(m *imap[*region], lo, hi int, a *Access, deps []CGID) []CGID {
	for lo < hi {
		ci := lo >> imShift
		base := ci << imShift
		end := min(hi, base+m.chunkSize(ci))
		ch := &m.chunks[ci]
		off := lo - base
		lo = end
		if len(ch.vals) == 0 {
			continue // never touched: no history
		}
		vals := ch.vals[ch.rank(off)-1 : ch.rank(end-base-1)]
		var t uintptr
		for _, r := range vals {
			if r != nil {
				t += uintptr(r.small[0]) + uintptr(len(r.readers))
			}
		}
		c.touch += t
		for _, r := range vals {
			if r != nil {
				deps = c.regionDeps(r, a, deps)
			}
		}
	}
	return deps
}

// regionDeps appends the live groups access a must wait for in region r.
func (c *Core) regionDeps(r *region, a *Access, deps []CGID) []CGID {
	var gs []CGID
	switch {
	case a.Mode == Read:
		gs = r.writers
	case a.Mode == Reduce && r.reduce && r.op == a.Op && r.target == a.Target && !c.anyLive(r.readers):
		gs = r.before
	case c.anyLive(r.readers):
		gs = r.readers
	default:
		gs = r.writers
	}
	return c.appendLiveNew(deps, gs)
}

// appendLiveNew adds the live groups of gs to deps, kept sorted and
// without repeats (a handful of entries: an insertion is a short move, and
// most groups are repeats of a neighbouring region's), so no final sort or
// compaction is needed.
func (c *Core) appendLiveNew(deps, gs []CGID) []CGID {
	for _, g := range gs {
		i := len(deps)
		for i > 0 && deps[i-1] > g {
			i--
		}
		if i > 0 && deps[i-1] == g || !c.isLive(g) {
			continue
		}
		deps = slices.Insert(deps, i, g)
	}
	return deps
}

// anyLive reports whether some group of gs is live, newest (last) first.
func (c *Core) anyLive(gs []CGID) bool {
	for i := len(gs) - 1; i >= 0; i-- {
		if c.isLive(gs[i]) {
			return true
		}
	}
	return false
}
