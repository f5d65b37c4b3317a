package coherence

import (
	"fmt"
	"math/bits"
	"slices"
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

	maxSlots = 63 // allocation slots per buffer
	lostSlot = 63
	lostBit  = uint64(1) << lostSlot
)

// pageStates is the state of all pages of one buffer.
type pageStates struct {
	n      int
	chunks []psChunk
	// scratch for run rebuilding
	sStarts []uint16
	sMasks  []uint64
}

type psChunk struct {
	starts []uint16
	masks  []uint64
	dense  *denseChunk
}

// denseChunk holds one bitmap of chunkWords words per slot in slots, in
// increasing slot order.
type denseChunk struct {
	slots uint64
	words []uint64
}

func newPageStates(n int, initial uint64) *pageStates {
	p := &pageStates{n: n, chunks: make([]psChunk, (n+chunkLen-1)/chunkLen)}
	for i := range p.chunks {
		p.chunks[i] = psChunk{starts: []uint16{0}, masks: []uint64{initial}}
	}
	return p
}

func (p *pageStates) chunkSize(ci int) int {
	return min(chunkLen, p.n-ci*chunkLen)
}

// visit calls fn for the maximal runs of equal mask within [lo, hi), in order.
// Adjacent runs reported may carry equal masks across chunk boundaries.
func (p *pageStates) visit(lo, hi int, fn func(lo, hi int, mask uint64)) {
	for lo < hi {
		ci := lo >> chunkShift
		base := ci << chunkShift
		end := min(hi, base+p.chunkSize(ci))
		c := &p.chunks[ci]
		if c.dense != nil {
			c.dense.visit(lo-base, end-base, func(a, b int, m uint64) { fn(a+base, b+base, m) })
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
				fn(max(s, lo), min(e, end), c.masks[i])
			}
		}
		lo = end
	}
}

// uniform reports the mask of the pages of box (in a grid of extent ext)
// when they form one contiguous span inside one run of one chunk; ok is
// false otherwise (the caller then walks the states).
func (p *pageStates) uniform(ext Dims, box Box) (mask uint64, ok bool) {
	lo, hi, ok := contiguousSpan(ext, box)
	if !ok {
		return 0, false
	}
	ci := lo >> chunkShift
	base := ci << chunkShift
	if (hi-1)>>chunkShift != ci {
		return 0, false
	}
	c := &p.chunks[ci]
	if c.dense != nil || len(c.starts) == 0 {
		return 0, false
	}
	i := runIndex(c.starts, lo-base)
	if i+1 < len(c.starts) && base+int(c.starts[i+1]) < hi {
		return 0, false
	}
	return c.masks[i], true
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
	m    uint64
}

type opKind uint8

const (
	opSet      opKind = iota // mask = m
	opOrIfInit               // mask |= m where mask has a real allocation bit
	opLose                   // mask &^= m; a page left with nothing becomes lost
)

func (o stateOp) apply(mask uint64) uint64 {
	switch o.kind {
	case opSet:
		return o.m
	case opOrIfInit:
		if mask&^lostBit != 0 {
			return mask | o.m
		}
		return mask
	case opLose:
		if mask&o.m == 0 {
			return mask
		}
		if nm := mask &^ o.m; nm != 0 {
			return nm
		}
		return lostBit
	}
	panic("coherence: unknown state op")
}

// update applies op to every page of [lo, hi).
func (p *pageStates) update(lo, hi int, op stateOp) {
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
			c.masks = append(c.masks[:0], op.m)
		case c.dense != nil:
			c.dense.update(a, b, op)
		default:
			p.updateRuns(c, size, a, b, op)
		}
		lo = end
	}
}

func (p *pageStates) updateRuns(c *psChunk, size, a, b int, op stateOp) {
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
		push(max(int(c.starts[k]), a), op.apply(c.masks[k]))
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
	if grew && denseCheaper(len(c.starts), c.masks) {
		c.dense = toDense(c.starts, c.masks, size)
		c.starts, c.masks = nil, nil
	}
}

// denseCheaper: a run costs 10 bytes; a dense slot bitmap chunkWords*8.
func denseCheaper(runs int, masks []uint64) bool {
	if runs*10 <= 2*chunkWords*8 {
		return false // cheaper than even one slot's bitmap plus the lost one
	}
	var all uint64
	for _, m := range masks {
		all |= m
	}
	return runs*10 > (bits.OnesCount64(all)+1)*chunkWords*8
}

func toDense(starts []uint16, masks []uint64, size int) *denseChunk {
	var all uint64
	for _, m := range masks {
		all |= m
	}
	d := &denseChunk{slots: all, words: make([]uint64, bits.OnesCount64(all)*chunkWords)}
	for i := range starts {
		s := int(starts[i])
		e := size
		if i+1 < len(starts) {
			e = int(starts[i+1])
		}
		for m := masks[i]; m != 0; m &= m - 1 {
			d.setBits(d.bitmap(bits.TrailingZeros64(m)), s, e)
		}
	}
	return d
}

// bitmap returns slot s's bitmap, adding it if absent.
func (d *denseChunk) bitmap(s int) []uint64 {
	bit := uint64(1) << s
	idx := bits.OnesCount64(d.slots & (bit - 1))
	if d.slots&bit == 0 {
		d.slots |= bit
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

func (d *denseChunk) update(a, b int, op stateOp) {
	// Compute, word by word, the new per-slot words from the old ones.
	var cur [64]uint64
	slotsAfter := d.slots
	switch op.kind {
	case opSet, opOrIfInit:
		slotsAfter |= op.m
	}
	for m := slotsAfter &^ d.slots; m != 0; m &= m - 1 {
		d.bitmap(bits.TrailingZeros64(m))
	}
	nslots := bits.OnesCount64(d.slots)
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
		for k := range nslots {
			cur[k] = d.words[k*chunkWords+wi]
		}
		var any, real uint64
		for k := range nslots {
			any |= cur[k]
		}
		lostIdx := -1
		if d.slots&lostBit != 0 {
			lostIdx = nslots - 1 // lost slot is the highest bit
		}
		real = any
		if lostIdx >= 0 {
			real = any &^ cur[lostIdx]
		}
		k := 0
		for m := d.slots; m != 0; m &= m - 1 {
			s := bits.TrailingZeros64(m)
			bit := uint64(1) << s
			x := cur[k]
			switch op.kind {
			case opSet:
				if op.m&bit != 0 {
					x |= sel
				} else {
					x &^= sel
				}
			case opOrIfInit:
				if op.m&bit != 0 {
					x |= real & sel
				}
			case opLose:
				if op.m&bit != 0 {
					x &^= sel
				}
			}
			d.words[k*chunkWords+wi] = x
			k++
		}
		if op.kind == opLose {
			// Pages that had a bit of op.m and nothing else become lost.
			var hadM, other uint64
			k := 0
			for m := d.slots; m != 0; m &= m - 1 {
				s := bits.TrailingZeros64(m)
				if op.m&(uint64(1)<<s) != 0 {
					hadM |= cur[k]
				} else {
					other |= cur[k]
				}
				k++
			}
			if lost := hadM &^ other & sel; lost != 0 {
				w := d.bitmap(lostSlot)
				w[wi] |= lost
				nslots = bits.OnesCount64(d.slots)
			}
		}
		wa += n
	}
}

// visit reports runs of equal mask in [a, b).
func (d *denseChunk) visit(a, b int, fn func(a, b int, m uint64)) {
	nslots := bits.OnesCount64(d.slots)
	runStart, runMask := a, uint64(0)
	started := false
	emit := func(p int, m uint64) {
		if !started {
			runStart, runMask, started = p, m, true
			return
		}
		if m != runMask {
			fn(runStart, p, runMask)
			runStart, runMask = p, m
		}
	}
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
		var m uint64
		k := 0
		for s := d.slots; s != 0; s &= s - 1 {
			x := d.words[k*chunkWords+wi] & sel
			if x == sel {
				m |= uint64(1) << bits.TrailingZeros64(s)
			} else if x != 0 {
				uniform = false
				break
			}
			k++
		}
		_ = nslots
		if uniform {
			emit(p, m)
		} else {
			// Transpose the slots' words into per-page masks.
			var pm [64]uint64
			k := 0
			for s := d.slots; s != 0; s &= s - 1 {
				bit := uint64(1) << bits.TrailingZeros64(s)
				for x := d.words[k*chunkWords+wi] & sel; x != 0; x &= x - 1 {
					pm[bits.TrailingZeros64(x)] |= bit
				}
				k++
			}
			for q := off; q < off+n; q++ {
				emit(p+q-off, pm[q])
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
	const chunkHdr = 24 + 24 + 8
	total := 24 + len(p.chunks)*chunkHdr
	for i := range p.chunks {
		c := &p.chunks[i]
		if c.dense != nil {
			total += 32 + cap(c.dense.words)*8
		} else {
			total += cap(c.starts)*2 + cap(c.masks)*8
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
// hold one bitmap per present slot.
func (p *pageStates) check() error {
	for ci := range p.chunks {
		c := &p.chunks[ci]
		size := p.chunkSize(ci)
		if c.dense != nil {
			if len(c.starts) != 0 || len(c.dense.words) != bits.OnesCount64(c.dense.slots)*chunkWords {
				return fmt.Errorf("chunk %d: dense with %d runs and %d words for slots %b", ci, len(c.starts), len(c.dense.words), c.dense.slots)
			}
			var bad error
			c.dense.visit(0, size, func(a, b int, m uint64) {
				if m&lostBit != 0 && m != lostBit && bad == nil {
					bad = fmt.Errorf("chunk %d pages [%d,%d): lost with other bits %b", ci, a, b, m)
				}
			})
			if bad != nil {
				return bad
			}
			continue
		}
		if len(c.starts) == 0 || c.starts[0] != 0 || len(c.starts) != len(c.masks) {
			return fmt.Errorf("chunk %d: malformed run list (%d starts, %d masks)", ci, len(c.starts), len(c.masks))
		}
		for i := range c.starts {
			if i > 0 && (c.starts[i] <= c.starts[i-1] || c.masks[i] == c.masks[i-1]) {
				return fmt.Errorf("chunk %d run %d: start %d after %d, mask %b after %b", ci, i, c.starts[i], c.starts[i-1], c.masks[i], c.masks[i-1])
			}
			if int(c.starts[i]) >= size {
				return fmt.Errorf("chunk %d run %d starts at %d beyond the chunk (%d)", ci, i, c.starts[i], size)
			}
			if m := c.masks[i]; m&lostBit != 0 && m != lostBit {
				return fmt.Errorf("chunk %d run %d: lost with other bits %b", ci, i, m)
			}
		}
	}
	return nil
}
