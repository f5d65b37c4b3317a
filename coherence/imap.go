package coherence

import "slices"

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

type imChunk[V comparable] struct {
	starts []uint16
	vals   []V
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
		for i := runIndex(c.starts, lo-base); i < len(c.starts); i++ {
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
			return
		}
		c.starts, c.vals = []uint16{0}, []V{zero}
	}
	if len(c.starts) == 1 && a == 0 && b == size {
		c.vals[0] = f(c.vals[0])
		return
	}
	// Splice: rebuild only the segments overlapping [a, b), then coalesce
	// with the neighbours; the rest of the chunk is moved at most once.
	i, j := runIndex(c.starts, a), runIndex(c.starts, b-1)
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
	c.starts = slices.Replace(c.starts, lo, hi, ns...)
	c.vals = slices.Replace(c.vals, lo, hi, nv...)
	m.sS, m.sV = ns[:0], nv[:0]
	clear(m.sV[:cap(m.sV)])
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
		for i := w; i < len(c.vals); i++ {
			c.vals[i] = zero
		}
		c.starts, c.vals = c.starts[:w], c.vals[:w]
		if w == 1 && c.vals[0] == zero {
			c.starts, c.vals = nil, nil // back to the empty form
		}
	}
}
