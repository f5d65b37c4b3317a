package acpp

import (
	"fmt"
	"math"

	"github.com/acpp/acpp/coherence"
)

// Range is a 1, 2 or 3-dimensional extent. Dimension 0 varies slowest (a 2D
// range is rows × columns, row-major), as in SYCL.
type Range struct {
	dims int
	e    [3]int // e[d] for d < dims; 1 beyond
}

// R1 is a 1D range of n.
func R1(n int) Range { return Range{1, [3]int{n, 1, 1}} }

// R2 is a 2D range of rows × cols.
func R2(rows, cols int) Range { return Range{2, [3]int{rows, cols, 1}} }

// R3 is a 3D range.
func R3(d0, d1, d2 int) Range { return Range{3, [3]int{d0, d1, d2}} }

// Dims is the number of dimensions (1–3; 0 for the zero Range).
func (r Range) Dims() int { return r.dims }

// Size is the extent of dimension d.
func (r Range) Size(d int) int { return r.e[d] }

// Count is the number of elements.
func (r Range) Count() int {
	if r.dims == 0 {
		return 0
	}
	return r.e[0] * r.e[1] * r.e[2]
}

func (r Range) String() string {
	switch r.dims {
	case 1:
		return fmt.Sprintf("[%d]", r.e[0])
	case 2:
		return fmt.Sprintf("[%d %d]", r.e[0], r.e[1])
	case 3:
		return fmt.Sprintf("[%d %d %d]", r.e[0], r.e[1], r.e[2])
	}
	return "[]"
}

func (r Range) valid() error {
	if r.dims < 1 || r.dims > 3 {
		return fmt.Errorf("%w: range has %d dimensions; build it with R1, R2 or R3", ErrBadRange, r.dims)
	}
	n := 1
	for d := 0; d < r.dims; d++ {
		if r.e[d] < 0 {
			return fmt.Errorf("%w: range %v has a negative extent", ErrBadRange, r)
		}
		if r.e[d] > 0 && n > math.MaxInt/r.e[d] {
			// Count would wrap (R3(1<<30, 1<<30, 1<<30) is 0 in int
			// arithmetic): refuse it rather than build a buffer, a view or
			// a launch of the wrapped size.
			return fmt.Errorf("%w: range %v has more than %d elements", ErrBadRange, r, math.MaxInt)
		}
		n *= r.e[d]
	}
	return nil
}

// dims3 is r in coherence order (dimension 2 fastest; a 1D range n is {1,1,n}).
func (r Range) dims3() coherence.Dims { return toInternal(r.dims, r.e, 1) }

// ID is an index in a Range (unused trailing dimensions are 0).
type ID [3]int

// I1, I2 and I3 build IDs (offsets).
func I1(i int) ID          { return ID{i} }
func I2(i, j int) ID       { return ID{i, j} }
func I3(i, j, k int) ID    { return ID{i, j, k} }
func (id ID) In(d int) int { return id[d] }

// toInternal maps user-order values (dimension 0 slowest, dims used) to
// coherence order, padding the slow end with pad.
func toInternal(dims int, v [3]int, pad int) coherence.Dims {
	out := coherence.Dims{pad, pad, pad}
	for d := 0; d < dims; d++ {
		out[3-dims+d] = v[d]
	}
	return out
}

// fromInternal is the inverse of toInternal.
func fromInternal(dims int, v [3]int, pad int) [3]int {
	out := [3]int{pad, pad, pad}
	for d := 0; d < dims; d++ {
		out[d] = v[3-dims+d]
	}
	return out
}

// Item is one work-item of a ParallelFor: its global id and the launch's
// range. It has at most four word-sized fields so that it travels in
// registers (the compiler keeps larger structs in memory).
type Item struct {
	i, j, k int     // id, dimension 0 first
	r       *[3]int // the launch's range, shared by its items
}

// ID is the item's index in dimension d.
func (it Item) ID(d int) int {
	switch d {
	case 0:
		return it.i
	case 1:
		return it.j
	}
	return it.k
}

// Range is the launch's extent in dimension d.
func (it Item) Range(d int) int { return it.r[d] }

// Linear is the item's row-major linear index.
func (it Item) Linear() int { return (it.i*it.r[1]+it.j)*it.r[2] + it.k }
