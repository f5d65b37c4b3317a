package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunCUDASourceKernel: a job file's kernel given as CUDA C (cuda:)
// is read and registered by acpp-submit without compiling it (no NVRTC
// on the client): a missing source file is an error at its kernels:
// entry, and on CPU devices the step fails naming the device, since the
// source is compiled only where a GPU runs it (docs/CUDA.md). The GPU
// path runs on the GPU machine (docs/PERFORMANCE.md, "CUDA C at run time").
func TestRunCUDASourceKernel(t *testing.T) {
	src, err := os.ReadFile("../../../examples/jobs/cuda_source.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	job := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(job, src, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() error {
		_, err := Run(context.Background(), Config{JobFile: job, Params: map[string]string{"n": "64"}, OutDir: t.TempDir(), Devices: []string{"cpu"}})
		return err
	}
	err = run()
	if err == nil || !strings.Contains(err.Error(), "kernels.saxpy_sq.cuda") || !strings.Contains(err.Error(), "kernels/saxpy_sq.cu") {
		t.Fatalf("Run without the source file = %v, want an error at kernels.saxpy_sq.cuda", err)
	}
	cu, err := os.ReadFile("../../../examples/jobs/kernels/saxpy_sq.cu")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "kernels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernels", "saxpy_sq.cu"), cu, 0o644); err != nil {
		t.Fatal(err)
	}
	// Refused before anything runs (the buffers' init steps came first),
	// as check refuses it.
	res, err := Run(context.Background(), Config{JobFile: job, Params: map[string]string{"n": "64"}, OutDir: t.TempDir(), Devices: []string{"cpu"}})
	if err == nil || !strings.Contains(err.Error(), `no device here runs kernel "saxpy_sq" (devices: cpu:0)`) {
		t.Fatalf("Run on the CPU = %v, want the step refused: a CUDA C kernel runs on GPUs only", err)
	}
	if res != nil && res.Count != 0 {
		t.Errorf("Run on the CPU ran %d command groups before refusing the job, want none", res.Count)
	}
}
