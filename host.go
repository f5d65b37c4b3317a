package acpp

import (
	"context"
	"fmt"
	"io"
	"iter"
	"unsafe"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/internal/engine"
)

// hostView is what a host accessor holds: the accessed region of a buffer
// in host memory and how to end the access. Element (i, j, k) of the
// region (internal order, relative to its offset) is p[base+(i*s1+j)*s2+k]:
// on an embedded queue p is the buffer's whole host allocation, on a
// cluster queue a copy of just the region (or of the whole buffer for a
// view of another shape). It has no method that writes; HostAccessor adds
// those.
type hostView[T any] struct {
	p      []T
	base   int
	s1, s2 int
	off    [3]int // access offset, internal order
	rng    [3]int // access range, internal order
	dims   int
	done   func(error)
	closed bool
}

// HostAccessorRO gives the host read access to a buffer's data (HostRead).
// It has no way to write that compiles (V2): it reads with At, At2, At3,
// All and Values and copies out with CopyTo and Copy. Until Close, command
// groups that write the accessed region wait.
type HostAccessorRO[T any] struct {
	hostView[T]
}

// HostAccessor gives the host write or read-write access to a buffer's
// data (HostAccess). Until Close, command groups that use the accessed
// region wait.
type HostAccessor[T any] struct {
	hostView[T]
	// mode is ModeRead, ModeWrite or ModeReadWrite. It also keeps HostAccessor's
	// fields different from HostAccessorRO's: Go converts between pointers
	// to struct types with identical fields, which would make a read
	// accessor writable (TestReadAccessorsCannotWrite_V2).
	mode Mode
}

// HostRead waits for the groups that write b, makes the data up to date in
// host memory and returns a read-only accessor of it. With Within(off,
// rng) only that region is accessed: only its pages move (T3), indices are
// relative to off, and the accessor holds just the region. NoInit cannot
// apply to a read and is an error, as is a region outside the buffer.
// Close the accessor when done. If ctx ends first the access is abandoned
// and ctx's error returned.
func HostRead[T any](ctx context.Context, b *Buffer[T], opts ...AccessOption) (*HostAccessorRO[T], error) {
	v, err := hostAccess(ctx, b, ModeRead, opts)
	if err != nil {
		return nil, err
	}
	return &HostAccessorRO[T]{v}, nil
}

// HostAccess waits for the groups that use b, makes the data up to date in
// host memory (for ModeRead and ModeReadWrite, and for ModeWrite without
// NoInit; nothing moves with NoInit, T1) and returns an accessor of it.
// With Within(off, rng) only that region is accessed: only its pages move
// (T3), indices are relative to off, and the accessor holds just the
// region. Close it when done. If ctx ends first the access is abandoned
// and ctx's error returned.
//
// With ModeRead the accessor reads only: Set, Set2, Set3 and CopyFrom
// panic, and Slice returns a copy of the region (writing to it never
// reaches the buffer). HostRead gives a read accessor whose type has no
// way to write (V2); prefer it.
func HostAccess[T any](ctx context.Context, b *Buffer[T], mode Mode, opts ...AccessOption) (*HostAccessor[T], error) {
	switch mode {
	case ModeRead, ModeWrite, ModeReadWrite:
	default:
		return nil, fmt.Errorf("%w: unknown host access mode %d; use ModeRead, ModeWrite or ModeReadWrite", ErrMode, mode)
	}
	v, err := hostAccess(ctx, b, mode, opts)
	if err != nil {
		return nil, err
	}
	return &HostAccessor[T]{v, mode}, nil
}

// hostRegion applies a host access's options: the region (internal order)
// and NoInit. An option that cannot apply is an error.
func hostRegion[T any](b *Buffer[T], mode Mode, opts []AccessOption) (off, rng coherence.Dims, noInit bool, err error) {
	var cfg accessConfig
	for _, o := range opts {
		if o != nil { // a nil option is none, as in onlyOptions
			o(&cfg)
		}
	}
	if cfg.twice != "" {
		return off, rng, false, fmt.Errorf("%w: %s given twice to one host access (the later replaced the earlier); pass it once", ErrOption, cfg.twice)
	}
	if cfg.noInit && mode == ModeRead {
		return off, rng, false, fmt.Errorf("%w: a host read cannot be NoInit (NoInit means the contents are not needed); drop NoInit", ErrMode)
	}
	if cfg.mapper != nil {
		return off, rng, false, fmt.Errorf("%w: Map applies to the accessors of a group submitted with Split, not to a host access; use Within for a region", ErrSplit)
	}
	if !cfg.within {
		return coherence.Dims{}, b.rng.dims3(), cfg.noInit, nil
	}
	off, rng, err = b.region(cfg.off, cfg.rng)
	if err != nil {
		return off, rng, false, fmt.Errorf("host access Within: %w", err)
	}
	return off, rng, cfg.noInit, nil
}

func hostAccess[T any](ctx context.Context, b *Buffer[T], mode Mode, opts []AccessOption) (hostView[T], error) {
	if err := checkCtx(ctx, "host access (HostRead, HostAccess)"); err != nil {
		return hostView[T]{}, err
	}
	if b == nil || b.st == nil {
		return hostView[T]{}, fmt.Errorf("%w: nil buffer", ErrBadRange)
	}
	if b.st.isClosed() {
		return hostView[T]{}, ErrBufferClosed
	}
	off, rng, noInit, err := hostRegion(b, mode, opts)
	if err != nil {
		return hostView[T]{}, err
	}
	r, err := hostRequest(b, mode, noInit, off, rng)
	if err != nil {
		return hostView[T]{}, err
	}
	v, err := b.st.q.eng.HostAccess(ctx, r)
	if err != nil {
		return hostView[T]{}, b.st.closedMeanwhile(err)
	}
	p := sliceOfBytes[T](v.Data)
	if v.Whole {
		return bufferView(p, b, off, rng, v.Done), nil
	}
	// Just the region, row-major.
	return hostView[T]{p: p, s1: rng[1], s2: rng[2], off: off, rng: rng, dims: b.rng.dims, done: v.Done}, nil
}

// hostRequest is the engine's form of a host access to the region off+rng
// of b.
func hostRequest[T any](b *Buffer[T], mode Mode, noInit bool, off, rng coherence.Dims) (*engine.HostRequest, error) {
	st := b.st
	pages, err := b.pageRange(off, rng)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRange, err)
	}
	return &engine.HostRequest{
		Access: engine.Access{Buffer: st.id, Geo: &st.geo, Mode: mode.coherence(), NoInit: noInit, Pages: pages,
			Elem: b.elem(), BRange: b.rng.dims3(), Off: off, Rng: rng, VDims: int8(b.rng.dims), Ranged: true},
		Alloc: func(n int) []byte { return bytesOf(make([]T, n/b.elem())) },
	}, nil
}

// sliceOfBytes views bytes as []T (the engines hand out host memory or
// copies made by HostRequest.Alloc, aligned for T).
func sliceOfBytes[T any](b []byte) []T {
	var z T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

func bytesOf[T any](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// bufferView is a host view of the region off+rng of b in p, which holds
// all of b's elements.
func bufferView[T any](p []T, b *Buffer[T], off, rng coherence.Dims, done func(error)) hostView[T] {
	br := b.rng.dims3()
	return hostView[T]{p: p, base: (off[0]*br[1]+off[1])*br[2] + off[2], s1: br[1], s2: br[2],
		off: off, rng: rng, dims: b.rng.dims, done: done}
}

// ---- reading ----

// count is the number of elements in the region.
func (v *hostView[T]) count() int { return v.rng[0] * v.rng[1] * v.rng[2] }

// Range is the accessed range: the buffer's, or Within's.
func (v *hostView[T]) Range() Range { return Range{v.dims, fromInternal(v.dims, v.rng, 1)} }

// Offset is the accessed region's offset: zero, or Within's.
func (v *hostView[T]) Offset() ID { return ID(fromInternal(v.dims, v.off, 0)) }

// index maps element (i, j, k) of the region (internal order) to p, and
// panics outside the region: the data there is not up to date.
func (v *hostView[T]) index(i, j, k int) int {
	v.open()
	if uint(i) >= uint(v.rng[0]) || uint(j) >= uint(v.rng[1]) || uint(k) >= uint(v.rng[2]) {
		panic(fmt.Sprintf("acpp: host accessor index %v outside its range %v", fromInternal(v.dims, [3]int{i, j, k}, 0), v.Range()))
	}
	return v.base + (i*v.s1+j)*v.s2 + k
}

// linear maps a row-major index within the region to p.
func (v *hostView[T]) linear(i int) int {
	v.open()
	if uint(i) >= uint(v.count()) {
		panic(fmt.Sprintf("acpp: host accessor index %d outside its %d elements", i, v.count()))
	}
	k := i % v.rng[2]
	i /= v.rng[2]
	return v.base + ((i/v.rng[1])*v.s1+i%v.rng[1])*v.s2 + k
}

// At reads element i of the region in row-major order (the element itself
// for a 1D buffer), relative to the offset.
func (v *hostView[T]) At(i int) T { return v.p[v.linear(i)] }

// At2 reads element (i, j) of a 2D region, relative to the offset.
func (v *hostView[T]) At2(i, j int) T { return v.p[v.index(0, i, j)] }

// At3 reads element (i, j, k) of a 3D region, relative to the offset.
func (v *hostView[T]) At3(i, j, k int) T { return v.p[v.index(i, j, k)] }

// rows calls f with each row (innermost dimension) of the region in
// row-major order, as a slice of p; it stops when f returns false.
func (v *hostView[T]) rows(f func(row []T) bool) {
	v.open()
	if v.count() == 0 {
		return
	}
	for i := 0; i < v.rng[0]; i++ {
		for j := 0; j < v.rng[1]; j++ {
			lo := v.base + (i*v.s1+j)*v.s2
			if !f(v.p[lo : lo+v.rng[2] : lo+v.rng[2]]) {
				return
			}
		}
	}
}

// All yields the region's elements in row-major order with their index
// (as At takes it).
func (v *hostView[T]) All() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		k := 0
		v.rows(func(row []T) bool {
			for _, x := range row {
				if !yield(k, x) {
					return false
				}
				k++
			}
			return true
		})
	}
}

// Values yields the region's elements in row-major order.
func (v *hostView[T]) Values() iter.Seq[T] {
	return func(yield func(T) bool) {
		v.rows(func(row []T) bool {
			for _, x := range row {
				if !yield(x) {
					return false
				}
			}
			return true
		})
	}
}

// CopyTo copies the region's elements, row-major, into dst and returns how
// many it copied (the smaller of len(dst) and the region's count).
func (v *hostView[T]) CopyTo(dst []T) int {
	n := 0
	v.rows(func(row []T) bool {
		n += copy(dst[n:], row)
		return n < len(dst)
	})
	return n
}

// WriteTo writes the region's elements, row-major, to w as they lie in
// host memory (host byte order, no conversion), straight from the host copy
// without copying it first: a region that is contiguous in the buffer (the
// whole buffer, any 1D region, whole rows of a 2D or 3D one) goes to w in
// one Write. It implements io.WriterTo. As io.Writer requires, w must not
// modify or keep the slices it is given: they are the buffer's memory.
func (v *hostView[T]) WriteTo(w io.Writer) (int64, error) {
	var n int64
	var err error
	write := func(s []T) bool {
		m, e := w.Write(bytesOf(s))
		n += int64(m)
		if e == nil && m < len(s)*v.elemSize() {
			e = io.ErrShortWrite
		}
		err = e
		return e == nil
	}
	r := v.rng
	switch {
	case v.count() == 0:
	case r[2] == v.s2 && (r[1] == v.s1 || r[0] == 1):
		write(v.p[v.base : v.base+v.count()])
	case r[2] == v.s2:
		for i := 0; i < r[0] && write(v.p[v.base+i*v.s1*v.s2:][:r[1]*r[2]]); i++ {
		}
	default:
		v.rows(write)
	}
	return n, err
}

func (v *hostView[T]) elemSize() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// Copy returns a copy of the region's elements, row-major.
func (v *hostView[T]) Copy() []T {
	out := make([]T, v.count())
	return out[:v.CopyTo(out)]
}

// open panics when the access was closed: command groups may have changed
// the data since, and a write would race with them or be lost.
func (v *hostView[T]) open() {
	if v.closed {
		panic("acpp: host accessor used after its Close: command groups may have changed the buffer since, and a write would race with them or be lost; open a new HostAccess or HostRead")
	}
}

// Close ends the access; groups waiting for it go on. Calling it twice is
// safe; any other use after Close panics.
func (v *hostView[T]) Close() {
	if v.closed {
		return
	}
	v.closed = true
	v.done(nil)
}

// ---- writing (HostAccessor only) ----

// writable panics for an accessor opened with ModeRead: a write there
// would change the host copy while other copies still count as valid.
func (a *HostAccessor[T]) writable(what string) {
	if a.mode == ModeRead {
		panic("acpp: HostAccessor." + what + " on an accessor opened with ModeRead; open it with ModeReadWrite (or ModeWrite) to write")
	}
}

// Set writes element i of the region in row-major order, relative to the
// offset.
func (a *HostAccessor[T]) Set(i int, x T) { a.writable("Set"); a.p[a.linear(i)] = x }

// Set2 writes element (i, j) of a 2D region, relative to the offset.
func (a *HostAccessor[T]) Set2(i, j int, x T) { a.writable("Set2"); a.p[a.index(0, i, j)] = x }

// Set3 writes element (i, j, k) of a 3D region, relative to the offset.
func (a *HostAccessor[T]) Set3(i, j, k int, x T) { a.writable("Set3"); a.p[a.index(i, j, k)] = x }

// Slice is the region as one writable slice, row-major. The region must be
// contiguous in the buffer (the whole buffer, any 1D region, or whole rows
// of a 2D or 3D one); otherwise Slice panics: use Set2/Set3, or CopyFrom.
// With ModeRead it is a copy of the region (of any shape), so that no
// write through it reaches the buffer.
func (a *HostAccessor[T]) Slice() []T {
	if a.mode == ModeRead {
		return a.Copy()
	}
	a.open()
	r := a.rng
	if !(r[2] == a.s2 && (r[1] == a.s1 || r[0] <= 1)) && !(r[0] <= 1 && r[1] <= 1) {
		panic(fmt.Sprintf("acpp: HostAccessor.Slice of region %v at %v, which is not contiguous in the buffer; use Set2/Set3 or CopyFrom", a.Range(), a.Offset()))
	}
	n := a.count()
	return a.p[a.base : a.base+n : a.base+n]
}

// CopyFrom copies src, row-major, into the region and returns how many
// elements it copied (the smaller of len(src) and the region's count).
func (a *HostAccessor[T]) CopyFrom(src []T) int {
	a.writable("CopyFrom")
	n := 0
	a.rows(func(row []T) bool {
		n += copy(row, src[n:])
		return n < len(src)
	})
	return n
}

// ---- whole-buffer shortcuts ----

// Read copies the buffer's contents into a new slice (waiting for
// writers). With Within(off, rng) it reads just that region (row-major),
// and only the region's pages move (T3); NoInit is an error.
func (b *Buffer[T]) Read(ctx context.Context, opts ...AccessOption) ([]T, error) {
	if err := checkCtx(ctx, "Buffer.Read"); err != nil {
		return nil, err
	}
	if b == nil || b.st == nil {
		return nil, fmt.Errorf("%w: nil buffer", ErrBadRange)
	}
	if b.st.isClosed() {
		return nil, ErrBufferClosed
	}
	off, rng, _, err := hostRegion(b, ModeRead, opts)
	if err != nil {
		return nil, err
	}
	out := make([]T, rng.Volume())
	if len(out) == 0 {
		return out, nil
	}
	r, err := hostRequest(b, ModeRead, false, off, rng)
	if err != nil {
		return nil, err
	}
	if err := b.st.q.eng.ReadInto(ctx, r, bytesOf(out)); err != nil {
		return nil, b.st.closedMeanwhile(err)
	}
	return out, nil
}

// Write replaces the buffer's contents with data (len must be Len()). With
// Within(off, rng) it replaces just that region, and data holds the
// region's rng.Count() elements, row-major.
func (b *Buffer[T]) Write(ctx context.Context, data []T, opts ...AccessOption) error {
	if err := checkCtx(ctx, "Buffer.Write"); err != nil {
		return err
	}
	if b == nil || b.st == nil {
		return fmt.Errorf("%w: nil buffer", ErrBadRange)
	}
	off, rng, _, err := hostRegion(b, ModeWrite, opts)
	if err != nil {
		return err
	}
	if len(data) != rng.Volume() {
		return fmt.Errorf("%w: %d elements for a region of %d (range %v)", ErrBadRange, len(data), rng.Volume(), Range{b.rng.dims, fromInternal(b.rng.dims, rng, 1)})
	}
	if b.st.isClosed() {
		return ErrBufferClosed
	}
	if len(data) == 0 {
		return nil
	}
	r, err := hostRequest(b, ModeWrite, true, off, rng)
	if err != nil {
		return err
	}
	return b.st.closedMeanwhile(b.st.q.eng.WriteFrom(ctx, r, bytesOf(data)))
}
