package acpp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acpp/acpp/device"
)

func TestUSMOperations_B3(t *testing.T) {
	ctx := context.Background()
	q, f := gpuQueue(t)
	dev := must(Malloc[int32](q, 100, USMDevice)) // on the fake GPU
	host := must(Malloc[int32](q, 100, USMHost))
	if _, err := dev.Host(); !errors.Is(err, ErrNotHostVisible) {
		t.Fatalf("device USM Host() = %v, want ErrNotHostVisible", err)
	}
	e1 := must(FillUSM(q, dev, 7, 100))
	e2 := must(Memset(q, dev.Add(50), 0, 50, After(e1)))
	e3 := must(Memcpy(q, host, dev, 100, After(e2)))
	if err := e3.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	hs := must(host.Host())
	if hs[49] != 7 || hs[50] != 0 || hs[99] != 0 {
		t.Fatalf("host USM after fill/memset/memcpy = %v", hs)
	}
	if err := Free(q, dev); err != nil {
		t.Fatal(err)
	}
	if f.Stats().Frees != 1 {
		t.Errorf("Free did not reach the device")
	}
	if _, err := Memcpy(q, host, host, 101); !errors.Is(err, ErrBadRange) {
		t.Errorf("Memcpy past the end = %v, want ErrBadRange", err)
	}
}

func TestBufferPointerIsUSM_B3(t *testing.T) {
	ctx := context.Background()
	q, _ := gpuQueue(t)
	b := must(NewBuffer[float32](q, R1(64)))
	add(t, q, b, 3, fakeID, true)
	waitAll(t, q)
	// The buffer's device allocation works with USM operations (user
	// synchronisation: we waited above).
	p := must(b.USM(fakeID))
	out := must(Malloc[float32](q, 64, USMHost))
	if err := must(Memcpy(q, out, p, 64)).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if hs := must(out.Host()); hs[63] != 3 {
		t.Fatalf("copied from the buffer's pointer: %v, want 3", hs[63])
	}
}

func TestBufferOverUSM_B3(t *testing.T) {
	ctx := context.Background()
	q, f := gpuQueue(t)
	p := must(Malloc[float32](q, 32, USMDevice))
	if err := must(FillUSM(q, p, 2, 32)).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	allocs := f.Stats().Allocs
	b := must(NewBufferOver(q, p, R1(32)))
	add(t, q, b, 1, fakeID, false) // runs in the user's allocation: no copy, no allocation
	waitAll(t, q)
	if st := q.Stats(); st.Copies != 0 || f.Stats().Allocs != allocs {
		t.Fatalf("Stats() = %+v, fake allocs %d → %d: want the user's allocation used as is", st, allocs, f.Stats().Allocs)
	}
	if v := must(b.Read(ctx)); v[31] != 3 {
		t.Fatalf("v[31] = %v, want 3", v[31])
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if f.Stats().Frees != 0 {
		t.Fatal("closing the buffer freed the user's USM allocation")
	}
}

func TestAddressSpaces_A1_A2_A4(t *testing.T) {
	q, _ := gpuQueue(t)
	hostp := must(Malloc[float32](q, 4, USMHost))
	devp := must(Malloc[float32](q, 4, USMDevice))
	tests := []struct {
		name string
		arg  KernelArg
		msg  string // "" for success
	}{
		{"device pointer is global_device", devp, ""},
		{"host USM is no global_device (A2)", hostp, "argument 0 (p): a host USM pointer is no global_device"},
		{"generic needs an explicit cast back", Generic(devp), "explicit cast"},
		{"cast back to the real space", Cast(Generic(devp), device.GlobalDevice), ""},
		{"cast cannot change the real space", Cast(Generic(hostp), device.GlobalDevice), "points to global_host memory"},
		{"global to global_device by cast", Cast(Cast(Generic(devp), device.Global), device.GlobalDevice), ""},
		{"named spaces convert implicitly to generic only", Cast(devp, device.Local), "cannot be cast"},
		{"Generic of nil (it panicked)", Generic(nil), "Generic of a nil argument"},
		{"Cast of nil", Cast(nil, device.GlobalDevice), "Cast of a nil argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := q.Submit(func(h *Handler) error {
				h.Launch("acpptest.devptr", R1(1), tc.arg)
				return nil
			}, On(fakeID))
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("Submit = %v, want success", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.msg) || !errors.Is(err, device.ErrBadArg) {
				t.Fatalf("Submit = %v, want ErrBadArg containing %q", err, tc.msg)
			}
		})
	}
	waitAll(t, q)
}

func TestGoPointerSpaces_A4(t *testing.T) {
	g := GlobalPtr[int]{p: make([]int, 2)}
	gen := g.Generic()
	// A failed conversion gives the zero pointer, not one to the memory
	// (it did: a caller ignoring ok used global memory as local).
	if l, ok := gen.ToLocal(); ok || l.p != nil {
		t.Error("a generic pointer to global memory became local")
	}
	if p, ok := gen.ToPrivate(); ok || p.p != nil {
		t.Error("a generic pointer to global memory became private")
	}
	if g2, ok := (LocalPtr[int]{p: make([]int, 1)}).Generic().ToGlobal(); ok || g2.p != nil {
		t.Error("a generic pointer to local memory became global")
	}
	back, ok := gen.ToGlobal()
	if !ok {
		t.Fatal("generic → global (its real space) failed")
	}
	back.Set(1, 5)
	if g.At(1) != 5 || gen.At(1) != 5 {
		t.Error("conversions do not point to the same memory")
	}
}

// Options a USM call cannot apply are errors that name them and the options
// that apply (docs/API.md: an option that cannot apply is never ignored);
// Named names a USM operation's group.
func TestUSMRefusesOptionsThatCannotApply_B3(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t, WithCPUDevices(2))
	p := must(Malloc[int32](q, 4, USMHost))
	done := must(FillUSM(q, p, 0, 4))
	other := On(DeviceID{Kind: CPU, Index: 1})
	split := Split()
	tests := []struct {
		name string
		call func() error
		msg  string
	}{
		{"FillUSM On Named Split", func() error {
			_, err := FillUSM(q, p, 1, 4, On(DeviceID{Kind: CUDA, Index: 7}), Named("x"), split)
			return err
		}, "FillUSM takes only After and Named; On, Split cannot apply to it"},
		{"Memset On", func() error { _, err := Memset(q, p, 1, 4, other); return err }, "Memset takes only After and Named; On cannot apply"},
		{"Memcpy OnNode", func() error {
			_, err := Memcpy(q, p, p, 0, OnNode("n1", cpuID))
			return err
		}, "Memcpy takes only After and Named; OnNode cannot apply"},
		{"Malloc After Named", func() error {
			_, err := Malloc[int32](q, 4, USMHost, After(done), Named("m"))
			return err
		}, "Malloc takes only On; After, Named cannot apply to it: drop them"},
		{"Malloc Split", func() error { _, err := Malloc[int32](q, 4, USMHost, split); return err }, "Malloc takes only On; Split cannot apply"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want ErrOption containing %q", err, tc.msg)
			}
		})
	}
	if hs := must(p.Host()); hs[0] != 0 {
		t.Fatalf("a refused FillUSM ran: %v", hs)
	}
	// What applies still works: On for Malloc, After and Named for the ops.
	m := must(Malloc[int32](q, 4, USMDevice, other))
	if m.Device() != (DeviceID{Kind: CPU, Index: 1}) {
		t.Errorf("Malloc(On(cpu:1)) on %v", m.Device())
	}
	ev := must(FillUSM(q, p, 3, 4, After(done), Named("threes")))
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if hs := must(p.Host()); hs[3] != 3 {
		t.Fatalf("FillUSM with After and Named: %v", hs)
	}
	waitAll(t, q)
}

// Free frees only the start of a live Malloc allocation of its queue, once:
// a pointer Add made, a buffer's own allocation (Buffer.USM), a second Free
// and an allocation an open buffer is bound to are refused and free
// nothing; after Close, Malloc and Free return ErrClosed (B3).
func TestFreeOnlyLiveMallocAllocations_B3(t *testing.T) {
	q, f := gpuQueue(t)
	p := must(Malloc[float32](q, 16, USMDevice))
	b := must(NewBuffer[float32](q, R1(16)))
	add(t, q, b, 1, fakeID, true)
	waitAll(t, q)
	own := must(b.USM(fakeID))
	over := must(Malloc[float32](q, 16, USMDevice))
	bo := must(NewBufferOver(q, over, R1(16)))
	other := newQueue(t)
	foreign := must(Malloc[float32](other, 4, USMHost))
	for _, tc := range []struct {
		name string
		p    USM[float32]
		msg  string
	}{
		{"into the allocation", p.Add(1), "1 elements into its allocation"},
		{"a buffer's allocation", own, "no live Malloc allocation of this queue"},
		{"another queue's", foreign, "no live Malloc allocation of this queue"},
		{"bound to an open buffer", over, "open buffer(s) made with NewBufferOver"},
		{"nil", USM[float32]{}, "nil USM pointer"},
	} {
		if err := Free(q, tc.p); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Free of %s = %v, want ErrBadRange containing %q", tc.name, err, tc.msg)
		}
	}
	if n := f.Stats().Frees; n != 0 {
		t.Fatalf("refused Frees freed %d allocations", n)
	}
	if err := Free(q, p); err != nil {
		t.Fatalf("Free of a Malloc allocation: %v", err)
	}
	if err := Free(q, p); !errors.Is(err, ErrBadRange) || !strings.Contains(err.Error(), "freed already") {
		t.Errorf("second Free = %v, want ErrBadRange", err)
	}
	if err := bo.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Free(q, over); err != nil {
		t.Errorf("Free after the buffer over it closed: %v", err)
	}
	if n := f.Stats().Frees; n != 2 {
		t.Errorf("device frees = %d, want 2", n)
	}
	if _, err := Malloc[float32](q, 1<<62, USMHost); !errors.Is(err, ErrBadRange) {
		t.Errorf("Malloc of 2^62 float32s = %v, want ErrBadRange (the size overflows)", err)
	}
	left := must(Malloc[float32](q, 4, USMHost))
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if m, err := Malloc[float32](q, 4, USMHost); !errors.Is(err, ErrClosed) || m.mem != nil {
		t.Errorf("Malloc after Close = %v, %v; want ErrClosed", m.mem, err)
	}
	if err := Free(q, left); !errors.Is(err, ErrClosed) {
		t.Errorf("Free after Close = %v, want ErrClosed", err)
	}
}
