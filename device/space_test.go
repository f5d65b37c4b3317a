package device

import (
	"errors"
	"strings"
	"testing"
)

func TestAddressSpaceConversions_A4(t *testing.T) {
	all := []AddrSpace{Generic, Global, GlobalDevice, GlobalHost, Local, Private, Constant}
	implicit := map[[2]AddrSpace]bool{
		{GlobalDevice, Global}: true, {GlobalHost, Global}: true,
	}
	for _, s := range all {
		implicit[[2]AddrSpace{s, s}] = true
		if s != Generic {
			implicit[[2]AddrSpace{s, Generic}] = true
		}
	}
	for _, from := range all {
		for _, to := range all {
			want := implicit[[2]AddrSpace{from, to}]
			if got := ImplicitlyConverts(from, to); got != want {
				t.Errorf("ImplicitlyConverts(%s, %s) = %v, want %v", from, to, got, want)
			}
			wantX := want || from == Generic || (from == Global && (to == GlobalDevice || to == GlobalHost))
			if got := ExplicitlyConverts(from, to); got != wantX {
				t.Errorf("ExplicitlyConverts(%s, %s) = %v, want %v", from, to, got, wantX)
			}
		}
	}
}

func TestValidateArgs_A1_A2_V2_V4(t *testing.T) {
	dev := &Mem{Kind: MemDevice, Bytes: 64}
	host := &Mem{Kind: MemHost, Bytes: 64}
	ranged := Arg{Kind: ArgRangedAccessor, Space: GlobalDevice, Mem: dev, ElemSize: 4, Range: [3]int{1, 1, 16}, AccessOffset: [3]int{0, 0, 4}, AccessRange: [3]int{1, 1, 8}}
	unranged := Arg{Kind: ArgAccessor, Space: GlobalDevice, Mem: dev, ElemSize: 4, Range: [3]int{1, 1, 16}}
	raw := Arg{Kind: ArgPointer, Space: GlobalDevice, Mem: dev, ElemSize: 4}
	hostPtr := Arg{Kind: ArgPointer, Space: GlobalHost, Mem: host, ElemSize: 4}
	generic := hostPtr
	generic.Space = Generic
	scalar := Arg{Kind: ArgScalar, Space: Private, Scalar: []byte{1, 2, 3, 4}}
	local := Arg{Kind: ArgLocal, Space: Local, LocalBytes: 128}
	ro := unranged
	ro.ReadOnly = true
	tests := []struct {
		name  string
		param Param
		arg   Arg
		want  string // substring of the error, "" for success
		check func(Arg) bool
	}{
		{"device ptr to global_device", Param{"p", ArgPointer, GlobalDevice, 4}, raw, "", nil},
		{"host usm is no global_device", Param{"p", ArgPointer, GlobalDevice, 0}, hostPtr, "host USM pointer is no global_device", nil},
		{"host usm to global", Param{"p", ArgPointer, Global, 0}, hostPtr, "", nil},
		{"device ptr is no global_host", Param{"p", ArgPointer, GlobalHost, 0}, raw, "device pointer is no global_host", nil},
		{"named to generic", Param{"p", ArgPointer, Generic, 0}, hostPtr, "", nil},
		{"generic back needs a cast", Param{"p", ArgPointer, GlobalHost, 0}, generic, "explicit cast", nil},
		{"unranged to raw keeps only the pointer", Param{"p", ArgPointer, GlobalDevice, 0}, unranged, "", func(a Arg) bool {
			return a.Kind == ArgPointer && a.Range == [3]int{}
		}},
		{"ranged to raw drops offset", Param{"p", ArgPointer, GlobalDevice, 0}, ranged, "", func(a Arg) bool {
			return a.Kind == ArgPointer && a.AccessOffset == [3]int{} && a.AccessRange == [3]int{}
		}},
		{"ranged never to unranged", Param{"p", ArgAccessor, GlobalDevice, 0}, ranged, "never converts to an unranged", nil},
		{"raw never to unranged", Param{"p", ArgAccessor, GlobalDevice, 0}, raw, "never converts", nil},
		{"raw never to ranged", Param{"p", ArgRangedAccessor, GlobalDevice, 0}, raw, "never converts", nil},
		{"unranged to ranged is whole range", Param{"p", ArgRangedAccessor, Global, 0}, unranged, "", func(a Arg) bool {
			return a.Kind == ArgRangedAccessor && a.AccessRange == a.Range && a.AccessOffset == [3]int{}
		}},
		{"scalar private", Param{"s", ArgScalar, Private, 4}, scalar, "", nil},
		{"scalar wrong size", Param{"s", ArgScalar, Private, 8}, scalar, "element size", nil},
		{"pointer to scalar param", Param{"s", ArgScalar, Private, 0}, raw, "declared a scalar", nil},
		{"local", Param{"l", ArgLocal, Local, 0}, local, "", nil},
		{"accessor to local param", Param{"l", ArgLocal, Local, 0}, unranged, "declared local memory", nil},
		{"local to global param", Param{"p", ArgPointer, Global, 0}, local, "got a local memory", nil},
		{"constant needs read-only", Param{"c", ArgAccessor, Constant, 0}, unranged, "read-only", nil},
		{"constant read-only", Param{"c", ArgAccessor, Constant, 0}, ro, "", nil},
		{"wrong element size", Param{"p", ArgPointer, GlobalDevice, 8}, raw, "element size 4, declared 8", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &Kernel{Name: "k", Params: []Param{tc.param}}
			got, err := ValidateArgs(k, []Arg{tc.arg}, 0)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateArgs = %v, want success", err)
				}
				if tc.check != nil && !tc.check(got[0]) {
					t.Fatalf("converted arg %+v does not carry what its variant stores", got[0])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateArgs = %v, want error containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrBadArg) {
				t.Fatalf("error %v does not match ErrBadArg", err)
			}
			var ae *ArgError
			if !errors.As(err, &ae) || ae.Index != 0 || ae.Param != tc.param.Name {
				t.Fatalf("error %v does not name argument 0 (%s)", err, tc.param.Name)
			}
		})
	}
}

func TestValidateArgsCountAndLocalLimit_A2_A3(t *testing.T) {
	k := &Kernel{Name: "k", Params: []Param{{"a", ArgLocal, Local, 0}, {"b", ArgLocal, Local, 0}}}
	if _, err := ValidateArgs(k, nil, 0); err == nil || !strings.Contains(err.Error(), "takes 2 arguments, got 0") {
		t.Errorf("ValidateArgs(no args) = %v, want count error", err)
	}
	l := Arg{Kind: ArgLocal, Space: Local, LocalBytes: 600}
	if _, err := ValidateArgs(k, []Arg{l, l}, 1024); err == nil || !strings.Contains(err.Error(), "1200 bytes of local memory") {
		t.Errorf("ValidateArgs(over limit) = %v, want local memory error", err)
	}
	if _, err := ValidateArgs(k, []Arg{l, l}, 2048); err != nil {
		t.Errorf("ValidateArgs(under limit) = %v", err)
	}
	// Sizes whose sum overflows int: the sum wrapped below the limit and
	// the launch was accepted (found by FuzzValidateArgs).
	huge := Arg{Kind: ArgLocal, Space: Local, LocalBytes: 1 << 62}
	if _, err := ValidateArgs(k, []Arg{huge, huge}, 48<<10); err == nil || !strings.Contains(err.Error(), "local memory") {
		t.Errorf("ValidateArgs(2 × 2^62 local bytes, limit 48 KiB) = %v, want local memory error", err)
	}
	// A scalar's bytes are what the kernel reads: an ElemSize that
	// matches the declaration does not make up for bytes that do not.
	s := &Kernel{Name: "s", Params: []Param{{"v", ArgScalar, Private, 4}}}
	if _, err := ValidateArgs(s, []Arg{{Kind: ArgScalar, Space: Private, ElemSize: 4}}, 0); err == nil || !strings.Contains(err.Error(), "a scalar of 0 bytes, declared 4") {
		t.Errorf("ValidateArgs(a scalar of no bytes claiming 4) = %v, want it refused", err)
	}
	if _, err := ValidateArgs(s, []Arg{{Kind: ArgScalar, Space: Private, Scalar: []byte{1, 2, 3, 4}}}, 0); err != nil {
		t.Errorf("ValidateArgs(a 4-byte scalar) = %v", err)
	}
}

func TestCopyHostBox_T4(t *testing.T) {
	// 3x4x5 array of 2-byte elements; copy box origin (1,1,1) size (2,2,3)
	// into a 2x3x4 array at (0,1,1).
	src := &Mem{Bytes: 3 * 4 * 5 * 2, Host: make([]byte, 3*4*5*2)}
	for i := range src.Host {
		src.Host[i] = byte(i)
	}
	dst := &Mem{Bytes: 2 * 3 * 4 * 2, Host: make([]byte, 2*3*4*2)}
	c := CopyOp{
		Src:  Region{Mem: src, Extent: [3]int{3, 4, 5}, Origin: [3]int{1, 1, 1}},
		Dst:  Region{Mem: dst, Extent: [3]int{2, 3, 4}, Origin: [3]int{0, 1, 1}},
		Size: [3]int{2, 2, 3}, ElemSize: 2,
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	CopyHost(dst.Host, src.Host, c)
	for z := 0; z < 2; z++ {
		for y := 0; y < 3; y++ {
			for x := 0; x < 4; x++ {
				in := z < 2 && y >= 1 && y < 3 && x >= 1 && x < 4
				di := ((z*3+y)*4 + x) * 2
				want := byte(0)
				if in {
					want = byte((((z+1)*4+(y-1+1))*5 + (x - 1 + 1)) * 2)
				}
				if dst.Host[di] != want {
					t.Fatalf("dst[%d,%d,%d] = %d, want %d", z, y, x, dst.Host[di], want)
				}
			}
		}
	}
	if c.Bytes() != 24 {
		t.Errorf("Bytes() = %d, want 24", c.Bytes())
	}
	bad := c
	bad.Size[2] = 5
	if err := bad.Validate(); !errors.Is(err, ErrBadOp) {
		t.Errorf("Validate(box too wide) = %v, want ErrBadOp", err)
	}
	bad = c
	bad.Src.Offset = 10
	if err := bad.Validate(); !errors.Is(err, ErrBadOp) {
		t.Errorf("Validate(array past allocation) = %v, want ErrBadOp", err)
	}
}

func TestFill(t *testing.T) {
	m := &Mem{Bytes: 12, Host: make([]byte, 12)}
	f := FillOp{Dst: m, Offset: 2, Bytes: 9, Pattern: []byte{1, 2, 3}}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	FillHost(m.Host, f)
	want := []byte{0, 0, 1, 2, 3, 1, 2, 3, 1, 2, 3, 0}
	if string(m.Host) != string(want) {
		t.Errorf("FillHost = %v, want %v", m.Host, want)
	}
	for _, bad := range []FillOp{{Dst: m, Bytes: 4, Pattern: []byte{1, 2, 3}}, {Dst: m, Offset: 8, Bytes: 8, Pattern: []byte{0}}, {Dst: m, Bytes: 1}} {
		if err := bad.Validate(); !errors.Is(err, ErrBadOp) {
			t.Errorf("Validate(%+v) = %v, want ErrBadOp", bad, err)
		}
	}
}

func TestRegistry(t *testing.T) {
	var r Registry
	k := Kernel{Name: "k", Go: func(*Work) {}}
	if err := r.Register(k); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(k); !errors.Is(err, ErrDuplicateKernel) {
		t.Errorf("second Register = %v, want ErrDuplicateKernel", err)
	}
	if err := r.Register(Kernel{Name: "none"}); err == nil {
		t.Error("Register(no implementation) succeeded")
	}
	if _, err := r.Lookup("missing"); !errors.Is(err, ErrUnknownKernel) {
		t.Errorf("Lookup(missing) = %v, want ErrUnknownKernel", err)
	}
	got, err := r.Lookup("k")
	if err != nil || got.Name != "k" || !got.Has(FormGo) || got.Has(FormPTX) {
		t.Errorf("Lookup(k) = %+v, %v", got, err)
	}
	if n := r.Names(); len(n) != 1 || n[0] != "k" {
		t.Errorf("Names() = %v", n)
	}
}

// ValidateArgs copies only when an argument converts: arguments that pass
// as they are come back in the caller's slice (no allocation per launch),
// and a conversion never writes into the caller's slice (V4).
func TestValidateArgsCopiesOnlyOnConversion_V4(t *testing.T) {
	dev := &Mem{Kind: MemDevice, Bytes: 64}
	k := &Kernel{Name: "k", Params: []Param{
		{"s", ArgScalar, Private, 4},
		{"p", ArgPointer, GlobalDevice, 4},
	}}
	raw := Arg{Kind: ArgPointer, Space: GlobalDevice, Mem: dev, ElemSize: 4}
	scalar := Arg{Kind: ArgScalar, Space: Private, Scalar: []byte{1, 2, 3, 4}, ElemSize: 4}
	args := []Arg{scalar, raw}
	got, err := ValidateArgs(k, args, 0)
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &args[0] {
		t.Error("ValidateArgs copied arguments that needed no conversion")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ValidateArgs(k, args, 0) }); n != 0 {
		t.Errorf("ValidateArgs of arguments that convert to themselves: %v allocations, want 0", n)
	}
	// An unranged accessor for the raw parameter keeps only its pointer.
	unranged := Arg{Kind: ArgAccessor, Space: GlobalDevice, Mem: dev, ElemSize: 4, Range: [3]int{1, 1, 16}}
	args = []Arg{scalar, unranged}
	got, err = ValidateArgs(k, args, 0)
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] == &args[0] {
		t.Fatal("ValidateArgs converted into the caller's slice")
	}
	if args[1].Kind != ArgAccessor || args[1].Range != unranged.Range {
		t.Errorf("the caller's argument changed: %+v", args[1])
	}
	if got[1].Kind != ArgPointer || got[1].Range != ([3]int{}) || got[0].Kind != ArgScalar {
		t.Errorf("converted = %+v, want the scalar and a bare pointer", got)
	}
}
