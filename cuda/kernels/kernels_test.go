package kernels

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/acpp/acpp/device"
)

// TestBuiltinsMatchPTX_V4: every built-in kernel's embedded PTX has its entry
// and takes exactly the ND range plus the parameter layout its declaration
// implies (raw = one pointer, unranged = pointer + range, ranged = pointer +
// range + offset + access range, local = one offset).
func TestBuiltinsMatchPTX_V4(t *testing.T) {
	want := []string{"copy_f32", "empty", "fill_f32", "histogram_u32", "jacobi2d", "matmul_tiled", "reduce_sum_f32", "saxpy", "spin"}
	if got := Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range Names() {
		b, _ := Lookup(n)
		k := b.Kernel()
		if k.PTX == nil || len(k.PTX.Module) == 0 || k.PTX.Entry != b.Entry {
			t.Fatalf("%s: Kernel().PTX = %+v, want the embedded module", n, k.PTX)
		}
		entries, err := Entries(k.PTX.Module)
		if err != nil {
			t.Fatalf("%s: Entries: %v", n, err)
		}
		var e *Entry
		for i := range entries {
			if entries[i].Name == b.Entry {
				e = &entries[i]
			}
		}
		if e == nil {
			t.Fatalf("%s: entry %s not in ptx/%s.ptx (entries %v)", n, b.Entry, b.File, entries)
		}
		if err := CheckLayout(n, *e, b.Params); err != nil {
			t.Errorf("CheckLayout(%s) = %v", n, err)
		}
	}
}

func TestEntries(t *testing.T) {
	tests := []struct {
		name string
		ptx  string
		want []Entry
	}{
		{"none", ".version 7.0\n.target sm_52\n", nil},
		{"no params", ".visible .entry empty() { ret; }", []Entry{{Name: "empty"}}},
		{"no parens", ".entry k\n{\n ret;\n}", []Entry{{Name: "k"}}},
		{"scalars", ".visible .entry saxpy(.param .u64 px, .param .u64 py, .param .f32 pa, .param .u32 pn)\n{ ret; }",
			[]Entry{{Name: "saxpy", Params: []EntryParam{{"px", 8, 8}, {"py", 8, 8}, {"pa", 4, 4}, {"pn", 4, 4}}}}},
		{"struct and qualifiers", "// c\n.entry f(\n\t.param .align 8 .b8 f_param_0[48], /* x */\n\t.param .u64 .ptr .global .align 4 f_param_1\n)\n{}",
			[]Entry{{Name: "f", Params: []EntryParam{{"f_param_0", 48, 8}, {"f_param_1", 8, 4}}}}},
		{"two entries, .entry in a comment", "// .entry fake(\n.entry a(.param .b16 x)\n{}\n.entry b(.param .s8 y[3])\n{}",
			[]Entry{{Name: "a", Params: []EntryParam{{"x", 2, 2}}}, {Name: "b", Params: []EntryParam{{"y", 3, 1}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Entries([]byte(tc.ptx))
			if err != nil {
				t.Fatalf("Entries = %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Entries = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEntriesRejects(t *testing.T) {
	tests := []struct{ ptx, want string }{
		{".entry (", "without a name"},
		{".entry k(.param .u64 a", "not closed"},
		{".entry k(.param .q64 a)", "unknown parameter type"},
		{".entry k(.param .u64)", "declares no parameter name"},
		{".entry k(.param .b8 a[0])", "positive count"},
		{".entry k(.param .align 3 .b8 a[4])", "power of two"},
		{"\n\n.entry k(.reg .u32 a)", "line 3"},
	}
	for _, tc := range tests {
		_, err := Entries([]byte(tc.ptx))
		if !errors.Is(err, ErrBadPTX) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Entries(%q) = %v, want ErrBadPTX mentioning %q", tc.ptx, err, tc.want)
		}
	}
}

// TestCheckLayoutNamesArgument_A2: a declaration that disagrees with the PTX
// is refused before launch, naming the argument.
func TestCheckLayoutNamesArgument_A2(t *testing.T) {
	e := Entry{Name: "k", Params: []EntryParam{{"p0", 48, 8}, {"p1", 8, 8}, {"p2", 4, 4}}}
	ok := []device.Param{ptr("x", 4), scalar("n", 4)}
	if err := CheckLayout("k", e, ok); err != nil {
		t.Fatalf("CheckLayout(matching) = %v", err)
	}
	bad := []device.Param{acc("x", 4), scalar("n", 4)}
	err := CheckLayout("k", e, bad)
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "argument 0 (x)") {
		t.Errorf("CheckLayout(accessor for pointer) = %v, want ErrLayout naming argument 0 (x)", err)
	}
	if err := CheckLayout("k", e, ok[:1]); !errors.Is(err, ErrLayout) {
		t.Errorf("CheckLayout(too few) = %v, want ErrLayout", err)
	}
	noND := Entry{Name: "k", Params: []EntryParam{{"p0", 8, 8}, {"p1", 8, 8}, {"p2", 4, 4}}}
	if err := CheckLayout("k", noND, ok); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "acpp_nd") {
		t.Errorf("CheckLayout(no ND range) = %v, want ErrLayout about acpp_nd", err)
	}
}

// FuzzEntries: the PTX reader never panics, and what it returns is sane.
func FuzzEntries(f *testing.F) {
	for _, n := range Names() {
		b, _ := Lookup(n)
		f.Add(b.PTX().Module)
	}
	f.Add([]byte(".entry k(.param .align 8 .b8 a[48], .param .u64 .ptr .global .align 4 b)"))
	f.Add([]byte("/* unterminated .entry x("))
	f.Add([]byte(".entry"))
	f.Fuzz(func(t *testing.T, ptx []byte) {
		es, err := Entries(ptx)
		if err != nil {
			if !errors.Is(err, ErrBadPTX) {
				t.Fatalf("Entries error %v is not ErrBadPTX", err)
			}
			return
		}
		for _, e := range es {
			if e.Name == "" {
				t.Fatalf("entry without a name in %+v", es)
			}
			for _, p := range e.Params {
				if p.Size <= 0 || p.Align <= 0 || p.Name == "" {
					t.Fatalf("bad parameter %+v", p)
				}
			}
		}
	})
}

// TestLaunchFor: the launch hint belongs to the built-in's PTX (its bytes or
// a copy of them) and entry; another entry or another module has none (and
// so runs one item per thread, which the kernel must also get right).
func TestLaunchFor(t *testing.T) {
	b, _ := Lookup("jacobi2d")
	p := b.PTX()
	l, ok := LaunchFor(p)
	if !ok || l.Block != [3]int{1, 2, 128} || l.PerThread != [3]int{1, 8, 1} {
		t.Fatalf("LaunchFor(jacobi2d) = %+v, %v", l, ok)
	}
	if q := b.PTX(); &q.Module[0] != &p.Module[0] {
		t.Error("two PTX() calls gave two copies of the module; LaunchFor needs one")
	}
	cp := &device.PTX{Module: append([]byte(nil), p.Module...), Entry: p.Entry}
	if l2, ok := LaunchFor(cp); !ok || l2 != l {
		t.Errorf("LaunchFor(a copy of jacobi2d's PTX) = %+v, %v; want %+v", l2, ok, l)
	}
	edited := &device.PTX{Module: append([]byte(nil), p.Module...), Entry: p.Entry}
	edited.Module[len(edited.Module)-2] ^= 1
	other := &device.PTX{Module: p.Module, Entry: "other"}
	s, _ := Lookup("saxpy")
	for _, q := range []*device.PTX{edited, other, s.PTX(), nil, {}} {
		if l, ok := LaunchFor(q); ok {
			t.Errorf("LaunchFor(module of %d bytes, entry %q) = %+v, want none", len(q.Module), q.Entry, l)
		}
	}
}
