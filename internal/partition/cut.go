package partition

import "fmt"

// Split divides a command group's range across devices.
type Split struct {
	// Devices are the devices to split across ("node/kind:index"); empty
	// means every device of the job that can run the kernel. Chunks go to
	// the devices in contiguous runs (with 6 chunks over 3 devices: 0 0 1 1
	// 2 2), so neighbouring chunks share a device and a stencil's halos
	// stay within it; the same split in a loop keeps each chunk where its
	// data is. Cut does not read it: it returns device indexes, which the
	// caller maps to its devices.
	Devices []string
	// Interleave assigns chunk i to Devices[i mod len(Devices)] instead
	// (better balance when the work per item varies along the range).
	Interleave bool
	// Along is the dimension to cut: SplitAuto (the zero value) picks the
	// outermost dimension whose extent is larger than 1.
	Along SplitDim
	// Chunks is the number of chunks; 0 means one per device (a negative
	// number is refused).
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
// splitting: the coordinator and the root package's embedded queues both
// use it, so a program splits the same way on a cluster and on local
// devices. Its errors wrap ErrBadSplit.
//
// With whole blocks per device (Chunks a multiple of devs, no Interleave)
// the range is first cut into one block per device, and each block then
// into its chunks (and border chunks). A device's block is then the same
// whatever the number of chunks, so steps split differently (a buffer's
// initialisation, one chunk per device, then a stencil, four) agree on
// which device holds which rows, and only halos move between them.
func (s *Split) Cut(off, rng, local Dims, devs int) ([]Chunk, []int, error) {
	if s.Borders < 0 {
		return nil, nil, fmt.Errorf("%w: Split.Borders %d is negative", ErrBadSplit, s.Borders)
	}
	if s.Chunks < 0 {
		return nil, nil, fmt.Errorf("%w: Split.Chunks %d is negative; give a number of chunks ≥ 1, or 0 for one per device", ErrBadSplit, s.Chunks)
	}
	n := s.Chunks
	if n == 0 {
		n = devs
	}
	perDevice := !s.Interleave && n%devs == 0
	if s.Borders > 0 && !perDevice {
		why := "Interleave deals chunks out one by one"
		if n%devs != 0 {
			why = fmt.Sprintf("Chunks is %d, not a multiple of the %d devices", n, devs)
		}
		return nil, nil, fmt.Errorf("%w: Split.Borders cuts the borders off each device's block: it needs whole blocks per device (Chunks 0 or a multiple of the devices, and no Interleave), but %s", ErrBadSplit, why)
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
		return nil, 0, fmt.Errorf("%w: Split.Along %d: use SplitAuto or SplitDim0..SplitDim2", ErrBadSplit, along)
	}
	unit := 1
	if local[dim] > 0 {
		unit = local[dim]
		if rng[dim]%unit != 0 {
			return nil, 0, fmt.Errorf("%w: range %v is not a multiple of the work-group size %v in dimension %d", ErrBadSplit, rng, local, dim)
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
