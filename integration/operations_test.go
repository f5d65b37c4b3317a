package integration

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acpp/acpp/node/nodeclient"
)

// Tests of docs/OPERATIONS.md and the cluster parts of docs/JOBS.md,
// followed step by step as an operator and a job submitter read them
// (docs/CONFORMANCE.md, "Operating a cluster, followed step by step").

// healthzAny returns the body of /healthz whatever its status code, or ""
// when nothing answers.
func (p *proc) healthzAny() string {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + p.health + "/healthz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitHealth polls a node's /healthz until its body starts with prefix
// (any status code).
func waitHealth(t testing.TB, p *proc, prefix string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if strings.HasPrefix(p.healthzAny(), prefix) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /healthz is %q, not %q… within %v", p.name, p.healthzAny(), prefix, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunGivenADrainingNodesAddress: JOBS.md, --cluster: "One address
// expands to every alive, non-draining member". Given the address of a node
// that drains (here one held by a job whose client never hands over), the
// run uses the other members; it used to fail with "cluster unreachable:
// … node n3 is draining".
func TestRunGivenADrainingNodesAddress(t *testing.T) {
	submitBinary(t)
	creds := makeCredentials(t, "ops", []string{"n1", "n2", "n3"}, []string{"alice"})
	n1 := startNode(t, creds, "n1", nil)
	n2 := startNode(t, creds, "n2", []string{n1.gossip})
	n3 := startNode(t, creds, "n3", []string{n1.gossip}, "--drain-timeout", "60s")
	waitMembers(t, []*proc{n1, n2, n3}, 3, 20*time.Second)

	// A job on n3 that nobody hands over keeps n3 draining.
	c := client(t, creds, "alice", n3)
	if _, err := c.Open(ctx(t), "n3", 42, nodeclient.JobOptions{}); err != nil {
		t.Fatal(err)
	}
	n3.cmd.Process.Signal(syscall.SIGTERM)
	waitHealth(t, n3, "draining", 10*time.Second)

	job, _ := filepath.Abs("../examples/jobs/jacobi.yaml")
	set := []string{"--set", "n=64", "--set", "iters=8", "--progress", "never"}
	emb := t.TempDir()
	if code, out, errs := submit(t, nil, append([]string{"run", "-o", emb, "--device", "cpu", job}, set...)...); code != 0 {
		t.Fatalf("embedded run: exit %d\n%s%s", code, out, errs)
	}
	out := t.TempDir()
	code, stdout, stderr := submit(t, []string{"ACPP_CREDENTIALS=" + creds, "ACPP_CLIENT=alice"},
		append([]string{"run", "--cluster", n3.quic, "-o", out, job}, set...)...)
	if code != 0 || !strings.Contains(stdout, "on cluster (2 nodes: n1, n2;") {
		t.Fatalf("run --cluster %s (n3, draining): exit %d, want 0 on n1 and n2\n%s%s", n3.quic, code, stdout, stderr)
	}
	want, _ := os.ReadFile(filepath.Join(emb, "jacobi.npy"))
	got, _ := os.ReadFile(filepath.Join(out, "jacobi.npy"))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("cluster jacobi.npy (%d bytes) differs from the embedded one (%d bytes)", len(got), len(want))
	}
	// nodes and status still answer through the draining node.
	if code, stdout, stderr = submit(t, nil, "nodes", "--cluster", n3.quic, "--credentials", creds, "--client", "alice"); code != 0 || !strings.Contains(stdout, "1 draining") {
		t.Errorf("nodes --cluster %s: exit %d\n%s%s", n3.quic, code, stdout, stderr)
	}
	c.Close()
	for _, p := range []*proc{n1, n2, n3} {
		p.kill()
	}

	// With only draining members to go to, the run says so and exits 1.
	m1 := startNode(t, creds, "n1", nil, "--drain-timeout", "60s")
	waitMembers(t, []*proc{m1}, 1, 20*time.Second)
	c1 := client(t, creds, "alice", m1)
	if _, err := c1.Open(ctx(t), "n1", 43, nodeclient.JobOptions{}); err != nil {
		t.Fatal(err)
	}
	m1.cmd.Process.Signal(syscall.SIGTERM)
	waitHealth(t, m1, "draining", 10*time.Second)
	code, stdout, stderr = submit(t, []string{"ACPP_CREDENTIALS=" + creds, "ACPP_CLIENT=alice"},
		append([]string{"run", "--cluster", m1.quic, "-o", t.TempDir(), job}, set...)...)
	if code != 1 || !strings.Contains(stderr, "no member takes jobs") || !strings.Contains(stderr, "draining: n1") {
		t.Errorf("run --cluster %s (the only node, draining): exit %d, want 1 saying no member takes jobs\n%s%s", m1.quic, code, stdout, stderr)
	}
	c1.Close()
	m1.kill()
}
