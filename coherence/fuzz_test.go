package coherence

import (
	"errors"
	"testing"
)

// FuzzGeometry: arbitrary extents, element sizes, page sizes, offsets and
// views never crash; results are either a wrapped sentinel error or a page
// box inside the page grid that covers the accessed elements (P1, P5).
func FuzzGeometry(f *testing.F) {
	f.Add(int64(1), int64(64), int64(64), int64(4), int64(0), int64(8), int64(64), int64(0), int64(3), int64(5), int64(1), int64(2), int64(3), int64(1))
	f.Add(int64(1), int64(1), int64(1<<20), int64(4), int64(0), int64(0), int64(0), int64(0), int64(0), int64(100), int64(1), int64(1), int64(50), int64(2))
	f.Add(int64(4), int64(16), int64(64), int64(8), int64(1), int64(2), int64(3), int64(1), int64(1), int64(1), int64(2), int64(2), int64(2), int64(8))
	f.Add(int64(-1), int64(0), int64(1<<62), int64(-4), int64(0), int64(-1), int64(7), int64(-3), int64(1), int64(1), int64(-1), int64(1), int64(1), int64(3))
	f.Fuzz(func(t *testing.T, r0, r1, r2, elem, p0, p1, p2, o0, o1, o2, n0, n1, n2, velem int64) {
		clamp := func(x int64) int { return int(x % (1 << 24)) }
		rng := Dims{clamp(r0), clamp(r1), clamp(r2)}
		ps := Dims{clamp(p0), clamp(p1), clamp(p2)}
		geo, err := NewGeometry(rng, clamp(elem), ps)
		if err != nil {
			if !errors.Is(err, ErrBadGeometry) {
				t.Fatalf("NewGeometry error %v does not wrap ErrBadGeometry", err)
			}
			return
		}
		if geo.NumPages() < 1 {
			t.Fatalf("geometry %+v has %d pages", geo, geo.NumPages())
		}
		off, n := Dims{clamp(o0), clamp(o1), clamp(o2)}, Dims{clamp(n0), clamp(n1), clamp(n2)}
		box, err := geo.PageRange(off, n)
		if err != nil {
			if !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("PageRange error %v does not wrap ErrOutOfRange", err)
			}
		} else if !box.Empty() {
			all := geo.All()
			if box.Intersect(all) != box {
				t.Fatalf("PageRange(%v, %v) = %v outside the grid %v", off, n, box, all)
			}
			eb := geo.ElementBox(box)
			for d := range 3 {
				if eb.Lo[d] > off[d] || eb.Hi[d] < off[d]+n[d] {
					t.Fatalf("PageRange(%v, %v) = %v covers elements %v only", off, n, box, eb)
				}
			}
		}
		// A 1D byte view of the same buffer.
		ve := int(velem&15) + 1
		if geo.Bytes()%ve != 0 {
			return
		}
		v := View{Range: Dims{1, 1, geo.Bytes() / ve}, ElemSize: ve}
		vo := Dims{0, 0, off[2] % max(1, v.Range[2])}
		vn := Dims{1, 1, n[2] % max(1, v.Range[2]-vo[2]+1)}
		vbox, err := geo.ViewPageRange(v, vo, vn)
		if err != nil {
			if !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrBadGeometry) {
				t.Fatalf("ViewPageRange error %v is not a sentinel", err)
			}
			return
		}
		if !vbox.Empty() && vbox.Intersect(geo.All()) != vbox {
			t.Fatalf("ViewPageRange = %v outside the grid", vbox)
		}
	})
}

// FuzzCoreOps drives a Core with arbitrary operations (decoded from bytes):
// it never panics, and errors are the documented sentinels.
func FuzzCoreOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("\x00\x00\x10\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11"))
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := New(Config{})
		geo, _ := NewGeometry(Dims{1, 8, 8}, 4, Dims{1, 2, 3})
		h := host0
		if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo, HostData: &h}); err != nil {
			t.Fatal(err)
		}
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			x := int(data[0])
			data = data[1:]
			return x
		}
		id := CGID(1)
		for len(data) > 0 {
			switch next() % 6 {
			case 0, 1, 2:
				var lo, hi Dims
				for d := range 3 {
					lo[d], hi[d] = next()%6-1, next()%6
				}
				a := Access{Buffer: BufferID(next()%3 + 1), Pages: Box{Lo: lo, Hi: hi}, Mode: Mode(next() % 6),
					Op: ReduceOp(next() % 2), Discard: next()%2 == 0, Target: AllocID{Node: NodeID(next() % 3), Mem: MemID(next() % 3)}}
				gid := id + CGID(next()%3) - 1 // sometimes reused, sometimes skipping one
				_, err := c.Submit(CommandGroup{ID: gid, Accesses: []Access{a}})
				if err == nil {
					id = gid + 1
				} else if !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrUnknownBuffer) && !errors.Is(err, ErrBadAccess) &&
					!errors.Is(err, ErrOrder) && !errors.Is(err, ErrLostPages) {
					t.Fatalf("Submit error %v is not a documented sentinel", err)
				}
			case 3:
				c.Complete(CGID(next()))
			case 4:
				_, err := c.Release(id, 1, AllocID{Node: NodeID(next() % 3), Mem: MemID(next() % 3)})
				if err == nil {
					id++
				} else if !errors.Is(err, ErrNoAllocation) && !errors.Is(err, ErrLastCopy) && !errors.Is(err, ErrOrder) {
					t.Fatalf("Release error %v is not a documented sentinel", err)
				}
			case 5:
				c.LoseNode(NodeID(next() % 3))
			}
		}
	})
}

// FuzzDiscardPages: full and partial pages partition the page range; full
// pages lie inside the accessed elements (up to the buffer's end); every
// partial page is only partly accessed.
func FuzzDiscardPages(f *testing.F) {
	f.Add(int64(10), int64(37), int64(3), int64(4), int64(2), int64(9), int64(5), int64(20))
	f.Add(int64(1), int64(64), int64(1), int64(8), int64(0), int64(0), int64(1), int64(64))
	f.Add(int64(7), int64(7), int64(7), int64(7), int64(1), int64(1), int64(6), int64(6))
	f.Fuzz(func(t *testing.T, r1, r2, p1, p2, o1, o2, n1, n2 int64) {
		c := func(x int64, lo, hi int) int {
			if x < 0 {
				x = -x
			}
			return lo + int(x%int64(hi-lo+1))
		}
		rng := Dims{1, c(r1, 1, 40), c(r2, 1, 40)}
		geo, err := NewGeometry(rng, 4, Dims{1, c(p1, 1, 9), c(p2, 1, 9)})
		if err != nil {
			t.Fatal(err)
		}
		off := Dims{0, c(o1, 0, rng[1]-1), c(o2, 0, rng[2]-1)}
		n := Dims{1, c(n1, 1, rng[1]-off[1]), c(n2, 1, rng[2]-off[2])}
		full, partial, err := geo.DiscardPages(off, n)
		if err != nil {
			t.Fatal(err)
		}
		pages, _ := geo.PageRange(off, n)
		all := append([]Box{full}, partial...)
		count := 0
		for i, b := range all {
			if b.Empty() {
				continue
			}
			if b.Intersect(pages) != b {
				t.Fatalf("box %v outside the page range %v", b, pages)
			}
			for _, o := range all[i+1:] {
				if b.Overlaps(o) {
					t.Fatalf("boxes %v and %v overlap", b, o)
				}
			}
			count += b.Volume()
		}
		if count != pages.Volume() {
			t.Fatalf("DiscardPages(%v, %v) = %v + %v covers %d of %d pages", off, n, full, partial, count, pages.Volume())
		}
		acc := Box{Lo: off, Hi: Dims{off[0] + n[0], off[1] + n[1], off[2] + n[2]}}
		if !full.Empty() {
			if eb := geo.ElementBox(full); eb.Intersect(acc) != eb {
				t.Fatalf("full pages %v (elements %v) leave the accessed elements %v", full, eb, acc)
			}
		}
		for _, b := range partial {
			for z := b.Lo[0]; z < b.Hi[0]; z++ {
				for y := b.Lo[1]; y < b.Hi[1]; y++ {
					for x := b.Lo[2]; x < b.Hi[2]; x++ {
						pb := geo.ElementBox(Box{Lo: Dims{z, y, x}, Hi: Dims{z + 1, y + 1, x + 1}})
						if pb.Intersect(acc) == pb {
							t.Fatalf("page %v counted partial but fully accessed", Dims{z, y, x})
						}
					}
				}
			}
		}
	})
}

// FuzzDefaultPageSize: any extents give a page size of at least 1 and at most
// the extent in every dimension; contiguous (every dimension outside the
// one that is split is 1, every one inside it whole); at most
// DefaultPageBytes unless one element is larger; the whole buffer when it
// fits in DefaultPageBytes; and the split dimension cut into the fewest
// equal parts (P1).
func FuzzDefaultPageSize(f *testing.F) {
	f.Add(int64(1), int64(4096), int64(4096), int64(4))
	f.Add(int64(1), int64(1), int64(1)<<62, int64(1))
	f.Add(int64(-5), int64(0), int64(7), int64(0))
	f.Add(int64(1), int64(1000), int64(20000), int64(4))
	f.Add(int64(64), int64(64), int64(64), int64(8))
	f.Add(int64(3), int64(5), int64(7), int64(1)<<20)
	f.Fuzz(func(t *testing.T, r0, r1, r2, elem int64) {
		rng := Dims{int(r0), int(r1), int(r2)}
		ps := DefaultPageSize(rng, int(elem))
		for d := range 3 {
			if ps[d] < 1 || ps[d] > max(rng[d], 1) {
				t.Fatalf("DefaultPageSize(%v, %d) = %v", rng, elem, ps)
			}
		}
		// The checks below need the buffer's size; skip extents whose
		// byte size overflows (DefaultPageSize still must not crash).
		e := max(int(elem), 1)
		var whole Dims
		for d := range 3 {
			whole[d] = max(rng[d], 1)
		}
		size, ok := mulChecked(whole[0], whole[1], whole[2], e)
		if !ok {
			return
		}
		if size <= DefaultPageBytes {
			if ps != whole {
				t.Fatalf("DefaultPageSize(%v, %d) = %v; a buffer of %d bytes is one page", rng, elem, ps, size)
			}
			return
		}
		split := -1 // the innermost dimension that is not whole
		for d := 2; d >= 0 && split < 0; d-- {
			if ps[d] < whole[d] {
				split = d
			}
		}
		if bytes := ps.Volume() * e; bytes > DefaultPageBytes && ps.Volume() > 1 {
			t.Fatalf("DefaultPageSize(%v, %d) = %v: %d bytes, above DefaultPageBytes", rng, elem, ps, bytes)
		}
		if split < 0 {
			return // the whole buffer: one element larger than the target
		}
		for d := range split {
			if ps[d] != 1 {
				t.Fatalf("DefaultPageSize(%v, %d) = %v: not contiguous (dimension %d outside the split dimension %d is not 1)", rng, elem, ps, d, split)
			}
		}
		// The fewest equal parts: one part fewer would not fit, and no
		// smaller page gives as few parts.
		cdiv := func(a, b int) int { // overflow-free ceiling
			if a%b != 0 {
				return a/b + 1
			}
			return a / b
		}
		n, p := whole[split], ps[split]
		parts := cdiv(n, p) // >= 2: p < n
		inner := ps.Volume() / p
		if bigger := cdiv(n, parts-1); bigger*inner*e <= DefaultPageBytes {
			t.Fatalf("DefaultPageSize(%v, %d) = %v: %d parts of dimension %d where %d fit", rng, elem, ps, parts, split, parts-1)
		}
		if eq := cdiv(n, parts); eq != p {
			t.Fatalf("DefaultPageSize(%v, %d) = %v: %d parts of dimension %d are not equal (pages of %d would do)", rng, elem, ps, parts, split, eq)
		}
	})
}
