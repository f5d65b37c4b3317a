package acpp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWorkGroupsWithLocalMemory_A3(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	const n, wg = 4096, 64
	data := make([]int64, n)
	for i := range data {
		data[i] = int64(i)
	}
	in := must(NewBufferFrom(q, data, R1(n)))
	out := must(NewBuffer[int64](q, R1(n/wg)))
	must(q.Submit(func(h *Handler) error {
		x := Read(h, in)
		sums := Write(h, out, NoInit)
		loc := LocalAccessor[int64](h, wg)
		h.ParallelForND(R1(n), R1(wg), func(g Group) {
			l := loc.Slice(g)
			g.Items(func(it NDItem) { l[it.LocalID(0)] = x.At(it.GlobalID(0)) })
			// Barrier: the tree reduction reads what other items wrote.
			for s := wg / 2; s > 0; s /= 2 {
				g.Items(func(it NDItem) {
					if i := it.LocalID(0); i < s {
						l[i] += l[i+s]
					}
				})
			}
			sums.Set(g.ID(0), l[0])
		})
		return nil
	}))
	v := must(out.Read(ctx))
	for gi, s := range v {
		lo := int64(gi * wg)
		want := wg*lo + wg*(wg-1)/2
		if s != want {
			t.Fatalf("group %d sum = %d, want %d", gi, s, want)
		}
	}
}

func TestGroupIndices2D(t *testing.T) {
	q := newQueue(t)
	data := make([]int32, 8*6)
	b := must(NewBufferFrom(q, data, R2(8, 6)))
	must(q.Submit(func(h *Handler) error {
		a := Write(h, b, NoInit)
		h.ParallelForND(R2(8, 6), R2(4, 3), func(g Group) {
			g.Items(func(it NDItem) {
				i, j := it.GlobalID(0), it.GlobalID(1)
				if it.Group().ID(0) != i/4 || g.ID(1) != j/3 || it.LocalID(0) != i%4 || it.LocalID(1) != j%3 {
					panic("bad ids")
				}
				a.Set2(i, j, int32(g.Linear()*100+it.LocalLinear()))
			})
		})
		return nil
	}))
	waitAll(t, q)
	b.Close()
	if data[7*6+5] != 300+11 || data[0] != 0 || data[3] != 100 {
		t.Fatalf("data = %v", data)
	}
}

func TestCopyFillHostCopies(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	a := must(NewBuffer[int32](q, R2(4, 4)))
	b := must(NewBuffer[int32](q, R2(4, 4)))
	must(q.Submit(func(h *Handler) error { Fill(h, Write(h, a, NoInit), int32(1)); return nil }))
	must(q.Submit(func(h *Handler) error { Fill(h, WriteRange(h, a, R2(2, 2), I2(1, 1)), int32(9)); return nil }))
	must(q.Submit(func(h *Handler) error { Fill(h, Write(h, b, NoInit), int32(0)); return nil }))
	must(q.Submit(func(h *Handler) error {
		Copy(h, ReadRange(h, a, R2(2, 3), I2(1, 0)), WriteRange(h, b, R2(2, 3), I2(2, 1)))
		return nil
	}))
	got := make([]int32, 4)
	must(q.Submit(func(h *Handler) error { CopyToHost(h, ReadRange(h, b, R2(1, 4), I2(2, 0)), got); return nil }))
	must(q.Submit(func(h *Handler) error {
		CopyFromHost(h, []int32{5, 6}, WriteRange(h, a, R2(1, 2), I2(0, 0)))
		return nil
	}))
	waitAll(t, q)
	if want := []int32{0, 1, 9, 9}; !equal(got, want) {
		t.Errorf("CopyToHost = %v, want %v", got, want)
	}
	av := must(a.Read(ctx))
	if want := []int32{5, 6, 1, 1, 1, 9, 9, 1, 1, 9, 9, 1, 1, 1, 1, 1}; !equal(av, want) {
		t.Errorf("a = %v, want %v", av, want)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestHostAccessorWaitsAndBlocks(t *testing.T) {
	ctx := context.Background()
	q, _ := gpuQueue(t)
	b := must(NewBuffer[float32](q, R1(16)))
	add(t, q, b, 4, fakeID, true)
	// The host accessor waits for the writer and brings the data over.
	ha := must(HostAccess(ctx, b, ModeReadWrite))
	if ha.At(15) != 4 || ha.Range().Size(0) != 16 {
		t.Fatalf("host accessor sees %v, want 4", ha.At(15))
	}
	ha.Set(0, 100)
	// A conflicting group waits until the host accessor is closed.
	ev := add(t, q, b, 1, fakeID, false)
	select {
	case <-ev.Done():
		t.Fatal("a conflicting group ran while a host accessor was open")
	case <-time.After(20 * time.Millisecond):
	}
	ha.Close()
	ha.Close()
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	v := must(b.Read(ctx))
	if v[0] != 101 || v[1] != 5 {
		t.Fatalf("v = %v, want host write then device add", v[:2])
	}
	// A read host accessor has no way to write (TestReadAccessorsCannotWrite_V2).
	ro := must(HostRead(ctx, b))
	if ro.At(0) != 101 {
		t.Errorf("read host accessor sees %v, want 101", ro.At(0))
	}
	ro.Close()
	// HostAccess with ModeRead reads too; its writes panic and its Slice
	// is a copy, so nothing written reaches the buffer (V2).
	hr := must(HostAccess(ctx, b, ModeRead))
	s := hr.Slice()
	if s[0] != 101 || s[1] != 5 {
		t.Errorf("HostAccess(ModeRead).Slice() = %v, want [101 5]", s[:2])
	}
	s[0] = -1
	for name, write := range map[string]func(){
		"Set":      func() { hr.Set(0, -1) },
		"CopyFrom": func() { hr.CopyFrom([]float32{-1}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "ModeReadWrite") {
					t.Errorf("%s on a ModeRead host accessor: recovered %v, want a panic naming ModeReadWrite", name, r)
				}
			}()
			write()
		}()
	}
	hr.Close()
	if v := must(b.Read(ctx)); v[0] != 101 {
		t.Errorf("after writing a ModeRead accessor's Slice copy: v[0] = %v, want 101 (unchanged)", v[0])
	}
}

func TestHostAccessContextEnds(t *testing.T) {
	q := newQueue(t)
	b := must(NewBuffer[int32](q, R1(1)))
	gate := make(chan struct{})
	must(q.Submit(func(h *Handler) error {
		a := Write(h, b, NoInit)
		h.SingleTask(func() { <-gate; a.Set(0, 1) })
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := HostRead(ctx, b); err != context.DeadlineExceeded {
		t.Fatalf("HostRead = %v, want the context's deadline error", err)
	}
	close(gate)
	waitAll(t, q) // the abandoned access is released by itself
}

func TestWriteBack_L1(t *testing.T) {
	ctx := context.Background()
	q, _ := gpuQueue(t)
	data := make([]float32, 8)
	b := must(NewBufferFrom(q, data, R1(8)))
	add(t, q, b, 2, fakeID, false)
	waitAll(t, q)
	if data[0] != 0 {
		t.Fatal("the slice changed before write-back although the device holds the data")
	}
	if err := b.WriteBack(ctx); err != nil {
		t.Fatal(err)
	}
	if data[7] != 2 {
		t.Fatalf("after WriteBack data[7] = %v, want 2", data[7])
	}
	// CopyData: no write-back.
	d2 := []float32{1, 1}
	c := must(NewBufferFrom(q, d2, R1(2), CopyData()))
	add(t, q, c, 1, cpuID, false)
	waitAll(t, q)
	c.Close()
	if d2[0] != 1 {
		t.Fatalf("CopyData buffer wrote back into the slice: %v", d2)
	}
	if err := b.Write(ctx, []float32{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if data[7] != 8 {
		t.Fatalf("Write + Close: data = %v", data)
	}
}

// Local memory is bounded per work-group (cpu.LocalMemBytes on a CPU
// device), and sizes that overflow are refused: once, 2^62 float32s
// wrapped to 0 bytes and handed out a 2^62-element slice over nothing, and
// 2^32 of them (16 GiB per work-group) crashed the process with fatal out
// of memory (A3).
func TestLocalMemoryBounded_A3(t *testing.T) {
	registerTestKernels()
	q := newQueue(t)
	b := must(NewBuffer[float32](q, R1(64)))
	limit := q.Device().Caps.LocalMemBytes
	if limit != 1<<20 {
		t.Fatalf("cpu:0 has %d bytes of local memory per work-group, want 1 MiB (cpu.LocalMemBytes)", limit)
	}
	tests := []struct {
		name string
		cgf  func(h *Handler) error
		msg  string
	}{
		{"2^62 elements overflow", func(h *Handler) error {
			loc := LocalAccessor[float32](h, 1<<62)
			h.ParallelForND(R1(64), R1(16), func(g Group) { _ = loc.Slice(g) })
			return nil
		}, "local accessor of 4611686018427387904 elements of 4 bytes"},
		{"16 GiB per work-group", func(h *Handler) error {
			loc := LocalAccessor[float32](h, 1<<32)
			h.ParallelForND(R1(64), R1(16), func(g Group) { _ = loc.Slice(g) })
			return nil
		}, "a work-group of cpu:0 has 1048576 bytes of local memory"},
		{"two that fit one by one", func(h *Handler) error {
			a, c := LocalAccessor[byte](h, 600<<10), LocalAccessor[byte](h, 600<<10)
			h.ParallelForND(R1(64), R1(16), func(g Group) { _, _ = a.Slice(g), c.Slice(g) })
			return nil
		}, "local accessors of 1228800 bytes in all"},
		{"one byte past the limit", func(h *Handler) error {
			a, c := LocalAccessor[byte](h, 1<<19), LocalAccessor[byte](h, 1<<19+1)
			h.ParallelForND(R1(64), R1(16), func(g Group) { _, _ = a.Slice(g), c.Slice(g) })
			return nil
		}, "local accessors of 1048577 bytes in all"},
		{"a named kernel's local argument", func(h *Handler) error {
			h.LaunchND("acpptest.args", R1(64), R1(16), WriteRaw(h, b), Write(h, b), WriteRange(h, b, R1(64), I1(0)), LocalAccessor[float32](h, 1<<32))
			return nil
		}, "a work-group of cpu:0 has 1048576 bytes of local memory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := q.Submit(tc.cgf)
			if ev != nil || !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Submit = %v, %v; want ErrBadRange containing %q", ev, err, tc.msg)
			}
			if strings.Contains(err.Error(), "not declared") || strings.Contains(err.Error(), "not constructed") {
				t.Errorf("the failed local accessor is reported twice: %v", err)
			}
		})
	}
	// All of it, in two accessors, fits.
	ev := must(q.Submit(func(h *Handler) error {
		a, c := LocalAccessor[byte](h, limit/2), LocalAccessor[float32](h, limit/8)
		h.ParallelForND(R1(64), R1(16), func(g Group) {
			a.Slice(g)[limit/2-1], c.Slice(g)[limit/8-1] = 1, 2
		})
		return nil
	}))
	if err := ev.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}
