package partition

import "fmt"

// RangeMapper says which part of a buffer an accessor of a split command
// group touches for one chunk, as Celerity's range mappers do. Map returns
// the accessed region (offset and range, in elements) of a buffer whose
// range is buf; MapAccess clips it to the buffer.
type RangeMapper interface {
	Map(c Chunk, buf Dims) (offset, rng Dims)
}

// MapFunc is a RangeMapper from a function (custom mappers).
type MapFunc func(c Chunk, buf Dims) (offset, rng Dims)

// Map implements RangeMapper.
func (f MapFunc) Map(c Chunk, buf Dims) (Dims, Dims) { return f(c, buf) }

type oneToOne struct{}

func (oneToOne) Map(c Chunk, _ Dims) (Dims, Dims) { return c.Offset, c.Range }

// OneToOne maps work item i to element i: the chunk's own range.
func OneToOne() RangeMapper { return oneToOne{} }

type neighbourhood struct{ k Dims }

func (n neighbourhood) Map(c Chunk, buf Dims) (Dims, Dims) {
	var lo, hi Dims
	for d := range 3 {
		lo[d] = max(c.Offset[d]-n.k[d], 0)
		hi[d] = min(c.Offset[d]+c.Range[d]+n.k[d], buf[d])
	}
	return lo, sub(hi, lo)
}

// Neighbourhood maps a chunk to its range grown by k elements on each
// side, clipped to the buffer (stencils). One k applies to every
// dimension; three give one per dimension (dimension 2 fastest). Any other
// number of extents panics.
func Neighbourhood(k ...int) RangeMapper {
	var n neighbourhood
	switch len(k) {
	case 1:
		n.k = Dims{k[0], k[0], k[0]}
	case 3:
		n.k = Dims{k[0], k[1], k[2]}
	default:
		panic("partition: Neighbourhood takes one extent or three")
	}
	return n
}

type all struct{}

func (all) Map(_ Chunk, buf Dims) (Dims, Dims) { return Dims{}, buf }

// All maps every chunk to the whole buffer.
func All() RangeMapper { return all{} }

type fixed struct{ off, rng Dims }

func (f fixed) Map(Chunk, Dims) (Dims, Dims) { return f.off, f.rng }

// Fixed maps every chunk to the same region.
func Fixed(offset, rng Dims) RangeMapper { return fixed{offset, rng} }

// MapAccess applies m to chunk c for a buffer of range buf and clips the
// result to the buffer. An empty region (after clipping) is allowed; a
// negative extent from m is an error wrapping ErrBadSplit, and so is a
// panic in m (a custom mapper runs on whatever goroutine splits the group:
// a planner's or the coordinator's, where a panic would end the program).
func MapAccess(m RangeMapper, c Chunk, buf Dims) (off, rng Dims, err error) {
	defer func() {
		if p := recover(); p != nil {
			off, rng, err = Dims{}, Dims{}, fmt.Errorf("%w: range mapper panicked for chunk %v+%v: %v", ErrBadSplit, c.Offset, c.Range, p)
		}
	}()
	o, r := m.Map(c, buf)
	var lo, hi Dims
	for d := range 3 {
		if r[d] < 0 {
			return Dims{}, Dims{}, fmt.Errorf("%w: range mapper gave a negative range %v for chunk %v+%v", ErrBadSplit, r, c.Offset, c.Range)
		}
		lo[d] = min(max(o[d], 0), buf[d])
		hi[d] = min(max(o[d]+r[d], 0), buf[d])
	}
	return lo, sub(hi, lo), nil
}
