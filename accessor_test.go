package acpp

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/acpp/acpp/device"
)

func TestAccessorVariantsStoreOnlyWhatTheyNeed_V1(t *testing.T) {
	// In a kernel an accessor is a data pointer (a slice) plus the
	// requirement record, four words that the compiler keeps in registers;
	// what a variant adds (buffer range, offset, access range) is in the
	// record and exposed only by the variants that have it.
	words := unsafe.Sizeof(uintptr(0))
	for _, tc := range []struct {
		v      any
		size   uintptr
		fields []string
		query  map[string]bool // methods that expose stored information
	}{
		{Raw[float32]{}, 4 * words, []string{"p", "rq"}, map[string]bool{"Range": false, "Offset": false}},
		{Unranged[float32]{}, 4 * words, []string{"p", "rq"}, map[string]bool{"Range": true, "Offset": true, "Slice": true}},
		{Ranged[float32]{}, 4 * words, []string{"p", "rq"}, map[string]bool{"Range": true, "Offset": true, "Slice": false}},
		// Placeholders store the buffer and the properties (no_init); no
		// pointer: they are bound later.
		{Placeholder[float32]{}, 0, []string{"b", "mode", "noInit"}, map[string]bool{"At": false, "Require": true}},
		{RangedPlaceholder[float32]{}, 0, []string{"b", "mode", "noInit", "off", "rng"}, map[string]bool{"At": false, "Require": true}},
	} {
		typ := reflect.TypeOf(tc.v)
		if tc.size != 0 && typ.Size() != tc.size {
			t.Errorf("%v is %d bytes, want %d (register-sized)", typ, typ.Size(), tc.size)
		}
		var got []string
		for i := 0; i < typ.NumField(); i++ {
			got = append(got, typ.Field(i).Name)
		}
		if !reflect.DeepEqual(got, tc.fields) {
			t.Errorf("%v fields = %v, want %v", typ, got, tc.fields)
		}
		for m, want := range tc.query {
			if _, ok := typ.MethodByName(m); ok != want {
				t.Errorf("%v has %s = %v, want %v", typ, m, ok, want)
			}
		}
	}
	// The queries report what the variant stores.
	q := newQueue(t)
	b := must(NewBuffer[float32](q, R2(6, 8)))
	must(q.Submit(func(h *Handler) error {
		u := Read(h, b)
		r := ReadRange(h, b, R2(2, 3), I2(1, 4))
		if u.Range() != R2(6, 8) || u.Offset() != (ID{}) || r.Range() != R2(2, 3) || r.Offset() != I2(1, 4) {
			t.Errorf("queries: unranged %v %v, ranged %v %v", u.Range(), u.Offset(), r.Range(), r.Offset())
		}
		if w := u.Ranged(); w.Range() != R2(6, 8) || w.Offset() != (ID{}) {
			t.Errorf("unranged → ranged: %v %v, want the whole buffer", w.Range(), w.Offset())
		}
		h.SingleTask(func() {})
		return nil
	}))
	waitAll(t, q)
}

func TestConversionRulesInMethodSets_V2_V3(t *testing.T) {
	has := func(v any, m string) bool { _, ok := reflect.TypeOf(v).MethodByName(m); return ok }
	tests := []struct {
		name   string
		v      any
		method string
		want   bool
	}{
		{"raw never converts to unranged", Raw[float32]{}, "Unranged", false},
		{"raw never converts to ranged", Raw[float32]{}, "Ranged", false},
		{"raw to read-only raw", Raw[float32]{}, "ReadOnly", true},
		{"raw exposes no range (V3)", Raw[float32]{}, "Range", false},
		{"raw exposes no offset (V3)", Raw[float32]{}, "Offset", false},
		{"raw has no 2D index (V3)", Raw[float32]{}, "At2", false},
		{"unranged to ranged", Unranged[float32]{}, "Ranged", true},
		{"unranged to raw", Unranged[float32]{}, "Raw", true},
		{"ranged never to unranged", Ranged[float32]{}, "Unranged", false},
		{"ranged to raw", Ranged[float32]{}, "Raw", true},
		{"no placeholder from an accessor", Unranged[float32]{}, "Placeholder", false},
		{"placeholder binds with Require", Placeholder[float32]{}, "Require", true},
		{"read-only accessors cannot write", UnrangedRO[float32]{}, "Set", false},
		{"read-only ranged cannot write", RangedRO[float32]{}, "Set2", false},
		{"read-only raw cannot write", RawRO[float32]{}, "Set", false},
		{"read-only unranged has no slice", UnrangedRO[float32]{}, "Slice", false},
		{"read-only unranged has no pointer", UnrangedRO[float32]{}, "Ptr", false},
		{"read-only ranged has no slice", RangedRO[float32]{}, "Slice", false},
		{"read-only raw has no pointer", RawRO[float32]{}, "Ptr", false},
		{"read host accessor cannot write", &HostAccessorRO[float32]{}, "Set", false},
		{"read host accessor has no slice", &HostAccessorRO[float32]{}, "Slice", false},
		{"read host accessor copies in nothing", &HostAccessorRO[float32]{}, "CopyFrom", false},
		{"read-only unranged copies out", UnrangedRO[float32]{}, "CopyTo", true},
		{"read-only ranged iterates", RangedRO[float32]{}, "All", true},
		{"read host accessor copies out", &HostAccessorRO[float32]{}, "Copy", true},
		{"read-only never back to read-write", UnrangedRO[float32]{}, "ReadWrite", false},
		{"placeholder has no data access", Placeholder[float32]{}, "At", false},
	}
	for _, tc := range tests {
		if got := has(tc.v, tc.method); got != tc.want {
			t.Errorf("%s: %T has %s = %v, want %v", tc.name, tc.v, tc.method, got, tc.want)
		}
	}
}

// Read accessors read through At, iterators and copies out, never through
// a slice of the buffer (V2).
func TestReadAccessorsReadOnlyMeans_V2(t *testing.T) {
	q := newQueue(t)
	data := make([]int32, 6*8)
	for i := range data {
		data[i] = int32(i)
	}
	b := must(NewBufferFrom(q, data, R2(6, 8)))
	var whole, wholeIter, wholeAll, region, regionIter, regionAll, short []int32
	var n int
	must(q.Submit(func(h *Handler) error {
		u := Read(h, b)
		g := ReadRange(h, b, R2(2, 3), I2(1, 4))
		h.SingleTask(func() {
			whole = u.Copy()
			wholeIter = slices.Collect(u.Values())
			for i, v := range u.All() {
				if int32(i) != v {
					return // leaves wholeAll short
				}
				wholeAll = append(wholeAll, v)
			}
			region = g.Copy()
			regionIter = slices.Collect(g.Values())
			for i, v := range g.All() {
				if i != len(regionAll) { // the index within the range
					return
				}
				regionAll = append(regionAll, v)
			}
			short = make([]int32, 4)
			n = g.CopyTo(short)
		})
		return nil
	}))
	waitAll(t, q)
	if !slices.Equal(whole, data) || !slices.Equal(wholeIter, data) || !slices.Equal(wholeAll, data) {
		t.Errorf("unranged Copy/Values/All = %v / %v / %v, want the buffer", whole, wholeIter, wholeAll)
	}
	want := []int32{12, 13, 14, 20, 21, 22}
	if !slices.Equal(region, want) || !slices.Equal(regionIter, want) || !slices.Equal(regionAll, want) {
		t.Errorf("ranged Copy/Values/All = %v / %v / %v, want the range %v", region, regionIter, regionAll, want)
	}
	if n != 4 || !slices.Equal(short, want[:4]) {
		t.Errorf("ranged CopyTo of 4 = %d, %v", n, short)
	}
}

func TestRawIgnoresOffset_V3(t *testing.T) {
	q := newQueue(t)
	data := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	b := must(NewBufferFrom(q, data, R1(8)))
	must(q.Submit(func(h *Handler) error {
		r := ReadWriteRaw(h, b, Within(I1(4), R1(4)))
		g := ReadWriteRange(h, b, R1(4), I1(4))
		h.SingleTask(func() {
			r.Set(1, r.At(1)+10) // element 1: raw ignores the offset
			g.Set(1, g.At(1)+20) // element 5: ranged adds it
		})
		return nil
	}))
	waitAll(t, q)
	b.Close()
	if data[1] != 11 || data[5] != 25 {
		t.Fatalf("data = %v, want data[1] = 11 (raw), data[5] = 25 (ranged)", data)
	}
}

func TestKernelArgsCarryOnlyTheirVariant_V4(t *testing.T) {
	q, _ := gpuQueue(t)
	b := must(NewBuffer[float32](q, R2(8, 8)))
	must(q.Submit(func(h *Handler) error {
		raw := ReadWriteRaw(h, b)
		unr := Read(h, b)
		rng := ReadRange(h, b, R2(2, 3), I2(4, 5))
		loc := LocalAccessor[float32](h, 16)
		h.LaunchND("acpptest.args", R1(4), R1(4), raw, unr, rng, loc)
		return nil
	}, On(fakeID)))
	waitAll(t, q)
	seenMu.Lock()
	defer seenMu.Unlock()
	if len(seen) != 4 {
		t.Fatalf("kernel saw %d args", len(seen))
	}
	if a := seen[0]; a.Kind != device.ArgPointer || a.Range != [3]int{} || a.AccessOffset != [3]int{} {
		t.Errorf("raw arg = %+v, want a pointer only", a)
	}
	if a := seen[1]; a.Kind != device.ArgAccessor || a.Range != [3]int{1, 8, 8} || a.AccessRange != [3]int{} || !a.ReadOnly {
		t.Errorf("unranged arg = %+v, want pointer + range", a)
	}
	if a := seen[2]; a.Kind != device.ArgRangedAccessor || a.AccessOffset != [3]int{0, 4, 5} || a.AccessRange != [3]int{1, 2, 3} {
		t.Errorf("ranged arg = %+v, want pointer + range + offset", a)
	}
	if a := seen[3]; a.Kind != device.ArgLocal || a.LocalBytes != 64 {
		t.Errorf("local arg = %+v, want 64 bytes of local memory", a)
	}
}

func TestConstructorsDeduceCompactVariant_V5(t *testing.T) {
	q := newQueue(t)
	b := must(NewBuffer[float32](q, R1(8)))
	got := map[string]reflect.Type{}
	must(q.Submit(func(h *Handler) error {
		got["Read"] = reflect.TypeOf(Read(h, b))
		got["ReadWrite"] = reflect.TypeOf(ReadWrite(h, b))
		got["ReadRange"] = reflect.TypeOf(ReadRange(h, b, R1(2), I1(1)))
		got["WriteRaw"] = reflect.TypeOf(WriteRaw(h, b))
		got["Require"] = reflect.TypeOf(ReadWritePlaceholder(b).Require(h))
		got["RequireRange"] = reflect.TypeOf(ReadPlaceholderRange(b, R1(2), I1(0)).Require(h))
		h.SingleTask(func() {})
		return nil
	}))
	want := map[string]reflect.Type{
		"Read": reflect.TypeFor[UnrangedRO[float32]](), "ReadWrite": reflect.TypeFor[Unranged[float32]](),
		"ReadRange": reflect.TypeFor[RangedRO[float32]](), "WriteRaw": reflect.TypeFor[Raw[float32]](),
		"Require": reflect.TypeFor[Unranged[float32]](), "RequireRange": reflect.TypeFor[RangedRO[float32]](),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("constructor types = %v, want %v", got, want)
	}
	waitAll(t, q)
}

func TestPlaceholderRequire(t *testing.T) {
	q := newQueue(t)
	data := make([]float64, 10)
	b := must(NewBufferFrom(q, data, R1(10)))
	ph := WritePlaceholderRange(b, R1(5), I1(5), NoInit)
	if !ph.IsNoInit() || ph.Buffer() != b {
		t.Fatal("placeholder lost its properties")
	}
	for range 2 { // a placeholder binds to any number of groups
		must(q.Submit(func(h *Handler) error {
			a := ph.Require(h)
			h.ParallelFor(R1(5), func(it Item) { a.Set(it.ID(0), float64(it.ID(0))) })
			return nil
		}))
	}
	waitAll(t, q)
	b.Close()
	if data[9] != 4 || data[4] != 0 {
		t.Fatalf("data = %v", data)
	}
}

// Placeholders take NoInit; Within and Map cannot apply to them and make
// Require fail with ErrOption instead of being ignored, as they were.
func TestPlaceholderRefusesOptionsThatCannotApply(t *testing.T) {
	q := newQueue(t, WithCPUDevices(2))
	b := must(NewBuffer[float32](q, R1(8)))
	for name, tc := range map[string]struct {
		require func(h *Handler)
		msg     string
	}{
		"Within": {func(h *Handler) { ReadWritePlaceholder(b, Within(I1(2), R1(2))).Require(h) }, "use WritePlaceholderRange or ReadWritePlaceholderRange"},
		"Within on a ranged one": {func(h *Handler) { WritePlaceholderRange(b, R1(4), I1(0), Within(I1(2), R1(2))).Require(h) },
			"use the constructor's range and offset"},
		"Map": {func(h *Handler) { WritePlaceholder(b, NoInit, Map(OneToOne())).Require(h) }, "Map cannot apply to a placeholder"},
	} {
		_, err := q.Submit(func(h *Handler) error {
			tc.require(h)
			h.SingleTask(func() {})
			return nil
		})
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Submit = %v, want ErrOption containing %q", name, err, tc.msg)
		}
	}
	if ph := WritePlaceholder(b, NoInit); !ph.IsNoInit() || WritePlaceholder(b).IsNoInit() {
		t.Error("IsNoInit does not say whether NoInit was given")
	}
}

func TestAccessorIndexing2D3D(t *testing.T) {
	q := newQueue(t)
	d2 := make([]int32, 6*7)
	d3 := make([]int32, 3*4*5)
	b2 := must(NewBufferFrom(q, d2, R2(6, 7)))
	b3 := must(NewBufferFrom(q, d3, R3(3, 4, 5)))
	must(q.Submit(func(h *Handler) error {
		a := Write(h, b2, NoInit)
		h.ParallelFor(R2(6, 7), func(it Item) { a.Set2(it.ID(0), it.ID(1), int32(it.Linear())) })
		return nil
	}))
	must(q.Submit(func(h *Handler) error {
		a := Write(h, b3, NoInit)
		h.ParallelFor(R3(3, 4, 5), func(it Item) { a.Set3(it.ID(0), it.ID(1), it.ID(2), int32(it.Linear())) })
		return nil
	}))
	must(q.Submit(func(h *Handler) error {
		a := ReadWriteRange(h, b3, R3(1, 2, 2), I3(1, 1, 2))
		h.SingleTask(func() { a.Set3(0, 1, 1, -a.At3(0, 1, 1)) })
		return nil
	}))
	waitAll(t, q)
	b2.Close()
	b3.Close()
	for i := range d2 {
		if d2[i] != int32(i) {
			t.Fatalf("2D element %d = %d", i, d2[i])
		}
	}
	idx := (1*4+2)*5 + 3
	for i := range d3 {
		want := int32(i)
		if i == idx {
			want = -want
		}
		if d3[i] != want {
			t.Fatalf("3D element %d = %d, want %d", i, d3[i], want)
		}
	}
}

func TestReinterpretAndReshape_P5(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	data := make([]float32, 16)
	b := must(NewBufferFrom(q, data, R1(16), PageSize(4)))
	u := must(Reinterpret[uint32](b, R2(4, 4)))
	must(q.Submit(func(h *Handler) error {
		a := WriteRange(h, u, R2(1, 4), I2(2, 0), NoInit)
		h.ParallelFor(R1(4), func(it Item) { a.Set2(0, it.ID(0), 0x3f800000) }) // 1.0
		return nil
	}))
	v := must(b.Read(ctx))
	for i, x := range v {
		want := float32(0)
		if i >= 8 && i < 12 {
			want = 1
		}
		if x != want {
			t.Fatalf("element %d = %v, want %v", i, x, want)
		}
	}
	r := must(b.Reshape(R2(2, 8)))
	if r.Range().Size(1) != 8 {
		t.Fatal("reshape lost its range")
	}
	if _, err := b.Reshape(R2(3, 5)); err == nil {
		t.Error("Reshape to another element count succeeded")
	}
	if _, err := Reinterpret[uint64](b, R1(16)); err == nil {
		t.Error("Reinterpret to a larger size succeeded")
	}
	if err := u.Close(); err != nil || b.st.isClosed() {
		t.Error("closing a view closed the buffer")
	}
}
