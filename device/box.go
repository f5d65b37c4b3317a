package device

import "fmt"

// Region places a 3D box of elements in an allocation whose contents are laid
// out as a dense row-major 3D array (dimension 2 fastest).
type Region struct {
	Mem *Mem
	// Offset is the byte offset of element (0,0,0) of the array in Mem.
	Offset int
	// Extent is the array's extent in elements; it gives the pitches
	// (row pitch Extent[2]*ElemSize, slice pitch Extent[1]*row pitch).
	Extent [3]int
	// Origin is the box's first element.
	Origin [3]int
}

// byteAt is the byte offset in Mem of element e of the array.
func (r Region) byteAt(e [3]int, elem int) int {
	return r.Offset + ((e[0]*r.Extent[1]+e[1])*r.Extent[2]+e[2])*elem
}

// CopyOp copies a 3D box of elements from one allocation to another (same
// device, another device, host to device or back). One CopyOp is one backend
// transfer (cuMemcpy3D on CUDA, T4).
type CopyOp struct {
	Src, Dst Region
	// Size is the box's extent in elements.
	Size     [3]int
	ElemSize int
}

// Bytes is the number of bytes the copy moves.
func (c CopyOp) Bytes() int { return c.Size[0] * c.Size[1] * c.Size[2] * c.ElemSize }

// Validate checks that the box lies inside both arrays and both arrays inside
// their allocations.
func (c CopyOp) Validate() error {
	if c.ElemSize <= 0 {
		return fmt.Errorf("%w: copy ElemSize %d must be > 0", ErrBadOp, c.ElemSize)
	}
	for d := 0; d < 3; d++ {
		if c.Size[d] < 0 {
			return fmt.Errorf("%w: copy Size[%d] = %d must be >= 0", ErrBadOp, d, c.Size[d])
		}
	}
	for _, side := range []struct {
		name string
		r    Region
	}{{"Src", c.Src}, {"Dst", c.Dst}} {
		r := side.r
		if r.Mem == nil {
			return fmt.Errorf("%w: copy %s.Mem is nil", ErrBadOp, side.name)
		}
		for d := 0; d < 3; d++ {
			if r.Extent[d] <= 0 || r.Origin[d] < 0 || r.Origin[d]+c.Size[d] > r.Extent[d] {
				return fmt.Errorf("%w: copy %s box [%v, %v+%v) outside its array extent %v", ErrBadOp, side.name, r.Origin, r.Origin, c.Size, r.Extent)
			}
		}
		end := r.Offset + r.Extent[0]*r.Extent[1]*r.Extent[2]*c.ElemSize
		if r.Offset < 0 || end > r.Mem.Bytes {
			return fmt.Errorf("%w: copy %s array [%d, %d) bytes outside its allocation of %d bytes", ErrBadOp, side.name, r.Offset, end, r.Mem.Bytes)
		}
	}
	return nil
}

// CopyHost performs c between two host-visible byte slices (the views of
// c.Src.Mem and c.Dst.Mem), one contiguous run per row. Backends and fakes
// use it; c must be valid.
func CopyHost(dst, src []byte, c CopyOp) {
	row := c.Size[2] * c.ElemSize
	if row == 0 {
		return
	}
	for z := 0; z < c.Size[0]; z++ {
		for y := 0; y < c.Size[1]; y++ {
			s := c.Src.byteAt([3]int{c.Src.Origin[0] + z, c.Src.Origin[1] + y, c.Src.Origin[2]}, c.ElemSize)
			d := c.Dst.byteAt([3]int{c.Dst.Origin[0] + z, c.Dst.Origin[1] + y, c.Dst.Origin[2]}, c.ElemSize)
			copy(dst[d:d+row], src[s:s+row])
		}
	}
}

// FillOp writes Pattern repeatedly over Bytes bytes of Dst from Offset
// (memset when the pattern is one byte; cuMemsetD8/16/32 for 1, 2 and 4
// bytes on CUDA).
type FillOp struct {
	Dst     *Mem
	Offset  int
	Bytes   int
	Pattern []byte
}

// Validate checks the fill's bounds and pattern.
func (f FillOp) Validate() error {
	switch {
	case f.Dst == nil:
		return fmt.Errorf("%w: fill Dst is nil", ErrBadOp)
	case len(f.Pattern) == 0:
		return fmt.Errorf("%w: fill Pattern is empty", ErrBadOp)
	case f.Bytes%len(f.Pattern) != 0:
		return fmt.Errorf("%w: fill of %d bytes is not a multiple of the %d-byte pattern", ErrBadOp, f.Bytes, len(f.Pattern))
	case f.Offset < 0 || f.Bytes < 0 || f.Offset+f.Bytes > f.Dst.Bytes:
		return fmt.Errorf("%w: fill [%d, %d) outside its allocation of %d bytes", ErrBadOp, f.Offset, f.Offset+f.Bytes, f.Dst.Bytes)
	}
	return nil
}

// fillBlock is the size of the pattern block FillHost builds and then
// copies over the rest: small enough to stay in cache, so the fill reads
// nothing from memory, and 1 MiB, where Go's memmove switches to
// non-temporal stores on amd64 (1.2–1.4× a 256 KiB block, BenchmarkFill).
const fillBlock = 1 << 20

// FillHost performs f on a host-visible view of f.Dst; f must be valid. A
// pattern of zeros is a memclr; any other pattern fills one cache-sized
// block by doubling and copies it over the rest.
func FillHost(dst []byte, f FillOp) {
	b := dst[f.Offset : f.Offset+f.Bytes]
	if len(b) == 0 {
		return
	}
	zero := true
	for _, c := range f.Pattern {
		zero = zero && c == 0
	}
	if zero {
		clear(b)
		return
	}
	p := len(f.Pattern)
	block := min(len(b), max(p, fillBlock/p*p)) // whole patterns
	n := copy(b[:block], f.Pattern)
	for n < block { // doubling copy within the block
		n += copy(b[n:block], b[:n])
	}
	for n < len(b) {
		n += copy(b[n:], b[:block])
	}
}
