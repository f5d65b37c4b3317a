package acpp

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/device"
)

// Tests of the public API used carelessly: what a program gets for a
// mistake is an error that says what is wrong, never a hang or a crash.

// waitOrFail waits for ev with a bound, so that a group that never
// finishes fails the test instead of hanging it.
func waitOrFail(t *testing.T, ev *Event, what string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := ev.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: the group never finished", what)
	}
	return err
}

// A kernel that calls t.Fatal (runtime.Goexit) fails its group with
// ErrKernelPanic naming Goexit; the group, q.Wait and q.Close used to hang
// for ever, and the worker was lost.
func TestKernelGoexitFailsGroup(t *testing.T) {
	q := newQueue(t, WithWorkers(1))
	b := must(NewBuffer[int](q, R1(10000)))
	kernels := map[string]func(h *Handler){
		"single_task":  func(h *Handler) { h.SingleTask(func() { runtime.Goexit() }) },
		"parallel_for": func(h *Handler) { h.ParallelFor(R1(1000), func(it Item) { runtime.Goexit() }) },
	}
	for name, k := range kernels {
		ev := must(q.Submit(func(h *Handler) error { k(h); return nil }))
		if err := waitOrFail(t, ev, name); !errors.Is(err, ErrKernelPanic) || !strings.Contains(err.Error(), "Goexit") {
			t.Errorf("%s: Wait = %v, want ErrKernelPanic naming Goexit", name, err)
		}
		// The device still runs groups on its one worker.
		ev = must(q.Submit(func(h *Handler) error {
			a := Write(h, b, NoInit)
			h.ParallelFor(R1(10000), func(it Item) { a.Set(it.ID(0), 7) })
			return nil
		}))
		if err := waitOrFail(t, ev, name+": the next group"); err != nil {
			t.Fatalf("%s: the next group: %v", name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.Wait(ctx); !errors.Is(err, ErrKernelPanic) {
		t.Errorf("q.Wait = %v, want the two groups' ErrKernelPanic", err)
	}
}

// A nil kernel function is refused by Submit with ErrNoKernel naming the
// method; it was accepted and failed the group later with a nil
// dereference reported as a kernel panic.
func TestNilKernelFunctionRefused(t *testing.T) {
	q := newQueue(t)
	for name, declare := range map[string]func(h *Handler){
		"ParallelFor":       func(h *Handler) { h.ParallelFor(R1(4), nil) },
		"ParallelForChunks": func(h *Handler) { h.ParallelForChunks(R1(4), nil) },
		"SingleTask":        func(h *Handler) { h.SingleTask(nil) },
		"ParallelForND":     func(h *Handler) { h.ParallelForND(R1(4), R1(2), nil) },
	} {
		ev, err := q.Submit(func(h *Handler) error { declare(h); return nil })
		if !errors.Is(err, ErrNoKernel) || !strings.Contains(err.Error(), name+" got a nil kernel") {
			t.Errorf("%s(nil): Submit = %v, want ErrNoKernel naming %s", name, err, name)
		}
		if ev != nil {
			t.Errorf("%s(nil): Submit returned an event (Wait: %v)", name, waitOrFail(t, ev, name))
		}
	}
}

// A zero Event (&Event{}, never returned by Submit) given to After or
// DependsOn is ErrOption saying so; it was refused as "an event of a
// cluster queue", which the program never had.
func TestZeroEventInAfterRefused(t *testing.T) {
	q := newQueue(t)
	p := must(Malloc[int](q, 4, USMDevice))
	defer Free(q, p)
	calls := map[string]func() error{
		"After": func() error {
			_, err := q.Submit(func(h *Handler) error { h.SingleTask(func() {}); return nil }, After(&Event{}))
			return err
		},
		"DependsOn": func() error {
			_, err := q.Submit(func(h *Handler) error { h.DependsOn(&Event{}); h.SingleTask(func() {}); return nil })
			return err
		},
		"Memset After": func() error { _, err := Memset(q, p, 0, 4, After(&Event{})); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "no Submit returned") {
			t.Errorf("%s(&Event{}) = %v, want ErrOption saying no Submit returned it", name, err)
		}
	}
}

// A pointer from Malloc of a queue that was closed points into memory that
// went with the queue's devices: every use is ErrClosed saying so, as a
// use after Free is refused. Host handed out the memory, and Memcpy,
// NewBufferOver and kernel arguments of another queue took it.
func TestUSMOfClosedQueueRefused_B3(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	closed, err := NewQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := must(Malloc[float32](closed, 8, USMDevice))
	inner := p.Add(2)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	d := must(Malloc[float32](q, 8, USMHost))
	registerTestKernels()
	for name, use := range map[string]func() error{
		"Host":          func() error { _, err := p.Host(); return err },
		"Host of Add":   func() error { _, err := inner.Host(); return err },
		"Memcpy from":   func() error { _, err := Memcpy(q, d, p, 8); return err },
		"Memcpy to":     func() error { _, err := Memcpy(q, inner, d, 2); return err },
		"FillUSM":       func() error { _, err := FillUSM(q, p, 1, 8); return err },
		"NewBufferOver": func() error { _, err := NewBufferOver(q, p, R1(8)); return err },
		"a kernel argument": func() error {
			_, err := q.Submit(func(h *Handler) error { h.Launch("acpptest.devptr", R1(1), p); return nil })
			return err
		},
	} {
		if err := use(); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "closed queue") {
			t.Errorf("%s of a closed queue's pointer = %v, want ErrClosed saying the queue was closed", name, err)
		}
	}
	if err := Free(closed, p); !errors.Is(err, ErrClosed) {
		t.Errorf("Free after Close = %v, want ErrClosed", err)
	}
	ev, err := FillUSM(q, d, 2, 8) // the open queue's pointer still works
	if err != nil || ev.Wait(ctx) != nil {
		t.Fatalf("FillUSM of a live allocation: %v", err)
	}
}

// Free of an allocation that a Memcpy, Memset or FillUSM not yet finished
// uses is refused with ErrBadRange, as Free's documentation says; it freed
// the memory under the operation. After the operation's Wait, Free works.
func TestFreeRefusedWhileUSMOperationRuns_B3(t *testing.T) {
	q := newQueue(t)
	src := must(Malloc[float32](q, 8, USMHost))
	dst := must(Malloc[float32](q, 8, USMHost))
	release := make(chan struct{})
	hold := must(q.Submit(func(h *Handler) error { h.SingleTask(func() { <-release }); return nil }))
	cp := must(Memcpy(q, dst, src, 4, After(hold)))         // waits for hold; dst[0:4]
	fill := must(FillUSM(q, dst.Add(4), 1, 4, After(hold))) // dst[4:8]: USM operations are not ordered with each other
	for name, p := range map[string]USM[float32]{"source": src, "destination": dst} {
		if err := Free(q, p); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), "unfinished") {
			t.Errorf("Free of the %s of an unfinished Memcpy = %v, want ErrBadRange", name, err)
		}
	}
	close(release)
	for _, ev := range []*Event{cp, fill} {
		if err := waitOrFail(t, ev, "USM operation"); err != nil {
			t.Fatal(err)
		}
	}
	for name, p := range map[string]USM[float32]{"source": src, "destination": dst} {
		if err := Free(q, p); err != nil {
			t.Errorf("Free of the %s after Wait: %v", name, err)
		}
	}
}

// A host accessor used after its Close panics, as an index outside its
// region does: a write went into the buffer unordered with the groups
// submitted since (a race, or lost), and a read returned stale data.
func TestHostAccessorUseAfterClosePanics(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	b := must(NewBuffer[int](q, R2(4, 4)))
	rw := must(HostAccess(ctx, b, ModeReadWrite))
	rw.Close()
	ro := must(HostRead(ctx, b))
	ro.Close()
	rw.Close() // a second Close is no use
	for name, use := range map[string]func(){
		"Set":      func() { rw.Set(1, 3) },
		"Set2":     func() { rw.Set2(1, 1, 3) },
		"Slice":    func() { _ = rw.Slice() },
		"CopyFrom": func() { rw.CopyFrom([]int{1, 2}) },
		"At":       func() { _ = rw.At(0) },
		"RO At2":   func() { _ = ro.At2(0, 0) },
		"RO Copy":  func() { _ = ro.Copy() },
		"RO Values": func() {
			for range ro.Values() {
			}
		},
	} {
		p := try(use)
		if s, _ := p.(string); !strings.Contains(s, "after its Close") {
			t.Errorf("%s after Close: panic %v, want one saying the accessor was closed", name, p)
		}
	}
	if v := must(b.Read(ctx)); v[5] != 0 || v[1] != 0 {
		t.Errorf("writes after Close reached the buffer: %v", v)
	}
}

// Goroutines submitting conflicting groups to one queue at once end with
// the contents of a sequential run of the groups in ID order (D1, D3).
func TestConcurrentSubmittersMatchSequentialModel_D3(t *testing.T) {
	const n, workers, per = 64, 6, 30
	q := newQueue(t, WithCPUDevices(2))
	x := must(NewBufferFrom(q, make([]uint64, n), R1(n), PageSize(16)))
	y := must(NewBufferFrom(q, make([]uint64, n), R1(n), PageSize(16)))
	type op struct {
		id      uint64
		kind, c int
	}
	ops := make(chan op, workers*per)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range per {
				kind, c := (g*7+k*3)%4, g*100+k
				ev, err := q.Submit(func(h *Handler) error {
					switch kind {
					case 0: // x = 3x + c
						a := ReadWrite(h, x)
						h.ParallelFor(R1(n), func(it Item) { i := it.ID(0); a.Set(i, a.At(i)*3+uint64(c)) })
					case 1: // y = 2y + x + c
						xa, ya := Read(h, x), ReadWrite(h, y)
						h.ParallelFor(R1(n), func(it Item) { i := it.ID(0); ya.Set(i, ya.At(i)*2+xa.At(i)+uint64(c)) })
					case 2: // x = y + c
						ya, xa := Read(h, y), Write(h, x, NoInit)
						h.ParallelFor(R1(n), func(it Item) { i := it.ID(0); xa.Set(i, ya.At(i)+uint64(c)) })
					case 3: // second half of y ^= c
						ya := ReadWriteRange(h, y, R1(n/2), I1(n/2))
						h.ParallelFor(R1(n/2), func(it Item) { i := it.ID(0); ya.Set(i, ya.At(i)^uint64(c)) })
					}
					return nil
				}, On(DeviceID{Kind: CPU, Index: k % 2}))
				if err != nil {
					t.Error(err)
					return
				}
				ops <- op{ev.ID(), kind, c}
			}
		}()
	}
	wg.Wait()
	close(ops)
	var all []op
	for o := range ops {
		all = append(all, o)
	}
	slices.SortFunc(all, func(a, b op) int { return cmp.Compare(a.id, b.id) })
	mx, my := make([]uint64, n), make([]uint64, n)
	for _, o := range all {
		c := uint64(o.c)
		for i := range n {
			switch o.kind {
			case 0:
				mx[i] = mx[i]*3 + c
			case 1:
				my[i] = my[i]*2 + mx[i] + c
			case 2:
				mx[i] = my[i] + c
			case 3:
				if i >= n/2 {
					my[i] ^= c
				}
			}
		}
	}
	ctx := context.Background()
	gx, gy := must(x.Read(ctx)), must(y.Read(ctx))
	if !slices.Equal(gx, mx) || !slices.Equal(gy, my) {
		t.Fatalf("after %d groups from %d goroutines:\nx %v\nwant %v\ny %v\nwant %v", len(all), workers, gx, mx, gy, my)
	}
}

// Close of the queue and of a buffer while other goroutines submit, wait,
// read, write and hold host accesses: every call returns nil or an error
// matching ErrClosed, none panics or hangs, and every event finishes.
func TestCloseWhileBusyIsErrClosed(t *testing.T) {
	for round := range 6 {
		q, err := NewQueue(context.Background(), WithCPUDevices(2))
		if err != nil {
			t.Fatal(err)
		}
		b := must(NewBuffer[int](q, R1(1024), PageSize(64)))
		ctx := context.Background()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var evs []*Event
		check := func(what string, err error) {
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("round %d: %s: %v, want nil or ErrClosed", round, what, err)
			}
		}
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 20 {
					switch (g + k) % 5 {
					case 0, 1:
						ev, err := q.Submit(func(h *Handler) error {
							a := ReadWrite(h, b)
							h.ParallelFor(R1(1024), func(it Item) { a.Set(it.ID(0), a.At(it.ID(0))+1) })
							return nil
						})
						check("Submit", err)
						if ev != nil {
							mu.Lock()
							evs = append(evs, ev)
							mu.Unlock()
						}
					case 2:
						_, err := b.Read(ctx)
						check("Read", err)
					case 3:
						ha, err := HostAccess(ctx, b, ModeReadWrite)
						check("HostAccess", err)
						if ha != nil {
							ha.Set(0, 1)
							ha.Close()
						}
					case 4:
						check("q.Wait", q.Wait(ctx))
					}
				}
			}()
		}
		time.Sleep(time.Duration(round) * 100 * time.Microsecond)
		if round%2 == 0 {
			check("Buffer.Close", b.Close())
		}
		check("Queue.Close", q.Close())
		check("second Queue.Close", q.Close())
		wg.Wait()
		for _, ev := range evs {
			_ = waitOrFail(t, ev, "a group submitted before Close")
		}
	}
}

// try runs f and returns what it panicked with (nil if it returned).
func try(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// TestNilQueueIsErrClosed: every call on a nil *Queue (the queue of a
// NewQueue or Connect that failed, used without checking its error) is
// ErrClosed saying so, or a zero value, never a nil-pointer panic (they
// all panicked, unlike the nil *Buffer's methods).
func TestNilQueueIsErrClosed(t *testing.T) {
	var q *Queue
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "nil *Queue") {
			t.Errorf("%s on a nil queue = %v, want ErrClosed naming the nil *Queue", what, err)
		}
	}
	_, err := NewBuffer[float32](q, R1(4))
	check("NewBuffer", err)
	_, err = NewBufferFrom(q, []float32{1}, R1(1))
	check("NewBufferFrom", err)
	_, err = NewBufferOver(q, USM[float32]{}, R1(1))
	check("NewBufferOver", err)
	_, err = q.Submit(func(h *Handler) error { return nil })
	check("Submit", err)
	check("Wait", q.Wait(context.Background()))
	_, err = q.PageStates()
	check("PageStates", err)
	_, err = q.RunningGroups()
	check("RunningGroups", err)
	_, err = Malloc[float32](q, 4, device.MemDevice)
	check("Malloc", err)
	check("Free", Free(q, USM[float32]{}))
	_, err = Memcpy(q, USM[float32]{}, USM[float32]{}, 0)
	check("Memcpy", err)
	_, err = Memset(q, USM[float32]{}, 0, 0)
	check("Memset", err)
	_, err = FillUSM(q, USM[float32]{}, 1, 0)
	check("FillUSM", err)
	check("Close", q.Close())
	if q.Devices() != nil || q.Device().Name != "" || q.ClusterDevices() != nil || q.MemoryBudgets() != nil || q.Stats().Groups != 0 {
		t.Error("the describing methods of a nil queue return something other than zero values")
	}
}
