package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/node"
)

// tibJob is the job file of issue 14: one float32 buffer of exactly 1 TiB,
// the largest the job format allows.
const tibJob = `version: 1
name: tib
buffers:
  big: {type: float32, range: [268435456, 1024]}
steps:
  - fill: {buffer: big, value: 1.0}
`

// twoBuffersJob has two buffers of 768 KiB and writes one out.
const twoBuffersJob = `version: 1
name: two
buffers:
  a: {type: float32, range: [196608]}
  b: {type: float32, range: [196608]}
steps:
  - fill: {buffer: a, value: 1.0}
  - fill: {buffer: b, value: 2.0}
outputs:
  - {buffer: a, file: a.npy}
`

func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, Env{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

// TestCheckRefusesOneTiB_B5: the 1 TiB job of issue 14 passes the job
// format (at most 1 TiB per buffer) but not check, which says it does not
// fit this machine (its memory budgets), names the buffer and the budget
// and exits 1; a job that fits says so and exits 0.
func TestCheckRefusesOneTiB_B5(t *testing.T) {
	size, _, err := cpu.HostMemory()
	if err != nil {
		t.Skipf("host memory size unknown here: %v", err)
	}
	if b, _ := (acpp.MemoryLimit{}).Budget(size, true); b >= 1<<40 {
		t.Skipf("this machine's default host budget (%d bytes) holds 1 TiB", b)
	}
	code, out, errs := runMain("check", writeJob(t, "job.yaml", tibJob))
	if code != 1 || !strings.Contains(out, "job tib") || !strings.Contains(out, "valid, but it does not fit this machine") ||
		!strings.Contains(errs, "job does not fit this machine: buffer big (float32 [268435456 1024]) is 1024.00 GiB, more than the largest memory budget of this machine (host memory:") ||
		!strings.Contains(errs, "--max-bytes") {
		t.Errorf("check of the 1 TiB job: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1, not fitting, naming the buffer and the budget", code, out, errs)
	}
	code, out, errs = runMain("check", writeJob(t, "job.yaml", twoBuffersJob))
	if code != 0 || !strings.Contains(out, "two (") || !strings.Contains(out, ": valid\n") || !strings.Contains(out, "fits the memory budgets of this machine") {
		t.Errorf("check of a small job: exit %d\n%s%s", code, out, errs)
	}
}

// TestCheckAgainstBudgets_B5: check --max-bytes checks this machine under
// that budget (each buffer, their sum, outputs through host memory), and
// run --max-bytes makes the embedded runtime refuse the same job with the
// memory-limit error (exit 1) instead of allocating it.
func TestCheckAgainstBudgets_B5(t *testing.T) {
	job := writeJob(t, "job.yaml", twoBuffersJob)
	code, out, errs := runMain("check", "--max-bytes", "1MiB", job)
	if code != 1 || !strings.Contains(errs, "its buffers are 1.5 MiB together, more than the memory budgets of this machine together (1.0 MiB)") {
		t.Errorf("check --max-bytes 1MiB: exit %d\n%s%s; want the sum refused", code, out, errs)
	}
	if code, out, errs := runMain("check", "--max-bytes", "512KiB", job); code != 1 || !strings.Contains(errs, "buffer a (float32 [196608]) is 768.0 KiB, more than the largest memory budget") ||
		!strings.Contains(errs, "output a.npy (buffer a, 768.0 KiB) is read back into this machine's host memory") {
		t.Errorf("check --max-bytes 512KiB: exit %d\n%s%s; want each buffer and the output refused", code, out, errs)
	}
	if code, out, errs := runMain("check", "--max-bytes", "lots", job); code != 2 || !strings.Contains(errs, "--max-bytes") {
		t.Errorf("check --max-bytes lots: exit %d\n%s%s; want a usage error", code, out, errs)
	}
	code, out, errs = runMain("run", "--max-bytes", "1MiB", "--device", "cpu", "--progress", "never", "-o", t.TempDir(), job)
	if code != 1 || !strings.Contains(errs, "more than is left of the host memory budget") || !strings.Contains(errs, "786432 bytes") {
		t.Errorf("run --max-bytes 1MiB: exit %d\n%s%s; want the second buffer refused by the budget", code, out, errs)
	}
	if code, out, errs := runMain("run", "--max-bytes", "2MiB", "--device", "cpu", "--progress", "never", "-o", t.TempDir(), job); code != 0 {
		t.Errorf("run --max-bytes 2MiB: exit %d\n%s%s", code, out, errs)
	}
}

// TestCheckCluster_B5: check --cluster checks a job against the budgets
// of the cluster's members (from their inventories): two buffers that fit
// two nodes of 1 MiB each but not one, and a buffer larger than any node's
// budget that does not fit the cluster. status shows the budgets.
func TestCheckCluster_B5(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{Modify: func(_ int, cfg *node.Config) { cfg.MaxBytes = 1 << 20 }})
	flags := []string{"--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", "alice"}
	job := writeJob(t, "job.yaml", twoBuffersJob)
	code, out, errs := runMain(append(append([]string{"check"}, flags...), job)...)
	if code != 0 || !strings.Contains(out, "memory budgets of the cluster: n0 host memory: 1.0 MiB") || !strings.Contains(out, "n1 host memory: 1.0 MiB") ||
		!strings.Contains(out, "fits the memory budgets of the cluster") {
		t.Errorf("check --cluster of two 768 KiB buffers on two 1 MiB nodes: exit %d\n%s%s", code, out, errs)
	}
	big := strings.ReplaceAll(twoBuffersJob, "[196608]", "[524288]") // 2 MiB each
	code, out, errs = runMain(append(append([]string{"check"}, flags...), writeJob(t, "job.yaml", big))...)
	if code != 1 || !strings.Contains(out, "valid, but it does not fit the cluster") ||
		!strings.Contains(errs, "buffer a (float32 [524288]) is 2.0 MiB, more than the largest memory budget of the cluster (n0 host memory: 1.0 MiB") {
		t.Errorf("check --cluster of 2 MiB buffers on 1 MiB nodes: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := runMain(append(append([]string{"check", "--max-bytes", "1GiB"}, flags...), job)...); code != 2 || !strings.Contains(errs, "acpp-node --max-bytes") {
		t.Errorf("check --cluster --max-bytes: exit %d, %s; want a usage error", code, errs)
	}
	// status shows each node's budgets.
	if code, out, errs := runMain(append([]string{"status"}, flags...)...); code != 0 || !strings.Contains(out, "BUDGET") || strings.Count(out, "host 1.0 MiB") != 2 {
		t.Errorf("status: exit %d\n%s%s; want each node's 1 MiB host budget", code, out, errs)
	}
}

// TestCheckClusterPerJobLimit_B5: a node's per-job limit (acpp-node
// --max-job-bytes) bounds what check --cluster counts of it: a buffer
// larger than every node's limit does not fit (check said "fits", and the
// run failed on the node), and two buffers that fit the nodes' budgets
// but not their limits together do not either.
func TestCheckClusterPerJobLimit_B5(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{Modify: func(_ int, cfg *node.Config) { cfg.MaxBytes, cfg.MaxJobBytes = 4<<20, 512<<10 }})
	flags := []string{"--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", "alice"}
	code, out, errs := runMain(append(append([]string{"check"}, flags...), writeJob(t, "job.yaml", twoBuffersJob))...) // 768 KiB each
	if code != 1 || !strings.Contains(errs, "buffer a (float32 [196608]) is 768.0 KiB, more than the largest memory budget of the cluster (n0 host memory: 512.0 KiB (n0's per-job limit, --max-job-bytes))") {
		t.Errorf("check --cluster of 768 KiB buffers on nodes with a 512 KiB per-job limit: exit %d\n%s%s", code, out, errs)
	}
	small := strings.ReplaceAll(twoBuffersJob, "[196608]", "[98304]") // 384 KiB each: one per node
	if code, out, errs := runMain(append(append([]string{"check"}, flags...), writeJob(t, "job.yaml", small))...); code != 0 || !strings.Contains(out, "fits the memory budgets of the cluster") {
		t.Errorf("check --cluster of 384 KiB buffers: exit %d\n%s%s", code, out, errs)
	}
}

// Issue 13 §2: check --cluster says which nodes have each kernel the job
// launches, and refuses a job whose kernel is on no node.
func TestKernelsOnCluster(t *testing.T) {
	job, err := Load("../../../examples/jobs/saxpy.yaml", map[string]string{"n": "16"})
	if err != nil {
		t.Fatal(err)
	}
	src := kernelSource{members: []string{"n1", "n2"}, on: map[string][]string{"fill_f32": {"n1", "n2"}, "saxpy": {"n2"}}}
	line, missing := src.onCluster(job)
	if line != "fill_f32 on every node; saxpy on n2" || len(missing) != 0 {
		t.Errorf("onCluster = %q, %v", line, missing)
	}
	src.on["saxpy"] = nil
	line, missing = src.onCluster(job)
	if !strings.Contains(line, "saxpy on no node") || len(missing) != 1 || !strings.Contains(missing[0], "kernel saxpy is on no node (asked n1, n2") {
		t.Errorf("onCluster without saxpy = %q, %v", line, missing)
	}
}

// check --cluster counts the kernels launched inside repeat blocks too:
// the Jacobi example launches jacobi2d only inside its repeat, and a
// cluster without it must be refused, not called valid.
func TestKernelsOnClusterInsideRepeat(t *testing.T) {
	job, err := Load("../../../examples/jobs/jacobi.yaml", map[string]string{"n": "16", "iters": "2"})
	if err != nil {
		t.Fatal(err)
	}
	src := kernelSource{members: []string{"n1", "n2"}, on: map[string][]string{"jacobi2d": {"n1", "n2"}}}
	line, missing := src.onCluster(job)
	if line != "jacobi2d on every node" || len(missing) != 0 {
		t.Errorf("onCluster = %q, %v; want jacobi2d on every node", line, missing)
	}
	src.on["jacobi2d"] = []string{"n2"}
	if line, _ := src.onCluster(job); line != "jacobi2d on n2" {
		t.Errorf("onCluster with jacobi2d on n2 only = %q", line)
	}
	src.on["jacobi2d"] = nil
	line, missing = src.onCluster(job)
	if len(missing) != 1 || !strings.Contains(missing[0], "kernel jacobi2d is on no node") {
		t.Errorf("onCluster without jacobi2d = %q, %v; want it missing", line, missing)
	}
}

// check refuses a job whose kernel no device of this machine runs (a
// job's own PTX kernel with only the CPU), at the step's line, as run
// does on reaching the step, instead of calling it valid and fitting
// (examples/jobs/cuda_source.yaml on a machine without a GPU).
func TestCheckRefusesKernelNoLocalDeviceRuns(t *testing.T) {
	dir := t.TempDir()
	mod, err := os.ReadFile("../../../cuda/kernels/ptx/saxpy.ptx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "my.ptx"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	job := func(pin string) string {
		return `kernels:
  mysaxpy:
    ptx: my.ptx
    entry: saxpy
    params:
      - {name: a, kind: scalar, type: float32}
      - {name: x, kind: pointer, type: float32, const: true}
      - {name: y, kind: pointer, type: float32}
buffers:
  x: {type: float32, range: [8], init: {value: 1}}
  y: {type: float32, range: [8], init: {value: 1}}
steps:
  - kernel: mysaxpy
    scalars: {a: 2}
    accessors: [{buffer: x, mode: read}, {buffer: y, mode: read_write}]
` + pin
	}
	p := filepath.Join(dir, "ptx.yaml")
	for _, tc := range []struct{ pin, want string }{
		{"", `ptx.yaml:13: steps[0]: no device here runs kernel "mysaxpy" (devices: cpu:0)`},
		{"    device: cpu:0\n", `ptx.yaml:16: steps[0].device: cpu:0 does not run kernel "mysaxpy"`},
	} {
		if err := os.WriteFile(p, []byte(job(tc.pin)), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runMain("check", "--device", "cpu", p)
		if code != 1 || strings.Contains(out, "fits") || !strings.Contains(errs, tc.want) {
			t.Errorf("check of a PTX-only kernel on the CPU (pin %q): exit %d\n%s%s\nwant exit 1 and %q", tc.pin, code, out, errs, tc.want)
		}
	}
	// A built-in kernel (Go and PTX) is fine on the CPU.
	if code, out, errs := runMain("check", "--device", "cpu", "../../../examples/jobs/saxpy.yaml"); code != 0 {
		t.Errorf("check of saxpy.yaml on the CPU: exit %d\n%s%s", code, out, errs)
	}
}

// check --cluster refuses a job whose own kernel (PTX or CUDA C: GPUs
// only) no node can run, instead of calling it fitting on CPU-only nodes.
func TestOwnKernelsOnClusterNeedAGPU(t *testing.T) {
	job, err := Load("../../../examples/jobs/cuda_source.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Kernels) == 0 {
		t.Fatal("cuda_source.yaml declares no kernel of its own")
	}
	name := job.Kernels[0].Name
	src := kernelSource{members: []string{"n1", "n2"}, on: map[string][]string{"fill_f32": {"n1", "n2"}}}
	_, missing := src.onCluster(job)
	if len(missing) != 1 || !strings.Contains(missing[0], "kernel "+name+" is the job's own") || !strings.Contains(missing[0], "no node has one") {
		t.Errorf("onCluster on CPU-only nodes: missing = %v; want %s refused for want of a GPU", missing, name)
	}
	src.ptx = []string{"n2"}
	line, missing := src.onCluster(job)
	if len(missing) != 0 || !strings.Contains(line, name+" (the job's) on n2") {
		t.Errorf("onCluster with a GPU on n2 = %q, %v", line, missing)
	}
}

// A kernel no node of the cluster declares (a custom node's kernel on
// stock nodes) is refused saying so, and how to get it there; it only
// said to declare it with a PTX module.
func TestUnknownKernelOnClusterSaysWhere(t *testing.T) {
	src := kernelSource{members: []string{"n1", "n2"}}
	_, err := loadWith("../../../examples/custom-node/poly.yaml", map[string]string{"n": "16"}, src)
	if err == nil || !strings.Contains(err.Error(), `unknown kernel "custom.poly": neither this job nor any node of the cluster (n1, n2) declares it`) ||
		!strings.Contains(err.Error(), "examples/custom-node") {
		t.Errorf("poly.yaml against stock nodes: %v", err)
	}
	if _, err := Load("../../../examples/custom-node/poly.yaml", nil); err == nil || strings.Contains(err.Error(), "node of the cluster") {
		t.Errorf("poly.yaml on this machine: %v, want the plain unknown-kernel error", err)
	}
}
