package acpp

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/internal/engine"
)

// bufState is a buffer's identity, shared by its reinterpreted or reshaped
// views.
type bufState struct {
	q    *Queue
	id   coherence.BufferID
	dims int // dimensions of the owner's range
	geo  coherence.Geometry

	mu     sync.Mutex  // serialises close, Release and USM's pointers
	closed atomic.Bool // set once by close
	// usm is the state of the pointers Buffer.USM handed out, per device:
	// Release and close mark them freed, so that a use is refused rather
	// than touching freed memory.
	usm map[DeviceID]*usmState
}

// usmState is the shared state of the USM pointers to the buffer's
// allocation on id. The caller holds mu.
func (st *bufState) usmStateLocked(id DeviceID) *usmState {
	s := st.usm[id]
	if s == nil {
		if st.usm == nil {
			st.usm = make(map[DeviceID]*usmState)
		}
		s = &usmState{buffer: true}
		st.usm[id] = s
	}
	return s
}

// takeUSMLocked marks the pointers to the allocation on id freed and
// returns their state, for restoreUSMLocked. The caller holds mu.
func (st *bufState) takeUSMLocked(id DeviceID) *usmState {
	s := st.usm[id]
	if s != nil {
		s.freed.Store(true)
		delete(st.usm, id)
	}
	return s
}

// restoreUSMLocked undoes takeUSMLocked for a release that was refused.
// The caller holds mu.
func (st *bufState) restoreUSMLocked(id DeviceID, s *usmState) {
	if s == nil || st.usm[id] != nil {
		return
	}
	s.freed.Store(false)
	if st.usm == nil {
		st.usm = make(map[DeviceID]*usmState)
	}
	st.usm[id] = s
}

// freeUSMLocked marks the pointers to the allocation on id freed (all
// devices' when all). The caller holds mu.
func (st *bufState) freeUSMLocked(id DeviceID, all bool) {
	for d, s := range st.usm {
		if all || d == id {
			s.freed.Store(true)
			delete(st.usm, d)
		}
	}
}

// Buffer is a fixed-size 1–3D array of T that the runtime keeps coherent
// across the devices that access it. T must hold no pointers.
type Buffer[T any] struct {
	st   *bufState
	rng  Range
	view bool // a Reinterpret or Reshape view: Close is the owner's job
}

// BufferOption configures a buffer.
type BufferOption func(*bufferConfig)

type bufferConfig struct {
	page     [3]int // user order, 0 = default
	pageDims int
	pageSet  bool // PageSize was given
	copyIn   bool
	name     string
	nameSet  bool // BufferName was given
	// twice names options given more than once with different values: the
	// later would silently undo the earlier, so the constructor refuses
	// them, as Submit does.
	twice []string
}

// again records that option name was given before with another value.
func (c *bufferConfig) again(name string) {
	if !slices.Contains(c.twice, name) {
		c.twice = append(c.twice, name)
	}
}

// BufferName names the buffer in the runtime's errors (a failed copy or
// allocation, a cluster job's lost pages: `buffer "grid" lost …`);
// unnamed buffers are named by number. Two different names are ErrOption.
func BufferName(name string) BufferOption {
	return func(c *bufferConfig) {
		if c.nameSet && c.name != name {
			c.again("BufferName")
		}
		c.name, c.nameSet = name, true
	}
}

// PageSize sets the page size in elements per dimension (P1), in the order
// of the buffer's range: smaller pages track data more finely (fewer
// copies, more independent groups), larger ones cost less bookkeeping.
// It needs one size per dimension of the buffer; PageSize() with none,
// and two different PageSize options, are ErrOption.
func PageSize(size ...int) BufferOption {
	return func(c *bufferConfig) {
		var page [3]int
		copy(page[:], size)
		if c.pageSet && (c.pageDims != len(size) || c.page != page) {
			c.again("PageSize")
		}
		c.pageDims, c.page, c.pageSet = len(size), page, true
	}
}

// CopyData makes NewBufferFrom copy the slice into a buffer-owned host
// allocation (B5) instead of using it in place; there is then no
// write-back. NewBuffer and NewBufferOver refuse it (ErrOption).
func CopyData() BufferOption { return func(c *bufferConfig) { c.copyIn = true } }

func elemSize[T any]() (int, error) {
	var z T
	t := reflect.TypeOf(&z).Elem()
	if hasPointers(t) {
		return 0, fmt.Errorf("%w: %s", ErrElemType, t)
	}
	if t.Size() == 0 {
		return 0, fmt.Errorf("%w: %s has size 0", ErrElemType, t)
	}
	return int(t.Size()), nil
}

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.UnsafePointer, reflect.Slice, reflect.Map, reflect.Chan,
		reflect.Func, reflect.Interface, reflect.String:
		return true
	case reflect.Array:
		return hasPointers(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

func (q *Queue) geometry(r Range, elem int, cfg bufferConfig) (coherence.Geometry, error) {
	if err := r.valid(); err != nil {
		return coherence.Geometry{}, err
	}
	if r.Count() == 0 {
		return coherence.Geometry{}, fmt.Errorf("%w: buffer range %v is empty", ErrBadRange, r)
	}
	var ps coherence.Dims
	if cfg.pageDims != 0 {
		if cfg.pageDims != r.dims {
			return coherence.Geometry{}, fmt.Errorf("%w: PageSize has %d dimensions, the buffer %d", ErrBadRange, cfg.pageDims, r.dims)
		}
		ps = toInternal(r.dims, cfg.page, 1)
	}
	geo, err := coherence.NewGeometry(r.dims3(), elem, ps)
	if err != nil {
		// A buffer too large for int, more pages than coherence tracks
		// (coherence.MaxPages), a page size below 1: the range or page size
		// does not fit, so it is ErrBadRange as the API documents.
		return coherence.Geometry{}, fmt.Errorf("%w: %w", ErrBadRange, err)
	}
	return geo, nil
}

func (q *Queue) addBuffer(st *bufState, spec engine.BufferSpec) error {
	spec.Geo = st.geo
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	id, err := q.eng.NewBuffer(spec)
	if err != nil {
		return err
	}
	st.id = id
	q.buffers[st] = struct{}{}
	return nil
}

// bufferSetup applies a constructor's options and derives the element size
// and page geometry of a new buffer of T over r.
func bufferSetup[T any](q *Queue, r Range, opts []BufferOption) (bufferConfig, int, coherence.Geometry, error) {
	var cfg bufferConfig
	if q == nil {
		return cfg, 0, coherence.Geometry{}, errNilQueue("a new buffer")
	}
	for _, o := range opts {
		if o != nil { // a nil option is none, as in onlyOptions
			o(&cfg)
		}
	}
	if len(cfg.twice) > 0 {
		return cfg, 0, coherence.Geometry{}, fmt.Errorf("%w: %s given more than once with different values; the buffer has one: pass it once",
			ErrOption, strings.Join(cfg.twice, ", "))
	}
	if cfg.pageSet && cfg.pageDims == 0 {
		return cfg, 0, coherence.Geometry{}, fmt.Errorf("%w: PageSize() names no size; give one per dimension of the buffer (PageSize(64, 4096)), or drop it for the default", ErrOption)
	}
	es, err := elemSize[T]()
	if err != nil {
		return cfg, 0, coherence.Geometry{}, err
	}
	geo, err := q.geometry(r, es, cfg)
	return cfg, es, geo, err
}

// NewBuffer makes an uninitialised buffer (T2): nothing is allocated until a
// device first uses it (B5), and nothing is copied before the first write.
func NewBuffer[T any](q *Queue, r Range, opts ...BufferOption) (*Buffer[T], error) {
	cfg, _, geo, err := bufferSetup[T](q, r, opts)
	if err != nil {
		return nil, err
	}
	if cfg.copyIn {
		return nil, fmt.Errorf("%w: NewBuffer has no data to copy; CopyData applies to NewBufferFrom only: drop it", ErrOption)
	}
	st := &bufState{q: q, geo: geo, dims: r.dims}
	if err := q.addBuffer(st, engine.BufferSpec{Name: cfg.name}); err != nil {
		return nil, err
	}
	return &Buffer[T]{st: st, rng: r}, nil
}

// NewBufferFrom makes a buffer over data, which holds r.Count() elements in
// row-major order. By default data itself becomes the buffer's host
// allocation (L1): CPU kernels work on it in place, and Close (or
// WriteBack) makes it up to date. The program must not touch data while
// the buffer is open, except after WriteBack and before the next
// submission. With CopyData the contents are copied instead.
func NewBufferFrom[T any](q *Queue, data []T, r Range, opts ...BufferOption) (*Buffer[T], error) {
	cfg, es, geo, err := bufferSetup[T](q, r, opts)
	if err != nil {
		return nil, err
	}
	if len(data) != r.Count() {
		return nil, fmt.Errorf("%w: slice has %d elements, range %v needs %d", ErrBadRange, len(data), r, r.Count())
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), len(data)*es)
	st := &bufState{q: q, geo: geo, dims: r.dims}
	if err := q.addBuffer(st, engine.BufferSpec{Data: raw, Copy: cfg.copyIn, Name: cfg.name}); err != nil {
		return nil, err
	}
	return &Buffer[T]{st: st, rng: r}, nil
}

// NewBufferOver makes a buffer over a USM allocation (B3). The buffer is
// bound to p's device: that memory is its allocation there and holds its
// initial contents.
func NewBufferOver[T any](q *Queue, p USM[T], r Range, opts ...BufferOption) (*Buffer[T], error) {
	cfg, _, geo, err := bufferSetup[T](q, r, opts)
	if err != nil {
		return nil, err
	}
	if cfg.copyIn {
		return nil, fmt.Errorf("%w: NewBufferOver uses the USM allocation in place; CopyData applies to NewBufferFrom only: drop it (or Memcpy into a Malloc of your own first)", ErrOption)
	}
	if p.mem != nil {
		if err := p.check("NewBufferOver"); err != nil {
			return nil, err
		}
	}
	if p.mem == nil || p.n < r.Count() {
		return nil, fmt.Errorf("%w: USM allocation holds %d elements, range %v needs %d", ErrBadRange, p.n, r, r.Count())
	}
	if p.off != 0 {
		return nil, fmt.Errorf("%w: a buffer must start at the beginning of its USM allocation", ErrBadRange)
	}
	st := &bufState{q: q, geo: geo, dims: r.dims}
	if err := q.addBuffer(st, engine.BufferSpec{Over: p.mem, Name: cfg.name}); err != nil {
		return nil, err
	}
	return &Buffer[T]{st: st, rng: r}, nil
}

// Range is the buffer's (or view's) range.
func (b *Buffer[T]) Range() Range { return b.rng }

// Len is the number of elements.
func (b *Buffer[T]) Len() int { return b.rng.Count() }

// PageSize is the page size in elements, in the buffer's dimension order.
func (b *Buffer[T]) PageSize() [3]int {
	return fromInternal(b.st.dims, b.st.geo.PageSize, 1)
}

func (b *Buffer[T]) elem() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// Reshape returns a view of the same data with another range of the same
// element count (P5). Accessors of the view may cover a larger page range
// than the elements they touch.
func (b *Buffer[T]) Reshape(r Range) (*Buffer[T], error) {
	if b == nil || b.st == nil {
		return nil, errNilBuffer("Reshape")
	}
	if err := r.valid(); err != nil {
		return nil, err
	}
	if r.Count() != b.rng.Count() {
		return nil, fmt.Errorf("%w: reshape %v to %v changes the element count", ErrBadRange, b.rng, r)
	}
	return &Buffer[T]{st: b.st, rng: r, view: true}, nil
}

// Reinterpret returns a view of b's bytes as elements of U with range r
// (P5); r.Count()*sizeof(U) must equal b's size in bytes.
func Reinterpret[U, T any](b *Buffer[T], r Range) (*Buffer[U], error) {
	if b == nil || b.st == nil {
		return nil, errNilBuffer("Reinterpret")
	}
	es, err := elemSize[U]()
	if err != nil {
		return nil, err
	}
	if err := r.valid(); err != nil {
		return nil, err
	}
	if bytes := b.st.geo.Bytes(); bytes%es != 0 || r.Count() != bytes/es {
		return nil, fmt.Errorf("%w: %v elements of %d bytes do not cover the buffer's %d bytes", ErrBadRange, r, es, b.st.geo.Bytes())
	}
	return &Buffer[U]{st: b.st, rng: r, view: true}, nil
}

// pageRange maps an access region (internal order) to the page range.
func (b *Buffer[T]) pageRange(off, rng coherence.Dims) (coherence.Box, error) {
	if !b.view && b.rng.dims3() == b.st.geo.Range {
		return b.st.geo.PageRange(off, rng)
	}
	return b.st.geo.ViewPageRange(coherence.View{Range: b.rng.dims3(), ElemSize: b.elem()}, off, rng)
}

func (st *bufState) isClosed() bool { return st.closed.Load() }

// WriteBack makes the host allocation up to date and waits for it: for a
// buffer made over a slice (L1), the slice then holds the buffer's contents.
func (b *Buffer[T]) WriteBack(ctx context.Context) error {
	if err := checkCtx(ctx, "Buffer.WriteBack"); err != nil {
		return err
	}
	if b == nil || b.st == nil {
		return errNilBuffer("WriteBack")
	}
	if b.st.isClosed() {
		return ErrBufferClosed
	}
	return b.st.q.eng.WriteBack(ctx, b.st.id)
}

// Close waits for every command group that uses the buffer, writes the
// data back to the user's slice (L1), and frees the buffer's allocations.
// Views share their owner's data: closing a view only forgets the view.
// Calling Close twice is safe.
func (b *Buffer[T]) Close() error {
	if b == nil || b.st == nil {
		return errNilBuffer("Close")
	}
	if b.view {
		return nil
	}
	return b.st.close(context.Background())
}

// closedMeanwhile is err of a call on the buffer, as ErrBufferClosed when
// the buffer (or its queue) was closed while the call ran: the engine then
// no longer knows it ("unknown buffer"), which says nothing of the cause.
func (st *bufState) closedMeanwhile(err error) error {
	if err == nil || errors.Is(err, ErrClosed) || !st.isClosed() && !st.q.isClosed() {
		return err
	}
	return fmt.Errorf("%w while the call ran (%v)", ErrBufferClosed, err)
}

func (st *bufState) close(ctx context.Context) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed.Swap(true) {
		return nil
	}
	st.freeUSMLocked(DeviceID{}, true)
	err := st.q.eng.CloseBuffer(ctx, st.id)
	st.q.mu.Lock()
	delete(st.q.buffers, st)
	st.q.mu.Unlock()
	return err
}

// Release frees the buffer's allocation on device id now (B1), after
// copying to the host the pages whose only valid copy is there. Later use
// on that device allocates again. The host allocation cannot be released:
// close the buffer instead.
func (b *Buffer[T]) Release(ctx context.Context, id DeviceID) error {
	if err := checkCtx(ctx, "Buffer.Release"); err != nil {
		return err
	}
	if b == nil || b.st == nil {
		return errNilBuffer("Release")
	}
	// The pointers USM handed out for id are marked freed before the
	// release is submitted, and the lock is not held while it waits: a
	// release whose ctx ends still frees the allocation later, and USM or
	// Close of the same buffer must not wait behind it.
	b.st.mu.Lock()
	if b.st.isClosed() {
		b.st.mu.Unlock()
		return ErrBufferClosed
	}
	marked := b.st.takeUSMLocked(id)
	b.st.mu.Unlock()
	err := b.st.q.eng.Release(ctx, b.st.id, id)
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if errors.Is(err, engine.ErrMode) || errors.Is(err, engine.ErrNoDevice) {
		// Refused before anything was submitted: nothing is freed, and
		// the pointers stay valid.
		b.st.restoreUSMLocked(id, marked)
		return err
	}
	b.st.freeUSMLocked(id, false) // and those USM handed out meanwhile
	return err
}

// USM returns the buffer's allocation on device id as a USM pointer (B3),
// allocating it if needed (B5). It stays valid and the same until the
// buffer is closed or the allocation released (B2); after that, a use of
// it is refused with ErrBadRange (call USM again after Release). USM
// operations on it are not ordered with the buffer's command groups:
// synchronise yourself (Wait on their events).
func (b *Buffer[T]) USM(id DeviceID) (USM[T], error) {
	if b == nil || b.st == nil {
		return USM[T]{}, errNilBuffer("USM")
	}
	if b.st.isClosed() {
		return USM[T]{}, ErrBufferClosed
	}
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if b.st.isClosed() {
		return USM[T]{}, ErrBufferClosed
	}
	m, err := b.st.q.eng.BufferUSM(b.st.id, id)
	if err != nil {
		return USM[T]{}, err
	}
	return USM[T]{mem: m, n: b.st.geo.Bytes() / b.elem(), live: b.st.usmStateLocked(id)}, nil
}

// errNilBuffer is the error of a Buffer method called on a nil buffer (a
// failed NewBuffer's result): ErrBadRange, as accessors of one are.
func errNilBuffer(method string) error {
	return fmt.Errorf("%w: Buffer.%s of a nil buffer", ErrBadRange, method)
}
