package acpp

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
)

// USM kinds for Malloc (B3).
const (
	USMDevice = device.MemDevice // device memory (host memory on a CPU)
	USMHost   = device.MemHost   // host memory the device can reach
	USMShared = device.MemShared // migrates on access
)

// USM is a typed pointer to a unified shared memory allocation: from
// Malloc, or a buffer's allocation (Buffer.USM). USM operations are ordered
// only by the events you pass to After.
type USM[T any] struct {
	mem  *device.Mem
	off  int       // elements
	n    int       // elements
	live *usmState // whether the allocation was freed (shared by the pointers into it)
}

// usmState is shared by the pointers into one allocation: Malloc's, or a
// buffer's on one device (Buffer.USM).
type usmState struct {
	freed  atomic.Bool
	closed atomic.Bool // set with freed when the queue's Close took the allocation
	buffer bool        // a buffer's allocation: Release or Close frees it, not Free
}

// check refuses a nil pointer and one into a freed allocation: what uses
// the memory (a copy, a fill, a kernel, a buffer, Host) calls it first.
func (p USM[T]) check(what string) error {
	if p.mem == nil {
		return fmt.Errorf("%w: %s of a nil USM pointer", ErrBadRange, what)
	}
	if p.live != nil && p.live.freed.Load() {
		if p.live.closed.Load() {
			return fmt.Errorf("%w: %s of a USM allocation of a closed queue (%s memory on %s went with the queue's devices at Close); Malloc on an open queue", ErrClosed, what, p.mem.Kind, p.mem.Device)
		}
		if p.live.buffer {
			return fmt.Errorf("%w: %s of a buffer's USM pointer (Buffer.USM) whose allocation the buffer's Release or Close freed (%s memory on %s); call USM again after Release", ErrBadRange, what, p.mem.Kind, p.mem.Device)
		}
		return fmt.Errorf("%w: %s of a USM allocation that Free freed (%s memory on %s)", ErrBadRange, what, p.mem.Kind, p.mem.Device)
	}
	return nil
}

// Malloc allocates n elements of kind on the queue's default device, or on
// the device named by On. On is the only option it takes: any other is an
// error (ErrOption). After Close it returns ErrClosed. Free the allocation
// with Free; those not freed go when the queue is closed, and a use of a
// pointer into one after that is ErrClosed.
func Malloc[T any](q *Queue, n int, kind device.MemKind, opts ...SubmitOption) (USM[T], error) {
	if q == nil {
		return USM[T]{}, errNilQueue("Malloc")
	}
	es, err := elemSize[T]()
	if err != nil {
		return USM[T]{}, err
	}
	if n <= 0 || n > math.MaxInt/es {
		return USM[T]{}, fmt.Errorf("%w: Malloc of %d elements of %d bytes", ErrBadRange, n, es)
	}
	cfg, err := onlyOptions("Malloc", opts, "On")
	if err != nil {
		return USM[T]{}, err
	}
	if q.isClosed() {
		return USM[T]{}, fmt.Errorf("%w: Malloc after Close", ErrClosed)
	}
	m, err := q.eng.Malloc(cfg.dev, kind, n*es)
	if err != nil {
		return USM[T]{}, err
	}
	live := new(usmState)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed { // Close began meanwhile: the allocation goes with the devices
		return USM[T]{}, fmt.Errorf("%w: Malloc after Close", ErrClosed)
	}
	q.usm[live] = struct{}{}
	return USM[T]{mem: m, n: n, live: live}, nil
}

// Free frees p's allocation. p must be the pointer Malloc of this queue
// returned (not one Add made, nor a buffer's allocation from Buffer.USM),
// not freed yet, with no open buffer over it (NewBufferOver) and no
// Memcpy, Memset or FillUSM still using it. Anything else is refused with
// ErrBadRange and frees nothing; after Close, Free and Malloc return
// ErrClosed. A kernel that takes p as an argument is not tracked: wait
// for its group before Free.
func Free[T any](q *Queue, p USM[T]) error {
	if q == nil {
		return errNilQueue("Free")
	}
	if p.mem == nil {
		return fmt.Errorf("%w: Free of a nil USM pointer", ErrBadRange)
	}
	if q.isClosed() {
		return fmt.Errorf("%w: Free after Close (the queue's Malloc allocations went with its devices)", ErrClosed)
	}
	if p.off != 0 {
		return fmt.Errorf("%w: Free of a pointer %d elements into its allocation (from Add); free the pointer Malloc returned", ErrBadRange, p.off)
	}
	if err := q.eng.Free(p.mem); err != nil {
		return err
	}
	if p.live != nil {
		p.live.freed.Store(true)
		q.mu.Lock()
		delete(q.usm, p.live)
		q.mu.Unlock()
	}
	return nil
}

// Len is the number of elements from the pointer to the allocation's end.
func (p USM[T]) Len() int { return p.n }

// Kind is the allocation's USM kind.
// The zero pointer's is the zero MemKind.
func (p USM[T]) Kind() device.MemKind {
	if p.mem == nil {
		return 0
	}
	return p.mem.Kind
}

// Device is the device the allocation belongs to.
// The zero pointer's is the zero DeviceID.
func (p USM[T]) Device() DeviceID {
	if p.mem == nil {
		return DeviceID{}
	}
	return p.mem.Device
}

// Addr is the device address of the first element; stable for the
// allocation's life (B2). The zero pointer's is 0.
func (p USM[T]) Addr() uint64 {
	if p.mem == nil {
		return 0
	}
	var z T
	return p.mem.Addr + uint64(p.off)*uint64(unsafe.Sizeof(z))
}

// Add returns the pointer i elements further. Like slicing past a slice's
// length, an i outside [0, elements left] is a programmer's error: Add
// panics, naming both.
func (p USM[T]) Add(i int) USM[T] {
	if i < 0 || i > p.n {
		panic(fmt.Sprintf("acpp: USM.Add(%d) outside the allocation of %d elements", i, p.n))
	}
	return USM[T]{mem: p.mem, off: p.off + i, n: p.n - i, live: p.live}
}

// Host is the memory as a slice, when the host can touch it (host and
// shared USM; device USM of a CPU device). A pointer into a freed
// allocation is ErrBadRange.
func (p USM[T]) Host() ([]T, error) {
	if p.mem != nil {
		if err := p.check("Host"); err != nil {
			return nil, err
		}
	}
	if p.mem == nil || p.mem.Host == nil {
		return nil, ErrNotHostVisible
	}
	return sliceOf[T](p.mem)[p.off : p.off+p.n], nil
}

func (p USM[T]) byteOff() int {
	var z T
	return p.off * int(unsafe.Sizeof(z))
}

func (p USM[T]) kernelArg(argCtx) (device.Arg, error) {
	if err := p.check("a kernel argument"); err != nil {
		return device.Arg{}, err
	}
	var z T
	return device.Arg{Kind: device.ArgPointer, Space: p.mem.Space(), Mem: p.mem, Offset: p.byteOff(), ElemSize: int(unsafe.Sizeof(z))}, nil
}

// usmOptions applies the options of a USM operation (what names it):
// After and Named; any other is an error.
func usmOptions(what string, opts []SubmitOption) (submitConfig, error) {
	return onlyOptions(what, opts, "After", "Named")
}

// usmOp submits one USM op as a group without accessors, ordered by
// cfg.after and named cfg.name (or name).
func (q *Queue) usmOp(name string, op device.Op, mems []*device.Mem, cfg submitConfig) (*Event, error) {
	after := make([]engine.Event, 0, len(cfg.after))
	for _, e := range cfg.after {
		if e != nil {
			if e.e == nil {
				return nil, errZeroEvent
			}
			after = append(after, e.e)
		}
	}
	if cfg.name != "" {
		name = cfg.name
	}
	ev, err := q.eng.USMOp(name, op, mems, after)
	if err != nil {
		return nil, err
	}
	return &Event{ev}, nil
}

// Memcpy copies n elements from src to dst (any USM kinds and devices).
// It takes the options After and Named; any other is an error
// (ErrOption): the copy runs on the device that reaches the memory.
func Memcpy[T any](q *Queue, dst, src USM[T], n int, opts ...SubmitOption) (*Event, error) {
	if q == nil {
		return nil, errNilQueue("Memcpy")
	}
	cfg, err := usmOptions("Memcpy", opts)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(dst.check("Memcpy's destination"), src.check("Memcpy's source")); err != nil {
		return nil, err
	}
	if n < 0 || n > dst.n || n > src.n {
		return nil, fmt.Errorf("%w: Memcpy of %d elements (source has %d, destination %d)", ErrBadRange, n, src.n, dst.n)
	}
	var z T
	es := int(unsafe.Sizeof(z))
	op := device.CopyOp{
		Src:  device.Region{Mem: src.mem, Offset: src.byteOff(), Extent: [3]int{1, 1, n * es}},
		Dst:  device.Region{Mem: dst.mem, Offset: dst.byteOff(), Extent: [3]int{1, 1, n * es}},
		Size: [3]int{1, 1, n * es}, ElemSize: 1,
	}
	if n == 0 {
		op.Src.Extent, op.Dst.Extent = [3]int{1, 1, 1}, [3]int{1, 1, 1}
		op.Size = [3]int{1, 1, 0}
	}
	return q.usmOp("memcpy", op, []*device.Mem{src.mem, dst.mem}, cfg)
}

// Memset sets n elements' bytes to b. It takes the options After and
// Named; any other is an error (ErrOption).
func Memset[T any](q *Queue, p USM[T], b byte, n int, opts ...SubmitOption) (*Event, error) {
	if q == nil {
		return nil, errNilQueue("Memset")
	}
	cfg, err := usmOptions("Memset", opts)
	if err != nil {
		return nil, err
	}
	if err := p.check("Memset"); err != nil {
		return nil, err
	}
	var z T
	return q.fillUSM("memset", p.mem, p.byteOff(), n, p.n, int(unsafe.Sizeof(z)), []byte{b}, cfg)
}

// FillUSM sets n elements to v. It takes the options After and Named; any
// other is an error (ErrOption).
func FillUSM[T any](q *Queue, p USM[T], v T, n int, opts ...SubmitOption) (*Event, error) {
	if q == nil {
		return nil, errNilQueue("FillUSM")
	}
	cfg, err := usmOptions("FillUSM", opts)
	if err != nil {
		return nil, err
	}
	if err := p.check("FillUSM"); err != nil {
		return nil, err
	}
	es := int(unsafe.Sizeof(v))
	pat := make([]byte, es)
	copy(pat, unsafe.Slice((*byte)(unsafe.Pointer(&v)), es))
	return q.fillUSM("fill", p.mem, p.byteOff(), n, p.n, es, pat, cfg)
}

func (q *Queue) fillUSM(name string, m *device.Mem, off, n, have, es int, pat []byte, cfg submitConfig) (*Event, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil USM pointer", ErrBadRange)
	}
	if n < 0 || n > have {
		return nil, fmt.Errorf("%w: %s of %d elements, the pointer has %d", ErrBadRange, name, n, have)
	}
	return q.usmOp(name, device.FillOp{Dst: m, Offset: off, Bytes: n * es, Pattern: pat}, []*device.Mem{m}, cfg)
}
