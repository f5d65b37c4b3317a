// Package kernels is acpp's built-in kernel library: named kernels with a Go
// implementation for the CPU backend and the PTX of cuda/kernels for the
// CUDA backend, under identical names and parameter declarations (taken
// from cuda/kernels, so they cannot drift). Job files (package jobfile) and
// programs launch them by name.
//
// # Usage
//
//	if err := kernels.Register(); err != nil { ... } // once per process; idempotent
//	q.Submit(func(h *acpp.Handler) error {
//		x := acpp.ReadRaw(h, xb)
//		y := acpp.ReadWriteRaw(h, yb)
//		h.Launch("saxpy", acpp.R1(n), acpp.Scalar(float32(2)), x, y)
//		return nil
//	})
//
// # The library
//
//	saxpy(a float32, x, y *float32)           y[i] = a*x[i] + y[i], 1D
//	fill_f32(out accessor float32, v float32) out[id] = v, 1–3D
//	copy_f32(src, dst ranged float32)         dst[dst.off+id] = src[src.off+id] inside both access ranges
//	jacobi2d(in, out accessor float32)        one Jacobi step; the border is copied
//	matmul_tiled(A, B, C *float32, M, N, K uint64, tileA, tileB local)
//	                                          C = A·B, grouped {1,T,T}; tileA ≥ T·T floats
//	reduce_sum_f32(in, partial *float32, n uint64, scratch local)
//	                                          partial[g] = tree sum of group g's items; scratch ≥ group-size floats
//	histogram_u32(in *uint32, n uint64, bins *uint32, nbins uint32, lbins local)
//	                                          bins[in[i] % nbins] += 1; lbins ≥ nbins uint32
//	empty()                                   nothing (launch overhead)
//	spin(cycles uint64)                       busy loop of about cycles iterations
//
// The Go implementations compute exactly what the CUDA sources in
// cuda/kernels/src compute, in the same order of float operations (the PTX
// is built without fused multiply-add and the Go code converts products to
// float32 explicitly, so no platform fuses them either): a job gives the same
// bits on the CPU and on a GPU, except for the histogram's and reduction's
// group order, which does not change their results.
//
// ParamType tells the Go type a parameter holds (device.Param has only its
// size): job files use it to check buffer element types and to encode scalar
// arguments.
//
// # Errors
//
// Register returns the error of the first registration for every later
// call; a kernel of the same name registered by someone else first is a
// clash (device.ErrDuplicateKernel) that names the kernel.
//
// The kernels refuse, on every backend, the launches they cannot compute
// as documented (device.Kernel.Check): reduce_sum_f32 over a work-group
// that is not a 1D power of two (the tree would drop items), local memory
// smaller than documented, nbins 0, no work-groups where they are needed,
// a matmul_tiled work-group that is not [1, T, T]. The launch fails with
// device.ErrBadArg and what to pass, when the group is submitted through
// the API and again in the backend. The Go implementations also panic,
// with a message that says what to pass, on launches that would run out
// of bounds (a range larger than the buffers); the CPU backend turns the
// panic into the launch's error.
package kernels
