package cuda

// copyPlan is one backend transfer for one box (T4): a linear copy, a 2D
// copy (rows with pitches) or a 3D copy (rows, slices, pitches), with every
// address already pointing at the box's first byte. It is computed without
// the driver, so it is tested everywhere.
type copyPlan struct {
	Dims                 int    // 0: nothing to copy; 1: linear; 2: rows; 3: slices of rows
	Src, Dst             uint64 // address of the box's first byte
	Width                uint64 // bytes per row (Dims 1: the whole copy)
	Height, Depth        uint64 // rows per slice, slices
	SrcPitch, DstPitch   uint64 // bytes from one row to the next
	SrcHeight, DstHeight uint64 // rows from one slice to the next (Dims 3)
}

// Bytes is how many bytes the plan moves.
func (p copyPlan) Bytes() uint64 {
	switch p.Dims {
	case 1:
		return p.Width
	case 2:
		return p.Width * p.Height
	case 3:
		return p.Width * p.Height * p.Depth
	}
	return 0
}

// planBox turns a valid box copy between two dense row-major 3D arrays into
// one transfer, merging dimensions wherever the box is contiguous in both
// arrays: whole rows make a 2D copy of slices, whole slices a linear copy.
// srcBase and dstBase are the addresses of the arrays' first elements.
func planBox(srcBase, dstBase uint64, srcExt, dstExt, srcOrg, dstOrg, size [3]int, elem int) copyPlan {
	if size[0] == 0 || size[1] == 0 || size[2] == 0 {
		return copyPlan{}
	}
	e := uint64(elem)
	at := func(base uint64, ext, org [3]int) uint64 {
		return base + ((uint64(org[0])*uint64(ext[1])+uint64(org[1]))*uint64(ext[2])+uint64(org[2]))*e
	}
	p := copyPlan{
		Src: at(srcBase, srcExt, srcOrg), Dst: at(dstBase, dstExt, dstOrg),
		Width: uint64(size[2]) * e, Height: uint64(size[1]), Depth: uint64(size[0]),
		SrcPitch: uint64(srcExt[2]) * e, DstPitch: uint64(dstExt[2]) * e,
		SrcHeight: uint64(srcExt[1]), DstHeight: uint64(dstExt[1]),
	}
	// Rows contiguous in both arrays: a slice of the box is one run.
	if p.Width == p.SrcPitch && p.Width == p.DstPitch || p.Height == 1 {
		srcSlice, dstSlice := p.SrcPitch*p.SrcHeight, p.DstPitch*p.DstHeight
		p.Width *= p.Height
		p.Height, p.Depth = p.Depth, 1
		p.SrcPitch, p.DstPitch = srcSlice, dstSlice
		p.SrcHeight, p.DstHeight = 0, 0
		// Slices contiguous too: one run.
		if p.Height == 1 || p.Width == p.SrcPitch && p.Width == p.DstPitch {
			p.Width *= p.Height
			p.Height = 1
			p.SrcPitch, p.DstPitch = 0, 0
			p.Dims = 1
			return p
		}
		p.Dims = 2
		return p
	}
	if p.Depth == 1 {
		p.Dims = 2
		p.SrcHeight, p.DstHeight = 0, 0
		return p
	}
	p.Dims = 3
	return p
}
