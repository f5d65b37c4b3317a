package coherence

import (
	"errors"
	"fmt"
	"math/bits"
)

// DefaultPageBytes is the size DefaultPageSize aims for: 64 KiB.
//
// Why 64 KiB: a page is the unit of state tracking, of conflict detection and
// of transfer. Smaller pages let more command groups run without ordering and
// move fewer bytes for small accessors; larger pages cost less tracking. With
// the interval representation (see pagestate.go) tracking cost scales with the
// number of distinct regions, not with the number of pages, so pages can be
// small. 64 KiB is below the size where a PCIe or NVLink copy reaches a good
// fraction of its bandwidth per transfer (so merged boxes, not single pages,
// are what the backends see), and big enough that a dense fallback of one bit
// per page per allocation is 1/524288 of the data.
const DefaultPageBytes = 64 << 10

// MaxPages is the most pages a geometry may have. The core keeps a header
// per 256 pages of every buffer from AddBuffer on (about 0.34 bytes per
// page: 1.4 GiB at the limit), so a page grid far beyond any real
// allocation (a huge range with tiny pages) fails NewGeometry with
// ErrBadGeometry instead of exhausting memory. At the default page size
// the limit is 256 TiB per buffer.
const MaxPages = 1 << 32

// Geometry maps a buffer's element range onto its 3D page grid (P1).
// Build it with NewGeometry; the zero value is invalid.
type Geometry struct {
	Range    Dims // elements per dimension
	ElemSize int  // bytes per element
	PageSize Dims // elements per page per dimension
}

// NewGeometry validates and builds a geometry. A zero PageSize means
// DefaultPageSize(rng, elemSize); otherwise every dimension of pageSize must
// be at least 1, and dimensions larger than the range are clipped to it.
// A page grid of more than MaxPages pages is refused. Errors wrap
// ErrBadGeometry and name every bad field.
func NewGeometry(rng Dims, elemSize int, pageSize Dims) (Geometry, error) {
	var errs []error
	for d := range 3 {
		if rng[d] < 1 {
			errs = append(errs, fmt.Errorf("%w: Range[%d] = %d, must be >= 1 (a 1D range n is {1, 1, n})", ErrBadGeometry, d, rng[d]))
		}
	}
	if elemSize < 1 {
		errs = append(errs, fmt.Errorf("%w: ElemSize = %d, must be >= 1", ErrBadGeometry, elemSize))
	}
	if len(errs) == 0 {
		if _, ok := mulChecked(rng[0], rng[1], rng[2], elemSize); !ok {
			errs = append(errs, fmt.Errorf("%w: Range %v × ElemSize %d overflows int", ErrBadGeometry, rng, elemSize))
		}
	}
	if pageSize != (Dims{}) {
		for d := range 3 {
			if pageSize[d] < 1 {
				errs = append(errs, fmt.Errorf("%w: PageSize[%d] = %d, must be >= 1 (or leave PageSize zero for the default)", ErrBadGeometry, d, pageSize[d]))
			}
		}
	}
	if len(errs) > 0 {
		return Geometry{}, errors.Join(errs...)
	}
	if pageSize == (Dims{}) {
		pageSize = DefaultPageSize(rng, elemSize)
	}
	for d := range 3 {
		pageSize[d] = min(pageSize[d], rng[d])
	}
	g := Geometry{Range: rng, ElemSize: elemSize, PageSize: pageSize}
	if n := g.NumPages(); uint64(n) > MaxPages {
		return Geometry{}, fmt.Errorf("%w: Range %v with PageSize %v gives %d pages, more than MaxPages (%d); use larger pages",
			ErrBadGeometry, rng, pageSize, n, uint64(MaxPages))
	}
	return g, nil
}

// check is validate's cheap part, for the methods that map ranges: a
// geometry that does not come from NewGeometry (the zero value, or fields
// set by hand) fails with ErrBadGeometry instead of dividing by zero.
func (g Geometry) check() error {
	for d := range 3 {
		if g.Range[d] < 1 || g.PageSize[d] < 1 {
			return fmt.Errorf("%w: Range %v, PageSize %v: every extent and page size must be >= 1; build the geometry with NewGeometry",
				ErrBadGeometry, g.Range, g.PageSize)
		}
	}
	if g.ElemSize < 1 {
		return fmt.Errorf("%w: ElemSize = %d, must be >= 1; build the geometry with NewGeometry", ErrBadGeometry, g.ElemSize)
	}
	return nil
}

// validate checks a geometry that may not come from NewGeometry.
func (g Geometry) validate() error {
	ng, err := NewGeometry(g.Range, g.ElemSize, g.PageSize)
	if err != nil {
		return err
	}
	if g.PageSize == (Dims{}) || ng.PageSize != g.PageSize {
		return fmt.Errorf("%w: PageSize %v is not normalised for Range %v; build the geometry with NewGeometry", ErrBadGeometry, g.PageSize, g.Range)
	}
	return nil
}

func mulChecked(xs ...int) (int, bool) {
	p := 1
	for _, x := range xs {
		hi, lo := bits.Mul64(uint64(p), uint64(x))
		if hi != 0 || lo > uint64(maxInt) {
			return 0, false
		}
		p = int(lo)
	}
	return p, true
}

const maxInt = int(^uint(0) >> 1)

// DefaultPageSize is the page size used when a buffer is created without one
// (P1). Pages are contiguous in memory and about DefaultPageBytes large:
// inner dimensions stay whole while a page stays within the target, and the
// first dimension (from the innermost, dimension 2) that does not fit is split
// into equal parts that do. A buffer of at most DefaultPageBytes is one page.
//
// Contiguous pages make every page, and every run of consecutive pages along
// the split dimension, one contiguous or one strided byte range, so a merged
// page box is one backend copy (T4). AdaptiveCpp's default of one page per
// buffer makes all page tracking moot; this default gives useful granularity
// (e.g. a 4096×4096 float32 grid gets one page per 4 rows) without tuning.
func DefaultPageSize(rng Dims, elemSize int) Dims {
	elemSize = max(elemSize, 1)
	for d := range 3 {
		rng[d] = max(rng[d], 1)
	}
	budget := max(DefaultPageBytes/elemSize, 1) // elements per page
	// split divides n into the fewest equal parts of at most limit.
	split := func(n, limit int) int { // overflow-free ceilings
		parts := n / limit
		if n%limit != 0 {
			parts++
		}
		size := n / parts
		if n%parts != 0 {
			size++
		}
		return size
	}
	if rng[2] > budget {
		return Dims{1, 1, split(rng[2], budget)}
	}
	rowsFit := budget / rng[2]
	if rng[1] > rowsFit {
		return Dims{1, split(rng[1], rowsFit), rng[2]}
	}
	planesFit := budget / (rng[1] * rng[2])
	if rng[0] > planesFit {
		return Dims{split(rng[0], planesFit), rng[1], rng[2]}
	}
	return rng
}

// Pages is the page grid's extent.
func (g Geometry) Pages() Dims {
	var p Dims
	for d := range 3 {
		p[d] = ceilDiv(g.Range[d], g.PageSize[d])
	}
	return p
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// NumPages is the number of pages.
func (g Geometry) NumPages() int { return g.Pages().Volume() }

// Bytes is the buffer's size in bytes.
func (g Geometry) Bytes() int { return g.Range.Volume() * g.ElemSize }

// All is the page box of the whole buffer.
func (g Geometry) All() Box { return Box{Hi: g.Pages()} }

// PageRange is the page range of an accessor with the given element offset
// and range: every page fully or partly covered. A range with a zero extent
// gives the empty Box{}. ErrOutOfRange (wrapped, naming the dimension and the
// bounds) if the range leaves the buffer or has a negative component;
// ErrBadGeometry if g does not come from NewGeometry (a zero or negative
// extent, element size or page size).
func (g Geometry) PageRange(offset, rng Dims) (Box, error) {
	if err := g.check(); err != nil {
		return Box{}, err
	}
	if err := checkElemRange(g.Range, offset, rng); err != nil {
		return Box{}, err
	}
	if rng.Volume() == 0 {
		return Box{}, nil
	}
	var b Box
	for d := range 3 {
		ps, lo, hi := g.PageSize[d], offset[d], offset[d]+rng[d]
		switch {
		case ps == 1: // no division (a 1D buffer's outer dimensions)
			b.Lo[d], b.Hi[d] = lo, hi
		case hi <= ps: // inside the first page (a small buffer accessed whole)
			b.Lo[d], b.Hi[d] = 0, 1
		default:
			b.Lo[d], b.Hi[d] = lo/ps, ceilDiv(hi, ps)
		}
	}
	return b, nil
}

func checkElemRange(extent, offset, rng Dims) error {
	for d := range 3 {
		if offset[d] < 0 || rng[d] < 0 || offset[d] > extent[d] || rng[d] > extent[d]-offset[d] {
			return fmt.Errorf("%w: dimension %d: offset %d + range %d leaves the extent %d; shrink the accessor's range or fix its offset",
				ErrOutOfRange, d, offset[d], rng[d], extent[d])
		}
	}
	return nil
}

// ElementBox is the element box covered by a page box, clipped to the buffer.
func (g Geometry) ElementBox(pages Box) Box {
	var b Box
	for d := range 3 {
		b.Lo[d] = min(pages.Lo[d]*g.PageSize[d], g.Range[d])
		b.Hi[d] = min(pages.Hi[d]*g.PageSize[d], g.Range[d])
	}
	return b
}

// View is a reinterpreted (other element size) or reshaped (other range)
// view of a buffer's bytes; its Range × ElemSize must equal the buffer's bytes.
type View struct {
	Range    Dims
	ElemSize int
}

// ViewPageRange is a page range of the underlying buffer covering at least
// the bytes an accessor of the view touches (P5). It is exact when the view
// has the buffer's own shape; when the view's rows (or planes) have the
// buffer's byte length the outer dimensions map one to one and only the inner
// ones are widened to whole elements; otherwise it is the bounding page box of
// the linear byte interval the accessor spans, which may be larger than the
// accessed bytes (allowed by the spec). Errors wrap ErrBadGeometry (view does
// not match the buffer's bytes, or g does not come from NewGeometry) or
// ErrOutOfRange.
func (g Geometry) ViewPageRange(v View, offset, rng Dims) (Box, error) {
	if err := g.check(); err != nil {
		return Box{}, err
	}
	if v.ElemSize < 1 || v.Range[0] < 1 || v.Range[1] < 1 || v.Range[2] < 1 {
		return Box{}, fmt.Errorf("%w: view %v × %d bytes has a non-positive extent", ErrBadGeometry, v.Range, v.ElemSize)
	}
	vb, ok := mulChecked(v.Range[0], v.Range[1], v.Range[2], v.ElemSize)
	if !ok || vb != g.Bytes() {
		return Box{}, fmt.Errorf("%w: view %v × %d bytes does not cover the buffer's %d bytes exactly; a reinterpret or reshape must keep the byte size",
			ErrBadGeometry, v.Range, v.ElemSize, g.Bytes())
	}
	if v.Range == g.Range && v.ElemSize == g.ElemSize {
		return g.PageRange(offset, rng)
	}
	if err := checkElemRange(v.Range, offset, rng); err != nil {
		return Box{}, err
	}
	if rng.Volume() == 0 {
		return Box{}, nil
	}
	ve, ge := v.ElemSize, g.ElemSize
	vRow, gRow := v.Range[2]*ve, g.Range[2]*ge
	vPlane, gPlane := v.Range[1]*vRow, g.Range[1]*gRow
	var elo, ehi Dims // element box of the buffer, half-open
	switch {
	case vRow == gRow && v.Range[1] == g.Range[1]:
		// Same rows and planes: dims 0 and 1 map one to one.
		for d := range 2 {
			elo[d], ehi[d] = offset[d], offset[d]+rng[d]
		}
		elo[2] = offset[2] * ve / ge
		ehi[2] = ceilDiv((offset[2]+rng[2])*ve, ge)
	case vPlane == gPlane:
		// Same planes: dim 0 maps one to one; within a plane, bound the
		// linear interval.
		elo[0], ehi[0] = offset[0], offset[0]+rng[0]
		lo := offset[1]*vRow + offset[2]*ve
		hi := (offset[1]+rng[1]-1)*vRow + (offset[2]+rng[2])*ve
		l, h := boundLinear(Dims{1, g.Range[1], g.Range[2]}, lo/ge, ceilDiv(hi, ge))
		elo[1], ehi[1], elo[2], ehi[2] = l[1], h[1], l[2], h[2]
	default:
		lo := offset[0]*vPlane + offset[1]*vRow + offset[2]*ve
		hi := (offset[0]+rng[0]-1)*vPlane + (offset[1]+rng[1]-1)*vRow + (offset[2]+rng[2])*ve
		elo, ehi = boundLinear(g.Range, lo/ge, ceilDiv(hi, ge))
	}
	return g.PageRange(elo, Dims{ehi[0] - elo[0], ehi[1] - elo[1], ehi[2] - elo[2]})
}

// boundLinear is the bounding box [lo, hi) of the row-major linear index
// interval [a, b) (b > a) in a grid of extent ext.
func boundLinear(ext Dims, a, b int) (lo, hi Dims) {
	first, last := unflatten(ext, a), unflatten(ext, b-1)
	k := 0
	for k < 3 && first[k] == last[k] {
		k++
	}
	for d := range 3 {
		switch {
		case d < k:
			lo[d], hi[d] = first[d], first[d]+1
		case d == k:
			lo[d], hi[d] = first[d], last[d]+1
		default:
			lo[d], hi[d] = 0, ext[d]
		}
	}
	return lo, hi
}

func unflatten(ext Dims, i int) Dims {
	x := i % ext[2]
	i /= ext[2]
	return Dims{i / ext[1], i % ext[1], x}
}

func flatten(ext, p Dims) int { return (p[0]*ext[1]+p[1])*ext[2] + p[2] }

// Volume is the product of the extents.
func (d Dims) Volume() int { return d[0] * d[1] * d[2] }

// String formats as "[a b c]".
func (d Dims) String() string { return fmt.Sprintf("[%d %d %d]", d[0], d[1], d[2]) }

// Empty reports whether the box holds no points.
func (b Box) Empty() bool {
	return b.Hi[0] <= b.Lo[0] || b.Hi[1] <= b.Lo[1] || b.Hi[2] <= b.Lo[2]
}

// Size is the box's extent (zero in every dimension if empty).
func (b Box) Size() Dims {
	if b.Empty() {
		return Dims{}
	}
	return Dims{b.Hi[0] - b.Lo[0], b.Hi[1] - b.Lo[1], b.Hi[2] - b.Lo[2]}
}

// Volume is the number of points in the box.
func (b Box) Volume() int { return b.Size().Volume() }

// Intersect is the intersection of two boxes (empty if they are disjoint).
func (b Box) Intersect(o Box) Box {
	var r Box
	for d := range 3 {
		r.Lo[d] = max(b.Lo[d], o.Lo[d])
		r.Hi[d] = min(b.Hi[d], o.Hi[d])
	}
	if r.Empty() {
		return Box{}
	}
	return r
}

// Minus is b without h: up to six disjoint boxes, slab by slab (b itself
// when they do not overlap, nothing when h covers b).
func (b Box) Minus(h Box) []Box {
	if !b.Overlaps(h) {
		return []Box{b}
	}
	var out []Box
	rest := b
	for d := range 3 {
		if rest.Lo[d] < h.Lo[d] {
			p := rest
			p.Hi[d] = h.Lo[d]
			out = append(out, p)
			rest.Lo[d] = h.Lo[d]
		}
		if rest.Hi[d] > h.Hi[d] {
			p := rest
			p.Lo[d] = h.Hi[d]
			out = append(out, p)
			rest.Hi[d] = h.Hi[d]
		}
	}
	return out
}

// Overlaps reports whether the boxes share a point.
func (b Box) Overlaps(o Box) bool { return !b.Intersect(o).Empty() }

// Contains reports whether p lies in the box.
func (b Box) Contains(p Dims) bool {
	for d := range 3 {
		if p[d] < b.Lo[d] || p[d] >= b.Hi[d] {
			return false
		}
	}
	return true
}

// String formats as "[z0,z1)×[y0,y1)×[x0,x1)".
func (b Box) String() string {
	return fmt.Sprintf("[%d,%d)x[%d,%d)x[%d,%d)", b.Lo[0], b.Hi[0], b.Lo[1], b.Hi[1], b.Lo[2], b.Hi[2])
}

// String formats as "n<node>/m<mem>" ("n0/host" for host memory).
func (a AllocID) String() string {
	if a.Mem == HostMem {
		return fmt.Sprintf("n%d/host", a.Node)
	}
	return fmt.Sprintf("n%d/m%d", a.Node, a.Mem)
}

func (a AllocID) less(b AllocID) bool {
	if a.Node != b.Node {
		return a.Node < b.Node
	}
	return a.Mem < b.Mem
}

func compareAlloc(a, b AllocID) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

func compareBox(a, b Box) int {
	for d := range 3 {
		if a.Lo[d] != b.Lo[d] {
			return cmpInt(a.Lo[d], b.Lo[d])
		}
	}
	for d := range 3 {
		if a.Hi[d] != b.Hi[d] {
			return cmpInt(a.Hi[d], b.Hi[d])
		}
	}
	return 0
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	case ReadWrite:
		return "read_write"
	case Reduce:
		return "reduce"
	case release:
		return "release"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// DefaultCost is the default CostModel: same memory, then same node, then
// another node.
//
//	same allocation                 0
//	same node, host ↔ device        1
//	same node, device ↔ device      2  (peer copies; on many hosts they
//	                                    stage through host memory)
//	other node                      10 (network)
type DefaultCost struct{}

// Cost implements CostModel.
func (DefaultCost) Cost(src, dst AllocID) int {
	switch {
	case src == dst:
		return 0
	case src.Node != dst.Node:
		return 10
	case src.Mem == HostMem || dst.Mem == HostMem:
		return 1
	}
	return 2
}

// DiscardPages splits the page range of a discard (no_init) accessor into
// the pages it covers completely and the pages it covers only in part (as up
// to six disjoint boxes). A page at the end of the buffer counts as covered
// when the accessor reaches the buffer's end.
//
// Why it matters: the core tracks whole pages, so a Discard access marks its
// whole page range valid on the target only (P3) without a transfer (T1);
// elements of a partly covered page outside the accessor then keep whatever
// the target held, and the other allocations' copies are outdated. A caller
// that must preserve those elements submits full as Discard and each partial
// box as a non-discard Write (which transfers the page first, T3). With page
// sized or page aligned accessors partial is empty and nothing changes.
// Errors are PageRange's.
func (g Geometry) DiscardPages(offset, rng Dims) (full Box, partial []Box, err error) {
	pages, err := g.PageRange(offset, rng)
	if err != nil || pages.Empty() {
		return Box{}, nil, err
	}
	full = pages
	for d := range 3 {
		full.Lo[d] = ceilDiv(offset[d], g.PageSize[d])
		end := offset[d] + rng[d]
		if end == g.Range[d] {
			full.Hi[d] = pages.Hi[d]
		} else {
			full.Hi[d] = end / g.PageSize[d]
		}
	}
	if full.Empty() {
		return Box{}, []Box{pages}, nil
	}
	// pages minus full, slab by slab: dimension 0, then 1 inside full's
	// dimension-0 extent, then 2 inside full's dimensions 0 and 1.
	rest := pages
	for d := range 3 {
		if rest.Lo[d] < full.Lo[d] {
			b := rest
			b.Hi[d] = full.Lo[d]
			partial = append(partial, b)
		}
		if full.Hi[d] < rest.Hi[d] {
			b := rest
			b.Lo[d] = full.Hi[d]
			partial = append(partial, b)
		}
		rest.Lo[d], rest.Hi[d] = full.Lo[d], full.Hi[d]
	}
	return full, partial, nil
}

// AppendNoInit appends to dst the accesses for a no_init (discard) accessor
// a over the elements offset+rng (a.Pages and a.Discard are set here). The
// pages the accessor covers completely are one Discard access: no transfer
// (T1). Each box of pages it covers only in part becomes a plain access of
// a's mode, so the rest of those pages is brought to the target first (T3)
// and never lost. Page-aligned accessors give exactly one Discard access.
func (g Geometry) AppendNoInit(dst []Access, a Access, offset, rng Dims) ([]Access, error) {
	full, partial, err := g.DiscardPages(offset, rng)
	if err != nil {
		return dst, err
	}
	if !full.Empty() {
		f := a
		f.Pages, f.Discard = full, true
		dst = append(dst, f)
	}
	for _, p := range partial {
		w := a
		w.Pages, w.Discard = p, false
		dst = append(dst, w)
	}
	return dst, nil
}
