package acpp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Within narrows what a raw accessor declares (V3). An unranged accessor
// indexes, copies and reports the whole buffer, and a ranged one has its
// constructor's region, so Within cannot apply to either: it is refused
// with ErrOption instead of declaring less than the accessor hands out (or
// silently replacing the constructor's region), as it did.
func TestWithinOnlyOnRawAccessors_V3(t *testing.T) {
	q := newQueue(t)
	b := must(NewBuffer[float32](q, R1(16)))
	w := Within(I1(4), R1(4))
	for name, tc := range map[string]struct {
		declare func(h *Handler)
		msg     string
	}{
		"Read":           {func(h *Handler) { Read(h, b, w) }, "Within cannot apply to an unranged accessor"},
		"Write":          {func(h *Handler) { Write(h, b, w) }, "use ReadRange, WriteRange or ReadWriteRange"},
		"ReadWrite":      {func(h *Handler) { ReadWrite(h, b, w) }, "or a Raw constructor"},
		"ReadRange":      {func(h *Handler) { ReadRange(h, b, R1(2), I1(0), w) }, "its region is the constructor's"},
		"WriteRange":     {func(h *Handler) { WriteRange(h, b, R1(2), I1(0), w) }, "Within cannot apply to a ranged accessor"},
		"ReadWriteRange": {func(h *Handler) { ReadWriteRange(h, b, R1(2), I1(0), w) }, "ranged accessor"},
	} {
		_, err := q.Submit(func(h *Handler) error {
			tc.declare(h)
			h.SingleTask(func() {})
			return nil
		})
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s with Within: Submit = %v, want ErrOption containing %q", name, err, tc.msg)
		}
	}
	for name, declare := range map[string]func(h *Handler){
		"ReadRaw":      func(h *Handler) { ReadRaw(h, b, w) },
		"WriteRaw":     func(h *Handler) { WriteRaw(h, b, w) },
		"ReadWriteRaw": func(h *Handler) { ReadWriteRaw(h, b, w) },
	} {
		ev, err := q.Submit(func(h *Handler) error {
			declare(h)
			h.SingleTask(func() {})
			return nil
		})
		if err != nil {
			t.Fatalf("%s with Within: %v", name, err)
		}
		if err := ev.Wait(context.Background()); err != nil {
			t.Fatalf("%s with Within: %v", name, err)
		}
	}
}

// A nil buffer (what a failed NewBuffer returns) is an error in every
// Buffer method that returns one, as it is for accessors and Read/Write;
// Reshape, Reinterpret, WriteBack, Release, USM and Close panicked.
func TestNilBufferIsAnError(t *testing.T) {
	ctx := context.Background()
	var b *Buffer[float32]
	for name, call := range map[string]func() error{
		"Reshape":     func() error { _, err := b.Reshape(R1(1)); return err },
		"Reinterpret": func() error { _, err := Reinterpret[uint32](b, R1(1)); return err },
		"WriteBack":   func() error { return b.WriteBack(ctx) },
		"Release":     func() error { return b.Release(ctx, DeviceID{Kind: CPU}) },
		"USM":         func() error { _, err := b.USM(DeviceID{Kind: CPU}); return err },
		"Close":       func() error { return b.Close() },
		"Read":        func() error { _, err := b.Read(ctx); return err },
		"Write":       func() error { return b.Write(ctx, nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s of a nil buffer panicked: %v", name, r)
				}
			}()
			if err := call(); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), "nil buffer") {
				t.Errorf("%s of a nil buffer = %v, want ErrBadRange saying nil buffer", name, err)
			}
		}()
	}
}

// CopyData applies to NewBufferFrom only; NewBuffer (no data) and
// NewBufferOver (the USM allocation is used in place) accepted and
// ignored it.
func TestCopyDataOnlyForNewBufferFrom(t *testing.T) {
	q := newQueue(t)
	if _, err := NewBuffer[float32](q, R1(8), CopyData()); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "CopyData") {
		t.Errorf("NewBuffer with CopyData = %v, want ErrOption naming CopyData", err)
	}
	p := must(Malloc[float32](q, 8, USMHost))
	if _, err := NewBufferOver(q, p, R1(8), CopyData()); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "CopyData") {
		t.Errorf("NewBufferOver with CopyData = %v, want ErrOption naming CopyData", err)
	}
	if err := Free(q, p); err != nil { // no buffer was made over it
		t.Errorf("Free = %v", err)
	}
	b := must(NewBufferFrom(q, make([]float32, 8), R1(8), CopyData()))
	if err := b.Close(); err != nil {
		t.Error(err)
	}
}

// Map(nil) is refused (ErrSplit, saying Map(nil)): unsplit it was ignored,
// split it read as an accessor declared without Map.
func TestMapNilRefused_C4(t *testing.T) {
	q := newQueue(t, WithCPUDevices(2))
	b := must(NewBuffer[float32](q, R1(16)))
	for name, opts := range map[string][]SubmitOption{"unsplit": nil, "split": {Split()}} {
		_, err := q.Submit(func(h *Handler) error {
			a := Write(h, b, Map(nil))
			h.ParallelFor(R1(16), func(it Item) { a.Set(it.ID(0), 1) })
			return nil
		}, opts...)
		if !errors.Is(err, ErrSplit) || !strings.Contains(err.Error(), "Map(nil)") && name == "split" {
			t.Errorf("%s group with Map(nil): Submit = %v, want ErrSplit naming Map(nil)", name, err)
		}
	}
}

// A USM pointer into an allocation Free freed is refused wherever the
// memory would be used (it was used: a fill after Free ran), and the zero
// pointer's Kind, Device and Addr are zero (they panicked).
func TestUSMUseAfterFreeRefused_B3(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	p := must(Malloc[float32](q, 8, USMHost))
	d := must(Malloc[float32](q, 8, USMHost))
	inner := p.Add(2)
	if err := Free(q, p); err != nil {
		t.Fatal(err)
	}
	registerTestKernels()
	for name, use := range map[string]func() error{
		"FillUSM":       func() error { _, err := FillUSM(q, p, 1, 8); return err },
		"Memset of Add": func() error { _, err := Memset(q, inner, 0, 2); return err },
		"Memcpy from":   func() error { _, err := Memcpy(q, d, p, 8); return err },
		"Memcpy to":     func() error { _, err := Memcpy(q, p, d, 8); return err },
		"Host":          func() error { _, err := p.Host(); return err },
		"NewBufferOver": func() error { _, err := NewBufferOver(q, p, R1(8)); return err },
		"a kernel argument": func() error {
			_, err := q.Submit(func(h *Handler) error { h.Launch("acpptest.devptr", R1(1), p); return nil })
			return err
		},
	} {
		if err := use(); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), "Free freed") {
			t.Errorf("%s after Free = %v, want ErrBadRange saying Free freed it", name, err)
		}
	}
	ev, err := FillUSM(q, d, 2, 8) // the live one still works
	if err != nil || ev.Wait(ctx) != nil {
		t.Fatalf("FillUSM of a live allocation: %v", err)
	}
	var z USM[float32]
	if z.Kind() != 0 || z.Device() != (DeviceID{}) || z.Addr() != 0 || z.Len() != 0 {
		t.Errorf("zero USM: Kind %v, Device %v, Addr %d, Len %d", z.Kind(), z.Device(), z.Addr(), z.Len())
	}
}

// A nil option is no option, as it was already for USM calls
// (onlyOptions); queue, buffer, submit, accessor, placeholder and host
// access options panicked on one.
func TestNilOptionsAreNone(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, nil)
	b := must(NewBuffer[float32](q, R1(8), nil))
	ev := must(q.Submit(func(h *Handler) error {
		a := Write(h, b, nil, NoInit)
		p := ReadWritePlaceholder(b, nil).Require(h)
		h.SingleTask(func() { a.Set(0, 1); p.Set(1, 2) })
		return nil
	}, nil))
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	ha := must(HostRead(ctx, b, nil))
	if ha.At(0) != 1 || ha.At(1) != 2 {
		t.Errorf("HostRead = %v", ha.Copy())
	}
	ha.Close()
	if _, err := Connect(ctx, nil, nil); err == nil || strings.Contains(err.Error(), "nil pointer") {
		t.Errorf("Connect with a nil option = %v", err)
	}
}

// A MapFunc that panics fails the split group with ErrSplit naming the
// panic; the panic went up through Submit (and on a cluster queue would
// have ended the coordinator's goroutine).
func TestMapFuncPanicIsAnError_C4(t *testing.T) {
	q := newQueue(t, WithCPUDevices(2))
	b := must(NewBuffer[float32](q, R1(16)))
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panicked: %v", p)
			}
		}()
		ev, err := q.Submit(func(h *Handler) error {
			a := Write(h, b, Map(MapFunc(func(Chunk, Range) (ID, Range) { panic("mapper bug") })))
			h.ParallelFor(R1(16), func(it Item) { a.Set(it.ID(0), 1) })
			return nil
		}, Split())
		if err != nil {
			return err
		}
		return ev.Wait(context.Background())
	}()
	if !errors.Is(err, ErrSplit) || !strings.Contains(err.Error(), "range mapper panicked") || !strings.Contains(err.Error(), "mapper bug") {
		t.Errorf("split with a panicking MapFunc = %v, want ErrSplit naming the panic", err)
	}
}

// An option given twice with different values would let the later undo
// the earlier without a word: Submit (and the calls that take submit
// options) refuse it with ErrOption naming the option. The same value
// twice is harmless and accepted.
func TestSubmitOptionGivenTwiceRefused(t *testing.T) {
	q := newQueue(t, WithCPUDevices(2))
	cpu0, cpu1 := DeviceID{Kind: CPU, Index: 0}, DeviceID{Kind: CPU, Index: 1}
	buf := must(NewBuffer[float32](q, R1(8)))
	cgf := func(h *Handler) error {
		acc := Write(h, buf, Map(OneToOne()))
		h.ParallelFor(R1(8), func(it Item) { acc.Set(it.ID(0), 1) })
		return nil
	}
	plain := func(h *Handler) error {
		acc := Write(h, buf)
		h.ParallelFor(R1(8), func(it Item) { acc.Set(it.ID(0), 1) })
		return nil
	}
	for name, tc := range map[string]struct {
		cgf  func(*Handler) error
		opts []SubmitOption
		opt  string
	}{
		"On twice":    {plain, []SubmitOption{On(cpu0), On(cpu1)}, "On"},
		"Named twice": {plain, []SubmitOption{Named("a"), Named("b")}, "Named"},
		"Split twice": {cgf, []SubmitOption{Split(cpu0), SplitWith(SplitOpts{Chunks: 4})}, "Split"},
	} {
		_, err := q.Submit(tc.cgf, tc.opts...)
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.opt+" given more than once") {
			t.Errorf("%s: Submit = %v, want ErrOption naming %s", name, err, tc.opt)
		}
	}
	if _, err := Malloc[float32](q, 8, USMDevice, On(cpu0), On(cpu1)); !errors.Is(err, ErrOption) {
		t.Errorf("Malloc with On twice = %v, want ErrOption", err)
	}
	for name, opts := range map[string][]SubmitOption{
		"On twice, same device": {On(cpu0), On(cpu0)},
		"Named twice, same":     {Named("a"), Named("a")},
	} {
		ev, err := q.Submit(plain, opts...)
		if err != nil {
			t.Fatalf("%s: Submit = %v, want it accepted", name, err)
		}
		if err := ev.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := q.Submit(cgf, Split(), Split())
	if err != nil {
		t.Fatalf("Split() twice: %v, want it accepted", err)
	}
	if err := ev.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A buffer's USM pointer (Buffer.USM) is refused once the buffer's
// Release or Close freed its allocation, as Malloc's is after Free: it
// touched freed memory. USM again after Release hands out the new
// allocation.
func TestBufferUSMUseAfterReleaseRefused_B3(t *testing.T) {
	ctx := context.Background()
	q, _ := gpuQueue(t) // a device with memory of its own: the host allocation cannot be released
	dev := fakeID
	b := must(NewBuffer[float32](q, R1(8)))
	p := must(b.USM(dev))
	inner := p.Add(2)
	if ev, err := FillUSM(q, p, 1, 8); err != nil || ev.Wait(ctx) != nil {
		t.Fatalf("FillUSM of a live buffer pointer: %v", err)
	}
	if err := b.Release(ctx, dev); err != nil {
		t.Fatal(err)
	}
	for name, use := range map[string]func() error{
		"FillUSM":       func() error { _, err := FillUSM(q, p, 1, 8); return err },
		"Memset of Add": func() error { _, err := Memset(q, inner, 0, 2); return err },
		"Host":          func() error { _, err := p.Host(); return err },
	} {
		if err := use(); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), "Release or Close freed") {
			t.Errorf("%s after Release = %v, want ErrBadRange saying Release or Close freed it", name, err)
		}
	}
	p2 := must(b.USM(dev))
	if ev, err := FillUSM(q, p2, 2, 8); err != nil || ev.Wait(ctx) != nil {
		t.Fatalf("FillUSM of the pointer USM gave after Release: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := FillUSM(q, p2, 3, 8); !errors.Is(err, ErrBadRange) {
		t.Errorf("FillUSM after Close = %v, want ErrBadRange", err)
	}
	if _, err := b.USM(dev); !errors.Is(err, ErrBufferClosed) {
		t.Errorf("USM after Close = %v, want ErrBufferClosed", err)
	}
}

// A Release that waits (a host access holds the buffer) does not hold the
// buffer's lock meanwhile: USM of another device answers at once (it
// waited behind the release). A Release whose ctx ends still frees the
// allocation later, so the pointers it invalidates are refused from its
// start, not only when it returns nil.
func TestBufferReleaseWaitingKeepsUSMUsable_B3(t *testing.T) {
	ctx := context.Background()
	q, _ := gpuQueue(t)
	registerTestKernels()
	b := must(NewBuffer[float32](q, R1(8)))
	if err := add(t, q, b, 1, fakeID, true).Wait(ctx); err != nil { // the only valid copy is on the fake
		t.Fatal(err)
	}
	p := must(b.USM(fakeID))
	ha, err := HostAccess(ctx, b, ModeReadWrite) // the release's copy back waits for it
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	released := make(chan error, 1)
	go func() { released <- b.Release(short, fakeID) }()
	time.Sleep(20 * time.Millisecond) // the release is waiting for the host access
	got := make(chan error, 1)
	go func() { _, err := b.USM(cpuID); got <- err }()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("USM of the CPU during a waiting Release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("USM of another device waited behind a Release")
	}
	if err := <-released; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release whose ctx ended: %v, want DeadlineExceeded", err)
	}
	if _, err := FillUSM(q, p, 1, 8); !errors.Is(err, ErrBadRange) {
		t.Errorf("FillUSM of a pointer whose release was submitted: %v, want ErrBadRange", err)
	}
	ha.Close()
	if err := q.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// A refused release (the CPU uses the host allocation) frees nothing
	// and leaves its pointers valid.
	pc := must(b.USM(cpuID))
	if err := b.Release(ctx, cpuID); !errors.Is(err, ErrMode) {
		t.Fatalf("Release of the host allocation: %v, want ErrMode", err)
	}
	if ev, err := FillUSM(q, pc, 2, 8); err != nil || ev.Wait(ctx) != nil {
		t.Errorf("FillUSM of the CPU pointer after a refused Release: %v", err)
	}
}
