// Package builtin registers acpp's built-in kernel library in
// device.Kernels: each kernel with a Go implementation (for the CPU backend
// and fakes) and the PTX implementation of cuda/kernels (for CUDA), so one
// named kernel runs on whichever device a command group targets.
//
// # Usage
//
//	import _ "github.com/acpp/acpp/device/builtin"
//
//	q.Submit(func(h *acpp.Handler) error {
//		h.Launch("saxpy", acpp.R1(n), acpp.Scalar(a), acpp.ReadRaw(h, x), acpp.ReadWriteRaw(h, y))
//		return nil
//	})
//
// The Go implementations follow the .cu sources in cuda/kernels/src line by
// line (same operation order, so float results match bit for bit).
package builtin
