package coherence

import (
	"fmt"
	"iter"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Page states (P2).
//
// A buffer's pages are numbered in row-major order of the page grid (the
// linear page index). For every page the state is a slot mask: bit s is set
// when the allocation in slot s of the buffer holds the page up to date. Bit
// lostSlot is a pseudo-allocation: a page whose mask is exactly lostBit had its
// last valid copies on a node that was lost (C5). A zero mask is a page that
// was never initialised (T2). Invariant: lostBit never appears together with
// another bit.
//
// A mask has room for 255 allocations (maskWords words; slot 63 is the lost
// one, so slots 0–62 and the lost bit share the first word). A buffer whose
// allocations all sit in slots 0–62 (every buffer of at most 63 allocations:
// slots are handed out lowest first) stores one word per run, as when masks
// were a uint64, and updates its runs with one-word operations; the first
// update that names a higher slot widens the buffer's runs to maskWords
// words for good (pageStates.wide).
//
// The linear index space is cut into chunks of chunkLen pages so that every
// update is O(size of the chunks it touches) and never moves a slice as large
// as the buffer. A chunk is either a run list (run i covers [starts[i],
// starts[i+1]) with one mask; runs cover the chunk and adjacent runs differ)
// or, when it has too many runs to be cheaper, a dense per-slot bitmap (one
// bit per page per slot present in the chunk). Uniform buffers cost one run
// per chunk; fragmented chunks cost at most about one bit per page per
// allocation.

const (
	chunkShift = 12
	chunkLen   = 1 << chunkShift
	chunkWords = chunkLen / 64

	// maskWords is the width of a slotMask in 64-bit words. Four words give
	// 255 allocations per buffer: 64 members, each with its host memory and
	// a device memory or two, plus the client's host copy. A wide buffer's
	// runs cost 8 bytes per word.
	maskWords = 4
	maxSlots  = maskWords*64 - 1 // allocation slots per buffer
	// lostSlot is the lost pseudo-slot: the top bit of the first word, as
	// when masks were one word, so a narrow run's word is the mask's first.
	lostSlot = 63
	lostWord = uint64(1) << lostSlot
)

// slotMask is a set of allocation slots of one buffer (bit s: slot s), with
// the lost pseudo-slot at bit 63. It is a value: == compares sets.
type slotMask [maskWords]uint64

// lostBit is the mask of a lost page (only the lost pseudo-slot).
var lostBit = slotBit(lostSlot)

// slotBit is the set holding slot s alone.
func slotBit(s int) slotMask {
	var m slotMask
	m[s>>6] = 1 << (s & 63)
	return m
}

func (m slotMask) has(s int) bool { return m[s>>6]&(1<<(s&63)) != 0 }

func (m *slotMask) add(s int)    { m[s>>6] |= 1 << (s & 63) }
func (m *slotMask) remove(s int) { m[s>>6] &^= 1 << (s & 63) }

// The operations below are written out for maskWords == 4 (the compiler
// does not unroll loops; the planner calls them per run).
var _ = [1]struct{}{}[maskWords-4]

func (m slotMask) isZero() bool { return m[0]|m[1]|m[2]|m[3] == 0 }

// meets reports whether m and o share a slot.
func (m slotMask) meets(o slotMask) bool {
	return m[0]&o[0]|m[1]&o[1]|m[2]&o[2]|m[3]&o[3] != 0
}

func (m slotMask) or(o slotMask) slotMask {
	return slotMask{m[0] | o[0], m[1] | o[1], m[2] | o[2], m[3] | o[3]}
}

func (m slotMask) andNot(o slotMask) slotMask {
	return slotMask{m[0] &^ o[0], m[1] &^ o[1], m[2] &^ o[2], m[3] &^ o[3]}
}

// real is m without the lost pseudo-slot.
func (m slotMask) real() slotMask {
	m[0] &^= lostWord
	return m
}

// hasReal reports whether m holds a real allocation's slot.
func (m slotMask) hasReal() bool { return m[0]&^lostWord|m[1]|m[2]|m[3] != 0 }

// narrow reports whether m fits a narrow run (slots 0–62 and the lost bit).
func (m slotMask) narrow() bool { return m[1]|m[2]|m[3] == 0 }

func (m slotMask) count() int {
	return bits.OnesCount64(m[0]) + bits.OnesCount64(m[1]) + bits.OnesCount64(m[2]) + bits.OnesCount64(m[3])
}

// countBelow is the number of slots of m below s.
func (m slotMask) countBelow(s int) int {
	n := 0
	for i := range s >> 6 {
		n += bits.OnesCount64(m[i])
	}
	return n + bits.OnesCount64(m[s>>6]&(1<<(s&63)-1))
}

// first is m's lowest slot, or -1 when m is empty.
func (m slotMask) first() int {
	for i, w := range m {
		if w != 0 {
			return i<<6 | bits.TrailingZeros64(w)
		}
	}
	return -1
}

// single reports whether m holds exactly one slot.
func (m slotMask) single() bool {
	switch {
	case m[0] != 0:
		return m[0]&(m[0]-1) == 0 && m[1]|m[2]|m[3] == 0
	case m[1] != 0:
		return m[1]&(m[1]-1) == 0 && m[2]|m[3] == 0
	case m[2] != 0:
		return m[2]&(m[2]-1) == 0 && m[3] == 0
	}
	return m[3] != 0 && m[3]&(m[3]-1) == 0
}

// firstFree is the lowest allocation slot not in m (never the lost one;
// maskWords*64 when every slot is in m).
func (m slotMask) firstFree() int {
	m[0] |= lostWord
	for i, w := range m {
		if w != ^uint64(0) {
			return i<<6 | bits.TrailingZeros64(^w)
		}
	}
	return maskWords * 64
}

// all yields m's slots in increasing order.
func (m slotMask) all() iter.Seq[int] {
	return func(yield func(int) bool) {
		for i, w := range m {
			for ; w != 0; w &= w - 1 {
				if !yield(i<<6 | bits.TrailingZeros64(w)) {
					return
				}
			}
		}
	}
}

// String lists the slots, "lost" for the lost pseudo-slot: {0,3,lost}.
func (m slotMask) String() string {
	var sb strings.Builder
	sb.WriteByte('{')
	for s := range m.all() {
		if sb.Len() > 1 {
			sb.WriteByte(',')
		}
		if s == lostSlot {
			sb.WriteString("lost")
		} else {
			sb.WriteString(strconv.Itoa(s))
		}
	}
	sb.WriteByte('}')
	return sb.String()
}

// pageStates is the state of all pages of one buffer.
type pageStates struct {
	n      int
	chunks []psChunk
	// wide is set once a mask names a slot above 62: runs then keep
	// maskWords words (psChunk.wmasks) instead of one (psChunk.masks).
	wide bool
	// scratch for run rebuilding
	sStarts []uint16
	sMasks  []uint64
	sWide   []slotMask
}

// psChunk is one chunk: a run list (starts with masks, or wmasks in a wide
// buffer) or a dense bitmap.
type psChunk struct {
	starts []uint16
	masks  []uint64
	wmasks []slotMask
	dense  *denseChunk
}

// denseChunk holds one bitmap of chunkWords words per slot in slots, in
// increasing slot order.
type denseChunk struct {
	slots slotMask
	words []uint64
}

func newPageStates(n int, initial slotMask) *pageStates {
	p := &pageStates{n: n, chunks: make([]psChunk, (n+chunkLen-1)/chunkLen)}
	if !initial.narrow() {
		p.wide = true
	}
	for i := range p.chunks {
		p.chunks[i].starts = []uint16{0}
		if p.wide {
			p.chunks[i].wmasks = []slotMask{initial}
		} else {
			p.chunks[i].masks = []uint64{initial[0]}
		}
	}
	return p
}

// widen turns every narrow run list into a wide one.
func (p *pageStates) widen() {
	p.wide = true
	for i := range p.chunks {
		c := &p.chunks[i]
		if c.dense != nil {
			continue
		}
		c.wmasks = make([]slotMask, len(c.masks))
		for k, m := range c.masks {
			c.wmasks[k][0] = m
		}
		c.masks = nil
	}
}

func (p *pageStates) chunkSize(ci int) int {
	return min(chunkLen, p.n-ci*chunkLen)
}

// mask is run i's mask.
func (c *psChunk) mask(i int) slotMask {
	if c.wmasks != nil {
		return c.wmasks[i]
	}
	return slotMask{c.masks[i]}
}

// visit calls fn for the maximal runs of equal mask within [lo, hi), in order.
// Adjacent runs reported may carry equal masks across chunk boundaries.
func (p *pageStates) visit(lo, hi int, fn func(lo, hi int, mask slotMask)) {
	for lo < hi {
		ci := lo >> chunkShift
		base := ci << chunkShift
		end := min(hi, base+p.chunkSize(ci))
		c := &p.chunks[ci]
		if c.dense != nil {
			c.dense.visit(lo-base, end-base, func(a, b int, m slotMask) { fn(a+base, b+base, m) })
		} else {
			i := runIndex(c.starts, lo-base)
			for ; i < len(c.starts); i++ {
				s := base + int(c.starts[i])
				if s >= end {
					break
				}
				e := base + p.chunkSize(ci)
				if i+1 < len(c.starts) {
					e = base + int(c.starts[i+1])
				}
				if p.wide {
					fn(max(s, lo), min(e, end), c.wmasks[i])
				} else {
					fn(max(s, lo), min(e, end), slotMask{c.masks[i]})
				}
			}
		}
		lo = end
	}
}

// uniform reports the mask of the pages of box (in a grid of extent ext)
// when they form one contiguous span inside one run of one chunk; ok is
// false otherwise (the caller then walks the states).
func (p *pageStates) uniform(ext Dims, box Box) (mask slotMask, ok bool) {
	lo, hi, ok := contiguousSpan(ext, box)
	if !ok {
		return slotMask{}, false
	}
	ci := lo >> chunkShift
	base := ci << chunkShift
	if (hi-1)>>chunkShift != ci {
		return slotMask{}, false
	}
	c := &p.chunks[ci]
	if c.dense != nil || len(c.starts) == 0 {
		return slotMask{}, false
	}
	i := runIndex(c.starts, lo-base)
	if i+1 < len(c.starts) && base+int(c.starts[i+1]) < hi {
		return slotMask{}, false
	}
	return c.mask(i), true
}

// runIndex is the index of the run containing x.
func runIndex(starts []uint16, x int) int {
	lo, hi := 0, len(starts)
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if int(starts[m]) <= x {
			lo = m
		} else {
			hi = m
		}
	}
	return lo
}

// stateOp is an update of the masks of a range.
type stateOp struct {
	kind opKind
	m    slotMask
}

type opKind uint8

const (
	opSet      opKind = iota // mask = m
	opOrIfInit               // mask |= m where mask has a real allocation bit
	opLose                   // mask &^= m; a page left with nothing becomes lost
)

func (o *stateOp) apply(mask slotMask) slotMask {
	switch o.kind {
	case opSet:
		return o.m
	case opOrIfInit:
		if mask.hasReal() {
			return mask.or(o.m)
		}
		return mask
	case opLose:
		if !mask.meets(o.m) {
			return mask
		}
		if nm := mask.andNot(o.m); !nm.isZero() {
			return nm
		}
		return lostBit
	}
	panic("coherence: unknown state op")
}

// applyNarrow is apply on a narrow run's word (o.m is narrow too).
func (o *stateOp) applyNarrow(mask uint64) uint64 {
	m := o.m[0]
	switch o.kind {
	case opSet:
		return m
	case opOrIfInit:
		if mask&^lostWord != 0 {
			return mask | m
		}
		return mask
	case opLose:
		if mask&m == 0 {
			return mask
		}
		if nm := mask &^ m; nm != 0 {
			return nm
		}
		return lostWord
	}
	panic("coherence: unknown state op")
}

// update applies op to every page of [lo, hi).
func (p *pageStates) update(lo, hi int, op stateOp) {
	if !p.wide && !op.m.narrow() {
		p.widen()
	}
	for lo < hi {
		ci := lo >> chunkShift
		base := ci << chunkShift
		size := p.chunkSize(ci)
		end := min(hi, base+size)
		c := &p.chunks[ci]
		a, b := lo-base, end-base
		switch {
		case op.kind == opSet && a == 0 && b == size:
			c.dense = nil
			c.starts = append(c.starts[:0], 0)
			if p.wide {
				c.wmasks = append(c.wmasks[:0], op.m)
			} else {
				c.masks = append(c.masks[:0], op.m[0])
			}
		case c.dense != nil:
			c.dense.update(a, b, &op)
		case p.wide:
			p.updateWideRuns(c, size, a, b, &op)
		default:
			p.updateRuns(c, size, a, b, &op)
		}
		lo = end
	}
}

// updateRuns updates a narrow run list (updateWideRuns is the same on wide
// masks; change both together).
func (p *pageStates) updateRuns(c *psChunk, size, a, b int, op *stateOp) {
	// Splice: rebuild only the runs overlapping [a, b), coalesce with the
	// neighbours, move the rest of the chunk at most once.
	i, j := runIndex(c.starts, a), runIndex(c.starts, b-1)
	end := func(k int) int {
		if k+1 < len(c.starts) {
			return int(c.starts[k+1])
		}
		return size
	}
	ns, nm := p.sStarts[:0], p.sMasks[:0]
	push := func(s int, m uint64) {
		if len(nm) > 0 && nm[len(nm)-1] == m {
			return
		}
		ns = append(ns, uint16(s))
		nm = append(nm, m)
	}
	if int(c.starts[i]) < a {
		push(int(c.starts[i]), c.masks[i])
	}
	for k := i; k <= j; k++ {
		push(max(int(c.starts[k]), a), op.applyNarrow(c.masks[k]))
	}
	if end(j) > b {
		push(b, c.masks[j])
	}
	lo, hi := i, j+1
	if lo > 0 && len(nm) > 0 && c.masks[lo-1] == nm[0] {
		ns, nm = ns[1:], nm[1:]
	}
	if hi < len(c.starts) {
		if len(nm) > 0 && c.masks[hi] == nm[len(nm)-1] || len(nm) == 0 && lo > 0 && c.masks[hi] == c.masks[lo-1] {
			hi++
		}
	}
	grew := len(ns) > hi-lo
	c.starts = slices.Replace(c.starts, lo, hi, ns...)
	c.masks = slices.Replace(c.masks, lo, hi, nm...)
	p.sStarts, p.sMasks = ns[:0], nm[:0]
	if grew && denseCheaper(len(c.starts), 8, orNarrow(c.masks)) {
		c.dense = toDense(c, size)
		c.starts, c.masks = nil, nil
	}
}

// updateWideRuns is updateRuns on a wide run list.
func (p *pageStates) updateWideRuns(c *psChunk, size, a, b int, op *stateOp) {
	i, j := runIndex(c.starts, a), runIndex(c.starts, b-1)
	end := func(k int) int {
		if k+1 < len(c.starts) {
			return int(c.starts[k+1])
		}
		return size
	}
	ns, nm := p.sStarts[:0], p.sWide[:0]
	push := func(s int, m slotMask) {
		if len(nm) > 0 && nm[len(nm)-1] == m {
			return
		}
		ns = append(ns, uint16(s))
		nm = append(nm, m)
	}
	if int(c.starts[i]) < a {
		push(int(c.starts[i]), c.wmasks[i])
	}
	for k := i; k <= j; k++ {
		push(max(int(c.starts[k]), a), op.apply(c.wmasks[k]))
	}
	if end(j) > b {
		push(b, c.wmasks[j])
	}
	lo, hi := i, j+1
	if lo > 0 && len(nm) > 0 && c.wmasks[lo-1] == nm[0] {
		ns, nm = ns[1:], nm[1:]
	}
	if hi < len(c.starts) {
		if len(nm) > 0 && c.wmasks[hi] == nm[len(nm)-1] || len(nm) == 0 && lo > 0 && c.wmasks[hi] == c.wmasks[lo-1] {
			hi++
		}
	}
	grew := len(ns) > hi-lo
	c.starts = slices.Replace(c.starts, lo, hi, ns...)
	c.wmasks = slices.Replace(c.wmasks, lo, hi, nm...)
	p.sStarts, p.sWide = ns[:0], nm[:0]
	if grew {
		var all slotMask
		for _, m := range c.wmasks {
			all = all.or(m)
		}
		if denseCheaper(len(c.starts), 8*maskWords, all) {
			c.dense = toDense(c, size)
			c.starts, c.wmasks = nil, nil
		}
	}
}

func orNarrow(masks []uint64) slotMask {
	var all uint64
	for _, m := range masks {
		all |= m
	}
	return slotMask{all}
}

// denseCheaper: a run costs its start and maskBytes; a dense slot bitmap
// chunkWords*8; all is the union of the runs' masks.
func denseCheaper(runs, maskBytes int, all slotMask) bool {
	runBytes := 2 + maskBytes
	if runs*runBytes <= 2*chunkWords*8 {
		return false // cheaper than even one slot's bitmap plus the lost one
	}
	return runs*runBytes > (all.count()+1)*chunkWords*8
}

// toDense is c's run list as a dense chunk.
func toDense(c *psChunk, size int) *denseChunk {
	var all slotMask
	for i := range c.starts {
		all = all.or(c.mask(i))
	}
	d := &denseChunk{slots: all, words: make([]uint64, all.count()*chunkWords)}
	for i := range c.starts {
		s := int(c.starts[i])
		e := size
		if i+1 < len(c.starts) {
			e = int(c.starts[i+1])
		}
		for sl := range c.mask(i).all() {
			d.setBits(d.bitmap(sl), s, e)
		}
	}
	return d
}

// bitmap returns slot s's bitmap, adding it if absent.
func (d *denseChunk) bitmap(s int) []uint64 {
	idx := d.slots.countBelow(s)
	if !d.slots.has(s) {
		d.slots.add(s)
		d.words = append(d.words, make([]uint64, chunkWords)...)
		copy(d.words[(idx+1)*chunkWords:], d.words[idx*chunkWords:])
		clear(d.words[idx*chunkWords : (idx+1)*chunkWords])
	}
	return d.words[idx*chunkWords : (idx+1)*chunkWords]
}

func (d *denseChunk) setBits(w []uint64, a, b int) {
	rangeOp(w, a, b, func(x, m uint64) uint64 { return x | m })
}

func rangeOp(w []uint64, a, b int, f func(x, m uint64) uint64) {
	for a < b {
		wi := a >> 6
		off := a & 63
		n := min(64-off, b-a)
		var m uint64
		if n == 64 {
			m = ^uint64(0)
		} else {
			m = ((uint64(1) << n) - 1) << off
		}
		w[wi] = f(w[wi], m)
		a += n
	}
}

// denseScratch is the most slots a dense chunk holds (every slot and the
// lost one).
const denseScratch = maxSlots + 1

func (d *denseChunk) update(a, b int, op *stateOp) {
	// Compute, word by word, the new per-slot words from the old ones.
	slotsAfter := d.slots
	switch op.kind {
	case opSet, opOrIfInit:
		slotsAfter = slotsAfter.or(op.m)
	}
	for s := range slotsAfter.andNot(d.slots).all() {
		d.bitmap(s)
	}
	var curBuf [denseScratch]uint64
	var inOpBuf [denseScratch]bool
	// The slots' bitmaps are in increasing slot order; inOp tells which
	// are in op.m, lostIdx is the lost pseudo-slot's (-1: none).
	var cur []uint64
	var inOp []bool
	lostIdx := -1
	layout := func() {
		n := d.slots.count()
		cur, inOp = curBuf[:n], inOpBuf[:n]
		k := 0
		for s := range d.slots.all() {
			inOp[k] = op.m.has(s)
			if s == lostSlot {
				lostIdx = k
			}
			k++
		}
	}
	layout()
	for wa := a; wa < b; {
		wi := wa >> 6
		off := wa & 63
		n := min(64-off, b-wa)
		var sel uint64
		if n == 64 {
			sel = ^uint64(0)
		} else {
			sel = ((uint64(1) << n) - 1) << off
		}
		var any uint64
		for k := range cur {
			cur[k] = d.words[k*chunkWords+wi]
			any |= cur[k]
		}
		real := any
		if lostIdx >= 0 {
			real = any &^ cur[lostIdx]
		}
		for k := range cur {
			x := cur[k]
			switch op.kind {
			case opSet:
				if inOp[k] {
					x |= sel
				} else {
					x &^= sel
				}
			case opOrIfInit:
				if inOp[k] {
					x |= real & sel
				}
			case opLose:
				if inOp[k] {
					x &^= sel
				}
			}
			d.words[k*chunkWords+wi] = x
		}
		if op.kind == opLose {
			// Pages that had a bit of op.m and nothing else become lost.
			var hadM, other uint64
			for k := range cur {
				if inOp[k] {
					hadM |= cur[k]
				} else {
					other |= cur[k]
				}
			}
			if lost := hadM &^ other & sel; lost != 0 {
				w := d.bitmap(lostSlot)
				w[wi] |= lost
				if lostIdx < 0 {
					layout() // the bitmaps above the lost one moved up
				}
			}
		}
		wa += n
	}
}

// visit reports runs of equal mask in [a, b).
func (d *denseChunk) visit(a, b int, fn func(a, b int, m slotMask)) {
	runStart, runMask := a, slotMask{}
	started := false
	emit := func(p int, m *slotMask) {
		if !started {
			runStart, runMask, started = p, *m, true
			return
		}
		if *m != runMask {
			fn(runStart, p, runMask)
			runStart, runMask = p, *m
		}
	}
	var pm [64]slotMask
	for p := a; p < b; {
		wi, off := p>>6, p&63
		n := min(64-off, b-p)
		var sel uint64
		if n == 64 {
			sel = ^uint64(0)
		} else {
			sel = ((uint64(1) << n) - 1) << off
		}
		// Uniform word: every slot's bits are all set or all clear in sel.
		uniform := true
		var m slotMask
		k := 0
		for s := range d.slots.all() {
			x := d.words[k*chunkWords+wi] & sel
			if x == sel {
				m.add(s)
			} else if x != 0 {
				uniform = false
				break
			}
			k++
		}
		if uniform {
			emit(p, &m)
		} else {
			// Transpose the slots' words into per-page masks.
			clear(pm[off : off+n])
			k := 0
			for s := range d.slots.all() {
				for x := d.words[k*chunkWords+wi] & sel; x != 0; x &= x - 1 {
					pm[bits.TrailingZeros64(x)].add(s)
				}
				k++
			}
			for q := off; q < off+n; q++ {
				emit(p+q-off, &pm[q])
			}
		}
		p += n
	}
	if started {
		fn(runStart, b, runMask)
	}
}

// memBytes estimates the heap bytes held by the page states.
func (p *pageStates) memBytes() int {
	const chunkHdr = 24 + 24 + 24 + 8
	total := 24 + len(p.chunks)*chunkHdr
	for i := range p.chunks {
		c := &p.chunks[i]
		if c.dense != nil {
			total += 8*maskWords + 24 + cap(c.dense.words)*8
		} else {
			total += cap(c.starts)*2 + cap(c.masks)*8 + cap(c.wmasks)*8*maskWords
		}
	}
	return total
}

// denseChunks counts chunks in dense form.
func (p *pageStates) denseChunks() int {
	n := 0
	for i := range p.chunks {
		if p.chunks[i].dense != nil {
			n++
		}
	}
	return n
}

// check verifies the representation's invariants (tests call it after
// random updates): run starts increase from 0 within the chunk, adjacent
// runs differ, the lost bit never appears with another bit, dense chunks
// hold one bitmap per present slot, run lists are narrow or wide as the
// buffer is.
func (p *pageStates) check() error {
	for ci := range p.chunks {
		c := &p.chunks[ci]
		size := p.chunkSize(ci)
		if c.dense != nil {
			if len(c.starts) != 0 || len(c.dense.words) != c.dense.slots.count()*chunkWords {
				return fmt.Errorf("chunk %d: dense with %d runs and %d words for slots %v", ci, len(c.starts), len(c.dense.words), c.dense.slots)
			}
			if !p.wide && !c.dense.slots.narrow() {
				return fmt.Errorf("chunk %d: dense slots %v in a narrow buffer", ci, c.dense.slots)
			}
			var bad error
			c.dense.visit(0, size, func(a, b int, m slotMask) {
				if m.has(lostSlot) && m != lostBit && bad == nil {
					bad = fmt.Errorf("chunk %d pages [%d,%d): lost with other bits %v", ci, a, b, m)
				}
			})
			if bad != nil {
				return bad
			}
			continue
		}
		nm := len(c.masks)
		if p.wide {
			nm = len(c.wmasks)
		}
		if len(c.starts) == 0 || c.starts[0] != 0 || len(c.starts) != nm || p.wide && c.masks != nil || !p.wide && c.wmasks != nil {
			return fmt.Errorf("chunk %d: malformed run list (%d starts, %d masks, %d wide masks, wide %v)", ci, len(c.starts), len(c.masks), len(c.wmasks), p.wide)
		}
		for i := range c.starts {
			if i > 0 && (c.starts[i] <= c.starts[i-1] || c.mask(i) == c.mask(i-1)) {
				return fmt.Errorf("chunk %d run %d: start %d after %d, mask %v after %v", ci, i, c.starts[i], c.starts[i-1], c.mask(i), c.mask(i-1))
			}
			if int(c.starts[i]) >= size {
				return fmt.Errorf("chunk %d run %d starts at %d beyond the chunk (%d)", ci, i, c.starts[i], size)
			}
			if m := c.mask(i); m.has(lostSlot) && m != lostBit {
				return fmt.Errorf("chunk %d run %d: lost with other bits %v", ci, i, m)
			}
		}
	}
	return nil
}
