package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// TestClusterPTXKernelOnCPUNodes_C6: a job file's PTX kernel run on a
// cluster whose devices are all CPUs fails at its step with an error that
// names the kernel and the devices (none runs PTX), instead of hanging or
// failing on a node. (On remote nodes the kernel travels to the nodes
// with a GPU first, through coordinator.Job.ShipKernel; in one process
// the nodes share this process's registry, so nothing needs to travel:
// coordinator's TestRegisterKernelsPerJob_C6 covers the shipping.)
func TestClusterPTXKernelOnCPUNodes_C6(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	mod, err := os.ReadFile("../../../cuda/kernels/ptx/saxpy.ptx")
	if err != nil {
		t.Fatal(err)
	}
	p := writeJob(t, "ptx.yaml", `kernels:
  twice:
    ptx: twice.ptx
    entry: saxpy
    params: [{name: a, kind: scalar, type: float32}, {name: x, kind: pointer, type: float32}, {name: y, kind: pointer, type: float32}]
buffers:
  v: {type: float32, range: [16], init: {value: 1}}
steps:
  - kernel: twice
    scalars: {a: 1}
    accessors: [{buffer: v, mode: read}, {buffer: v, mode: read_write}]
`)
	if err := os.WriteFile(filepath.Join(filepath.Dir(p), "twice.ptx"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Run(ctx, Config{JobFile: p, OutDir: t.TempDir(),
		Cluster: &ClusterConfig{Addrs: c.Addrs(), CredentialsDir: c.Dir, Client: "alice"}})
	if !errors.Is(err, coordinator.ErrNoDevice) || ctx.Err() != nil {
		t.Fatalf("Run = %v, want ErrNoDevice well before the deadline", err)
	}
	for _, w := range []string{`kernel "twice@`, "PTX only", "n0/cpu:0", "n1/cpu:0", "ptx.yaml:9: steps[0]"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Run error %q lacks %q", err, w)
		}
	}
}
