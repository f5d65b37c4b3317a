package integration

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
)

// tibJob is issue 14's job: one float32 buffer of exactly 1 TiB.
const tibJob = `version: 1
name: tib
buffers:
  big: {type: float32, range: [268435456, 1024]}
steps:
  - fill: {buffer: big, value: 1.0}
outputs:
  - {buffer: big, file: big.npy}
`

// TestTooBigJobLeavesNodesUp_B5: three acpp-node processes with the
// default memory budget (no --max-bytes), which each logs at start-up and
// serves on /metrics. acpp-submit check --cluster says the 1 TiB job does
// not fit the cluster; run --cluster fails it with the nodes'
// memory-limit error instead of crashing every node; the nodes stay up,
// and the next job runs on them. The embedded run of the same job fails
// with the budget error and exit code 1 (not a runtime crash, exit 2).
func TestTooBigJobLeavesNodesUp_B5(t *testing.T) {
	size, _, err := cpu.HostMemory()
	if err != nil {
		t.Skipf("host memory size unknown here: %v", err)
	}
	if b, _ := (device.MemoryLimit{}).Budget(size, true); b >= 1<<40 {
		t.Skipf("the default host budget (%d bytes) holds 1 TiB here; the test would allocate it", b)
	}
	submitBinary(t)
	creds := makeCredentials(t, "budget", []string{"n1", "n2", "n3"}, []string{"alice"})
	n1 := startNode(t, creds, "n1", nil)
	n2 := startNode(t, creds, "n2", []string{n1.gossip})
	n3 := startNode(t, creds, "n3", []string{n1.gossip})
	procs := []*proc{n1, n2, n3}
	waitMembers(t, procs, 3, 20*time.Second)
	for _, p := range procs {
		if log := p.output(); !strings.Contains(log, `msg="memory budget"`) || !strings.Contains(log, "how=\"75% of") {
			t.Errorf("%s did not log its memory budget at start-up:\n%s", p.name, log)
		}
		if m := metrics(t, p); !strings.Contains(m, `acpp_node_memory_budget_bytes{device="cpu:0",memory="0"}`) {
			t.Errorf("%s /metrics lacks the host memory budget", p.name)
		}
	}

	dir := t.TempDir()
	job := filepath.Join(dir, "tib.yaml")
	if err := os.WriteFile(job, []byte(tibJob), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"ACPP_CREDENTIALS=" + creds, "ACPP_CLIENT=alice"}
	code, stdout, stderr := submit(t, env, "check", "--cluster", n1.quic, job)
	if code != 1 || !strings.Contains(stdout, "does not fit the cluster") || !strings.Contains(stderr, "buffer big (float32 [268435456 1024]) is 1024.00 GiB") {
		t.Errorf("check --cluster of the 1 TiB job: exit %d\n%s%s; want 1, not fitting the cluster", code, stdout, stderr)
	}

	code, stdout, stderr = submit(t, env, "run", "--cluster", n1.quic, "--progress", "never", "-o", dir, job)
	t.Logf("run --cluster of the 1 TiB job: exit %d\n%s%s", code, stdout, stderr)
	if code != 1 || !strings.Contains(stderr, "memory limit exceeded") || !strings.Contains(stderr, "1099511627776 bytes") || !strings.Contains(stderr, "--max-bytes") {
		t.Errorf("run --cluster of the 1 TiB job: exit %d; want 1 with the nodes' memory-limit error naming the size and --max-bytes", code)
	}
	for _, p := range procs {
		select {
		case <-p.done:
			t.Fatalf("%s exited after the 1 TiB job: %v\n%s", p.name, p.exitErr, p.output())
		default:
		}
		if strings.Contains(p.output(), "fatal error") {
			t.Errorf("%s logged a fatal error", p.name)
		}
	}
	waitMembers(t, procs, 3, 10*time.Second)

	saxpy, _ := filepath.Abs("../examples/jobs/saxpy.yaml")
	if code, stdout, stderr := submit(t, env, "run", "--cluster", n2.quic, "--progress", "never", "-o", t.TempDir(), saxpy); code != 0 {
		t.Fatalf("the next job on the same nodes: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = submit(t, nil, "run", "--device", "cpu", "--progress", "never", "-o", dir, job)
	if code != 1 || !strings.Contains(stderr, "more than is left of the host memory budget") || strings.Contains(stderr, "fatal error") {
		t.Errorf("embedded run of the 1 TiB job: exit %d\n%s%s; want 1 with the budget error", code, stdout, stderr)
	}
	for _, p := range procs {
		p.stop(t, 10*time.Second)
	}
}

func metrics(t *testing.T, p *proc) string {
	t.Helper()
	resp, err := http.Get("http://" + p.health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
