package kernels

import (
	"embed"
	"fmt"
	"sort"
	"strings"
	"unsafe"

	"github.com/acpp/acpp/device"
)

//go:embed ptx/*.ptx
var ptxFS embed.FS

// Header is acpp.cuh, the argument layout every acpp kernel shares
// (acpp_nd, acpp_id, the accessor structs). The CUDA backend offers it to
// kernels given as CUDA C source: they may #include "acpp.cuh".
//
//go:embed src/acpp.cuh
var Header []byte

// Builtin describes one built-in kernel: its registry name, its parameters
// (without the implicit ND range) and the PTX module and entry that run it.
type Builtin struct {
	Name   string
	Params []device.Param
	File   string // ptx/<File>.ptx
	Entry  string
}

// modules holds each embedded PTX module once, by file name (without
// .ptx): every Builtin.PTX of a file shares its bytes, so a device loads it
// once.
var modules = func() map[string][]byte {
	es, err := ptxFS.ReadDir("ptx")
	if err != nil {
		panic(fmt.Sprintf("kernels: embedded ptx/ missing: %v", err)) // a build defect
	}
	m := make(map[string][]byte, len(es))
	for _, e := range es {
		b, err := ptxFS.ReadFile("ptx/" + e.Name())
		if err != nil {
			panic(fmt.Sprintf("kernels: embedded ptx/%s: %v", e.Name(), err))
		}
		m[strings.TrimSuffix(e.Name(), ".ptx")] = b
	}
	return m
}()

// PTX returns the kernel's implementation for device.Kernel.PTX. Module is
// shared by every caller (and every kernel of the same file): do not modify
// it.
func (b Builtin) PTX() *device.PTX {
	m, ok := modules[b.File]
	if !ok {
		panic(fmt.Sprintf("kernels: embedded ptx/%s.ptx missing", b.File)) // a build defect
	}
	return &device.PTX{Module: m, Entry: b.Entry}
}

// Launch is how the CUDA backend shapes a flat (ungrouped) launch of a
// built-in kernel whose code is written for it: the block, and how many
// items of the range each thread covers, per dimension (dimension order,
// dimension 2 fastest, as in device.NDRange); the block shrinks to fit a
// small range (whole warps along dimension 2). The grid along dimension d is
// ceil(Global[d] / (Block[d] * PerThread[d])). Such a kernel must still be
// right for any grid (it shares the range out over the threads it gets), so
// a launch without the hint (a copy of the PTX, a grouped launch) is only
// slower.
type Launch struct {
	Block     [3]int
	PerThread [3]int
}

// launches are the built-ins with a launch hint, by name. jacobi2d: column
// strips of 8 rows under blocks of 128×2 threads; copy_f32: 4 elements of a
// row a thread under 256-thread blocks. See docs/CUDA.md, "Built-in
// kernels' speed", for the sweeps that chose them.
var launches = map[string]Launch{
	"jacobi2d": {Block: [3]int{1, 2, 128}, PerThread: [3]int{1, 8, 1}},
	"copy_f32": {Block: [3]int{1, 1, 256}, PerThread: [3]int{1, 1, 4}},
}

// LaunchFor returns the launch hint of the built-in kernel whose PTX p is:
// p.Entry its entry and p.Module the bytes Builtin.PTX returned, or a copy
// of them (a module shipped to a node). ok is false for every other module.
// The CUDA backend asks once per loaded module.
func LaunchFor(p *device.PTX) (l Launch, ok bool) {
	if p == nil || len(p.Module) == 0 {
		return Launch{}, false
	}
	for name, l := range launches {
		b := builtins[name]
		m := modules[b.File]
		if p.Entry != b.Entry || len(p.Module) != len(m) {
			continue
		}
		if unsafe.SliceData(p.Module) == unsafe.SliceData(m) || string(p.Module) == string(m) {
			return l, true
		}
	}
	return Launch{}, false
}

// Kernel returns a device.Kernel with the CUDA implementation only; a
// registry that also has a Go implementation sets Kernel.Go before
// registering it.
func (b Builtin) Kernel() device.Kernel {
	return device.Kernel{Name: b.Name, Params: append([]device.Param(nil), b.Params...), PTX: b.PTX()}
}

func ptr(name string, elem int) device.Param {
	return device.Param{Name: name, Kind: device.ArgPointer, Space: device.Global, ElemSize: elem}
}
func acc(name string, elem int) device.Param {
	return device.Param{Name: name, Kind: device.ArgAccessor, Space: device.Global, ElemSize: elem}
}
func ranged(name string, elem int) device.Param {
	return device.Param{Name: name, Kind: device.ArgRangedAccessor, Space: device.Global, ElemSize: elem}
}
func scalar(name string, size int) device.Param {
	return device.Param{Name: name, Kind: device.ArgScalar, Space: device.Private, ElemSize: size}
}
func local(name string) device.Param {
	return device.Param{Name: name, Kind: device.ArgLocal, Space: device.Local}
}

// builtins is the library, by name.
var builtins = map[string]Builtin{
	"saxpy":          {"saxpy", []device.Param{scalar("a", 4), ptr("x", 4), ptr("y", 4)}, "saxpy", "saxpy"},
	"fill_f32":       {"fill_f32", []device.Param{acc("out", 4), scalar("v", 4)}, "fill", "fill_f32"},
	"copy_f32":       {"copy_f32", []device.Param{ranged("src", 4), ranged("dst", 4)}, "copy", "copy_f32"},
	"jacobi2d":       {"jacobi2d", []device.Param{acc("in", 4), acc("out", 4)}, "jacobi", "jacobi2d"},
	"matmul_tiled":   {"matmul_tiled", []device.Param{ptr("A", 4), ptr("B", 4), ptr("C", 4), scalar("M", 8), scalar("N", 8), scalar("K", 8), local("tileA"), local("tileB")}, "matmul", "matmul_tiled"},
	"reduce_sum_f32": {"reduce_sum_f32", []device.Param{ptr("in", 4), ptr("partial", 4), scalar("n", 8), local("scratch")}, "reduce", "reduce_sum_f32"},
	"histogram_u32":  {"histogram_u32", []device.Param{ptr("in", 4), scalar("n", 8), ptr("bins", 4), scalar("nbins", 4), local("lbins")}, "histogram", "histogram_u32"},
	"empty":          {"empty", nil, "util", "empty"},
	"spin":           {"spin", []device.Param{scalar("cycles", 8)}, "util", "spin"},
}

// Lookup returns the built-in kernel called name.
func Lookup(name string) (Builtin, bool) {
	b, ok := builtins[name]
	return b, ok
}

// Names lists the built-in kernels, sorted.
func Names() []string {
	out := make([]string, 0, len(builtins))
	for n := range builtins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
