package coherence

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
type region struct {
	writers []CGID
	reduce  bool
	op      ReduceOp
	target  AllocID
	before  []CGID
	readers []CGID
	fills   []fill
}

type fill struct {
	gen uint32
	cg  CGID
}

func (r *region) empty() bool {
	return r == nil || len(r.writers) == 0 && len(r.before) == 0 && len(r.readers) == 0 && len(r.fills) == 0
}

// liveIDs returns ids without completed groups (a new slice only if needed).
func (c *Core) liveIDs(ids []CGID) []CGID {
	for i, id := range ids {
		if !c.isLive(id) {
			out := append([]CGID(nil), ids[:i]...)
			for _, id := range ids[i+1:] {
				if c.isLive(id) {
					out = append(out, id)
				}
			}
			return out
		}
	}
	return ids
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
	gen     uint32 // allocation generation of the target
	discard bool
}

// applyAccess computes the dependencies of access x on region r (appended to
// deps) and returns the region after x.
func (c *Core) applyAccess(r *region, x *accessCtx, deps []CGID) (*region, []CGID) {
	r = c.pruned(r)
	if r == nil {
		r = &region{}
	}
	addFills := func() {
		if x.discard {
			return
		}
		for _, f := range r.fills {
			if f.gen == x.gen {
				deps = append(deps, f.cg)
			}
		}
	}
	switch x.mode {
	case Read:
		deps = append(deps, r.writers...)
		addFills()
		n := *r
		if len(r.readers) == 0 || r.readers[len(r.readers)-1] != x.self {
			n.readers = append(append(make([]CGID, 0, len(r.readers)+1), r.readers...), x.self)
		}
		return &n, deps
	case Reduce:
		if len(r.readers) == 0 && r.reduce && r.op == x.op && r.target == x.target {
			deps = append(deps, r.before...)
			addFills()
			n := *r
			if r.writers[len(r.writers)-1] != x.self {
				n.writers = append(append(make([]CGID, 0, len(r.writers)+1), r.writers...), x.self)
			}
			return &n, deps
		}
		prev := r.readers
		if len(prev) == 0 {
			prev = r.writers
		}
		deps = append(deps, prev...)
		return &region{writers: []CGID{x.self}, reduce: true, op: x.op, target: x.target, before: prev}, deps
	default: // Write, ReadWrite, release
		if len(r.readers) > 0 {
			deps = append(deps, r.readers...)
		} else {
			deps = append(deps, r.writers...)
		}
		return &region{writers: []CGID{x.self}}, deps
	}
}

// conflictPass applies access x over the page box of buffer b and returns
// the dependencies found, appended to deps.
func (c *Core) conflictPass(b *buffer, box Box, x *accessCtx, deps []CGID) []CGID {
	clear(c.memo)
	boxSpans(b.pages, box, func(lo, hi int) {
		b.conf.update(lo, hi, func(r *region) *region {
			if n, ok := c.memo[r]; ok {
				return n
			}
			var n *region
			n, deps = c.applyAccess(r, x, deps)
			c.memo[r] = n
			return n
		})
	})
	return deps
}

// fillPass records that group self's copies made [lo, hi) valid on the
// allocation of generation gen.
func (c *Core) fillPass(b *buffer, spans []span, self CGID, gen uint32) {
	clear(c.memo)
	for _, s := range spans {
		b.conf.update(s.lo, s.hi, func(r *region) *region {
			if n, ok := c.memo[r]; ok {
				return n
			}
			var n region
			if r != nil {
				n = *r
			}
			n.fills = append(append(make([]fill, 0, len(n.fills)+1), n.fills...), fill{gen: gen, cg: self})
			c.memo[r] = &n
			return &n
		})
	}
}

// fillDeps appends the groups whose in-flight copies made [lo, hi) valid on
// the allocation of generation gen.
func (c *Core) fillDeps(b *buffer, lo, hi int, gen uint32, deps []CGID) []CGID {
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
