package coherence

// imap is a chunked interval map over [0, n) with values of type V; equal
// adjacent values (by ==) inside a chunk are coalesced. It is the conflict
// tracker's representation (values are *region, shared and immutable).
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
	m := &imap[V]{n: n, chunks: make([]imChunk[V], (n+chunkLen-1)/chunkLen)}
	var zero V
	for i := range m.chunks {
		m.chunks[i] = imChunk[V]{starts: []uint16{0}, vals: []V{zero}}
	}
	return m
}

func (m *imap[V]) chunkSize(ci int) int { return min(chunkLen, m.n-ci*chunkLen) }

// visit calls fn for each stored segment overlapping [lo, hi), clipped.
func (m *imap[V]) visit(lo, hi int, fn func(lo, hi int, v V)) {
	for lo < hi {
		ci := lo >> chunkShift
		base := ci << chunkShift
		size := m.chunkSize(ci)
		end := min(hi, base+size)
		c := &m.chunks[ci]
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
		ci := lo >> chunkShift
		base := ci << chunkShift
		size := m.chunkSize(ci)
		end := min(hi, base+size)
		m.updateChunk(&m.chunks[ci], size, lo-base, end-base, f)
		lo = end
	}
}

func (m *imap[V]) updateChunk(c *imChunk[V], size, a, b int, f func(V) V) {
	if a == 0 && b == size && len(c.starts) == 1 {
		c.vals[0] = f(c.vals[0])
		return
	}
	ns, nv := m.sS[:0], m.sV[:0]
	push := func(s int, v V) {
		if len(nv) > 0 && nv[len(nv)-1] == v {
			return
		}
		ns = append(ns, uint16(s))
		nv = append(nv, v)
	}
	first := runIndex(c.starts, a)
	ns = append(ns, c.starts[:first]...)
	nv = append(nv, c.vals[:first]...)
	last := first
	for i := first; i < len(c.starts); i++ {
		s := int(c.starts[i])
		if s >= b {
			break
		}
		last = i
		e := size
		if i+1 < len(c.starts) {
			e = int(c.starts[i+1])
		}
		v := c.vals[i]
		if s < a {
			push(s, v)
		}
		push(max(s, a), f(v))
		if e > b {
			push(b, v)
		}
	}
	for i := last + 1; i < len(c.starts); i++ {
		push(int(c.starts[i]), c.vals[i])
	}
	m.sS, m.sV = ns, nv
	c.starts = append(c.starts[:0], ns...)
	c.vals = append(c.vals[:0], nv...)
	// Drop references held by the tail of the old backing array.
	var zero V
	clear(c.vals[len(c.vals):cap(c.vals)])
	_ = zero
	clear(m.sV[:cap(m.sV)])
}

// segments is the number of stored segments.
func (m *imap[V]) segments() int {
	n := 0
	for i := range m.chunks {
		n += len(m.chunks[i].starts)
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
	}
}
