package coherence

import (
	"errors"
	"math/rand/v2"
	"slices"
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

// ViewPageRange's page range covers at least the bytes the view's
// accessor touches (P5), whatever the view's shape: every byte of every
// accessed view element lies in an element of the returned pages.
// Random small buffers, page sizes, views of the same byte size and
// accessor boxes, checked byte by byte.
func TestViewPageRangeCoversBytes_P5(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 27))
	divisors := func(n int) []int {
		var out []int
		for i := 1; i <= n; i++ {
			if n%i == 0 {
				out = append(out, i)
			}
		}
		return out
	}
	pick := func(xs []int) int { return xs[r.IntN(len(xs))] }
	for range 20000 {
		rng := Dims{1 + r.IntN(4), 1 + r.IntN(6), 1 + r.IntN(8)}
		elem := pick([]int{1, 2, 4, 8})
		g, err := NewGeometry(rng, elem, Dims{1 + r.IntN(rng[0]), 1 + r.IntN(rng[1]), 1 + r.IntN(rng[2])})
		if err != nil {
			t.Fatal(err)
		}
		ve := pick(divisors(g.Bytes()))
		n := g.Bytes() / ve
		v2 := pick(divisors(n))
		v1 := pick(divisors(n / v2))
		v := View{Range: Dims{n / v2 / v1, v1, v2}, ElemSize: ve}
		var off, ext Dims
		for d := range 3 {
			off[d] = r.IntN(v.Range[d])
			ext[d] = 1 + r.IntN(v.Range[d]-off[d])
		}
		box, err := g.ViewPageRange(v, off, ext)
		if err != nil {
			t.Fatalf("geometry %+v: ViewPageRange(%v, %v, %v): %v", g, v, off, ext, err)
		}
		if box.Intersect(g.All()) != box {
			t.Fatalf("geometry %+v: ViewPageRange(%v, %v, %v) = %v leaves the page grid", g, v, off, ext, box)
		}
		eb := g.ElementBox(box)
		for z := off[0]; z < off[0]+ext[0]; z++ {
			for y := off[1]; y < off[1]+ext[1]; y++ {
				for x := off[2]; x < off[2]+ext[2]; x++ {
					first := flatten(v.Range, Dims{z, y, x}) * ve
					for b := first; b < first+ve; b += min(ve, elem) {
						if e := unflatten(g.Range, b/elem); !eb.Contains(e) {
							t.Fatalf("geometry %+v: ViewPageRange(%v, %v, %v) = %v (elements %v) misses byte %d (element %v)",
								g, v, off, ext, box, eb, b, e)
						}
					}
					if e := unflatten(g.Range, (first+ve-1)/elem); !eb.Contains(e) {
						t.Fatalf("geometry %+v: ViewPageRange(%v, %v, %v) = %v misses the last byte of view element %v", g, v, off, ext, box, Dims{z, y, x})
					}
				}
			}
		}
	}
}

// Smaller promises of the doc comments that no test pinned.
func TestDocumentedContracts(t *testing.T) {
	t.Run("DefaultCost_C3", func(t *testing.T) {
		for _, tc := range []struct {
			src, dst AllocID
			want     int
		}{
			{gpu1, gpu1, 0},    // same allocation
			{host0, gpu1, 1},   // same node, host to device
			{gpu1, host0, 1},   // same node, device to host
			{gpu1, gpu2, 2},    // same node, device to device
			{host0, host1, 10}, // other node
			{n1g1, gpu1, 10},
		} {
			if got := (DefaultCost{}).Cost(tc.src, tc.dst); got != tc.want {
				t.Errorf("DefaultCost.Cost(%v, %v) = %d, want %d", tc.src, tc.dst, got, tc.want)
			}
		}
	})
	t.Run("Outdated_P2", func(t *testing.T) {
		c, geo := newCore1D(t, 8, true)
		// On an allocation that does not exist every page is outdated.
		if got, err := c.Outdated(1, n1g1, span1(2, 6)); err != nil || len(got) != 1 || got[0] != span1(2, 6) {
			t.Errorf("Outdated(absent allocation) = %v, %v; want [%v]", got, err, span1(2, 6))
		}
		if got, err := c.Outdated(1, host0, geo.All()); err != nil || got != nil {
			t.Errorf("Outdated(host0) = %v, %v; want nothing", got, err)
		}
		if _, err := c.Outdated(9, host0, geo.All()); !errors.Is(err, ErrUnknownBuffer) {
			t.Errorf("Outdated(unknown buffer) err = %v, want ErrUnknownBuffer", err)
		}
		if _, err := c.Outdated(1, host0, span1(0, 9)); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Outdated(box outside) err = %v, want ErrOutOfRange", err)
		}
		if got := c.Allocations(9); got != nil {
			t.Errorf("Allocations(unknown) = %v, want nil", got)
		}
	})
	t.Run("Complete_D3", func(t *testing.T) {
		// Completing an unknown or already completed group does nothing.
		c, _ := newCore1D(t, 8, true)
		mustSubmit(t, c, 1, acc(Write, gpu1, span1(0, 8)))
		c.Complete(7)
		c.Complete(0)
		if st := mustSubmit(t, c, 2, acc(Read, gpu1, span1(0, 8))); !slices.Equal(st.Deps, []CGID{1}) {
			t.Fatalf("deps = %v, want [1]: completing unknown groups completed 1", st.Deps)
		}
		c.Complete(1)
		c.Complete(1)
		if live := c.Stats().Live; live != 1 {
			t.Fatalf("live groups = %d, want 1 (group 2)", live)
		}
	})
	t.Run("ReleaseErrors_B1", func(t *testing.T) {
		c, _ := newCore1D(t, 8, true)
		mustSubmit(t, c, 5, acc(Read, gpu1, span1(0, 8)))
		if _, err := c.Release(5, 1, gpu1); !errors.Is(err, ErrOrder) {
			t.Errorf("Release(old id) err = %v, want ErrOrder", err)
		}
		if _, err := c.Release(6, 9, gpu1); !errors.Is(err, ErrUnknownBuffer) {
			t.Errorf("Release(unknown buffer) err = %v, want ErrUnknownBuffer", err)
		}
		// A failing Release changes nothing: id 6 is still free.
		if _, err := c.Release(6, 1, gpu1); err != nil {
			t.Errorf("Release(6) after failures: %v", err)
		}
	})
	t.Run("GeometryErrors_P1_P5", func(t *testing.T) {
		if _, err := NewGeometry(Dims{1 << 30, 1 << 30, 1 << 30}, 8, Dims{}); !errors.Is(err, ErrBadGeometry) || !strings.Contains(err.Error(), "overflows") {
			t.Errorf("NewGeometry(2^90 elements) err = %v, want ErrBadGeometry saying it overflows", err)
		}
		// A geometry whose page size is not what NewGeometry makes of it.
		c := New(Config{})
		if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: Geometry{Range: Dims{1, 1, 8}, ElemSize: 4, PageSize: Dims{1, 1, 16}}}); !errors.Is(err, ErrBadGeometry) {
			t.Errorf("AddBuffer(page larger than the range) err = %v, want ErrBadGeometry", err)
		}
		geo, err := NewGeometry(Dims{1, 8, 8}, 4, Dims{1, 2, 8})
		if err != nil {
			t.Fatal(err)
		}
		v := View{Range: Dims{1, 1, 256}, ElemSize: 1}
		if got, err := geo.ViewPageRange(v, Dims{0, 0, 10}, Dims{1, 1, 0}); err != nil || got != (Box{}) {
			t.Errorf("ViewPageRange(zero extent) = %v, %v; want the empty box", got, err)
		}
		if _, err := geo.ViewPageRange(v, Dims{0, 0, 250}, Dims{1, 1, 7}); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("ViewPageRange(leaves the view) err = %v, want ErrOutOfRange", err)
		}
		if _, err := geo.ViewPageRange(View{Range: Dims{1, 0, 256}, ElemSize: 1}, Dims{}, Dims{1, 1, 1}); !errors.Is(err, ErrBadGeometry) {
			t.Errorf("ViewPageRange(zero view extent) err = %v, want ErrBadGeometry", err)
		}
	})
}

// Step's Allocate, Copies and Lost are sorted by buffer ID as an unsigned
// number: IDs from 2^63 up (hashes, say) sorted before small ones, so
// Lost was not "per buffer in ID order" (C5) and Allocate and Copies not
// in the order LoseNode and Buffers use.
func TestStepSortedByBufferID_C5(t *testing.T) {
	c := New(Config{})
	geo, err := NewGeometry(Dims{1, 1, 8}, 4, Dims{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	big := BufferID(1<<63 + 1)
	h := host0
	for _, id := range []BufferID{big, 1} {
		if err := c.AddBuffer(BufferSpec{ID: id, Geometry: geo, HostData: &h}); err != nil {
			t.Fatal(err)
		}
	}
	both := func(m Mode, on AllocID, discard bool) []Access {
		return []Access{
			{Buffer: big, Pages: geo.All(), Mode: m, Target: on, Discard: discard},
			{Buffer: 1, Pages: geo.All(), Mode: m, Target: on, Discard: discard},
		}
	}
	st := mustSubmit(t, c, 1, both(Read, gpu1, false)...)
	if len(st.Allocate) != 2 || st.Allocate[0].Buffer != 1 || st.Allocate[1].Buffer != big {
		t.Errorf("Allocate = %v, want buffer 1 then %d", st.Allocate, big)
	}
	if len(st.Copies) != 2 || st.Copies[0].Buffer != 1 || st.Copies[1].Buffer != big {
		t.Errorf("Copies = %v, want buffer 1 then %d", st.Copies, big)
	}
	mustSubmit(t, c, 2, both(Write, n1g1, true)...)
	lost := c.LoseNode(1)
	if len(lost) != 2 || lost[0].Buffer != 1 || lost[1].Buffer != big {
		t.Fatalf("LoseNode = %v, want buffer 1 then %d", lost, big)
	}
	st, err = c.Submit(CommandGroup{ID: 3, Accesses: both(Read, gpu1, false)})
	if !errors.Is(err, ErrLostPages) || len(st.Lost) != 2 || st.Lost[0].Buffer != 1 || st.Lost[1].Buffer != big {
		t.Fatalf("Submit over lost pages: Lost = %v, %v; want buffer 1 then %d, ErrLostPages", st.Lost, err, big)
	}
}

// PlanRecovery with no node left fails (C5); a negative NodesLeft, a
// caller's miscount, planned a replay on no nodes.
func TestPlanRecoveryNoNodeLeft_C5(t *testing.T) {
	lost := []LostPages{{Buffer: 1, Boxes: []Box{span1(0, 1)}, Nodes: []NodeID{1}}}
	for _, left := range []int{0, -1} {
		if p := PlanRecovery(RecoveryInput{Lost: lost, NodesLeft: left}); p.Action != RecoverFail {
			t.Errorf("PlanRecovery(NodesLeft %d) = %v, want fail", left, p.Action)
		}
	}
	if p := PlanRecovery(RecoveryInput{Lost: lost, NodesLeft: 1}); p.Action != RecoverReplay {
		t.Errorf("PlanRecovery(NodesLeft 1) = %v, want replay", p.Action)
	}
}
