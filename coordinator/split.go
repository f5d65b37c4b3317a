package coordinator

import (
	"fmt"

	"github.com/acpp/acpp/coherence"
)

// Chunk is one part of a split command group's index space: the launch
// offset and range of the group it becomes.
type Chunk struct {
	Offset, Range Dims
}

// RangeMapper says which part of a buffer an accessor of a split command
// group touches for one chunk, as Celerity's range mappers do. Map returns
// the accessed region (offset and range, in elements) of a buffer whose
// range is buf; the coordinator clips it to the buffer.
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
// dimension; three give one per dimension (dimension 2 fastest).
func Neighbourhood(k ...int) RangeMapper {
	var n neighbourhood
	switch len(k) {
	case 1:
		n.k = Dims{k[0], k[0], k[0]}
	case 3:
		n.k = Dims{k[0], k[1], k[2]}
	default:
		panic("coordinator: Neighbourhood takes one extent or three")
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

// Split divides a command group's range across devices.
type Split struct {
	// Devices are the devices to split across ("node/kind:index"); empty
	// means every device of the job that can run the kernel. Chunks go to
	// the devices in contiguous runs (with 6 chunks over 3 devices: 0 0 1 1
	// 2 2), so neighbouring chunks share a device and a stencil's halos
	// stay within it; the same split in a loop keeps each chunk where its
	// data is.
	Devices []string
	// Interleave assigns chunk i to Devices[i mod len(Devices)] instead
	// (better balance when the work per item varies along the range).
	Interleave bool
	// Along is the dimension to cut: SplitAuto (the zero value) picks the
	// outermost dimension whose extent is larger than 1.
	Along SplitDim
	// Chunks is the number of chunks; 0 means one per device.
	Chunks int
	// Borders, when > 0, cuts a thin chunk of this many units (work-groups
	// along the split dimension, or items without a work-group size) off
	// each side of every device's block that touches another device's
	// block. For a stencil those border chunks are the only ones whose
	// halos cross between devices, so a device computes its interior
	// chunk while its borders' halos are on their way, with two or three
	// groups per device instead of the many that Chunks would need for the
	// same overlap. It takes whole blocks per device (Chunks 0 or a
	// multiple of the number of devices, no Interleave); with several
	// chunks per device the interior is cut into them.
	Borders int
}

// SplitDim names the dimension a split cuts.
type SplitDim uint8

// Split dimensions.
const (
	SplitAuto SplitDim = iota
	SplitDim0
	SplitDim1
	SplitDim2
)

// Cut cuts a split group's range (at offset off, work-group size local)
// over devs devices and returns the chunks, in order along the cut
// dimension, with the index of each one's device. It is the one rule for
// splitting: the root package's embedded queues use it too, so a program
// splits the same way on a cluster and on local devices.
//
// With whole blocks per device (Chunks a multiple of devs, no Interleave)
// the range is first cut into one block per device, and each block then
// into its chunks (and border chunks). A device's block is then the same
// whatever the number of chunks, so steps split differently (a buffer's
// initialisation, one chunk per device, then a stencil, four) agree on
// which device holds which rows, and only halos move between them.
func (s *Split) Cut(off, rng, local Dims, devs int) ([]Chunk, []int, error) {
	if s.Borders < 0 {
		return nil, nil, fmt.Errorf("%w: Split.Borders %d is negative", ErrInvalid, s.Borders)
	}
	n := s.Chunks
	if n == 0 {
		n = devs
	}
	perDevice := !s.Interleave && n%devs == 0
	if s.Borders > 0 && !perDevice {
		return nil, nil, fmt.Errorf("%w: Split.Borders cuts the borders off each device's block: it needs whole blocks per device (Chunks 0 or a multiple of %d, not %d, and no Interleave)", ErrInvalid, devs, n)
	}
	if !perDevice {
		chunks, _, err := splitRange(off, rng, local, s.Along, n)
		if err != nil {
			return nil, nil, err
		}
		dev := make([]int, len(chunks))
		for i := range chunks {
			dev[i] = s.chunkDevice(i, len(chunks), devs)
		}
		return chunks, dev, nil
	}
	blocks, dim, err := splitRange(off, rng, local, s.Along, devs)
	if err != nil {
		return nil, nil, err
	}
	along := SplitDim(dim + 1)
	unit := 1
	if local[dim] > 0 {
		unit = local[dim]
	}
	var out []Chunk
	var dev []int
	part := func(c Chunk, lo, size, d int) {
		c.Offset[dim], c.Range[dim] = lo, size
		out, dev = append(out, c), append(dev, d)
	}
	for d, c := range blocks {
		b := s.Borders * unit
		top, bottom := d > 0 && b > 0, d < len(blocks)-1 && b > 0 // sides that touch another block
		lo, inner := c.Offset[dim], c.Range[dim]
		if top {
			inner -= b
		}
		if bottom {
			inner -= b
		}
		if inner < unit { // too thin to cut borders off: the block's chunks only
			top, bottom, inner = false, false, c.Range[dim]
		}
		if top {
			part(c, lo, b, d)
			lo += b
		}
		mid := c
		mid.Offset[dim], mid.Range[dim] = lo, inner
		chunks, _, err := splitRange(mid.Offset, mid.Range, local, along, n/devs)
		if err != nil {
			return nil, nil, err
		}
		for _, ch := range chunks {
			out, dev = append(out, ch), append(dev, d)
		}
		if bottom {
			part(c, lo+inner, b, d)
		}
	}
	return out, dev, nil
}

// chunkDevice is the index into a split's device list of chunk i of n.
func (s *Split) chunkDevice(i, n, devs int) int {
	if s.Interleave || n <= devs {
		return i % devs
	}
	return i * devs / n
}

// splitRange cuts rng (at offset off) into n chunks along dimension dim,
// each a multiple of the work-group size local[dim] (when set) except that
// the chunks cover the range exactly. Chunks are as equal as possible; the
// first ones get the remainder. Empty chunks are dropped.
func splitRange(off, rng, local Dims, along SplitDim, n int) ([]Chunk, int, error) {
	dim := -1
	if along == SplitAuto {
		for d := range 3 {
			if rng[d] > 1 {
				dim = d
				break
			}
		}
		if dim < 0 {
			dim = 2
		}
	} else {
		dim = int(along) - 1
	}
	if dim < 0 || dim > 2 {
		return nil, 0, fmt.Errorf("%w: Split.Along %d: use SplitAuto or SplitDim0..SplitDim2", ErrInvalid, along)
	}
	unit := 1
	if local[dim] > 0 {
		unit = local[dim]
		if rng[dim]%unit != 0 {
			return nil, 0, fmt.Errorf("%w: range %v is not a multiple of the work-group size %v in dimension %d", ErrInvalid, rng, local, dim)
		}
	}
	units := rng[dim] / unit
	if n > units {
		n = units
	}
	if n < 1 {
		n = 1
	}
	var out []Chunk
	start := 0
	for i := range n {
		cnt := units / n
		if i < units%n {
			cnt++
		}
		if cnt == 0 {
			continue
		}
		c := Chunk{Offset: off, Range: rng}
		c.Offset[dim] = off[dim] + start*unit
		c.Range[dim] = cnt * unit
		out = append(out, c)
		start += cnt
	}
	return out, dim, nil
}

// mapAccess applies m to chunk c for a buffer of range buf and clips the
// result to the buffer. An empty region (after clipping) is allowed.
func mapAccess(m RangeMapper, c Chunk, buf Dims) (Dims, Dims, error) {
	off, rng := m.Map(c, buf)
	var lo, hi Dims
	for d := range 3 {
		if rng[d] < 0 {
			return Dims{}, Dims{}, fmt.Errorf("%w: range mapper gave a negative range %v for chunk %v+%v", ErrInvalid, rng, c.Offset, c.Range)
		}
		lo[d] = min(max(off[d], 0), buf[d])
		hi[d] = min(max(off[d]+rng[d], 0), buf[d])
	}
	return lo, sub(hi, lo), nil
}

func sub(a, b Dims) Dims { return Dims{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }

// Dims is a 3D extent or index, dimension 2 fastest: a 1D range n is
// {1, 1, n}, a 2D range (rows, cols) is {1, rows, cols}.
type Dims = coherence.Dims
