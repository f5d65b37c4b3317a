package acpp

import (
	"fmt"
	"iter"
	"unsafe"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
)

// AccessOption modifies an accessor.
type AccessOption func(*accessConfig)

type accessConfig struct {
	noInit bool
	within bool
	off    ID
	rng    Range
	mapper RangeMapper // Map: the region per chunk of a split group
	twice  string      // an option given twice with different values (Within), or Map twice
}

// NoInit (SYCL no_init, discard) says the group overwrites the accessed
// data without reading it: no transfer happens for it (T1). Only write and
// read-write accessors take it.
func NoInit(c *accessConfig) { c.noInit = true }

// Within limits an access region (the pages coherence makes up to date
// and orders on) to rng at offset off. Of the accessor constructors only
// the raw ones (ReadRaw, WriteRaw, ReadWriteRaw) take it, and their
// indexing still ignores the offset (V3); the unranged and ranged ones
// refuse it (ErrOption: use a ranged constructor for a region). A host
// accessor (HostAccess, HostRead) and
// Buffer.Read and Buffer.Write index relative to it and hold only the
// region (T3). The region must lie inside the buffer. Given twice with
// different regions it is ErrOption.
func Within(off ID, rng Range) AccessOption {
	return func(c *accessConfig) {
		if c.within && (c.off != off || c.rng != rng) {
			c.twice = "Within"
		}
		c.within, c.off, c.rng = true, off, rng
	}
}

// req is one requirement of a command group: what an accessor declared.
// Accessors point to it (core runtime information, V1).
type req struct {
	// Access is what the group's record holds: buffer, mode, NoInit, page
	// range, the (view's) range BRange and element size, and the access
	// region Off+Rng, all in internal order.
	engine.Access
	h      *Handler
	st     *bufState
	mem    *device.Mem
	s1, s2 int // BRange[1], BRange[2]: the strides accessors index with
}

// slice is the accessor's view of its memory as []T, or nil when the memory
// is not host-visible (then only named kernels can use it).
func sliceOf[T any](m *device.Mem) []T {
	if m == nil || m.Host == nil || len(m.Host) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(m.Host))), len(m.Host)/int(unsafe.Sizeof(z)))
}

// access declares a requirement of h on b and returns it (nil after
// recording an error in h).
func access[T any](h *Handler, b *Buffer[T], mode coherence.Mode, shape accShape, off ID, rng Range, opts []AccessOption) *req {
	ranged := shape == accRanged
	h.live("an accessor constructor (Read, Write, ReadRange, Require, …)")
	var cfg accessConfig
	if len(opts) > 0 {
		c := new(accessConfig)
		for _, o := range opts {
			if o != nil { // a nil option is none, as in onlyOptions
				o(c)
			}
		}
		cfg = *c
	}
	if b == nil || b.st == nil {
		h.fail(fmt.Errorf("%w: nil buffer", ErrBadRange))
		return nil
	}
	if cfg.twice != "" {
		h.fail(fmt.Errorf("%w: %s given twice to one accessor (the later replaced the earlier); pass it once", ErrOption, cfg.twice))
		return nil
	}
	if b.st.q != h.q {
		h.fail(fmt.Errorf("%w: buffer belongs to another queue", ErrBadRange))
		return nil
	}
	if b.st.isClosed() {
		h.fail(ErrBufferClosed)
		return nil
	}
	if cfg.noInit && mode == coherence.Read {
		h.fail(fmt.Errorf("%w: a read accessor cannot be NoInit (it would read data it never asked for)", ErrMode))
		return nil
	}
	if cfg.within && shape != accRaw {
		// An unranged accessor indexes, reads (Copy, All) and reports
		// (Range) the whole buffer, and a ranged one has its constructor's
		// region: a narrower declaration would leave the rest stale while
		// the accessor hands it out (or override the constructor's region).
		ctor := "use ReadRange, WriteRange or ReadWriteRange for a region, or a Raw constructor to narrow what it declares"
		if ranged {
			ctor = "its region is the constructor's range and offset"
		}
		article := "a"
		if !ranged {
			article = "an" // unranged
		}
		h.fail(fmt.Errorf("%w: Within cannot apply to %s %s accessor: %s", ErrOption, article, shape, ctor))
		return nil
	}
	if cfg.within {
		off, rng = cfg.off, cfg.rng
	}
	if !ranged && !cfg.within {
		off, rng = ID{}, b.rng
	}
	ioff, irng, err := b.region(off, rng)
	if err != nil {
		h.fail(err)
		return nil
	}
	bre := b.rng.dims3()
	pages, err := b.pageRange(ioff, irng)
	if err != nil {
		h.fail(fmt.Errorf("%w: %v", ErrBadRange, err))
		return nil
	}
	mem, err := h.rec.Target.Bind(b.st.id)
	if err != nil {
		h.fail(b.st.closedMeanwhile(err))
		return nil
	}
	r := h.newReq()
	*r = req{Access: engine.Access{Buffer: b.st.id, Geo: &b.st.geo, Mode: mode, NoInit: cfg.noInit, Pages: pages, Elem: b.elem(),
		BRange: bre, Off: ioff, Rng: irng, Ranged: ranged || cfg.within, VDims: int8(b.rng.dims)},
		h: h, st: b.st, mem: mem, s1: bre[1], s2: bre[2]}
	h.reqs = append(h.reqs, r)
	if cfg.mapper != nil && !h.mapped(r, cfg.mapper, ranged || cfg.within) {
		return nil
	}
	return r
}

// accShape is the variant an accessor constructor makes.
type accShape uint8

const (
	accUnranged accShape = iota // Read, Write, ReadWrite
	accRanged                   // ReadRange, WriteRange, ReadWriteRange
	accRaw                      // ReadRaw, WriteRaw, ReadWriteRaw
)

func (s accShape) String() string {
	return [...]string{"unranged", "ranged", "raw"}[s]
}

// region checks an access region of b (offset off, range rng, in b's
// dimension order) and returns it in internal order.
func (b *Buffer[T]) region(off ID, rng Range) (ioff, irng coherence.Dims, err error) {
	if err := rng.valid(); err != nil {
		return ioff, irng, err
	}
	if rng.dims != b.rng.dims {
		return ioff, irng, fmt.Errorf("%w: access range %v has %d dimensions, the buffer %v has %d", ErrBadRange, rng, rng.dims, b.rng, b.rng.dims)
	}
	ioff, irng = toInternal(b.rng.dims, off, 0), rng.dims3()
	bre := b.rng.dims3()
	for d := 0; d < 3; d++ {
		if ioff[d] < 0 || ioff[d]+irng[d] > bre[d] {
			o := off // a copy: slicing off itself would move it to the heap on every call
			return ioff, irng, fmt.Errorf("%w: access offset %v + range %v leaves the buffer %v", ErrBadRange, o[:rng.dims], rng, b.rng)
		}
	}
	return ioff, irng, nil
}

func (r *req) arg(c argCtx, kind device.ArgKind) (device.Arg, error) {
	if r == nil {
		if len(c.h.declErrs()) > 0 {
			return device.Arg{}, errReported // its constructor failed, and said why
		}
		return device.Arg{}, fmt.Errorf("%w: accessor was not constructed", ErrBadRange)
	}
	if r.h != c.h {
		return device.Arg{}, fmt.Errorf("%w: accessor belongs to another command group", ErrHandlerDone)
	}
	mem := r.mem
	if c.t != c.h.rec.Target { // a split chunk's device: its memory
		m, err := c.t.Bind(r.st.id)
		if err != nil {
			return device.Arg{}, err
		}
		mem = m
	}
	a := device.Arg{Kind: kind, Space: mem.Space(), Mem: mem, ElemSize: r.Elem, Range: r.BRange, ReadOnly: r.Mode == coherence.Read}
	if kind == device.ArgRangedAccessor {
		a.AccessOffset, a.AccessRange = r.Off, r.Rng
	}
	return a, nil
}

// ---- raw accessors (V1, V3): a data pointer only ----

// Raw is a read-write (or write) raw accessor: the smallest accessor, a
// data pointer. It indexes linearly, ignores any access offset and exposes
// no range (V3). Build one with ReadWriteRaw or WriteRaw.
type Raw[T any] struct {
	p  []T
	rq *req
}

// RawRO is a read-only raw accessor (ReadRaw). It has no way to write:
// no Set, no Ptr, no slice (V2).
type RawRO[T any] struct {
	p  roView[T]
	rq *req
}

// roView is the data pointer of a read-only accessor. Its own type keeps
// the read-only variants' fields different from the writable ones': Go
// converts between struct types with identical fields, which would turn
// a read accessor into a writable one (TestReadAccessorsCannotWrite_V2).
type roView[T any] []T

// At reads element i of the buffer (0D/1D indexing, no offset).
func (a Raw[T]) At(i int) T { return a.p[i] }

// Set writes element i of the buffer.
func (a Raw[T]) Set(i int, v T) { a.p[i] = v }

// Ptr returns the element's address, for atomics and in-place updates.
func (a Raw[T]) Ptr(i int) *T { return &a.p[i] }

// ReadOnly converts to a read-only raw accessor.
func (a Raw[T]) ReadOnly() RawRO[T] { return RawRO[T]{roView[T](a.p), a.rq} }

// At reads element i of the buffer.
func (a RawRO[T]) At(i int) T { return a.p[i] }

// ---- unranged accessors: pointer + buffer range ----
//
// Every accessor is at most four machine words (a slice and the requirement
// record), so the Go compiler keeps it in registers inside kernels: a larger
// struct lives in memory and is copied on every method call, which made
// ranged access five times slower. What a variant stores beyond the data
// pointer (buffer range, offset, access range: the table of
// accessor-variants.txt) sits in the requirement record, which is the core
// runtime information all variants carry; the method set exposes only what
// the variant has (V1, V3), and kernel arguments carry only that (V4). A
// ranged accessor's slice starts at its access offset.

// Unranged is a read-write (or write) accessor over the whole buffer: data
// pointer and buffer range; its offset is zero and its range the buffer's.
type Unranged[T any] struct {
	p  []T
	rq *req
}

// UnrangedRO is a read-only unranged accessor. It has no way to write
// (V2): it reads with At, All and Values, and copies out with CopyTo and
// Copy.
type UnrangedRO[T any] struct {
	p  roView[T]
	rq *req
}

// At reads element i of a 1D accessor (the linear index otherwise).
func (a Unranged[T]) At(i int) T { return a.p[i] }

// At2 reads element (i, j) of a 2D accessor.
func (a Unranged[T]) At2(i, j int) T { return a.p[i*a.rq.s2+j] }

// At3 reads element (i, j, k) of a 3D accessor.
func (a Unranged[T]) At3(i, j, k int) T { return a.p[(i*a.rq.s1+j)*a.rq.s2+k] }

// Set writes element i.
func (a Unranged[T]) Set(i int, v T) { a.p[i] = v }

// Set2 writes element (i, j).
func (a Unranged[T]) Set2(i, j int, v T) { a.p[i*a.rq.s2+j] = v }

// Set3 writes element (i, j, k).
func (a Unranged[T]) Set3(i, j, k int, v T) { a.p[(i*a.rq.s1+j)*a.rq.s2+k] = v }

// Ptr returns element i's address.
func (a Unranged[T]) Ptr(i int) *T { return &a.p[i] }

// Slice is the whole buffer as a slice (row-major).
func (a Unranged[T]) Slice() []T { return a.p[:min(len(a.p), a.rq.count())] }

// Range is the buffer's range.
func (a Unranged[T]) Range() Range { return rangeOf(a.rq, a.rq.bufRange()) }

// Offset is zero: unranged accessors start at the buffer's origin.
func (a Unranged[T]) Offset() ID { return ID{} }

// Raw converts to a raw accessor (V2: allowed, it exposes less).
func (a Unranged[T]) Raw() Raw[T] { return Raw[T]{a.p, a.rq} }

// Ranged converts to a ranged accessor over the whole buffer.
func (a Unranged[T]) Ranged() Ranged[T] { return Ranged[T](a) }

// ReadOnly converts to a read-only accessor.
func (a Unranged[T]) ReadOnly() UnrangedRO[T] { return UnrangedRO[T]{roView[T](a.p), a.rq} }

// At reads element i of a 1D accessor.
func (a UnrangedRO[T]) At(i int) T { return a.p[i] }

// At2 reads element (i, j).
func (a UnrangedRO[T]) At2(i, j int) T { return a.p[i*a.rq.s2+j] }

// At3 reads element (i, j, k).
func (a UnrangedRO[T]) At3(i, j, k int) T { return a.p[(i*a.rq.s1+j)*a.rq.s2+k] }

// elems is the whole buffer, row-major (empty when the memory is not
// host-visible).
func (a UnrangedRO[T]) elems() roView[T] { return a.p[:min(len(a.p), a.rq.count())] }

// All yields the buffer's elements with their linear (row-major) index.
func (a UnrangedRO[T]) All() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		for i, v := range a.elems() {
			if !yield(i, v) {
				return
			}
		}
	}
}

// Values yields the buffer's elements in row-major order.
func (a UnrangedRO[T]) Values() iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, v := range a.elems() {
			if !yield(v) {
				return
			}
		}
	}
}

// CopyTo copies the buffer's elements, row-major, into dst and returns how
// many it copied (as the built-in copy: the smaller of the two lengths).
func (a UnrangedRO[T]) CopyTo(dst []T) int { return copy(dst, a.elems()) }

// Copy returns a copy of the buffer's elements, row-major.
func (a UnrangedRO[T]) Copy() []T { return append([]T(nil), a.elems()...) }

// Range is the buffer's range.
func (a UnrangedRO[T]) Range() Range { return rangeOf(a.rq, a.rq.bufRange()) }

// Offset is zero.
func (a UnrangedRO[T]) Offset() ID { return ID{} }

// Raw converts to a read-only raw accessor.
func (a UnrangedRO[T]) Raw() RawRO[T] { return RawRO[T]{a.p, a.rq} }

// Ranged converts to a read-only ranged accessor over the whole buffer.
func (a UnrangedRO[T]) Ranged() RangedRO[T] { return RangedRO[T](a) }

// ---- ranged accessors: pointer + buffer range + offset + access range ----

// Ranged is a read-write (or write) accessor of a sub-range: indices are
// relative to its offset. Accessing outside its range but inside the buffer
// is allowed, but the data there is not guaranteed up to date.
type Ranged[T any] struct {
	p  []T
	rq *req
}

// RangedRO is a read-only ranged accessor. It has no way to write (V2):
// it reads with At, All and Values, and copies its range out with CopyTo
// and Copy.
type RangedRO[T any] struct {
	p  roView[T]
	rq *req
}

// At reads element i (relative to the offset) of a 1D accessor.
func (a Ranged[T]) At(i int) T { return a.p[i] }

// At2 reads element (i, j) relative to the offset.
func (a Ranged[T]) At2(i, j int) T { return a.p[i*a.rq.s2+j] }

// At3 reads element (i, j, k) relative to the offset.
func (a Ranged[T]) At3(i, j, k int) T { return a.p[(i*a.rq.s1+j)*a.rq.s2+k] }

// Set writes element i relative to the offset.
func (a Ranged[T]) Set(i int, v T) { a.p[i] = v }

// Set2 writes element (i, j) relative to the offset.
func (a Ranged[T]) Set2(i, j int, v T) { a.p[i*a.rq.s2+j] = v }

// Set3 writes element (i, j, k) relative to the offset.
func (a Ranged[T]) Set3(i, j, k int, v T) { a.p[(i*a.rq.s1+j)*a.rq.s2+k] = v }

// Range is the access range.
func (a Ranged[T]) Range() Range { return rangeOf(a.rq, a.rq.accRange()) }

// Offset is the access offset.
func (a Ranged[T]) Offset() ID { return offsetOf(a.rq, a.rq.accOffset()) }

// Raw converts to a raw accessor; it drops the offset (V3).
func (a Ranged[T]) Raw() Raw[T] { return Raw[T]{rqSlice[T](a.rq), a.rq} }

// ReadOnly converts to a read-only ranged accessor.
func (a Ranged[T]) ReadOnly() RangedRO[T] { return RangedRO[T]{roView[T](a.p), a.rq} }

// At reads element i relative to the offset.
func (a RangedRO[T]) At(i int) T { return a.p[i] }

// At2 reads element (i, j) relative to the offset.
func (a RangedRO[T]) At2(i, j int) T { return a.p[i*a.rq.s2+j] }

// At3 reads element (i, j, k) relative to the offset.
func (a RangedRO[T]) At3(i, j, k int) T { return a.p[(i*a.rq.s1+j)*a.rq.s2+k] }

// Range is the access range.
func (a RangedRO[T]) Range() Range { return rangeOf(a.rq, a.rq.accRange()) }

// Offset is the access offset.
func (a RangedRO[T]) Offset() ID { return offsetOf(a.rq, a.rq.accOffset()) }

// Raw converts to a read-only raw accessor (dropping the offset).
func (a RangedRO[T]) Raw() RawRO[T] { return RawRO[T]{rqSlice[T](a.rq), a.rq} }

// rows calls f with each row (the innermost dimension) of the access
// range, in row-major order; it stops when f returns false. Nothing is
// yielded when the memory is not host-visible.
func (a RangedRO[T]) rows(f func(row roView[T]) bool) {
	r := a.rq.accRange()
	if len(a.p) == 0 || r[0]*r[1]*r[2] == 0 {
		return
	}
	s1, s2 := a.rq.s1, a.rq.s2
	for i := 0; i < r[0]; i++ {
		for j := 0; j < r[1]; j++ {
			lo := (i*s1 + j) * s2
			if !f(a.p[lo : lo+r[2]]) {
				return
			}
		}
	}
}

// All yields the access range's elements in row-major order with their
// linear index within the range (0 to Range().Count()-1).
func (a RangedRO[T]) All() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		k := 0
		a.rows(func(row roView[T]) bool {
			for _, v := range row {
				if !yield(k, v) {
					return false
				}
				k++
			}
			return true
		})
	}
}

// Values yields the access range's elements in row-major order.
func (a RangedRO[T]) Values() iter.Seq[T] {
	return func(yield func(T) bool) {
		a.rows(func(row roView[T]) bool {
			for _, v := range row {
				if !yield(v) {
					return false
				}
			}
			return true
		})
	}
}

// CopyTo copies the access range's elements, row-major, into dst and
// returns how many it copied (the smaller of len(dst) and the range's
// count).
func (a RangedRO[T]) CopyTo(dst []T) int {
	n := 0
	a.rows(func(row roView[T]) bool {
		n += copy(dst[n:], row)
		return n < len(dst)
	})
	return n
}

// Copy returns a copy of the access range's elements, row-major.
func (a RangedRO[T]) Copy() []T {
	r := a.rq.accRange()
	out := make([]T, r[0]*r[1]*r[2])
	return out[:a.CopyTo(out)]
}

func (r *req) count() int {
	if r == nil {
		return 0
	}
	return r.BRange[0] * r.BRange[1] * r.BRange[2]
}

func (r *req) bufRange() [3]int {
	if r == nil {
		return [3]int{}
	}
	return r.BRange
}

func (r *req) accRange() [3]int {
	if r == nil {
		return [3]int{}
	}
	return r.Rng
}

func (r *req) accOffset() [3]int {
	if r == nil {
		return [3]int{}
	}
	return r.Off
}

// view returns an accessor's slice: the allocation, from the access offset
// on when ranged.
func view[T any](rq *req, fromOffset bool) []T {
	if rq == nil {
		return nil
	}
	p := rqSlice[T](rq)
	if fromOffset && p != nil {
		o, r := rq.Off, rq.BRange
		p = p[(o[0]*r[1]+o[1])*r[2]+o[2]:]
	}
	return p
}

func dimsOf(rq *req) int {
	if rq == nil {
		return 1
	}
	return int(rq.VDims)
}

func rangeOf(rq *req, e [3]int) Range {
	d := dimsOf(rq)
	return Range{d, fromInternal(d, e, 1)}
}

func offsetOf(rq *req, o [3]int) ID {
	d := dimsOf(rq)
	return ID(fromInternal(d, o, 0))
}

// ---- constructors (V5: the most compact variant for what is asked) ----

// Read declares a read-only accessor of the whole buffer: UnrangedRO.
func Read[T any](h *Handler, b *Buffer[T], opts ...AccessOption) UnrangedRO[T] {
	rq := access(h, b, coherence.Read, accUnranged, ID{}, Range{}, opts)
	return UnrangedRO[T]{view[T](rq, false), rq}
}

// Write declares a write accessor of the whole buffer: Unranged. Without
// NoInit the current contents are made available first.
func Write[T any](h *Handler, b *Buffer[T], opts ...AccessOption) Unranged[T] {
	rq := access(h, b, coherence.Write, accUnranged, ID{}, Range{}, opts)
	return Unranged[T]{view[T](rq, false), rq}
}

// ReadWrite declares a read-write accessor of the whole buffer: Unranged.
func ReadWrite[T any](h *Handler, b *Buffer[T], opts ...AccessOption) Unranged[T] {
	rq := access(h, b, coherence.ReadWrite, accUnranged, ID{}, Range{}, opts)
	return Unranged[T]{view[T](rq, false), rq}
}

// ReadRange declares a read-only accessor of rng at off: RangedRO.
func ReadRange[T any](h *Handler, b *Buffer[T], rng Range, off ID, opts ...AccessOption) RangedRO[T] {
	rq := access(h, b, coherence.Read, accRanged, off, rng, opts)
	return RangedRO[T]{view[T](rq, true), rq}
}

// WriteRange declares a write accessor of rng at off: Ranged.
func WriteRange[T any](h *Handler, b *Buffer[T], rng Range, off ID, opts ...AccessOption) Ranged[T] {
	rq := access(h, b, coherence.Write, accRanged, off, rng, opts)
	return Ranged[T]{view[T](rq, true), rq}
}

// ReadWriteRange declares a read-write accessor of rng at off: Ranged.
func ReadWriteRange[T any](h *Handler, b *Buffer[T], rng Range, off ID, opts ...AccessOption) Ranged[T] {
	rq := access(h, b, coherence.ReadWrite, accRanged, off, rng, opts)
	return Ranged[T]{view[T](rq, true), rq}
}

// ReadRaw declares a read-only raw accessor (SYCL read_only_raw). Use Within
// to narrow its access region.
func ReadRaw[T any](h *Handler, b *Buffer[T], opts ...AccessOption) RawRO[T] {
	rq := access(h, b, coherence.Read, accRaw, ID{}, Range{}, opts)
	return RawRO[T]{p: rqSlice[T](rq), rq: rq}
}

// WriteRaw declares a write raw accessor (write_only_raw).
func WriteRaw[T any](h *Handler, b *Buffer[T], opts ...AccessOption) Raw[T] {
	rq := access(h, b, coherence.Write, accRaw, ID{}, Range{}, opts)
	return Raw[T]{p: rqSlice[T](rq), rq: rq}
}

// ReadWriteRaw declares a read-write raw accessor (read_write_raw).
func ReadWriteRaw[T any](h *Handler, b *Buffer[T], opts ...AccessOption) Raw[T] {
	rq := access(h, b, coherence.ReadWrite, accRaw, ID{}, Range{}, opts)
	return Raw[T]{p: rqSlice[T](rq), rq: rq}
}

func rqSlice[T any](rq *req) []T {
	if rq == nil {
		return nil
	}
	return sliceOf[T](rq.mem)
}

// ---- placeholders: buffer + properties, bound later with Require ----

// Mode is an access mode of placeholders and host accessors.
type Mode uint8

// Access modes.
const (
	ModeRead Mode = iota + 1
	ModeWrite
	ModeReadWrite
)

func (m Mode) coherence() coherence.Mode {
	switch m {
	case ModeRead:
		return coherence.Read
	case ModeWrite:
		return coherence.Write
	}
	return coherence.ReadWrite
}

// Placeholder is an unranged placeholder accessor (write or read-write): it
// stores the buffer and its properties and is bound to a command group with
// Require. It never comes from a non-placeholder accessor (V2).
type Placeholder[T any] struct {
	b      *Buffer[T]
	mode   coherence.Mode
	noInit phProps
}

// PlaceholderRO is a read-only unranged placeholder.
type PlaceholderRO[T any] struct {
	b *Buffer[T]
}

// RangedPlaceholder is a ranged placeholder (write or read-write).
type RangedPlaceholder[T any] struct {
	b      *Buffer[T]
	mode   coherence.Mode
	noInit phProps
	off    ID
	rng    Range
}

// RangedPlaceholderRO is a read-only ranged placeholder.
type RangedPlaceholderRO[T any] struct {
	b   *Buffer[T]
	off ID
	rng Range
}

// phProps are a placeholder's properties: NoInit, and the options given
// that cannot apply to a placeholder (Require refuses them).
type phProps uint8

const (
	phNoInit phProps = 1 << iota
	phWithin         // Within: a placeholder's region is its constructor's
	phMap            // Map: a placeholder cannot be split
)

// propsOf are the properties of a placeholder made with opts.
func propsOf(opts []AccessOption) phProps {
	var c accessConfig
	for _, o := range opts {
		if o != nil { // a nil option is none, as in onlyOptions
			o(&c)
		}
	}
	var p phProps
	if c.noInit {
		p |= phNoInit
	}
	if c.within {
		p |= phWithin
	}
	if c.mapper != nil {
		p |= phMap
	}
	return p
}

// check records in h why the options p holds cannot apply to a
// placeholder, and reports whether they all can.
func (p phProps) check(h *Handler, ranged string) bool {
	if p&phWithin != 0 {
		h.fail(fmt.Errorf("%w: Within cannot apply to a placeholder (its region is its constructor's): use %s for a region", ErrOption, ranged))
	}
	if p&phMap != 0 {
		h.fail(fmt.Errorf("%w (%w): Map cannot apply to a placeholder; declare the accessor in the group (Read, Write, … with Map) to split it", ErrOption, ErrSplit))
	}
	return p&(phWithin|phMap) == 0
}

func opts(p phProps) []AccessOption {
	if p&phNoInit != 0 {
		return []AccessOption{NoInit}
	}
	return nil
}

// ReadPlaceholder makes a read-only unranged placeholder.
func ReadPlaceholder[T any](b *Buffer[T]) PlaceholderRO[T] { return PlaceholderRO[T]{b} }

// WritePlaceholder makes a write unranged placeholder. Of the access
// options it takes NoInit; Within and Map cannot apply to a placeholder,
// and Require refuses them (ErrOption; the ranged constructors take a
// region).
func WritePlaceholder[T any](b *Buffer[T], opts ...AccessOption) Placeholder[T] {
	return Placeholder[T]{b, coherence.Write, propsOf(opts)}
}

// ReadWritePlaceholder makes a read-write unranged placeholder. It takes
// NoInit, as WritePlaceholder does.
func ReadWritePlaceholder[T any](b *Buffer[T], opts ...AccessOption) Placeholder[T] {
	return Placeholder[T]{b, coherence.ReadWrite, propsOf(opts)}
}

// ReadPlaceholderRange makes a read-only ranged placeholder.
func ReadPlaceholderRange[T any](b *Buffer[T], rng Range, off ID) RangedPlaceholderRO[T] {
	return RangedPlaceholderRO[T]{b, off, rng}
}

// WritePlaceholderRange makes a write ranged placeholder. It takes NoInit,
// as WritePlaceholder does.
func WritePlaceholderRange[T any](b *Buffer[T], rng Range, off ID, opts ...AccessOption) RangedPlaceholder[T] {
	return RangedPlaceholder[T]{b, coherence.Write, propsOf(opts), off, rng}
}

// ReadWritePlaceholderRange makes a read-write ranged placeholder. It takes
// NoInit, as WritePlaceholder does.
func ReadWritePlaceholderRange[T any](b *Buffer[T], rng Range, off ID, opts ...AccessOption) RangedPlaceholder[T] {
	return RangedPlaceholder[T]{b, coherence.ReadWrite, propsOf(opts), off, rng}
}

// Require binds the placeholder to h and returns the accessor to use in the
// kernel.
func (ph Placeholder[T]) Require(h *Handler) Unranged[T] {
	h.live("Require")
	if !ph.noInit.check(h, "WritePlaceholderRange or ReadWritePlaceholderRange") {
		return Unranged[T]{}
	}
	rq := access(h, ph.b, ph.mode, accUnranged, ID{}, Range{}, opts(ph.noInit))
	return Unranged[T]{view[T](rq, false), rq}
}

// Require binds the placeholder to h.
func (p PlaceholderRO[T]) Require(h *Handler) UnrangedRO[T] { return Read(h, p.b) }

// Require binds the placeholder to h.
func (ph RangedPlaceholder[T]) Require(h *Handler) Ranged[T] {
	h.live("Require")
	if !ph.noInit.check(h, "the constructor's range and offset") {
		return Ranged[T]{}
	}
	rq := access(h, ph.b, ph.mode, accRanged, ph.off, ph.rng, opts(ph.noInit))
	return Ranged[T]{view[T](rq, true), rq}
}

// Require binds the placeholder to h.
func (p RangedPlaceholderRO[T]) Require(h *Handler) RangedRO[T] {
	return ReadRange(h, p.b, p.rng, p.off)
}

// Buffer is the placeholder's buffer.
func (p Placeholder[T]) Buffer() *Buffer[T] { return p.b }

// Buffer is the placeholder's buffer.
func (p PlaceholderRO[T]) Buffer() *Buffer[T] { return p.b }

// Buffer is the placeholder's buffer.
func (p RangedPlaceholder[T]) Buffer() *Buffer[T] { return p.b }

// Buffer is the placeholder's buffer.
func (p RangedPlaceholderRO[T]) Buffer() *Buffer[T] { return p.b }

// IsNoInit reports the NoInit property.
func (p Placeholder[T]) IsNoInit() bool { return p.noInit&phNoInit != 0 }

// IsNoInit reports the NoInit property.
func (p RangedPlaceholder[T]) IsNoInit() bool { return p.noInit&phNoInit != 0 }
