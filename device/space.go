package device

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unsafe"
)

// AddrSpace is a SYCL address space (address-spaces.rst, A1).
type AddrSpace uint8

// Address spaces. Global covers GlobalDevice (device allocations) and
// GlobalHost (host USM); Generic overlaps global, local and private.
const (
	Generic AddrSpace = iota + 1
	Global
	GlobalDevice
	GlobalHost
	Local
	Private
	Constant
)

var spaceNames = [...]string{Generic: "generic", Global: "global", GlobalDevice: "global_device",
	GlobalHost: "global_host", Local: "local", Private: "private", Constant: "constant"}

func (s AddrSpace) String() string {
	if int(s) < len(spaceNames) && spaceNames[s] != "" {
		return spaceNames[s]
	}
	return "addrspace(" + strconv.Itoa(int(s)) + ")"
}

// ImplicitlyConverts reports whether a pointer in space from converts to
// space to without a cast (A4): every named space to generic, and
// global_device and global_host to global. Constant data is global memory
// (it maps to the global attribute), so global pointers also pass where
// constant ones are expected once the argument is read-only; that check is
// ValidateArgs' business.
func ImplicitlyConverts(from, to AddrSpace) bool {
	switch {
	case from == to:
		return true
	case to == Generic:
		return from != Generic
	case to == Global:
		return from == GlobalDevice || from == GlobalHost
	}
	return false
}

// ExplicitlyConverts reports whether a cast can convert from to to (A4): the
// implicit conversions, generic back to any named space, and global to
// global_device or global_host. The cast is checked against the pointer's
// real space where that is known (a generic pointer to local memory does not
// become global).
func ExplicitlyConverts(from, to AddrSpace) bool {
	switch {
	case ImplicitlyConverts(from, to):
		return true
	case from == Generic:
		return true
	case from == Global:
		return to == GlobalDevice || to == GlobalHost
	}
	return false
}

// ArgKind is what a kernel argument carries (V4).
type ArgKind uint8

// Argument kinds. A raw accessor and a USM pointer are both ArgPointer: one
// device pointer.
const (
	// ArgPointer is one device pointer (raw accessor, USM pointer).
	ArgPointer ArgKind = iota + 1
	// ArgAccessor is an unranged accessor: pointer + buffer range.
	ArgAccessor
	// ArgRangedAccessor is a ranged accessor: pointer + buffer range +
	// access offset + access range.
	ArgRangedAccessor
	// ArgLocal is work-group local memory of LocalBytes bytes (A3).
	ArgLocal
	// ArgScalar is a value passed by copy (private space).
	ArgScalar
)

func (k ArgKind) String() string {
	switch k {
	case ArgPointer:
		return "pointer"
	case ArgAccessor:
		return "accessor"
	case ArgRangedAccessor:
		return "ranged accessor"
	case ArgLocal:
		return "local memory"
	case ArgScalar:
		return "scalar"
	}
	return "argkind(" + strconv.Itoa(int(k)) + ")"
}

// Param declares one kernel parameter.
type Param struct {
	Name  string
	Kind  ArgKind
	Space AddrSpace
	// ElemSize, when non-zero, is the element size the kernel expects of a
	// pointer or accessor argument, or the size of a scalar.
	ElemSize int
}

// Arg is one kernel argument as the runtime passes it.
type Arg struct {
	Kind ArgKind
	// Space is the address space of the value: Mem.Space() for memory,
	// Local for local memory, Private for scalars, or Generic for a pointer
	// the user cast to generic.
	Space AddrSpace
	// Mem and Offset (bytes) locate pointer and accessor arguments.
	Mem    *Mem
	Offset int
	// ElemSize is the element size of pointer and accessor arguments.
	ElemSize int
	// Range is the buffer's range in elements (accessors; dimension 2
	// fastest).
	Range [3]int
	// AccessOffset and AccessRange are the ranged accessor's access region.
	AccessOffset, AccessRange [3]int
	// ReadOnly: the kernel may only read through this argument.
	ReadOnly bool
	// LocalBytes is the size of an ArgLocal argument.
	LocalBytes int
	// Scalar holds an ArgScalar's bytes (little-endian, Go layout).
	Scalar []byte
}

// ArgError says which kernel argument does not match its declaration (A2).
type ArgError struct {
	Kernel string
	Index  int
	Param  string
	Reason string
}

func (e *ArgError) Error() string {
	return fmt.Sprintf("device: kernel %q argument %d (%s): %s", e.Kernel, e.Index, e.Param, e.Reason)
}

// Is makes every ArgError match ErrBadArg.
func (e *ArgError) Is(target error) bool { return target == ErrBadArg }

// ErrBadArg matches every *ArgError.
var ErrBadArg = errors.New("device: kernel argument does not match its declaration")

// ValidateArgs checks args against k's parameters (A2) and returns them
// converted to the declared kinds, each carrying only what its variant
// stores (V4): an unranged accessor passed for a raw parameter keeps only its
// pointer; an unranged accessor passed for a ranged parameter gets offset 0
// and the whole range. A ranged or raw accessor never converts to unranged
// (V2). localLimit, when > 0, bounds the sum of local memory. When no
// argument converts, the result is args itself (no copy per launch): treat
// it as read-only.
func ValidateArgs(k *Kernel, args []Arg, localLimit int) ([]Arg, error) {
	if len(args) != len(k.Params) {
		return nil, fmt.Errorf("%w: kernel %q takes %d arguments, got %d", ErrBadArg, k.Name, len(k.Params), len(args))
	}
	out := args // copied on the first argument that converts
	local := 0
	for i, p := range k.Params {
		a := args[i]
		bad := func(format string, v ...any) error {
			return &ArgError{Kernel: k.Name, Index: i, Param: p.Name, Reason: fmt.Sprintf(format, v...)}
		}
		conv, err := convertArg(p, a)
		if err != "" {
			return nil, bad("%s", err)
		}
		if p.ElemSize != 0 && a.Kind != ArgLocal && a.ElemSize != p.ElemSize && !(a.Kind == ArgScalar && len(a.Scalar) == p.ElemSize) {
			return nil, bad("element size %d, declared %d", a.ElemSize, p.ElemSize)
		}
		if a.Kind == ArgScalar && p.ElemSize != 0 && len(a.Scalar) != p.ElemSize {
			// Its bytes are what a kernel reads, whatever ElemSize says.
			return nil, bad("a scalar of %d bytes, declared %d", len(a.Scalar), p.ElemSize)
		}
		if a.Kind == ArgLocal {
			// Saturate: sizes from the wire must not wrap the sum below
			// the limit (convertArg refused those ≤ 0).
			local += min(a.LocalBytes, math.MaxInt-local)
		}
		if !sameArg(conv, a) {
			if &out[0] == &args[0] {
				out = slices.Clone(args)
			}
			out[i] = conv
		}
	}
	if localLimit > 0 && local > localLimit {
		return nil, fmt.Errorf("%w: kernel %q asks for %d bytes of local memory, the device has %d per work-group; use smaller work-groups or local arrays", ErrBadArg, k.Name, local, localLimit)
	}
	return out, nil
}

// sameArg reports whether a conversion left its argument as it was (the
// scalar's bytes by identity: conversions never rewrite them).
func sameArg(a, b Arg) bool {
	return a.Kind == b.Kind && a.Space == b.Space && a.Mem == b.Mem && a.Offset == b.Offset &&
		a.ElemSize == b.ElemSize && a.Range == b.Range && a.AccessOffset == b.AccessOffset &&
		a.AccessRange == b.AccessRange && a.ReadOnly == b.ReadOnly && a.LocalBytes == b.LocalBytes &&
		len(a.Scalar) == len(b.Scalar) && unsafe.SliceData(a.Scalar) == unsafe.SliceData(b.Scalar)
}

// convertArg returns a converted to p's kind, or why it cannot be.
func convertArg(p Param, a Arg) (Arg, string) {
	isMem := func(k ArgKind) bool { return k == ArgPointer || k == ArgAccessor || k == ArgRangedAccessor }
	switch p.Kind {
	case ArgScalar:
		if a.Kind != ArgScalar {
			return a, fmt.Sprintf("declared a scalar, got a %s", a.Kind)
		}
		if p.Space != Private && p.Space != Generic && p.Space != 0 {
			return a, fmt.Sprintf("a scalar is private, the parameter is declared %s", p.Space)
		}
		return a, ""
	case ArgLocal:
		if a.Kind != ArgLocal {
			return a, fmt.Sprintf("declared local memory, got a %s", a.Kind)
		}
		if a.LocalBytes <= 0 {
			return a, "local memory of 0 bytes"
		}
		return a, ""
	}
	if !isMem(a.Kind) {
		return a, fmt.Sprintf("declared a %s in %s space, got a %s", p.Kind, p.Space, a.Kind)
	}
	if a.Mem == nil {
		return a, "no memory behind the pointer"
	}
	switch {
	case p.Space == Constant:
		if !a.ReadOnly {
			return a, "constant parameters take read-only data; pass a read accessor"
		}
		if !ImplicitlyConverts(a.Space, Global) && a.Space != Constant {
			return a, fmt.Sprintf("a %s pointer does not convert to constant", a.Space)
		}
	case !ImplicitlyConverts(a.Space, p.Space):
		why := fmt.Sprintf("a %s pointer does not convert implicitly to %s", a.Space, p.Space)
		switch {
		case a.Space == GlobalHost && p.Space == GlobalDevice:
			why = "a host USM pointer is no global_device argument; pass device memory or declare the parameter global"
		case a.Space == GlobalDevice && p.Space == GlobalHost:
			why = "a device pointer is no global_host argument; pass host USM or declare the parameter global"
		case ExplicitlyConverts(a.Space, p.Space):
			why += " (it needs an explicit cast)"
		}
		return a, why
	}
	switch p.Kind {
	case ArgPointer:
		// Raw: the pointer only; the access offset is not applied (V3).
		return Arg{Kind: ArgPointer, Space: a.Space, Mem: a.Mem, Offset: a.Offset, ElemSize: a.ElemSize, ReadOnly: a.ReadOnly}, ""
	case ArgAccessor:
		switch a.Kind {
		case ArgPointer:
			return a, "a raw accessor or pointer never converts to an accessor with a range (V2)"
		case ArgRangedAccessor:
			return a, "a ranged accessor never converts to an unranged one (V2); declare the parameter ranged"
		}
		return Arg{Kind: ArgAccessor, Space: a.Space, Mem: a.Mem, Offset: a.Offset, ElemSize: a.ElemSize, Range: a.Range, ReadOnly: a.ReadOnly}, ""
	case ArgRangedAccessor:
		if a.Kind == ArgPointer {
			return a, "a raw accessor or pointer never converts to a ranged accessor (V2)"
		}
		if a.Kind == ArgAccessor {
			a.Kind, a.AccessOffset, a.AccessRange = ArgRangedAccessor, [3]int{}, a.Range
		}
		return a, ""
	}
	return a, fmt.Sprintf("parameter kind %s is unknown", p.Kind)
}
