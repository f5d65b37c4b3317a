// Package benchref holds the hand-written CUDA C kernels that the CUDA
// backend's benchmarks (cuda's BenchmarkKernels, scripts/bench) measure the
// built-in kernels against, in the same run on the same GPU: a Jacobi step
// with one point per thread and with one column strip per thread, saxpy,
// fill, copy and an empty kernel. They are simple kernels of the kind one
// writes by hand (32-bit indices, const __restrict__ inputs), with plain
// arguments rather than acpp's layout, launched raw.
//
// scripts/bench compiles ref.cu with nvcc (-O3 -cubin for the GPU's
// architecture) where nvcc is installed; the benchmarks otherwise compile
// Source with NVRTC.
package benchref

import _ "embed"

// Source is ref.cu.
//
//go:embed ref.cu
var Source []byte
