package acpp

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSubmitErrors(t *testing.T) {
	registerTestKernels()
	q := newQueue(t)
	b := must(NewBuffer[float32](q, R2(4, 4)))
	closed := must(NewBuffer[float32](q, R1(4)))
	closed.Close()
	type ptr struct{ p *int }
	tests := []struct {
		name string
		cgf  func(h *Handler) error
		is   error
		msg  string
	}{
		{"range outside the buffer", func(h *Handler) error {
			ReadRange(h, b, R2(2, 2), I2(3, 0))
			h.SingleTask(func() {})
			return nil
		}, ErrBadRange, "leaves the buffer"},
		{"wrong dimensions", func(h *Handler) error {
			ReadRange(h, b, R1(2), I1(0))
			h.SingleTask(func() {})
			return nil
		}, ErrBadRange, "dimensions"},
		{"closed buffer", func(h *Handler) error {
			Read(h, closed)
			h.SingleTask(func() {})
			return nil
		}, ErrBufferClosed, ""},
		{"NoInit read", func(h *Handler) error {
			Read(h, b, NoInit)
			h.SingleTask(func() {})
			return nil
		}, ErrMode, "cannot be NoInit"},
		{"no action", func(h *Handler) error { Read(h, b); return nil }, ErrNoKernel, ""},
		{"two actions", func(h *Handler) error {
			h.SingleTask(func() {})
			h.SingleTask(func() {})
			return nil
		}, ErrNoKernel, "after single_task"},
		{"no Go implementation", func(h *Handler) error {
			h.Launch("acpptest.ptxonly", R1(1))
			return nil
		}, ErrNoImplementation, "acpptest.ptxonly"},
		{"unknown kernel", func(h *Handler) error {
			h.Launch("nope", R1(1))
			return nil
		}, ErrUnknownKernel, `"nope"; register it before Submit (device.Register or device.MustRegister), or call kernels.Register()`},
		{"bad work-group", func(h *Handler) error {
			h.ParallelForND(R1(10), R1(3), func(Group) {})
			return nil
		}, ErrBadRange, "multiple"},
		{"the function's own error", func(h *Handler) error { return errBoom }, errBoom, ""},
		{"copy size mismatch", func(h *Handler) error {
			Copy(h, ReadRange(h, b, R2(2, 2), I2(0, 0)), WriteRange(h, b, R2(1, 2), I2(3, 0)))
			return nil
		}, ErrBadRange, "copy from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := q.Submit(tc.cgf)
			if ev != nil || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Submit = %v, %v; want error matching %v containing %q", ev, err, tc.is, tc.msg)
			}
		})
	}
	if _, err := NewBuffer[ptr](q, R1(1)); !errors.Is(err, ErrElemType) {
		t.Errorf("NewBuffer of a pointer type = %v, want ErrElemType", err)
	}
	if _, err := NewBufferFrom(q, make([]int32, 3), R1(4)); !errors.Is(err, ErrBadRange) {
		t.Errorf("NewBufferFrom with a short slice = %v, want ErrBadRange", err)
	}
	if _, err := NewBuffer[int32](q, R1(8), PageSize(2, 2)); !errors.Is(err, ErrBadRange) {
		t.Errorf("NewBuffer with 2D page size for a 1D buffer = %v, want ErrBadRange", err)
	}
	waitAll(t, q)
}

// A Handler used after its Submit returned panics with an error wrapping
// ErrHandlerDone, whatever the call (once, the error was recorded on the
// finished handler, where nobody saw it, and a zero accessor returned).
// An accessor of another group stays an error from Submit.
func TestHandlerUsedAfterSubmitPanics(t *testing.T) {
	registerTestKernels()
	q := newQueue(t)
	b := must(NewBuffer[float32](q, R1(4)))
	var late *Handler
	var kept UnrangedRO[float32]
	must(q.Submit(func(h *Handler) error { late, kept = h, Read(h, b); h.SingleTask(func() {}); return nil }))
	ph := ReadWritePlaceholder(b)
	for name, use := range map[string]func(){
		"Read":          func() { Read(late, b) },
		"WriteRange":    func() { WriteRange(late, b, R1(2), I1(0)) },
		"ReadWriteRaw":  func() { ReadWriteRaw(late, b) },
		"Require":       func() { ph.Require(late) },
		"SingleTask":    func() { late.SingleTask(func() {}) },
		"ParallelFor":   func() { late.ParallelFor(R1(-1), func(Item) {}) }, // even with a bad range
		"ParallelForND": func() { late.ParallelForND(R1(4), R1(2), func(Group) {}) },
		"Launch":        func() { late.Launch("acpptest.add", R1(4)) },
		"LocalAccessor": func() { LocalAccessor[float32](late, 4) },
		"Fill":          func() { Fill(late, Write(late, b), 1) },
		"CopyToHost":    func() { CopyToHost(late, kept, make([]float32, 4)) },
		"DependsOn":     func() { late.DependsOn() },
		"nil Handler":   func() { Read((*Handler)(nil), b) },
	} {
		func() {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, ErrHandlerDone) || !strings.Contains(err.Error(), "inside the command-group function") {
					t.Errorf("%s on a finished Handler: panic %v, want an error wrapping ErrHandlerDone", name, err)
				}
			}()
			use()
		}()
	}
	if len(late.declErrs()) != 0 {
		t.Errorf("the finished Handler recorded %v", late.declErrs())
	}
	_ = late.Device() // describes, changes nothing: allowed
	if _, err := q.Submit(func(h *Handler) error {
		Copy(h, kept, Write(h, b))
		return nil
	}); !errors.Is(err, ErrHandlerDone) || !strings.Contains(err.Error(), "belongs to another command group") {
		t.Errorf("Submit with an accessor of another group = %v, want ErrHandlerDone", err)
	}
	waitAll(t, q)
}

var errBoom = errors.New("boom")

func TestKernelPanicSurfacesOnEventAndWait(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	b := must(NewBuffer[int32](q, R1(10)))
	ev := must(q.Submit(func(h *Handler) error {
		a := Write(h, b, NoInit)
		h.ParallelFor(R1(10), func(it Item) { a.Set(it.ID(0)+5, 1) }) // index 10 is out of range
		return nil
	}))
	if err := ev.Wait(ctx); !errors.Is(err, ErrKernelPanic) || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("event error = %v, want a kernel panic error", err)
	}
	if ev.Status() != Failed {
		t.Errorf("status = %v, want failed", ev.Status())
	}
	if err := q.Wait(ctx); !errors.Is(err, ErrKernelPanic) {
		t.Fatalf("q.Wait = %v, want the kernel error", err)
	}
	if err := q.Wait(ctx); err != nil {
		t.Fatalf("second q.Wait = %v, want nil (errors are reported once)", err)
	}
	// Nothing else broke.
	must(q.Submit(func(h *Handler) error {
		a := Write(h, b, NoInit)
		h.ParallelFor(R1(10), func(it Item) { a.Set(it.ID(0), 2) })
		return nil
	}))
	if v := must(b.Read(ctx)); v[9] != 2 {
		t.Fatalf("after the panic v[9] = %d, want 2", v[9])
	}
}

// The async handler is called by Wait and Close (wait_and_throw), not when
// a group fails: the failed group's event has its error before.
func TestAsyncHandler(t *testing.T) {
	var mu sync.Mutex
	var got []error
	q, err := NewQueue(context.Background(), WithAsyncHandler(func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	handled := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	fail := func() *Event {
		return must(q.Submit(func(h *Handler) error { h.SingleTask(func() { panic("x") }); return nil }))
	}
	if err := fail().Wait(context.Background()); !errors.Is(err, ErrKernelPanic) {
		t.Fatalf("event = %v, want the kernel panic", err)
	}
	if n := handled(); n != 0 {
		t.Fatalf("the handler was called %d times before Wait", n)
	}
	if err := q.Wait(context.Background()); err != nil || handled() != 1 || !errors.Is(got[0], ErrKernelPanic) {
		t.Fatalf("Wait = %v, handler got %v", err, got)
	}
	if err := fail().Wait(context.Background()); err == nil {
		t.Fatal("the second failing group succeeded")
	}
	if err := q.Close(); err != nil || handled() != 2 {
		t.Fatalf("Close = %v, handler got %v; want the second error handed to it by Close", err, got)
	}
}

func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q, err := NewQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	b := must(NewBuffer[int32](q, R1(1)))
	gate := make(chan struct{})
	first := must(q.Submit(func(h *Handler) error {
		a := Write(h, b, NoInit)
		h.SingleTask(func() { <-gate; a.Set(0, 1) })
		return nil
	}))
	second := must(q.Submit(func(h *Handler) error {
		a := ReadWrite(h, b)
		h.SingleTask(func() { a.Set(0, 2) })
		return nil
	}))
	cancel()
	close(gate)
	bg := context.Background()
	if err := first.Wait(bg); err != nil {
		t.Fatalf("the running group failed: %v", err)
	}
	if err := second.Wait(bg); !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting group = %v, want context.Canceled", err)
	}
	if _, err := q.Submit(func(h *Handler) error { h.SingleTask(func() {}); return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit after cancel = %v, want context.Canceled", err)
	}
	// Waiting with a context that ends returns its error.
	wctx, wcancel := context.WithCancel(bg)
	wcancel()
	if err := second.Wait(wctx); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(cancelled ctx) = %v", err)
	}
}

func TestNoSuchDevice(t *testing.T) {
	if _, err := NewQueue(context.Background(), WithDevice(CUDA, 3)); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "import the backend") {
		t.Fatalf("NewQueue(cuda:3) = %v, want ErrNoDevice that says what to do", err)
	}
	q := newQueue(t)
	if _, err := q.Submit(func(h *Handler) error { return nil }, On(DeviceID{Kind: CPU, Index: 5})); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Submit(On(cpu:5)) = %v, want ErrNoDevice", err)
	}
}

func TestClosedQueue(t *testing.T) {
	q, err := NewQueue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	data := []int32{1, 2}
	b := must(NewBufferFrom(q, data, R1(2)))
	must(q.Submit(func(h *Handler) error {
		a := ReadWrite(h, b)
		h.SingleTask(func() { a.Set(0, 5) })
		return nil
	}))
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if data[0] != 5 {
		t.Errorf("Close did not write back open buffers: %v", data)
	}
	if _, err := q.Submit(func(h *Handler) error { h.SingleTask(func() {}); return nil }); err == nil {
		t.Error("Submit on a closed queue succeeded")
	}
	if _, err := NewBuffer[int32](q, R1(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("NewBuffer on a closed queue = %v, want ErrClosed", err)
	}
}

func TestNilArguments(t *testing.T) {
	if _, err := NewQueue(nil); err == nil || !strings.Contains(err.Error(), "context.Background()") { //nolint:staticcheck
		t.Errorf("NewQueue(nil) = %v, want an error that says what to pass", err)
	}
	q := newQueue(t)
	if _, err := q.Submit(nil); !errors.Is(err, ErrNoKernel) {
		t.Errorf("Submit(nil) = %v, want ErrNoKernel", err)
	}
}

// A closed buffer's errors are ErrBufferClosed, which matches ErrClosed too
// ("the queue or buffer was closed"); a closed queue's ErrClosed is not
// ErrBufferClosed.
func TestClosedBufferMatchesErrClosed(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	b := must(NewBuffer[int32](q, R1(4)))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, readErr := b.Read(ctx)
	_, hostErr := HostRead(ctx, b)
	_, usmErr := b.USM(cpuID)
	_, submitErr := q.Submit(func(h *Handler) error { Read(h, b); h.SingleTask(func() {}); return nil })
	for name, err := range map[string]error{
		"Read": readErr, "Write": b.Write(ctx, make([]int32, 4)), "WriteBack": b.WriteBack(ctx),
		"HostRead": hostErr, "USM": usmErr, "Release": b.Release(ctx, cpuID), "Submit": submitErr,
	} {
		if !errors.Is(err, ErrBufferClosed) || !errors.Is(err, ErrClosed) {
			t.Errorf("%s of a closed buffer = %v, want ErrBufferClosed matching ErrClosed", name, err)
		}
	}
	if ErrBufferClosed.Error() != "acpp: buffer closed" {
		t.Errorf("ErrBufferClosed says %q", ErrBufferClosed)
	}
	if errors.Is(ErrClosed, ErrBufferClosed) {
		t.Error("a closed queue's ErrClosed matches ErrBufferClosed")
	}
}

// Every call that takes a context refuses a nil one with an error, before
// anything is registered: b.Read(nil) once panicked inside the embedded
// engine's host access, which stayed registered, and q.Close then waited
// for it forever.
func TestNilContextIsAnError(t *testing.T) {
	q, err := NewQueue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b := must(NewBufferFrom(q, []int32{1, 2, 3, 4}, R1(4)))
	ev := must(q.Submit(func(h *Handler) error { a := ReadWrite(h, b); h.SingleTask(func() { a.Set(0, 5) }); return nil }))
	var nilCtx context.Context
	for name, call := range map[string]func() error{
		"Buffer.Read":      func() error { _, err := b.Read(nilCtx); return err },
		"Buffer.Write":     func() error { return b.Write(nilCtx, make([]int32, 4)) },
		"Buffer.WriteBack": func() error { return b.WriteBack(nilCtx) },
		"Buffer.Release":   func() error { return b.Release(nilCtx, cpuID) },
		"HostRead":         func() error { _, err := HostRead(nilCtx, b); return err },
		"HostAccess":       func() error { _, err := HostAccess(nilCtx, b, ModeReadWrite); return err },
		"Event.Wait":       func() error { return ev.Wait(nilCtx) },
		"Queue.Wait":       func() error { return q.Wait(nilCtx) },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s(nil) panicked: %v", name, p)
				}
			}()
			if err := call(); err == nil || !strings.Contains(err.Error(), "nil context; pass context.Background()") {
				t.Errorf("%s(nil) = %v, want an error that says what to pass", name, err)
			}
		}()
	}
	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close after the nil-context calls hangs: something stayed registered")
	}
}
