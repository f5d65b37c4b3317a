package kernels

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
)

// goImpls holds the Go implementation of every built-in kernel, by name.
var goImpls = map[string]device.GoFunc{
	"saxpy":          saxpy,
	"fill_f32":       fillF32,
	"copy_f32":       copyF32,
	"jacobi2d":       jacobi2d,
	"matmul_tiled":   matmulTiled,
	"reduce_sum_f32": reduceSumF32,
	"histogram_u32":  histogramU32,
	"empty":          func(*device.Work) {},
	"spin":           spin,
}

// paramTypes is the Go type of each parameter that carries data (device.Param
// only says its size). Local memory parameters are absent: they are sized in
// bytes by the launch.
var paramTypes = map[string]map[string]string{
	"saxpy":          {"a": "float32", "x": "float32", "y": "float32"},
	"fill_f32":       {"out": "float32", "v": "float32"},
	"copy_f32":       {"src": "float32", "dst": "float32"},
	"jacobi2d":       {"in": "float32", "out": "float32"},
	"matmul_tiled":   {"A": "float32", "B": "float32", "C": "float32", "M": "uint64", "N": "uint64", "K": "uint64"},
	"reduce_sum_f32": {"in": "float32", "partial": "float32", "n": "uint64"},
	"histogram_u32":  {"in": "uint32", "n": "uint64", "bins": "uint32", "nbins": "uint32"},
	"empty":          {},
	"spin":           {"cycles": "uint64"},
}

// ParamType returns the Go type name (float32, uint64, ...) of parameter
// param of the built-in kernel, for pointer, accessor and scalar
// parameters; ok is false for local memory, unknown kernels and unknown
// parameters.
func ParamType(kernel, param string) (typ string, ok bool) {
	typ, ok = paramTypes[kernel][param]
	return typ, ok
}

// Names lists the built-in kernels, sorted.
func Names() []string { return ptxlib.Names() }

// Kernel returns the built-in kernel called name with both
// implementations, or false.
func Kernel(name string) (device.Kernel, bool) {
	b, ok := ptxlib.Lookup(name)
	if !ok {
		return device.Kernel{}, false
	}
	k := b.Kernel() // Params copied from cuda/kernels: one declaration for both forms
	k.Go = goImpls[name]
	k.Check = checks[name]
	return k, true
}

var registered struct {
	once sync.Once
	err  error
}

// Register adds every built-in kernel to the process-wide registry
// (device.Kernels). It is idempotent: later calls return the first call's
// result. A kernel of a built-in name that someone else registered first is
// accepted if it declares the same parameters (and reported as a clash
// wrapping device.ErrDuplicateKernel otherwise); the other kernels are
// registered anyway.
func Register() error {
	registered.once.Do(func() { registered.err = RegisterIn(device.Kernels) })
	return registered.err
}

// RegisterIn adds every built-in kernel to r, as Register does for the
// process-wide registry.
func RegisterIn(r *device.Registry) error {
	var errs []error
	for _, name := range Names() {
		k, _ := Kernel(name)
		err := r.Register(k)
		if errors.Is(err, device.ErrDuplicateKernel) {
			if old, lerr := r.Lookup(name); lerr == nil && reflect.DeepEqual(old.Params, k.Params) {
				continue // same declaration: someone registered the built-in already
			}
			err = fmt.Errorf("kernels: built-in %q clashes with a kernel registered earlier under that name with other parameters; rename that kernel: %w", name, err)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
