package acpp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func hostValues(t *testing.T, b *Buffer[float32]) []float32 {
	t.Helper()
	v, err := b.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestUninitialisedBufferNeverCopies_T2_B5(t *testing.T) {
	q, f := gpuQueue(t)
	b := must(NewBuffer[float32](q, R1(1000)))
	if f.Stats().Allocs != 0 {
		t.Fatalf("allocations before first use: %d, want 0 (lazy, B5)", f.Stats().Allocs)
	}
	add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	if st := q.Stats(); st.Copies != 0 || st.CopiesPlanned != 0 {
		t.Fatalf("Stats() = %+v, want no copies for a buffer without initialised data", st)
	}
	if f.Stats().Allocs != 1 {
		t.Fatalf("allocations after first use: %d, want 1", f.Stats().Allocs)
	}
}

func TestNoInitNeverCopies_T1(t *testing.T) {
	q, _ := gpuQueue(t)
	data := make([]float32, 1000)
	b := must(NewBufferFrom(q, data, R1(1000)))
	add(t, q, b, 5, fakeID, true)
	waitAll(t, q)
	if st := q.Stats(); st.Copies != 0 {
		t.Fatalf("Stats() = %+v, want no copy for a NoInit accessor", st)
	}
	// The host sees what the device wrote (P3 made host pages outdated;
	// the host access copies them back, P4).
	v := hostValues(t, b)
	if st := q.Stats(); st.Copies == 0 || st.BytesDeviceToHost == 0 {
		t.Fatalf("Stats() = %+v, want a device-to-host copy", st)
	}
	// NoInit means the kernel's input is undefined; the fake's memory
	// started zeroed, so every element is 5.
	if v[999] != 5 {
		t.Fatalf("v[999] = %v, want 5", v[999])
	}
}

func TestTransferOnlyOutdatedPages_T3_P2_P3_P4(t *testing.T) {
	q, _ := gpuQueue(t)
	data := make([]float32, 4096)
	for i := range data {
		data[i] = float32(i)
	}
	b := must(NewBufferFrom(q, data, R1(4096), PageSize(1024)))
	add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	st1 := q.Stats()
	if st1.BytesHostToDevice != 4096*4 {
		t.Fatalf("first use on the device moved %d bytes host→device, want %d", st1.BytesHostToDevice, 4096*4)
	}
	// Pages are up to date on the device now (P4): no transfer.
	add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	if st := q.Stats(); st.Copies != st1.Copies {
		t.Fatalf("second use on the device copied again: %+v", st)
	}
	// Write one page on the host (P3 outdates it on the device); only that
	// page moves back.
	must(q.Submit(func(h *Handler) error {
		a := ReadWriteRange(h, b, R1(1024), I1(2048))
		h.ParallelFor(R1(1024), func(it Item) { a.Set(it.ID(0), a.At(it.ID(0))+100) })
		return nil
	}, On(cpuID)))
	waitAll(t, q)
	st2 := q.Stats()
	add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	st3 := q.Stats()
	if moved := st3.BytesHostToDevice - st2.BytesHostToDevice; moved != 1024*4 {
		t.Fatalf("moved %d bytes host→device after writing one page on the host, want %d", moved, 1024*4)
	}
	v := hostValues(t, b)
	for i, want := range map[int]float32{0: 3, 2048: 2048 + 3 + 100, 4095: 4095 + 3} {
		if v[i] != want {
			t.Errorf("v[%d] = %v, want %v", i, v[i], want)
		}
	}
}

func TestCopiesRunAsPlanned_T4(t *testing.T) {
	q, _ := gpuQueue(t)
	data := make([]float32, 64*64)
	b := must(NewBufferFrom(q, data, R2(64, 64), PageSize(16, 16)))
	// A 2D ranged access of 20×40 at (10, 5) touches pages rows 0–1 and
	// columns 0–2: coherence plans boxes; each box is one backend call.
	ev := must(q.Submit(func(h *Handler) error {
		a := ReadWriteRange(h, b, R2(20, 40), I2(10, 5))
		h.Launch("acpptest.add", R1(1), a, Scalar(float32(1)))
		return nil
	}, On(fakeID)))
	waitAll(t, q)
	st := q.Stats()
	planned := 0
	for _, tr := range ev.Transfers() { // one per page box
		planned += int(tr.Copies)
	}
	if planned == 0 || st.CopiesPlanned != int64(planned) || st.Copies != st.CopiesPlanned {
		t.Fatalf("copies: planned by coherence %d, counted planned %d, run %d; want equal and > 0", planned, st.CopiesPlanned, st.Copies)
	}
	// Only the pages in the page range moved: 2×3 pages of 16×16 floats.
	if st.BytesHostToDevice != 2*3*16*16*4 {
		t.Fatalf("moved %d bytes, want %d (the accessor's page range only)", st.BytesHostToDevice, 2*3*16*16*4)
	}
}

func TestCPUDevicesShareHostAllocation_B4_L2_L3(t *testing.T) {
	q := newQueue(t, WithCPUDevices(2), WithKind(CPU))
	cpu1 := DeviceID{Kind: CPU, Index: 1}
	data := make([]int32, 1000)
	b := must(NewBufferFrom(q, data, R1(1000)))
	for round := range 4 {
		id := cpuID
		if round%2 == 1 {
			id = cpu1
		}
		must(q.Submit(func(h *Handler) error {
			a := ReadWrite(h, b)
			h.ParallelFor(R1(1000), func(it Item) { a.Set(it.ID(0), a.At(it.ID(0))+1) })
			return nil
		}, On(id)))
	}
	waitAll(t, q)
	p0, p1 := must(b.USM(cpuID)), must(b.USM(cpu1))
	if p0.Addr() != p1.Addr() {
		t.Errorf("cpu:0 and cpu:1 use allocations %#x and %#x, want one shared host allocation", p0.Addr(), p1.Addr())
	}
	if st := q.Stats(); st.Copies != 0 || st.Allocations != 0 {
		t.Errorf("Stats() = %+v, want no copies and no allocation beyond the user's slice", st)
	}
	if data[999] != 4 {
		t.Errorf("data[999] = %d, want 4 (kernels work in the user's memory, L1)", data[999])
	}
}

func TestPointerStable_B2(t *testing.T) {
	q, _ := gpuQueue(t)
	b := must(NewBuffer[float32](q, R1(100)))
	var addrs []uint64
	for range 3 {
		add(t, q, b, 1, fakeID, false)
		must(q.Submit(func(h *Handler) error {
			a := ReadWrite(h, b)
			h.SingleTask(func() { a.Set(0, a.At(0)+1) })
			return nil
		}, On(cpuID)))
		waitAll(t, q)
		addrs = append(addrs, must(b.USM(fakeID)).Addr(), must(b.USM(cpuID)).Addr())
	}
	for i := 2; i < len(addrs); i++ {
		if addrs[i] != addrs[i-2] {
			t.Fatalf("allocation addresses changed: %#x", addrs)
		}
	}
}

func TestExplicitRelease_B1(t *testing.T) {
	ctx := context.Background()
	q, f := gpuQueue(t)
	b := must(NewBuffer[float32](q, R1(256)))
	add(t, q, b, 7, fakeID, true)
	waitAll(t, q)
	if err := b.Release(ctx, fakeID); err != nil {
		t.Fatal(err)
	}
	if f.Stats().Frees != 1 {
		t.Fatalf("frees after Release = %d, want 1", f.Stats().Frees)
	}
	// The data survived on the host.
	if v := hostValues(t, b); v[255] != 7 {
		t.Fatalf("after Release v[255] = %v, want 7", v[255])
	}
	// Using the device again allocates again.
	add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	if f.Stats().Allocs != 2 {
		t.Fatalf("allocations = %d, want 2", f.Stats().Allocs)
	}
	if v := hostValues(t, b); v[0] != 8 {
		t.Fatalf("v[0] = %v, want 8", v[0])
	}
	if err := b.Release(ctx, cpuID); !errors.Is(err, ErrMode) || !strings.Contains(err.Error(), "Close the buffer") {
		t.Errorf("Release of the host allocation = %v; want ErrMode that says to Close (API.md)", err)
	}
	if err := b.Release(ctx, DeviceID{Kind: CUDA, Index: 5}); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Release on a device the queue lacks = %v; want ErrNoDevice (API.md)", err)
	}
	// Allocations live until the buffer goes, then are freed (B1).
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if f.Stats().Frees != 2 {
		t.Fatalf("frees after Close = %d, want 2", f.Stats().Frees)
	}
}

func TestPageSizeDecidesConflicts_P1_D1(t *testing.T) {
	q := newQueue(t)
	for _, tc := range []struct {
		page    int
		wantDep bool
	}{{512, false}, {1024, true}} {
		b := must(NewBuffer[float32](q, R1(1024), PageSize(tc.page)))
		if got := b.PageSize(); got[0] != tc.page {
			t.Fatalf("PageSize() = %v, want %d", got, tc.page)
		}
		half := func(off int, gate chan struct{}) *Event {
			return must(q.Submit(func(h *Handler) error {
				a := WriteRange(h, b, R1(512), I1(off), NoInit)
				h.ParallelFor(R1(512), func(it Item) {
					if gate != nil && it.ID(0) == 0 {
						<-gate
					}
					a.Set(it.ID(0), 1)
				})
				return nil
			}))
		}
		// A first group allocates; coherence orders first users of a new
		// allocation after the group that creates it, so start from an
		// allocated buffer. The first half waits for gate so that it is
		// still running when the second is submitted.
		half(0, nil)
		waitAll(t, q)
		gate := make(chan struct{})
		e1, e2 := half(0, gate), half(512, nil)
		close(gate)
		dep := slices.Contains(e2.Deps(), e1.ID())
		if dep != tc.wantDep {
			t.Errorf("page size %d: second half depends on first = %v, want %v (deps %v)", tc.page, dep, tc.wantDep, e2.Deps())
		}
		waitAll(t, q)
		b.Close()
	}
}

// TestNoInitKeepsRestOfEdgePages_T1_T3: a NoInit accessor that covers pages
// only in part must not lose the rest of those pages. Fully covered pages are
// discarded without a transfer (T1); the two edge pages are brought to the
// device first (T3), so the host later reads back its own values outside the
// accessor and the kernel's values inside.
func TestNoInitKeepsRestOfEdgePages_T1_T3(t *testing.T) {
	q, _ := gpuQueue(t)
	const n, page = 4096, 1024
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i)
	}
	b := must(NewBufferFrom(q, data, R1(n), PageSize(page)))
	const lo, hi = 100, 2148 // page 0 in part, page 1 whole, page 2 in part
	must(q.Submit(func(h *Handler) error {
		a := WriteRange(h, b, R1(hi-lo), I1(lo), NoInit)
		h.Launch("acpptest.add", R1(hi-lo), a, Scalar(float32(0.5)))
		return nil
	}, On(fakeID)))
	waitAll(t, q)
	if st := q.Stats(); st.BytesHostToDevice != 2*page*4 {
		t.Fatalf("host→device moved %d bytes, want %d (the two edge pages only)", st.BytesHostToDevice, 2*page*4)
	}
	v := hostValues(t, b)
	for i, x := range v {
		inside := i >= lo && i < hi
		switch {
		case !inside && x != float32(i):
			t.Fatalf("v[%d] = %v outside the NoInit accessor, want %v (data lost)", i, x, float32(i))
		case inside && i < page && x != float32(i)+0.5:
			t.Fatalf("v[%d] = %v on an edge page, want %v", i, x, float32(i)+0.5)
		}
	}
}
