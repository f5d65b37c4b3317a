package coordinator_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/acpp/acpp/coordinator"
	_ "github.com/acpp/acpp/cuda" // the CUDA backend: no devices without a driver
	"github.com/acpp/acpp/device"
)

// saxpySqCU is a kernel of the job's own in CUDA C: y = a*x + y*y.
const saxpySqCU = `#include "acpp.cuh"

extern "C" __global__ void saxpy_sq(acpp_nd nd, float a, const float *x, float *y) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  u64 i = id[2] + nd.offset[2];
  y[i] = a * x[i] + y[i] * y[i];
}
`

// TestGPURunsShippedCUDAC_C6 ships a kernel as CUDA C source to an
// in-process node with a GPU, which compiles it with NVRTC for its GPU
// when the kernel is registered; the result matches the kernel's Go
// implementation bit for bit. A source that does not compile is refused
// at registration with the node's compile error at file:line. Skipped
// without a GPU (and failed without libnvrtc on a GPU node: the node
// refuses the kernel saying how to install it).
//
//	CGO_ENABLED=0 go test -c -o bin/coordinator.test ./coordinator
//	./bin/coordinator.test -test.run 'TestGPURunsShippedCUDAC_C6' -test.v
func TestGPURunsShippedCUDAC_C6(t *testing.T) {
	j, gpu := gpuJob(t)
	k := jobSaxpy("gpu.saxpy_sq")
	k.PTX = nil
	k.CUDA = &device.CUDA{Source: []byte(saxpySqCU), Entry: "saxpy_sq", File: "kernels/saxpy_sq.cu", Options: []string{"--fmad=false"}}
	if err := j.RegisterKernels(testCtx(t), k); err != nil {
		t.Fatalf("RegisterKernels(CUDA C): %v", err)
	}
	const n = 1<<20 + 3
	r := rand.New(rand.NewPCG(5, 6))
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(r.Float64()*2-1), float32(r.Float64()*2-1)
	}
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Name: "y", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(ys)})
	const a = float32(0.75)
	if _, err := j.Submit(testCtx(t), coordinator.Group{Kernel: "gpu.saxpy_sq", Range: coordinator.Dims{1, 1, n}, Device: gpu, Args: saxpyArgs(a, x, y)}); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	got, err := j.Read(testCtx(t), y, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	for i, v := range bytesF32(got) {
		if want := float32(a*xs[i]) + float32(ys[i]*ys[i]); v != want {
			t.Fatalf("y[%d] = %v on %s, want %v (Go)", i, v, gpu, want)
		}
	}
	t.Logf("gpu.saxpy_sq (shipped CUDA C) ran on %s over %d elements, equal to Go bit for bit", gpu, n)

	bad := jobSaxpy("gpu.bad")
	bad.PTX = nil
	bad.CUDA = &device.CUDA{Source: []byte(strings.Replace(saxpySqCU, "a * x[i]", "a * xx[i]", 1)), Entry: "saxpy_sq", File: "kernels/bad.cu"}
	err = j.RegisterKernels(testCtx(t), bad)
	if err == nil || !strings.Contains(err.Error(), "kernels/bad.cu:7: error") {
		t.Fatalf("RegisterKernels(bad CUDA C) = %v, want the node's compile error at kernels/bad.cu:7", err)
	}
	t.Logf("%v", err)
}
