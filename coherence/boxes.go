package coherence

import "slices"

// span is a half-open interval [lo, hi) of linear page indices.
type span struct{ lo, hi int }

// boxSpans calls fn for the linear intervals covering a page box of a grid of
// extent p, in increasing order. Boxes spanning whole rows (and planes) give
// one interval per plane (or one in all).
func boxSpans(p Dims, b Box, fn func(lo, hi int)) {
	if b.Empty() {
		return
	}
	fullX := b.Lo[2] == 0 && b.Hi[2] == p[2]
	fullY := b.Lo[1] == 0 && b.Hi[1] == p[1]
	switch {
	case fullX && fullY:
		fn(flatten(p, Dims{b.Lo[0], 0, 0}), flatten(p, Dims{b.Hi[0], 0, 0}))
	case fullX:
		for z := b.Lo[0]; z < b.Hi[0]; z++ {
			fn(flatten(p, Dims{z, b.Lo[1], 0}), flatten(p, Dims{z, b.Hi[1], 0}))
		}
	default:
		for z := b.Lo[0]; z < b.Hi[0]; z++ {
			for y := b.Lo[1]; y < b.Hi[1]; y++ {
				fn(flatten(p, Dims{z, y, b.Lo[2]}), flatten(p, Dims{z, y, b.Hi[2]}))
			}
		}
	}
}

// contiguousSpan returns the linear pages [lo, hi) of box in a grid of
// extent ext when they are one contiguous span (whole planes, or a part of
// one row); ok is false otherwise and for an empty box.
func contiguousSpan(ext Dims, box Box) (lo, hi int, ok bool) {
	switch {
	case box.Empty():
		return 0, 0, false
	case box.Lo[1] == 0 && box.Hi[1] == ext[1] && box.Lo[2] == 0 && box.Hi[2] == ext[2]:
		return flatten(ext, Dims{box.Lo[0], 0, 0}), flatten(ext, Dims{box.Hi[0], 0, 0}), true
	case box.Hi[0]-box.Lo[0] == 1 && box.Hi[1]-box.Lo[1] == 1:
		lo = flatten(ext, box.Lo)
		return lo, lo + box.Hi[2] - box.Lo[2], true
	}
	return 0, 0, false
}

// spansToBoxes turns sorted, disjoint linear intervals of a grid of extent p
// into few maximal page boxes (T4), sorted by (Lo, Hi). Greedy: each interval
// becomes at most five pieces (partial head row, rows, whole planes, rows,
// partial tail row); identical pieces are then stacked along dimension 1 and
// then along dimension 0.
func spansToBoxes(p Dims, spans []span) []Box {
	if len(spans) == 0 {
		return nil
	}
	rowLen, planeLen := p[2], p[1]*p[2]
	var pieces []Box
	cur := spans[0]
	flush := func(s span) {
		a, b := s.lo, s.hi
		for a < b {
			at := unflatten(p, a)
			z, y, x := at[0], at[1], at[2]
			switch {
			case x != 0 || b-a < rowLen:
				e := min(b, a+rowLen-x)
				pieces = append(pieces, Box{Lo: Dims{z, y, x}, Hi: Dims{z + 1, y + 1, x + e - a}})
				a = e
			case y != 0 || b-a < planeLen:
				rows := min((b-a)/rowLen, p[1]-y)
				pieces = append(pieces, Box{Lo: Dims{z, y, 0}, Hi: Dims{z + 1, y + rows, p[2]}})
				a += rows * rowLen
			default:
				planes := (b - a) / planeLen
				pieces = append(pieces, Box{Lo: Dims{z, 0, 0}, Hi: Dims{z + planes, p[1], p[2]}})
				a += planes * planeLen
			}
		}
	}
	for _, s := range spans[1:] {
		if s.lo == cur.hi {
			cur.hi = s.hi
			continue
		}
		flush(cur)
		cur = s
	}
	flush(cur)
	if len(pieces) == 1 {
		return pieces
	}
	pieces = stack(pieces, 1)
	pieces = stack(pieces, 0)
	slices.SortFunc(pieces, compareBox)
	return pieces
}

// stack merges boxes adjacent along dimension d whose other extents are equal.
func stack(bs []Box, d int) []Box {
	key := func(a, b Box) int {
		for k := range 3 {
			if k == d {
				continue
			}
			if c := cmpInt(a.Lo[k], b.Lo[k]); c != 0 {
				return c
			}
			if c := cmpInt(a.Hi[k], b.Hi[k]); c != 0 {
				return c
			}
		}
		return 0
	}
	slices.SortFunc(bs, func(a, b Box) int {
		if c := key(a, b); c != 0 {
			return c
		}
		return cmpInt(a.Lo[d], b.Lo[d])
	})
	out := bs[:1]
	for _, b := range bs[1:] {
		last := &out[len(out)-1]
		if key(*last, b) == 0 && last.Hi[d] == b.Lo[d] {
			last.Hi[d] = b.Hi[d]
			continue
		}
		out = append(out, b)
	}
	return out
}
