package coherence

import (
	"math/bits"
	"slices"
)

// imap is a chunked interval map over [0, n) with values of type V; equal
// adjacent values (by ==) inside a chunk are coalesced. It is the conflict
// tracker's representation (values are *region, shared and immutable).
// imShift sets the conflict map's chunk size (256 pages): small, because
// conflict regions fragment with the number of live groups and an update
// moves the tail of its chunk; chunks that were never touched hold no
// segments at all.
const (
	imShift = 8
	imLen   = 1 << imShift
)

type imap[V comparable] struct {
	n      int
	chunks []imChunk[V]
	sS     []uint16
	sV     []V
}

// imChunk is one chunk's segments: starts[i] (offset in the chunk) begins
// vals[i]. heads mirrors starts as a bitmap (bit p set: a segment starts
// at p), so a lookup finds the segment of an offset with a popcount over
// 32 bytes next to vals in the chunk header, instead of a binary search
// through starts (a chain of dependent cache misses on fragmented chunks).
// Every change to starts updates heads.
type imChunk[V comparable] struct {
	vals   []V
	heads  [imLen / 64]uint64
	starts []uint16
}

// rank is the number of segments starting at or before offset x: the
// segment holding x is vals[rank(x)-1].
func (c *imChunk[V]) rank(x int) int {
	w := x >> 6
	n := bits.OnesCount64(c.heads[w] & (2<<(x&63) - 1))
	for _, h := range c.heads[:w] {
		n += bits.OnesCount64(h)
	}
	return n
}

func newIMap[V comparable](n int) *imap[V] {
	return &imap[V]{n: n, chunks: make([]imChunk[V], (n+imLen-1)/imLen)}
}

func (m *imap[V]) chunkSize(ci int) int { return min(imLen, m.n-ci*imLen) }

// visit calls fn for each stored segment overlapping [lo, hi), clipped.
func (m *imap[V]) visit(lo, hi int, fn func(lo, hi int, v V)) {
	for lo < hi {
		ci := lo >> imShift
		base := ci << imShift
		size := m.chunkSize(ci)
		end := min(hi, base+size)
		c := &m.chunks[ci]
		if len(c.starts) == 0 {
			var zero V
			fn(lo, end, zero)
			lo = end
			continue
		}
		for i := c.rank(lo-base) - 1; i < len(c.starts); i++ {
			s := base + int(c.starts[i])
			if s >= end {
				break
			}
			e := base + size
			if i+1 < len(c.starts) {
				e = base + int(c.starts[i+1])
			}
			fn(max(s, lo), min(e, end), c.vals[i])
		}
		lo = end
	}
}

// update replaces every value v in [lo, hi) with f(v).
func (m *imap[V]) update(lo, hi int, f func(V) V) {
	for lo < hi {
		ci := lo >> imShift
		base := ci << imShift
		size := m.chunkSize(ci)
		end := min(hi, base+size)
		m.updateChunk(&m.chunks[ci], size, lo-base, end-base, f)
		lo = end
	}
}

func (m *imap[V]) updateChunk(c *imChunk[V], size, a, b int, f func(V) V) {
	var zero V
	if len(c.starts) == 0 {
		if v := f(zero); v == zero {
			return
		} else if a == 0 && b == size {
			c.starts, c.vals = []uint16{0}, []V{v}
			c.heads = [imLen / 64]uint64{1}
			return
		}
		// About to split: room for the usual three segments.
		c.starts, c.vals = make([]uint16, 1, 4), make([]V, 1, 4)
		c.heads = [imLen / 64]uint64{1}
	}
	if len(c.starts) == 1 && a == 0 && b == size {
		c.vals[0] = f(c.vals[0])
		return
	}
	// Splice: rebuild only the segments overlapping [a, b), then coalesce
	// with the neighbours; the rest of the chunk is moved at most once.
	i, j := c.rank(a)-1, c.rank(b-1)-1
	end := func(k int) int {
		if k+1 < len(c.starts) {
			return int(c.starts[k+1])
		}
		return size
	}
	ns, nv := m.sS[:0], m.sV[:0]
	push := func(s int, v V) {
		if len(nv) > 0 && nv[len(nv)-1] == v {
			return
		}
		ns = append(ns, uint16(s))
		nv = append(nv, v)
	}
	if int(c.starts[i]) < a {
		push(int(c.starts[i]), c.vals[i])
	}
	for k := i; k <= j; k++ {
		push(max(int(c.starts[k]), a), f(c.vals[k]))
	}
	if end(j) > b {
		push(b, c.vals[j])
	}
	lo, hi := i, j+1
	if lo > 0 && len(nv) > 0 && c.vals[lo-1] == nv[0] {
		ns, nv = ns[1:], nv[1:]
	}
	if hi < len(c.starts) {
		// The value just before the right neighbour: mid's last, or the
		// left neighbour's when mid merged into it entirely.
		if len(nv) > 0 && c.vals[hi] == nv[len(nv)-1] || len(nv) == 0 && lo > 0 && c.vals[hi] == c.vals[lo-1] {
			hi++
		}
	}
	// Positions before the old start of segment lo keep their heads: every
	// new start from lo on lies at or after it.
	keep := int(c.starts[lo])
	c.starts = slices.Replace(c.starts, lo, hi, ns...)
	c.vals = slices.Replace(c.vals, lo, hi, nv...)
	c.clearHeads(keep)
	for _, st := range c.starts[lo:] {
		c.heads[st>>6] |= 1 << (st & 63)
	}
	m.sS, m.sV = ns[:0], nv[:0]
	clear(m.sV[:cap(m.sV)])
}

// clearHeads clears the head bits at positions ≥ p.
func (c *imChunk[V]) clearHeads(p int) {
	w := p >> 6
	c.heads[w] &= 1<<(p&63) - 1
	clear(c.heads[w+1:])
}

// segments is the number of stored segments.
func (m *imap[V]) segments() int {
	n := 0
	for i := range m.chunks {
		n += max(1, len(m.chunks[i].starts))
	}
	return n
}

// rewriteAll applies f to every stored value (used by history sweeps).
func (m *imap[V]) rewriteAll(f func(V) V) {
	for ci := range m.chunks {
		c := &m.chunks[ci]
		if len(c.vals) == 0 {
			continue // never touched, or back in the empty form
		}
		for i := range c.vals {
			c.vals[i] = f(c.vals[i])
		}
		// coalesce
		w := 0
		for i := range c.vals {
			if w > 0 && c.vals[w-1] == c.vals[i] {
				continue
			}
			c.starts[w], c.vals[w] = c.starts[i], c.vals[i]
			w++
		}
		var zero V
		if w == len(c.vals) && (w > 1 || c.vals[0] != zero) {
			continue // starts, and so heads, unchanged
		}
		for i := w; i < len(c.vals); i++ {
			c.vals[i] = zero
		}
		c.starts, c.vals = c.starts[:w], c.vals[:w]
		c.clearHeads(0)
		if w == 1 && c.vals[0] == zero {
			c.starts, c.vals = nil, nil // back to the empty form
		}
		for _, st := range c.starts {
			c.heads[st>>6] |= 1 << (st & 63)
		}
	}
}
