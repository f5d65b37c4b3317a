// Package poly is examples/custom-node's own kernel, custom.poly
// (y = a·x² + y), in Go for CPU devices and in CUDA C for GPUs. Both the
// custom node (examples/custom-node/node) and the program register it:
// the node to run it, the program to run it embedded and to check its
// arguments before they travel.
package poly

import (
	_ "embed"
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/acpp/acpp/device"
)

// Name is the kernel's name in the cluster.
const Name = "custom.poly"

//go:embed poly.cu
var source []byte

// Poly is the kernel: parameters a (float32), x and y (float32 pointers).
var Poly = device.Kernel{
	Name: Name,
	Params: []device.Param{
		{Name: "a", Kind: device.ArgScalar, Space: device.Private, ElemSize: 4},
		{Name: "x", Kind: device.ArgPointer, Space: device.GlobalDevice, ElemSize: 4},
		{Name: "y", Kind: device.ArgPointer, Space: device.GlobalDevice, ElemSize: 4},
	},
	Go: func(w *device.Work) {
		a := math.Float32frombits(binary.LittleEndian.Uint32(w.Args[0].Scalar))
		x, y := f32s(w.Data[1]), f32s(w.Data[2])
		lo, hi := w.Lo[2]+w.Range.Offset[2], w.Hi[2]+w.Range.Offset[2]
		for i := lo; i < hi; i++ {
			y[i] = float32(float32(a*x[i])*x[i]) + y[i] // each product rounded, as -fmad=false does
		}
	},
	CUDA: &device.CUDA{Source: source, Entry: "poly", File: "poly.cu", Options: []string{"-fmad=false"}},
}

// Register adds Poly to the process's registry (once; later calls do
// nothing).
func Register() {
	if _, err := device.Kernels.Lookup(Name); err != nil {
		device.MustRegister(Poly)
	}
}

func f32s(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
