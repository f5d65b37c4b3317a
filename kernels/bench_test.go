package kernels

import (
	"testing"

	"github.com/acpp/acpp/device"
)

// BenchmarkKernels measures the Go implementations on one goroutine in
// 8 chunks (what a CPU worker runs), against a plain loop over slices in
// the same run: the ratio is the cost of the Work indirection.
func BenchmarkKernels(b *testing.B) {
	const n = 1 << 20
	x, y := make([]float32, n), make([]float32, n)
	b.Run("saxpy/kernel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(n * 12)
		for b.Loop() {
			run(saxpy, device.NDRange{Global: [3]int{1, 1, n}}, 8, scalarArg(float32(2)), ptrArg(x), ptrArg(y))
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
	b.Run("saxpy/plain", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(n * 12)
		for b.Loop() {
			for i := range y {
				y[i] = float32(2*x[i]) + y[i]
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
	const side = 1024
	in, out := make([]float32, side*side), make([]float32, side*side)
	rng := [3]int{1, side, side}
	b.Run("jacobi2d/kernel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(side * side * 8)
		for b.Loop() {
			run(jacobi2d, device.NDRange{Global: rng}, 8, accArg(in, rng), accArg(out, rng))
		}
		b.ReportMetric(float64(side*side)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gcell/s")
	})
	b.Run("jacobi2d/plain", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(side * side * 8)
		for b.Loop() {
			for yy := 1; yy < side-1; yy++ {
				for xx := 1; xx < side-1; xx++ {
					i := yy*side + xx
					s := in[i-side] + in[i+side]
					s = s + in[i-1]
					s = s + in[i+1]
					out[i] = 0.25 * s
				}
			}
		}
		b.ReportMetric(float64(side*side)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gcell/s")
	})
	const m = 256
	A, B, C := make([]float32, m*m), make([]float32, m*m), make([]float32, m*m)
	b.Run("matmul_tiled/256", func(b *testing.B) {
		b.ReportAllocs()
		nd := device.NDRange{Global: [3]int{1, m, m}, Local: [3]int{1, 16, 16}}
		for b.Loop() {
			run(matmulTiled, nd, 0, ptrArg(A), ptrArg(B), ptrArg(C), scalarArg(uint64(m)), scalarArg(uint64(m)), scalarArg(uint64(m)), localArg(1024), localArg(1024))
		}
		b.ReportMetric(2*m*m*m*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
