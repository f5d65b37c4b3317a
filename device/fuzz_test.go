package device

import (
	"errors"
	"testing"
)

// fuzzKernel turns fuzz bytes into a kernel's parameters and the
// arguments of a launch of it, 6 bytes each, as a node builds them from a
// proto.Launch (node/exec.go launchOp): kinds, spaces, element sizes and
// local sizes are the client's.
func fuzzKernel(b []byte) (*Kernel, []Arg) {
	k := &Kernel{Name: "k"}
	var args []Arg
	mem := &Mem{Kind: MemDevice, Bytes: 1 << 20}
	for len(b) >= 6 && len(k.Params) < 16 {
		c := b[:6]
		b = b[6:]
		k.Params = append(k.Params, Param{Name: "p", Kind: ArgKind(c[0] % 7), Space: AddrSpace(c[1] % 9), ElemSize: int(c[2] % 9)})
		a := Arg{Kind: ArgKind(c[3] % 7), Space: AddrSpace(c[4] % 9), ElemSize: int(c[2]%9) * int(c[4]%2), ReadOnly: c[5]&1 != 0}
		switch c[5] >> 1 % 4 {
		case 0:
			a.Mem = mem
		case 1:
			a.Scalar = make([]byte, c[5]>>3%9)
		case 2:
			a.LocalBytes = int(c[5]>>3) << 10
		case 3:
			a.LocalBytes = 1<<62 + int(c[5]>>3) // sums past MaxInt
		}
		args = append(args, a)
	}
	return k, args
}

// FuzzValidateArgs: no launch's arguments make ValidateArgs panic; what it
// accepts has one argument per parameter, each of the parameter's kind,
// scalars of the declared size, and local memory within the limit.
func FuzzValidateArgs(f *testing.F) {
	f.Add([]byte{4, 5, 0, 4, 5, 12, 4, 5, 0, 4, 5, 12}, 48<<10) // two local arrays of 1 KiB
	f.Add([]byte{5, 6, 4, 5, 6, 34, 2, 3, 4, 2, 3, 0}, 0)       // a scalar and an accessor
	f.Add([]byte{3, 3, 4, 2, 3, 0, 1, 1, 4, 3, 4, 1}, 1024)     // accessors converted
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		k, args := fuzzKernel(b)
		out, err := ValidateArgs(k, args, limit)
		if err != nil {
			if !errors.Is(err, ErrBadArg) {
				t.Fatalf("error %v does not match ErrBadArg", err)
			}
			return
		}
		if len(out) != len(k.Params) {
			t.Fatalf("accepted %d arguments for %d parameters", len(out), len(k.Params))
		}
		var local uint64
		for i, p := range k.Params {
			a := out[i]
			if a.Kind != p.Kind && !(p.Kind == ArgLocal || p.Kind == ArgScalar) {
				t.Fatalf("argument %d: %s accepted for a %s parameter", i, a.Kind, p.Kind)
			}
			if a.Kind == ArgScalar && p.ElemSize != 0 && len(a.Scalar) != p.ElemSize {
				t.Fatalf("argument %d: a %d-byte scalar accepted for %d", i, len(a.Scalar), p.ElemSize)
			}
			if a.Kind == ArgLocal {
				if a.LocalBytes <= 0 {
					t.Fatalf("argument %d: %d bytes of local memory accepted", i, a.LocalBytes)
				}
				local += uint64(a.LocalBytes)
				if limit > 0 && local > uint64(limit) {
					t.Fatalf("accepted %d+ bytes of local memory, the limit is %d", local, limit)
				}
			}
		}
	})
}
