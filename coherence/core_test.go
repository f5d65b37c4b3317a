package coherence

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

var (
	host0 = AllocID{Node: 0, Mem: HostMem}
	gpu1  = AllocID{Node: 0, Mem: 1}
	gpu2  = AllocID{Node: 0, Mem: 2}
	host1 = AllocID{Node: 1, Mem: HostMem}
	n1g1  = AllocID{Node: 1, Mem: 1}
)

// newCore1D returns a core with buffer 1: n pages of one element each
// (page size 1), initialised on host0 if init.
func newCore1D(t testing.TB, n int, init bool) (*Core, Geometry) {
	t.Helper()
	geo, err := NewGeometry(Dims{1, 1, n}, 4, Dims{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{})
	spec := BufferSpec{ID: 1, Geometry: geo}
	if init {
		h := host0
		spec.HostData = &h
	}
	if err := c.AddBuffer(spec); err != nil {
		t.Fatal(err)
	}
	return c, geo
}

func span1(lo, hi int) Box { return Box{Lo: Dims{0, 0, lo}, Hi: Dims{1, 1, hi}} }

func mustSubmit(t testing.TB, c *Core, id CGID, acc ...Access) Step {
	t.Helper()
	st, err := c.Submit(CommandGroup{ID: id, Accesses: acc})
	if err != nil {
		t.Fatalf("Submit(%d): %v", id, err)
	}
	return st
}

func acc(m Mode, target AllocID, pages Box) Access {
	return Access{Buffer: 1, Pages: pages, Mode: m, Target: target}
}

func totalPages(cs []Copy) int {
	n := 0
	for _, c := range cs {
		n += c.Pages
	}
	return n
}

func TestDefaultPageSizeContiguous_P1(t *testing.T) {
	tests := []struct {
		rng  Dims
		elem int
		want Dims
	}{
		{Dims{1, 1, 100}, 4, Dims{1, 1, 100}},        // small: one page
		{Dims{1, 1, 1 << 20}, 4, Dims{1, 1, 16384}},  // 1D split
		{Dims{1, 4096, 4096}, 4, Dims{1, 4, 4096}},   // rows kept whole
		{Dims{1, 1000, 20000}, 4, Dims{1, 1, 10000}}, // row of 80 KB split in two equal pages
		{Dims{64, 64, 64}, 8, Dims{2, 64, 64}},       // planes of 32 KiB
		{Dims{1, 1, 10}, 1 << 20, Dims{1, 1, 1}},     // elements larger than the target
		{Dims{1, 100, 100}, 4, Dims{1, 100, 100}},    // 40 KB: one page
		{Dims{1, 3000, 1000}, 4, Dims{1, 16, 1000}},  // 16 rows of 4000 B
		{Dims{1, 1, 65536}, 1, Dims{1, 1, 65536}},    // exactly the target
		{Dims{1, 1, 65537}, 1, Dims{1, 1, 32769}},    // just over: two near-equal pages
	}
	for _, tc := range tests {
		got := DefaultPageSize(tc.rng, tc.elem)
		if got != tc.want {
			t.Errorf("DefaultPageSize(%v, %d) = %v, want %v", tc.rng, tc.elem, got, tc.want)
		}
		// Contiguity: dims inner to the first split one are whole.
		split := -1
		for d := 2; d >= 0; d-- {
			if got[d] < tc.rng[d] {
				split = d
				break
			}
		}
		for d := 0; d < split; d++ {
			if got[d] != 1 {
				t.Errorf("DefaultPageSize(%v) = %v: page not contiguous (dim %d > 1 outside the split dim %d)", tc.rng, got, d, split)
			}
		}
		if bytes := got.Volume() * tc.elem; bytes > DefaultPageBytes && got.Volume() > 1 {
			t.Errorf("DefaultPageSize(%v, %d) = %v: %d bytes > target", tc.rng, tc.elem, got, bytes)
		}
	}
}

func TestPageRange_P1(t *testing.T) {
	geo, err := NewGeometry(Dims{1, 100, 100}, 4, Dims{1, 10, 32})
	if err != nil {
		t.Fatal(err)
	}
	if got := geo.Pages(); got != (Dims{1, 10, 4}) {
		t.Fatalf("Pages() = %v, want [1 10 4]", got)
	}
	tests := []struct {
		off, rng Dims
		want     Box
		err      error
	}{
		{Dims{0, 0, 0}, Dims{1, 100, 100}, Box{Hi: Dims{1, 10, 4}}, nil},
		{Dims{0, 5, 31}, Dims{1, 6, 2}, Box{Lo: Dims{0, 0, 0}, Hi: Dims{1, 2, 2}}, nil},
		{Dims{0, 10, 32}, Dims{1, 10, 32}, Box{Lo: Dims{0, 1, 1}, Hi: Dims{1, 2, 2}}, nil},
		{Dims{0, 0, 0}, Dims{1, 0, 5}, Box{}, nil},
		{Dims{0, 95, 0}, Dims{1, 6, 1}, Box{}, ErrOutOfRange},
		{Dims{0, -1, 0}, Dims{1, 1, 1}, Box{}, ErrOutOfRange},
	}
	for _, tc := range tests {
		got, err := geo.PageRange(tc.off, tc.rng)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("PageRange(%v, %v) = %v, %v; want %v, %v", tc.off, tc.rng, got, err, tc.want, tc.err)
		}
	}
}

func TestNewGeometryErrors(t *testing.T) {
	_, err := NewGeometry(Dims{0, 1, -1}, 0, Dims{1, 0, 1})
	if !errors.Is(err, ErrBadGeometry) {
		t.Fatalf("NewGeometry(bad) err = %v, want ErrBadGeometry", err)
	}
	// every bad field is named
	for _, want := range []string{"Range[0]", "Range[2]", "ElemSize", "PageSize[1]"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

func TestViewPageRange_P5(t *testing.T) {
	// 64×64 float32 buffer, page = 8 rows.
	geo, err := NewGeometry(Dims{1, 64, 64}, 4, Dims{1, 8, 64})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		v        View
		off, rng Dims
		want     Box
	}{
		{"same shape is exact", View{Dims{1, 64, 64}, 4}, Dims{0, 9, 0}, Dims{1, 2, 64}, Box{Lo: Dims{0, 1, 0}, Hi: Dims{1, 2, 1}}},
		{"reinterpret as bytes, same rows", View{Dims{1, 64, 256}, 1}, Dims{0, 16, 4}, Dims{1, 1, 8}, Box{Lo: Dims{0, 2, 0}, Hi: Dims{1, 3, 1}}},
		{"reshape to 1D", View{Dims{1, 1, 4096}, 4}, Dims{0, 0, 64 * 20}, Dims{1, 1, 64 * 10}, Box{Lo: Dims{0, 2, 0}, Hi: Dims{1, 4, 1}}},
		{"reshape to 3D", View{Dims{4, 16, 64}, 4}, Dims{1, 0, 0}, Dims{1, 16, 64}, Box{Lo: Dims{0, 2, 0}, Hi: Dims{1, 4, 1}}},
	}
	for _, tc := range tests {
		got, err := geo.ViewPageRange(tc.v, tc.off, tc.rng)
		if err != nil || got != tc.want {
			t.Errorf("%s: ViewPageRange = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := geo.ViewPageRange(View{Dims{1, 1, 100}, 4}, Dims{}, Dims{1, 1, 1}); !errors.Is(err, ErrBadGeometry) {
		t.Errorf("ViewPageRange(wrong size) err = %v, want ErrBadGeometry", err)
	}
}

func TestDiscardNeverTransfers_T1(t *testing.T) {
	c, geo := newCore1D(t, 64, true)
	st := mustSubmit(t, c, 1, Access{Buffer: 1, Pages: geo.All(), Mode: Write, Discard: true, Target: gpu1})
	if len(st.Copies) != 0 {
		t.Fatalf("discard write: copies %v, want none", st.Copies)
	}
	if !reflect.DeepEqual(st.Allocate, []Allocation{{Buffer: 1, Alloc: gpu1, Bytes: 256}}) {
		t.Fatalf("Allocate = %v", st.Allocate)
	}
}

func TestUninitialisedNeverTransfers_T2(t *testing.T) {
	c, geo := newCore1D(t, 64, false)
	st := mustSubmit(t, c, 1, acc(ReadWrite, gpu1, geo.All()))
	st2 := mustSubmit(t, c, 2, acc(Read, gpu2, span1(10, 20)))
	st3 := mustSubmit(t, c, 3, acc(Read, gpu2, span1(0, 64)))
	if len(st.Copies) != 0 {
		t.Fatalf("uninitialised buffer: copies %v, want none", st.Copies)
	}
	// after the ReadWrite on gpu1 the data counts as initialised there
	if totalPages(st2.Copies) != 10 || totalPages(st3.Copies) != 54 {
		t.Fatalf("after write: copies %v then %v, want 10 then 54 pages", st2.Copies, st3.Copies)
	}
}

func TestTransferOnlyOutdated_T3(t *testing.T) {
	c, _ := newCore1D(t, 64, true)
	st := mustSubmit(t, c, 1, acc(Read, gpu1, span1(0, 32)))
	want := []Copy{{Buffer: 1, Src: host0, Dst: gpu1, Boxes: []Box{span1(0, 32)}, Pages: 32}}
	if !reflect.DeepEqual(st.Copies, want) {
		t.Fatalf("first read copies = %v, want %v", st.Copies, want)
	}
	st = mustSubmit(t, c, 2, acc(Read, gpu1, span1(16, 48)))
	want = []Copy{{Buffer: 1, Src: host0, Dst: gpu1, Boxes: []Box{span1(32, 48)}, Pages: 16}}
	if !reflect.DeepEqual(st.Copies, want) {
		t.Fatalf("overlapping read copies = %v, want %v (only outdated pages)", st.Copies, want)
	}
	st = mustSubmit(t, c, 3, acc(Read, gpu1, span1(0, 48)))
	if len(st.Copies) != 0 {
		t.Fatalf("read of up-to-date pages: copies %v, want none", st.Copies)
	}
}

func TestMarkWrittenOutdatesElsewhere_P3_P4(t *testing.T) {
	c, _ := newCore1D(t, 64, true)
	mustSubmit(t, c, 1, acc(Read, gpu1, span1(0, 64)))
	mustSubmit(t, c, 2, acc(Write, gpu2, span1(8, 16)))
	for _, tc := range []struct {
		a    AllocID
		want []Box
	}{
		{host0, []Box{span1(8, 16)}},
		{gpu1, []Box{span1(8, 16)}},
		{gpu2, []Box{span1(0, 8), span1(16, 64)}},
	} {
		got, err := c.Outdated(1, tc.a, span1(0, 64))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Outdated(%v) = %v, %v; want %v", tc.a, got, err, tc.want)
		}
	}
}

func TestPagesMarkedValidByTransfer_P2_P4(t *testing.T) {
	c, _ := newCore1D(t, 64, true)
	mustSubmit(t, c, 1, acc(Read, gpu1, span1(4, 12)))
	got, _ := c.Outdated(1, gpu1, span1(0, 64))
	want := []Box{span1(0, 4), span1(12, 64)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Outdated(gpu1) after transfer = %v, want %v", got, want)
	}
}

func TestGatherFromSeveralSources_T4(t *testing.T) {
	c, _ := newCore1D(t, 64, false)
	mustSubmit(t, c, 1, Access{Buffer: 1, Pages: span1(0, 32), Mode: Write, Discard: true, Target: gpu1})
	mustSubmit(t, c, 2, Access{Buffer: 1, Pages: span1(32, 64), Mode: Write, Discard: true, Target: gpu2})
	st := mustSubmit(t, c, 3, acc(Read, host0, span1(0, 64)))
	want := []Copy{
		{Buffer: 1, Src: gpu1, Dst: host0, Boxes: []Box{span1(0, 32)}, Pages: 32},
		{Buffer: 1, Src: gpu2, Dst: host0, Boxes: []Box{span1(32, 64)}, Pages: 32},
	}
	if !reflect.DeepEqual(st.Copies, want) {
		t.Fatalf("gather copies = %v, want %v", st.Copies, want)
	}
	if !reflect.DeepEqual(st.Deps, []CGID{1, 2}) {
		t.Fatalf("gather deps = %v, want [1 2]", st.Deps)
	}
}

func TestCostModelPrefersCheapSource_C3_T4(t *testing.T) {
	c, _ := newCore1D(t, 16, true)                     // host0 valid
	mustSubmit(t, c, 1, acc(Read, n1g1, span1(0, 16))) // n1g1 gets a copy over the network
	st := mustSubmit(t, c, 2, acc(Read, host1, span1(0, 16)))
	want := []Copy{{Buffer: 1, Src: n1g1, Dst: host1, Boxes: []Box{span1(0, 16)}, Pages: 16}}
	if !reflect.DeepEqual(st.Copies, want) {
		t.Fatalf("copies = %v, want same-node source %v", st.Copies, want)
	}
	// The copy out of n1g1 depends on group 1's in-flight fill landing.
	if !reflect.DeepEqual(st.Deps, []CGID{1}) {
		t.Fatalf("deps = %v, want [1] (source filled by group 1)", st.Deps)
	}
}

func TestConflictRules_D1_D2_D3(t *testing.T) {
	geo, _ := NewGeometry(Dims{1, 1, 64}, 4, Dims{1, 1, 1})
	c := New(Config{})
	h := host0
	for _, id := range []BufferID{1, 2} {
		if err := c.AddBuffer(BufferSpec{ID: id, Geometry: geo, HostData: &h}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		a    Access
		want []CGID
	}{
		{Access{Buffer: 1, Pages: span1(0, 32), Mode: Write, Target: host0}, nil},           // 1
		{Access{Buffer: 2, Pages: span1(0, 32), Mode: Write, Target: host0}, nil},           // 2: D2 other buffer
		{Access{Buffer: 1, Pages: span1(16, 48), Mode: Read, Target: host0}, []CGID{1}},     // 3: D1 overlap
		{Access{Buffer: 1, Pages: span1(16, 48), Mode: Read, Target: host0}, []CGID{1}},     // 4: read-read none
		{Access{Buffer: 1, Pages: span1(40, 64), Mode: Write, Target: host0}, []CGID{3, 4}}, // 5: readers since
		{Access{Buffer: 1, Pages: span1(0, 8), Mode: Read, Target: host0}, []CGID{1}},       // 6: disjoint from 5
		{Access{Buffer: 1, Pages: span1(50, 51), Mode: Read, Target: host0}, []CGID{5}},     // 7
	}
	for i, tc := range tests {
		st := mustSubmit(t, c, CGID(i+1), tc.a)
		if !slices.Equal(st.Deps, tc.want) {
			t.Errorf("group %d deps = %v, want %v", i+1, st.Deps, tc.want)
		}
	}
}

func TestIndependentGroupsRunInParallel_D4_C4(t *testing.T) {
	c, _ := newCore1D(t, 64, true)
	a := mustSubmit(t, c, 1, acc(ReadWrite, gpu1, span1(0, 32)))
	b := mustSubmit(t, c, 2, acc(ReadWrite, n1g1, span1(32, 64)))
	r1 := mustSubmit(t, c, 3, acc(Read, host0, span1(60, 64)))
	r2 := mustSubmit(t, c, 4, acc(Read, host0, span1(0, 4)))
	if a.Deps != nil || b.Deps != nil {
		t.Fatalf("disjoint writers on two nodes: deps %v, %v; want none", a.Deps, b.Deps)
	}
	if !slices.Equal(r1.Deps, []CGID{2}) || !slices.Equal(r2.Deps, []CGID{1}) {
		t.Fatalf("readers deps = %v, %v; want [2], [1]", r1.Deps, r2.Deps)
	}
}

func TestReduceSameOpNoConflict_D1(t *testing.T) {
	c, _ := newCore1D(t, 8, true)
	red := func(op ReduceOp, tgt AllocID) Access {
		return Access{Buffer: 1, Pages: span1(0, 1), Mode: Reduce, Op: op, Target: tgt}
	}
	mustSubmit(t, c, 1, acc(Read, host0, span1(0, 1)))
	s2 := mustSubmit(t, c, 2, red(7, host0))
	s3 := mustSubmit(t, c, 3, red(7, host0))
	s4 := mustSubmit(t, c, 4, red(8, host0))
	s5 := mustSubmit(t, c, 5, acc(Read, host0, span1(0, 1)))
	for _, tc := range []struct {
		name      string
		got, want []CGID
	}{
		{"first reducer after a reader", s2.Deps, []CGID{1}},
		{"same op, same target", s3.Deps, []CGID{1}},
		{"other op", s4.Deps, []CGID{2, 3}},
		{"reader after reducers", s5.Deps, []CGID{4}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: deps %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestCompleteDropsHistory_D3(t *testing.T) {
	c, _ := newCore1D(t, 8, true)
	mustSubmit(t, c, 1, acc(Write, host0, span1(0, 8)))
	c.Complete(1)
	st := mustSubmit(t, c, 2, acc(Read, gpu1, span1(0, 8)))
	if st.Deps != nil {
		t.Fatalf("deps on a completed group: %v", st.Deps)
	}
	st = mustSubmit(t, c, 3, acc(Read, gpu1, span1(0, 8)))
	if !slices.Equal(st.Deps, []CGID{2}) {
		t.Fatalf("second reader on gpu1 deps = %v, want [2] (in-flight fill)", st.Deps)
	}
	c.Complete(2)
	st = mustSubmit(t, c, 4, acc(Read, gpu1, span1(0, 8)))
	if st.Deps != nil {
		t.Fatalf("after the fill completed: deps %v, want none", st.Deps)
	}
}

func TestLazyFixedSizeAllocation_B1_B2_B5(t *testing.T) {
	c, geo := newCore1D(t, 64, true)
	if got := c.Allocations(1); !slices.Equal(got, []AllocID{host0}) {
		t.Fatalf("Allocations after AddBuffer(HostData) = %v", got)
	}
	st := mustSubmit(t, c, 1, acc(Read, gpu1, span1(0, 1)))
	if !reflect.DeepEqual(st.Allocate, []Allocation{{Buffer: 1, Alloc: gpu1, Bytes: geo.Bytes()}}) {
		t.Fatalf("first use Allocate = %v, want the full buffer on gpu1", st.Allocate)
	}
	st = mustSubmit(t, c, 2, acc(ReadWrite, gpu1, span1(0, 64)))
	if st.Allocate != nil {
		t.Fatalf("second use reallocates: %v", st.Allocate)
	}
}

func TestOneAllocationPerMemory_B4(t *testing.T) {
	// Two devices sharing host memory both target HostMem: one allocation.
	c, _ := newCore1D(t, 8, false)
	st := mustSubmit(t, c, 1, acc(Write, host0, span1(0, 4)), acc(Write, host0, span1(4, 8)))
	if len(st.Allocate) != 1 {
		t.Fatalf("Allocate = %v, want one host allocation", st.Allocate)
	}
	mustSubmit(t, c, 2, acc(Read, gpu1, span1(0, 8)), acc(Read, gpu2, span1(0, 8)))
	if got := c.Allocations(1); !slices.Equal(got, []AllocID{host0, gpu1, gpu2}) {
		t.Fatalf("Allocations = %v, want one per memory", got)
	}
}

func TestReleaseEvacuatesAndFrees_B1(t *testing.T) {
	c, geo := newCore1D(t, 16, true)
	mustSubmit(t, c, 1, acc(Write, gpu1, span1(0, 8)))
	mustSubmit(t, c, 2, acc(Read, gpu1, span1(8, 16)))
	st, err := c.Release(3, 1, gpu1)
	if err != nil {
		t.Fatal(err)
	}
	want := Step{ID: 3, Deps: []CGID{1, 2}, // the writer and the reader (which does not wait for 1: disjoint, D4)
		Copies: []Copy{{Buffer: 1, Src: gpu1, Dst: host0, Boxes: []Box{span1(0, 8)}, Pages: 8}},
		Free:   []Allocation{{Buffer: 1, Alloc: gpu1, Bytes: geo.Bytes()}}}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("Release = %+v, want %+v", st, want)
	}
	if got := c.Allocations(1); !slices.Equal(got, []AllocID{host0}) {
		t.Fatalf("Allocations after release = %v", got)
	}
	st = mustSubmit(t, c, 4, acc(Read, gpu1, span1(0, 16)))
	if len(st.Allocate) != 1 || !slices.Equal(st.Deps, []CGID{3}) || totalPages(st.Copies) != 16 {
		t.Fatalf("use after release = %+v; want a new allocation, dep on the release, 16 pages copied", st)
	}
	if _, err := c.Release(5, 1, gpu2); !errors.Is(err, ErrNoAllocation) {
		t.Fatalf("Release(absent) err = %v, want ErrNoAllocation", err)
	}
	if _, err := c.Release(5, 1, host0); err != nil {
		t.Fatalf("Release(host0) with another copy on gpu1: %v", err)
	}
	if _, err := c.Release(6, 1, gpu1); err != nil { // gpu1 has the only copy, node 0's host was released: re-allocated
		t.Fatalf("Release(gpu1): %v", err)
	}
}

func TestLoseNode_C5(t *testing.T) {
	c, _ := newCore1D(t, 16, true)
	mustSubmit(t, c, 1, acc(Read, n1g1, span1(0, 16)))
	mustSubmit(t, c, 2, Access{Buffer: 1, Pages: span1(4, 8), Mode: Write, Discard: true, Target: n1g1})
	lost := c.LoseNode(1)
	want := []LostPages{{Buffer: 1, Boxes: []Box{span1(4, 8)}, Nodes: []NodeID{1}}}
	if !reflect.DeepEqual(lost, want) {
		t.Fatalf("LoseNode = %v, want %v", lost, want)
	}
	st, err := c.Submit(CommandGroup{ID: 3, Accesses: []Access{acc(Read, gpu1, span1(0, 16))}})
	if !errors.Is(err, ErrLostPages) || !reflect.DeepEqual(st.Lost, want) {
		t.Fatalf("Submit over lost pages = %+v, %v; want Lost %v and ErrLostPages", st, err, want)
	}
	// Sources on the lost node are never chosen; the rest is readable.
	st = mustSubmit(t, c, 3, acc(Read, gpu1, span1(8, 16)))
	if len(st.Copies) != 1 || st.Copies[0].Src != host0 {
		t.Fatalf("copies = %v, want from host0", st.Copies)
	}
	// A discard write heals.
	mustSubmit(t, c, 4, Access{Buffer: 1, Pages: span1(4, 8), Mode: Write, Discard: true, Target: gpu1})
	mustSubmit(t, c, 5, acc(Read, host0, span1(0, 16)))
}

func TestErrors(t *testing.T) {
	c, _ := newCore1D(t, 8, true)
	for _, tc := range []struct {
		name string
		cg   CommandGroup
		want error
	}{
		{"unknown buffer", CommandGroup{ID: 1, Accesses: []Access{{Buffer: 9, Mode: Read, Pages: span1(0, 1)}}}, ErrUnknownBuffer},
		{"out of range", CommandGroup{ID: 1, Accesses: []Access{acc(Read, host0, span1(0, 9))}}, ErrOutOfRange},
		{"bad mode", CommandGroup{ID: 1, Accesses: []Access{acc(Mode(0), host0, span1(0, 1))}}, ErrBadAccess},
	} {
		if _, err := c.Submit(tc.cg); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	mustSubmit(t, c, 5, acc(Read, host0, span1(0, 1)))
	if _, err := c.Submit(CommandGroup{ID: 5}); !errors.Is(err, ErrOrder) {
		t.Errorf("repeated ID: err = %v, want ErrOrder", err)
	}
	if err := c.AddBuffer(BufferSpec{ID: 2}); !errors.Is(err, ErrBadGeometry) {
		t.Errorf("zero geometry: err = %v, want ErrBadGeometry", err)
	}
}

// TestConflictDepsMatchesSubmit_D1: the read-only detection query returns
// exactly the conflict part of Submit's dependencies.
func TestConflictDepsMatchesSubmit_D1(t *testing.T) {
	c, _ := newCore1D(t, 32, true)
	groups := [][]Access{
		{acc(Read, host0, span1(0, 8))},
		{acc(Write, host0, span1(4, 12))},
		{acc(Read, host0, span1(0, 32))},
		{acc(Reduce, host0, span1(0, 4))},
		{acc(Reduce, host0, span1(0, 4))},
		{acc(ReadWrite, host0, span1(2, 20)), acc(Read, host0, span1(30, 32))},
	}
	for i, as := range groups {
		cg := CommandGroup{ID: CGID(i + 1), Accesses: as}
		want := c.reduceDeps(c.conflictDeps(cg))
		st := mustSubmit(t, c, cg.ID, as...)
		if !slices.Equal(st.Deps, want) {
			t.Errorf("group %d: conflictDeps = %v, Submit deps = %v", i+1, want, st.Deps)
		}
		if i == 2 {
			c.Complete(1)
		}
	}
}

// TestUniformBufferStateIsSmall_P2: a big buffer in one state costs a few
// bytes per 4096-page chunk, not a bit per page.
func TestUniformBufferStateIsSmall_P2(t *testing.T) {
	c, _ := newCore1D(t, 1<<24, true)
	mustSubmit(t, c, 1, acc(Read, gpu1, span1(0, 1<<24)))
	st := c.Stats()
	if bits := st.StateBitsPerPage(); bits > 0.1 {
		t.Fatalf("uniform 2^24-page buffer on 2 allocations: %.3f state bits/page/alloc (%d B), want < 0.1", bits, st.StateBytes)
	}
	if st.Allocations != 2 || st.DenseChunks != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestHistoryBounded_D3: a long run of groups over the same pages, each
// completed, leaves a bounded history (regions and live groups).
func TestHistoryBounded_D3(t *testing.T) {
	c, _ := newCore1D(t, 4096, true)
	for i := 1; i <= 20000; i++ {
		lo := (i * 37) % 4000
		m := Read
		if i%3 == 0 {
			m = Write
		}
		mustSubmit(t, c, CGID(i), acc(m, gpu1, span1(lo, lo+50)))
		if i > 8 {
			c.Complete(CGID(i - 8))
		}
	}
	st := c.Stats()
	if st.Live != 8 || st.Regions > 2000 {
		t.Fatalf("after 20000 groups: %d live, %d regions; want 8 live and a bounded history", st.Live, st.Regions)
	}
}

// TestReleaseWaitsForAllocation_B1: an allocation made by a group with an
// empty accessor is freed only after that group ran.
func TestReleaseWaitsForAllocation_B1(t *testing.T) {
	c, _ := newCore1D(t, 8, true)
	mustSubmit(t, c, 1, acc(Read, gpu1, Box{}))
	st, err := c.Release(2, 1, gpu1)
	if err != nil || !slices.Equal(st.Deps, []CGID{1}) {
		t.Fatalf("Release = %+v, %v; want it to wait for the allocating group 1", st, err)
	}
}

func TestTooManyAllocations(t *testing.T) {
	c, _ := newCore1D(t, 4, true) // host0 holds slot 0
	for m := 1; m < maxSlots; m++ {
		mustSubmit(t, c, CGID(m), acc(Read, AllocID{Mem: MemID(m)}, span1(0, 1)))
	}
	extra := AllocID{Mem: MemID(maxSlots + 10)}
	_, err := c.Submit(CommandGroup{ID: 1000, Accesses: []Access{acc(Read, extra, span1(0, 1))}})
	if !errors.Is(err, ErrTooManyAllocations) {
		t.Fatalf("allocation %d: err = %v, want ErrTooManyAllocations", maxSlots+1, err)
	}
	if _, err := c.Release(1000, 1, AllocID{Mem: 5}); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, c, 1001, acc(Read, extra, span1(0, 1))) // the freed slot is reused
	if got := len(c.Allocations(1)); got != maxSlots {
		t.Fatalf("%d allocations, want %d", got, maxSlots)
	}
}

func TestRemoveBufferFreesAllocations_B1(t *testing.T) {
	c, geo := newCore1D(t, 16, true)
	mustSubmit(t, c, 1, acc(Read, gpu2, span1(0, 4)))
	mustSubmit(t, c, 2, acc(Read, gpu1, span1(0, 4)))
	c.Complete(1)
	c.Complete(2)
	got, err := c.RemoveBuffer(1)
	want := []Allocation{{1, host0, geo.Bytes()}, {1, gpu1, geo.Bytes()}, {1, gpu2, geo.Bytes()}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("RemoveBuffer = %v, %v; want %v", got, err, want)
	}
	if _, err := c.RemoveBuffer(1); !errors.Is(err, ErrUnknownBuffer) {
		t.Fatalf("second RemoveBuffer: err = %v, want ErrUnknownBuffer", err)
	}
	if _, err := c.Submit(CommandGroup{ID: 3, Accesses: []Access{acc(Read, gpu1, span1(0, 1))}}); !errors.Is(err, ErrUnknownBuffer) {
		t.Fatalf("Submit on a removed buffer: err = %v, want ErrUnknownBuffer", err)
	}
	// The ID can be reused for a new buffer, which starts afresh.
	if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo}); err != nil {
		t.Fatal(err)
	}
	st := mustSubmit(t, c, 3, acc(Read, gpu1, span1(0, 16)))
	if len(st.Copies) != 0 || len(st.Allocate) != 1 || st.Deps != nil {
		t.Fatalf("first use of the re-added buffer = %+v; want one allocation, no copies, no deps", st)
	}
}

// TestGroupIDZero_D3: 0 is a valid first command group ID.
func TestGroupIDZero_D3(t *testing.T) {
	c, _ := newCore1D(t, 8, true)
	mustSubmit(t, c, 0, acc(Write, gpu1, span1(0, 8)))
	st := mustSubmit(t, c, 1, acc(Read, gpu1, span1(0, 8)))
	if !slices.Equal(st.Deps, []CGID{0}) {
		t.Fatalf("deps = %v, want [0] (group 0 writes the pages group 1 reads)", st.Deps)
	}
	if _, err := c.Submit(CommandGroup{ID: 0}); !errors.Is(err, ErrOrder) {
		t.Fatalf("ID 0 again: err = %v, want ErrOrder", err)
	}
}

func TestBuffersDescribesStates_P2_C5(t *testing.T) {
	c, geo := newCore1D(t, 16, false)
	mustSubmit(t, c, 1, Access{Buffer: 1, Pages: span1(0, 8), Mode: Write, Discard: true, Target: gpu1})
	mustSubmit(t, c, 2, acc(Read, host0, span1(0, 4)))
	mustSubmit(t, c, 3, Access{Buffer: 1, Pages: span1(8, 10), Mode: Write, Discard: true, Target: n1g1})
	c.LoseNode(1)
	got := c.Buffers()
	want := []BufferInfo{{ID: 1, Geometry: geo,
		Allocations:   []AllocInfo{{host0, 4}, {gpu1, 8}},
		Uninitialised: 6, Lost: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Buffers() = %+v, want %+v", got, want)
	}
}

// TestFreshBufferWriters_D1_D3_D4: two groups on one allocation that a
// still-incomplete group creates are ordered by conflicts only (D1, D3):
// allocation is not a reason for an edge (D4); the later group lists the
// allocation in its own Allocate, whichever runs first makes it (B5).
func TestFreshBufferWriters_D1_D3_D4(t *testing.T) {
	for _, tc := range []struct {
		name         string
		init         bool // the buffer has host data
		first, later Access
		deps         []CGID
	}{
		{"disjoint writers", false, acc(Write, gpu1, span1(0, 8)), acc(Write, gpu1, span1(8, 16)), nil},
		{"disjoint discard writers", false,
			Access{Buffer: 1, Pages: span1(0, 8), Mode: Write, Discard: true, Target: gpu1},
			Access{Buffer: 1, Pages: span1(8, 16), Mode: Write, Discard: true, Target: gpu1}, nil},
		{"disjoint read-writes of host data", true, acc(ReadWrite, gpu1, span1(0, 8)), acc(ReadWrite, gpu1, span1(8, 16)), nil},
		{"disjoint writer and reader", true, acc(Write, gpu1, span1(0, 8)), acc(Read, gpu1, span1(8, 16)), nil},
		{"readers", true, acc(Read, gpu1, span1(0, 16)), acc(Read, gpu1, span1(0, 16)), []CGID{1}}, // in-flight fill
		{"overlapping writers", false, acc(Write, gpu1, span1(0, 9)), acc(Write, gpu1, span1(8, 16)), []CGID{1}},
		{"writer then overlapping reader", true, acc(Write, gpu1, span1(0, 8)), acc(Read, gpu1, span1(4, 12)), []CGID{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, geo := newCore1D(t, 16, tc.init)
			st := mustSubmit(t, c, 1, tc.first)
			if want := []Allocation{{Buffer: 1, Alloc: gpu1, Bytes: geo.Bytes()}}; !reflect.DeepEqual(st.Allocate, want) {
				t.Fatalf("first group: Allocate = %v, want %v", st.Allocate, want)
			}
			st = mustSubmit(t, c, 2, tc.later)
			if !slices.Equal(st.Deps, tc.deps) {
				t.Fatalf("later group: Deps = %v, want %v", st.Deps, tc.deps)
			}
			// Without an edge to the creator, the later group makes the
			// allocation itself if it runs first.
			var wantAlloc []Allocation
			if tc.deps == nil {
				wantAlloc = []Allocation{{Buffer: 1, Alloc: gpu1, Bytes: geo.Bytes()}}
			}
			if !reflect.DeepEqual(st.Allocate, wantAlloc) {
				t.Fatalf("later group: Allocate = %v, want %v", st.Allocate, wantAlloc)
			}
		})
	}
}

// TestReleaseWaitsForEveryAllocator_B1: several incomplete groups may list
// an allocation in Allocate; a release of it waits for all of them, also
// for one whose access is empty (it conflicts with nothing).
func TestReleaseWaitsForEveryAllocator_B1(t *testing.T) {
	c, _ := newCore1D(t, 16, true)
	mustSubmit(t, c, 1, acc(Write, gpu1, span1(0, 8)))
	if st := mustSubmit(t, c, 2, acc(Read, gpu1, Box{})); len(st.Allocate) != 1 || st.Deps != nil {
		t.Fatalf("empty access = %+v, want gpu1 in Allocate and no deps", st)
	}
	st, err := c.Release(3, 1, gpu1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Deps, []CGID{1, 2}) {
		t.Fatalf("Release deps = %v, want [1 2] (every group that may make or use gpu1)", st.Deps)
	}
}
