package engine

// CopyBox copies the box off+rng of an array of extent ext with elem-byte
// elements (all, row-major) to or from box (the box's elements alone,
// row-major): into all when in, out of it otherwise. Whole rows of the
// box are one copy each.
func CopyBox(all []byte, ext Dims, elem int, off, rng Dims, box []byte, in bool) {
	k := 0
	n := rng[2] * elem
	for z := off[0]; z < off[0]+rng[0]; z++ {
		for y := off[1]; y < off[1]+rng[1]; y++ {
			s := ((z*ext[1]+y)*ext[2] + off[2]) * elem
			if in {
				copy(all[s:s+n], box[k:k+n])
			} else {
				copy(box[k:k+n], all[s:s+n])
			}
			k += n
		}
	}
}
