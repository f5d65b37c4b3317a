package acpp

import (
	"context"
	"fmt"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/internal/exec"
)

// HostAccessor gives the host access to a buffer's data. HostAccess blocks
// until the data is up to date on the host; until Close, command groups
// that conflict with the access wait.
type HostAccessor[T any] struct {
	p      []T
	rng    Range
	r      [3]int
	mode   coherence.Mode
	done   func(error)
	closed bool
}

// HostAccess waits for the groups that write b, makes the data up to date
// in host memory (for ModeWrite/ModeReadWrite without NoInit; nothing moves
// with NoInit, T1) and returns an accessor of the whole buffer. Close it
// when done. If ctx ends first the access is abandoned and ctx's error
// returned.
func HostAccess[T any](ctx context.Context, b *Buffer[T], mode Mode, opts ...AccessOption) (*HostAccessor[T], error) {
	var cfg accessConfig
	for _, o := range opts {
		o(&cfg)
	}
	st := b.st
	if st.isClosed() {
		return nil, ErrBufferClosed
	}
	if cfg.noInit && mode == ModeRead {
		return nil, fmt.Errorf("%w: a read host accessor cannot be NoInit", ErrMode)
	}
	if st.cb != nil {
		return hostAccessCluster(ctx, b, mode, cfg)
	}
	host := st.q.rt.HostAlloc()
	m, err := st.q.rt.Alloc(st.id, host)
	if err != nil {
		return nil, err
	}
	pages, err := b.pageRange(coherence.Dims{}, b.rng.dims3())
	if err != nil {
		return nil, err
	}
	ready := make(chan func(error), 1)
	g := exec.Group{Name: "host access", Accesses: []coherence.Access{{Buffer: st.id, Pages: pages, Mode: mode.coherence(), Discard: cfg.noInit, Target: host}},
		Host: func(done func(error)) { ready <- done }}
	n, err := st.q.rt.Submit(g)
	if err != nil {
		return nil, err
	}
	select {
	case done := <-ready:
		return &HostAccessor[T]{p: sliceOf[T](m), rng: b.rng, r: b.rng.dims3(), mode: mode.coherence(), done: done}, nil
	case <-n.Done():
		return nil, n.Err()
	case <-ctx.Done():
		// Release the access as soon as it is granted.
		go func() {
			select {
			case done := <-ready:
				done(nil)
			case <-n.Done():
			}
		}()
		return nil, ctx.Err()
	}
}

// Slice is the whole buffer, row-major. Writing through it is allowed only
// for write and read-write accessors.
func (a *HostAccessor[T]) Slice() []T { return a.p[:a.rng.Count()] }

// Range is the buffer's range.
func (a *HostAccessor[T]) Range() Range { return a.rng }

// At reads element i (1D or linear index).
func (a *HostAccessor[T]) At(i int) T { return a.p[i] }

// At2 reads element (i, j) of a 2D buffer.
func (a *HostAccessor[T]) At2(i, j int) T { return a.p[i*a.r[2]+j] }

// Set writes element i; it panics on a read accessor.
func (a *HostAccessor[T]) Set(i int, v T) {
	if a.mode == coherence.Read {
		panic(ErrMode)
	}
	a.p[i] = v
}

// Close ends the access; groups waiting for it go on. Calling it twice is
// safe.
func (a *HostAccessor[T]) Close() {
	if a.closed {
		return
	}
	a.closed = true
	a.done(nil)
}

// Read copies the buffer's contents into a new slice (waiting for writers).
func (b *Buffer[T]) Read(ctx context.Context) ([]T, error) {
	if b.st.cb != nil && !b.st.isClosed() {
		raw, err := b.st.q.cl.job.Read(ctx, b.st.cb, coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			return nil, err
		}
		return elemsOf[T](raw), nil
	}
	ha, err := HostAccess(ctx, b, ModeRead)
	if err != nil {
		return nil, err
	}
	defer ha.Close()
	return append([]T(nil), ha.Slice()...), nil
}

// Write replaces the buffer's contents with data (len must be Len()).
func (b *Buffer[T]) Write(ctx context.Context, data []T) error {
	if len(data) != b.Len() {
		return fmt.Errorf("%w: %d elements for a buffer of %d", ErrBadRange, len(data), b.Len())
	}
	if b.st.cb != nil && !b.st.isClosed() {
		return b.st.q.cl.job.Write(ctx, b.st.cb, coordinator.Dims{}, coordinator.Dims{}, bytesOf(data))
	}
	ha, err := HostAccess(ctx, b, ModeWrite, NoInit)
	if err != nil {
		return err
	}
	defer ha.Close()
	copy(ha.Slice(), data)
	return nil
}
