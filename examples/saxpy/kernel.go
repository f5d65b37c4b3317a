package main

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/acpp/acpp/device"
)

// The closure in run, as a named kernel: the same loop, registered once
// under a name with its parameters declared. A closure carries its
// captured variables (av, xa, ya) as addresses in this process; a named
// kernel gets them as launch arguments (a scalar and two pointers), which
// is what lets a node run it from a name and bytes. See docs/API.md, "Why
// a closure cannot travel".
//
// Go only here: a node runs it once the node's binary registers it too
// (a node of your own: node/nodecmd, examples/custom-node); add PTX or
// CUDA C for GPUs.
var saxpyKernel = device.Kernel{
	Name: "example.saxpy",
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
			y[i] = float32(a*x[i]) + y[i] // rounded product, as the closure computes it
		}
	},
}

// Register once per process, before the first Submit that launches it (a
// node's binary does the same in its main).
func init() { device.MustRegister(saxpyKernel) }

// f32s views argument memory as float32s (host allocations are aligned
// for any element type).
func f32s(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
