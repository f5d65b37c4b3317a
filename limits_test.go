package acpp

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/acpp/acpp/coherence"
)

// The limits docs/API.md states, each at its edge: the largest value
// accepted, one past it refused with the documented error, nothing large
// allocated on the way (docs/CONFORMANCE.md, "Every limit in API.md,
// JOBS.md and RUNTIME.md checked").

// TestRangeWhoseCountOverflowsRefused: a range whose element count does
// not fit an int (R3(1<<30, 1<<30, 1<<30) wraps to 0, R2(1<<62+1, 16) to
// 16) is ErrBadRange wherever a range is taken: a buffer, a view, a
// launch. Before, the buffer was refused as "empty", the view accepted
// with the wrapped count and the launch ran nothing.
func TestRangeWhoseCountOverflowsRefused(t *testing.T) {
	q := newQueue(t, WithWorkers(1))
	wraps := []Range{R3(1<<30, 1<<30, 1<<30), R2(1<<62+1, 16), R1(math.MaxInt).withDim(2, 2)}
	for _, r := range wraps {
		if _, err := NewBuffer[byte](q, r); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), "more than") {
			t.Errorf("NewBuffer(%v) = %v, want ErrBadRange saying it has more than MaxInt elements", r, err)
		}
	}
	b := must(NewBuffer[byte](q, R1(16)))
	if _, err := b.Reshape(R2(1<<62+1, 16)); !errors.Is(err, ErrBadRange) {
		t.Errorf("Reshape of 16 elements to R2(1<<62+1, 16) (16 when wrapped) = %v, want ErrBadRange", err)
	}
	if _, err := Reinterpret[uint32](b, R2(1<<62+1, 4)); !errors.Is(err, ErrBadRange) {
		t.Errorf("Reinterpret of 16 bytes as R2(1<<62+1, 4) uint32 = %v, want ErrBadRange", err)
	}
	// Count fits, Count × element size does not: refused, not wrapped.
	if _, err := Reinterpret[uint64](b, R1(1<<61+2)); !errors.Is(err, ErrBadRange) {
		t.Errorf("Reinterpret of 16 bytes as 1<<61+2 uint64 (16 bytes when wrapped) = %v, want ErrBadRange", err)
	}
	ran := false
	_, err := q.Submit(func(h *Handler) error {
		h.ParallelFor(R3(1<<30, 1<<30, 1<<30), func(Item) { ran = true })
		return nil
	})
	if !errors.Is(err, ErrBadRange) {
		t.Errorf("ParallelFor over R3(1<<30, 1<<30, 1<<30) = %v, want ErrBadRange", err)
	}
	if err := q.Wait(context.Background()); err != nil || ran {
		t.Errorf("Wait = %v, kernel ran %v; want nothing run", err, ran)
	}
	// The largest count is accepted as a range (a launch with no accessor
	// over it is refused only by what it would need, not by the range).
	if err := R1(math.MaxInt).valid(); err != nil {
		t.Errorf("R1(MaxInt).valid() = %v, want nil", err)
	}
}

// withDim sets extent d of a copy of r (for ranges no constructor makes).
func (r Range) withDim(dims, n int) Range {
	r.dims = dims
	r.e[dims-1] = n
	return r
}

// TestBufferGeometryLimitsAreErrBadRange: what coherence refuses of a
// buffer's geometry (bytes beyond int, more than coherence.MaxPages pages,
// a page size below 1) is ErrBadRange, the error API.md gives for a range
// that does not fit, and is refused before anything is allocated.
func TestBufferGeometryLimitsAreErrBadRange(t *testing.T) {
	q := newQueue(t, WithWorkers(1))
	cases := []struct {
		name string
		mk   func() error
		msg  string
	}{
		{"bytes beyond int", func() error { _, err := NewBuffer[float32](q, R1(math.MaxInt/2)); return err }, "overflows int"},
		{"MaxPages+1 pages", func() error { _, err := NewBuffer[byte](q, R1(coherence.MaxPages+1), PageSize(1)); return err }, "more than MaxPages"},
		{"page size 0", func() error { _, err := NewBuffer[byte](q, R1(16), PageSize(0)); return err }, "PageSize"},
		{"page size -1", func() error { _, err := NewBuffer[byte](q, R2(4, 4), PageSize(1, -1)); return err }, "PageSize"},
		{"empty", func() error { _, err := NewBuffer[byte](q, R2(4, 0)); return err }, "empty"},
	}
	for _, tc := range cases {
		if err := tc.mk(); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want ErrBadRange containing %q", tc.name, err, tc.msg)
		}
	}
	// One page per element is fine well below MaxPages.
	if _, err := NewBuffer[byte](q, R1(4096), PageSize(1)); err != nil {
		t.Errorf("4096 one-byte pages: %v", err)
	}
}

// TestQueueWorkerAndDeviceBounds: WithWorkers takes 0 (GOMAXPROCS) to
// 1024 and WithCPUDevices 0 (one) to 64; beyond either,
// or negative, NewQueue refuses with ErrOption before it starts a
// goroutine (before the bound, --workers 100000000 started 10⁸ goroutines
// and the process died).
func TestQueueWorkerAndDeviceBounds(t *testing.T) {
	ctx := context.Background()
	for _, o := range []struct {
		name string
		opt  Option
	}{
		{"WithWorkers(1024+1)", WithWorkers(1024 + 1)},
		{"WithWorkers(-1)", WithWorkers(-1)},
		{"WithWorkers(MaxInt)", WithWorkers(math.MaxInt)},
		{"WithCPUDevices(64+1)", WithCPUDevices(64 + 1)},
		{"WithCPUDevices(-1)", WithCPUDevices(-1)},
	} {
		if q, err := NewQueue(ctx, o.opt); !errors.Is(err, ErrOption) {
			if q != nil {
				q.Close()
			}
			t.Errorf("NewQueue(%s) = %v, want ErrOption", o.name, err)
		}
	}
	q := newQueue(t, WithWorkers(1024))
	if n := len(q.Devices()); n < 1 {
		t.Fatalf("queue with 1024 workers has %d devices", n)
	}
	q2 := newQueue(t, WithCPUDevices(64), WithWorkers(1), WithKind(CPU))
	if n := len(q2.Devices()); n != 64 {
		t.Errorf("WithCPUDevices(64) opened %d devices, want %d", n, 64)
	}
}

// TestMemoryLimitEdges_B5: a budget of n bytes admits buffers of n bytes
// in all and refuses the next byte; Share takes (0, 1] (1 is all of each
// memory) and NewQueue refuses anything else with ErrOption; a share so
// small that it rounds below one byte admits nothing (it used to mean no
// budget at all); the default is 75% of host memory.
func TestMemoryLimitEdges_B5(t *testing.T) {
	ctx := context.Background()
	use := func(q *Queue, n int) error {
		b, err := NewBuffer[byte](q, R1(n))
		if err != nil {
			return err
		}
		return groupErr(ctx, q, func(h *Handler) error {
			w := Write(h, b, NoInit)
			h.SingleTask(func() { w.Set(0, 1) })
			return nil
		})
	}
	q := newQueue(t, WithDevice(CPU, 0), WithMemoryLimit(MemoryLimit{Bytes: 8192}))
	if err := use(q, 8192); err != nil {
		t.Fatalf("a buffer of exactly the 8192-byte budget: %v", err)
	}
	if err := use(q, 1); !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("one byte past the budget: %v, want ErrMemoryLimit", err)
	}
	q.Wait(ctx)

	for _, l := range []MemoryLimit{{Share: 1.0000001}, {Share: -0.5}, {Share: math.NaN()}, {Bytes: 1, Share: 0.5}, {Off: true, Share: 0.5}} {
		if q, err := NewQueue(ctx, WithMemoryLimit(l)); !errors.Is(err, ErrOption) {
			if q != nil {
				q.Close()
			}
			t.Errorf("NewQueue(WithMemoryLimit(%+v)) = %v, want ErrOption", l, err)
		}
	}
	all := newQueue(t, WithDevice(CPU, 0), WithMemoryLimit(MemoryLimit{Share: 1}))
	if m := all.MemoryBudgets()[0]; m.Size != 0 && m.Budget != m.Size {
		t.Errorf("Share 1: budget %d of %d bytes, want all of it", m.Budget, m.Size)
	}
	tiny := newQueue(t, WithDevice(CPU, 0), WithMemoryLimit(MemoryLimit{Share: 1e-15}))
	if m := tiny.MemoryBudgets()[0]; m.Size != 0 {
		if m.Budget == 0 {
			t.Errorf("Share 1e-15 of %d bytes: budget 0, which means no budget", m.Size)
		}
		if err := use(tiny, 4096); !errors.Is(err, ErrMemoryLimit) {
			t.Errorf("4 KiB under a share that rounds below one byte: %v, want ErrMemoryLimit", err)
		}
		tiny.Wait(ctx)
	}
	def := newQueue(t, WithDevice(CPU, 0))
	if m := def.MemoryBudgets()[0]; m.Size != 0 && (m.Budget != uint64(float64(m.Size)*0.75) || !strings.HasPrefix(m.How, "75% of")) {
		t.Errorf("default host budget %d (%s) of %d bytes, want 75%%", m.Budget, m.How, m.Size)
	}
}
