package coherence

import (
	"errors"
	"strings"
	"testing"
)

// Tests of what docs/COHERENCE.md and the package's doc comments promise
// that no other test pinned (audit of 2026-11-27).

// A Geometry not built by NewGeometry (the zero value, or a page size set
// by hand) is refused with ErrBadGeometry by every method that maps a
// range: they divided by zero, or (negative page sizes) returned a wrong
// box without an error.
func TestHandBuiltGeometryFails_P1(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    Geometry
	}{
		{"zero value", Geometry{}},
		{"zero page size", Geometry{Range: Dims{1, 1, 8}, ElemSize: 4}},
		{"negative page size", Geometry{Range: Dims{1, 1, 8}, ElemSize: 4, PageSize: Dims{1, 1, -2}}},
		{"zero element size", Geometry{Range: Dims{1, 1, 8}, PageSize: Dims{1, 1, 2}}},
		{"negative range", Geometry{Range: Dims{-1, -1, 8}, ElemSize: 4, PageSize: Dims{1, 1, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, rng := Dims{}, Dims{1, 1, 4}
			if _, err := tc.g.PageRange(off, rng); !errors.Is(err, ErrBadGeometry) {
				t.Errorf("PageRange = %v, want ErrBadGeometry", err)
			}
			if _, _, err := tc.g.DiscardPages(off, rng); !errors.Is(err, ErrBadGeometry) {
				t.Errorf("DiscardPages = %v, want ErrBadGeometry", err)
			}
			if _, err := tc.g.AppendNoInit(nil, Access{Mode: Write}, off, rng); !errors.Is(err, ErrBadGeometry) {
				t.Errorf("AppendNoInit = %v, want ErrBadGeometry", err)
			}
			if _, err := tc.g.ViewPageRange(View{Range: Dims{1, 1, 32}, ElemSize: 1}, off, rng); !errors.Is(err, ErrBadGeometry) {
				t.Errorf("ViewPageRange = %v, want ErrBadGeometry", err)
			}
		})
	}
}

// NewGeometry refuses a page grid of more than MaxPages pages: AddBuffer
// of such a buffer allocated its tracking headers eagerly and ran out of
// memory (2^40 one-byte pages asked for ~350 GB).
func TestGeometryPageLimit_P1(t *testing.T) {
	if _, err := NewGeometry(Dims{1, 1, 1 << 40}, 1, Dims{1, 1, 1}); !errors.Is(err, ErrBadGeometry) || !strings.Contains(err.Error(), "MaxPages") {
		t.Fatalf("NewGeometry(2^40 pages) err = %v, want ErrBadGeometry naming MaxPages", err)
	}
	if _, err := NewGeometry(Dims{1, 1 << 16, 1<<16 + 1}, 1, Dims{1, 1, 1}); !errors.Is(err, ErrBadGeometry) {
		t.Fatalf("NewGeometry(MaxPages+2^16 pages) err = %v, want ErrBadGeometry", err)
	}
	g, err := NewGeometry(Dims{1, 1 << 16, 1 << 16}, 1, Dims{1, 1, 1})
	if err != nil || g.NumPages() != MaxPages {
		t.Fatalf("NewGeometry(MaxPages pages) = %d pages, %v; want accepted", g.NumPages(), err)
	}
	// The default page size keeps any range that fits in memory far below.
	if g, err := NewGeometry(Dims{1, 1, 1 << 40}, 4, Dims{}); err != nil || g.NumPages() != 1<<26 {
		t.Fatalf("NewGeometry(4 TiB, default pages) = %d pages, %v", g.NumPages(), err)
	}
	c := New(Config{})
	if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: Geometry{Range: Dims{1, 1, 1 << 40}, ElemSize: 1, PageSize: Dims{1, 1, 1}}}); !errors.Is(err, ErrBadGeometry) {
		t.Fatalf("AddBuffer(hand-built 2^40 pages) err = %v, want ErrBadGeometry", err)
	}
}

// A Read with Discard is refused with ErrBadAccess (as the root package
// refuses a read-only NoInit accessor): it was accepted, planned no copy
// and left the target outdated, so the kernel read pages never brought in.
func TestReadDiscardRefused_T1(t *testing.T) {
	c, geo := newCore1D(t, 8, true)
	cg := CommandGroup{ID: 1, Accesses: []Access{{Buffer: 1, Pages: geo.All(), Mode: Read, Discard: true, Target: gpu1}}}
	if _, err := c.Submit(cg); !errors.Is(err, ErrBadAccess) {
		t.Fatalf("Submit(Read, Discard) err = %v, want ErrBadAccess", err)
	}
	// Nothing changed: the ID is not consumed, no allocation was made.
	if got := c.Allocations(1); len(got) != 1 {
		t.Fatalf("allocations after the refused group = %v, want [n0/host]", got)
	}
	cg.Accesses[0].Discard = false
	if st := mustSubmit(t, c, 1, cg.Accesses...); totalPages(st.Copies) != 8 {
		t.Fatalf("Read without Discard: copies %v, want 8 pages", st.Copies)
	}
	// Writing modes may discard.
	for i, m := range []Mode{Write, ReadWrite, Reduce} {
		mustSubmit(t, c, CGID(2+i), Access{Buffer: 1, Pages: geo.All(), Mode: m, Discard: true, Target: gpu2})
	}
}

// The zero Core works like New(Config{}) (its AddBuffer wrote to a nil
// map), and AddBuffer of an ID in use wraps ErrBufferExists (it wrapped no
// sentinel, though every error of the package is documented to).
func TestZeroCoreAndDuplicateBuffer_B5(t *testing.T) {
	var c Core
	geo, err := NewGeometry(Dims{1, 1, 8}, 4, Dims{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	h := host0
	if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo, HostData: &h}); err != nil {
		t.Fatalf("zero Core: AddBuffer: %v", err)
	}
	// Two equally cheap sources would need the cost model: host0 and gpu1
	// both hold the pages, gpu2 reads them from one of them (DefaultCost:
	// host 1, peer 2).
	mustSubmit(t, &c, 1, acc(Read, gpu1, span1(0, 8)))
	st := mustSubmit(t, &c, 2, acc(Read, gpu2, span1(0, 8)))
	if len(st.Copies) != 1 || st.Copies[0].Src != host0 {
		t.Fatalf("zero Core: copies %v, want 8 pages from n0/host (DefaultCost)", st.Copies)
	}
	err = c.AddBuffer(BufferSpec{ID: 1, Geometry: geo})
	if !errors.Is(err, ErrBufferExists) {
		t.Fatalf("AddBuffer(existing ID) err = %v, want ErrBufferExists", err)
	}
	if _, err := c.RemoveBuffer(1); err != nil {
		t.Fatal(err)
	}
	if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo}); err != nil {
		t.Fatalf("AddBuffer after RemoveBuffer: %v", err)
	}
}
