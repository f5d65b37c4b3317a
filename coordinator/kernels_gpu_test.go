package coordinator_test

import (
	"context"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	_ "github.com/acpp/acpp/cuda" // the CUDA backend: no devices without a driver
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node"
)

// TestGPURunsShippedPTX_C6 runs a job-shipped PTX kernel (saxpy's module
// under a name no registry has) on an in-process node's first GPU and
// checks the result; the job's other node devices are CPUs, so the group
// is pinned to the GPU. Skipped without a GPU.
//
//	CGO_ENABLED=0 go test -c -o .carry/coordinator.test ./coordinator
//	./.carry/coordinator.test -test.run 'TestGPURunsShippedPTX_C6' -test.v
func TestGPURunsShippedPTX_C6(t *testing.T) {
	j, gpu := gpuJob(t)
	if err := j.RegisterKernels(testCtx(t), jobSaxpy("gpu.saxpy")); err != nil {
		t.Fatalf("RegisterKernels: %v", err)
	}
	const n = 1 << 20
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i%1000), 0.5
	}
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Name: "y", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(ys)})
	if _, err := j.Submit(testCtx(t), coordinator.Group{Kernel: "gpu.saxpy", Range: coordinator.Dims{1, 1, n}, Device: gpu, Args: saxpyArgs(3, x, y)}); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	got, err := j.Read(testCtx(t), y, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	for i, v := range bytesF32(got) {
		if want := 3*float32(i%1000) + 0.5; v != want { // exact in float32, FMA or not
			t.Fatalf("y[%d] = %v on %s, want %v", i, v, gpu, want)
		}
	}
	if p := j.Stats().Placed; p[gpu] != 1 {
		t.Errorf("placed %v, want the group on %s", p, gpu)
	}
	t.Logf("gpu.saxpy (shipped PTX) ran on %s over %d elements", gpu, n)
}

// gpuJob starts one node with its CPU and first GPU and opens a job there;
// it skips the test on a machine without a GPU. It returns the job and
// the GPU's device name.
func gpuJob(t *testing.T) (*coordinator.Job, string) {
	t.Helper()
	skipWithoutGPU(t)
	c := coordtest.Start(t, 1, coordtest.Options{Modify: func(_ int, cfg *node.Config) { cfg.Devices = "cpu,cuda:0" }})
	j := openJob(t, c, nil)
	gpu := ""
	for _, d := range j.Devices() {
		if d.Kind == "cuda" {
			gpu = d.String()
			break
		}
	}
	if gpu == "" {
		t.Skipf("no GPU on this machine (devices: %v)", j.Devices())
	}
	return j, gpu
}

// skipWithoutGPU skips t on a machine without a CUDA device: a node
// refuses --devices entries that match no device (cuda:0 here), so the
// nodes could not start.
func skipWithoutGPU(t *testing.T) {
	t.Helper()
	for _, b := range device.Backends() {
		if b.Kind != device.KindCUDA {
			continue
		}
		devs, err := b.Open(context.Background(), device.OpenConfig{})
		for _, d := range devs {
			d.Close()
		}
		if err == nil && len(devs) > 0 {
			return
		}
	}
	t.Skip("no GPU on this machine")
}
