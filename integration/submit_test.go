package integration

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/internal/nodeproc"
)

// submitBinary builds acpp-submit once per test run, next to acpp-node.
func submitBinary(t testing.TB) string {
	t.Helper()
	nodeBinary(t) // skips under -short
	return nodeproc.Build(t, "github.com/acpp/acpp/cmd/acpp-submit")
}

// submit runs acpp-submit with args and returns its exit code, stdout and
// stderr.
func submit(t testing.TB, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(submitBinary(t), args...)
	cmd.Env = append(append(os.Environ(), "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// peerBytes sums acpp_node_page_bytes_total{direction="sent"} to peers
// other than the client from a node's /metrics.
func (p *proc) peerBytes(t testing.TB) int64 {
	t.Helper()
	resp, err := http.Get("http://" + p.health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "acpp_node_page_bytes_total{") && strings.Contains(l, `direction="sent"`) && !strings.Contains(l, `peer="client"`) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int64(v)
		}
	}
	return n
}

// TestSubmitJacobiThreeProcesses_C3_C1: acpp-submit runs the Jacobi
// example on three acpp-node processes (given one address, it finds the
// other two), the output is bit for bit the embedded run's, and the bytes
// the nodes sent each other are exactly the halo rows (C3). acpp-submit
// nodes lists all three; status lists them serving; bad flags exit 2 and
// an unreachable cluster exits 1 with the address in the message.
func TestSubmitJacobiThreeProcesses_C3_C1(t *testing.T) {
	submitBinary(t)
	creds := makeCredentials(t, "submit", []string{"n1", "n2", "n3"}, []string{"alice"})
	n1 := startNode(t, creds, "n1", nil)
	n2 := startNode(t, creds, "n2", []string{n1.gossip})
	n3 := startNode(t, creds, "n3", []string{n1.gossip})
	procs := []*proc{n1, n2, n3}
	waitMembers(t, procs, 3, 20*time.Second)

	job, _ := filepath.Abs("../examples/jobs/jacobi.yaml")
	const n, iters = 64, 8
	set := []string{"--set", "n=64", "--set", "iters=8", "--set", "rows=1", "--progress", "never"}
	emb := t.TempDir()
	if code, out, errs := submit(t, nil, append([]string{"run", "-o", emb, "--device", "cpu", job}, set...)...); code != 0 {
		t.Fatalf("embedded run: exit %d\n%s%s", code, out, errs)
	}
	var before int64
	for _, p := range procs {
		before += p.peerBytes(t)
	}
	out := t.TempDir()
	start := time.Now()
	code, stdout, stderr := submit(t, []string{"ACPP_CREDENTIALS=" + creds, "ACPP_CLIENT=alice"},
		append([]string{"run", "--cluster", n2.quic, "-o", out, job}, set...)...)
	if code != 0 {
		t.Fatalf("cluster run: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("cluster run in %v:\n%s", time.Since(start), stdout)
	want, _ := os.ReadFile(filepath.Join(emb, "jacobi.npy"))
	got, _ := os.ReadFile(filepath.Join(out, "jacobi.npy"))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("cluster jacobi.npy (%d bytes) differs from the embedded one (%d bytes)", len(got), len(want))
	}
	var after int64
	for _, p := range procs {
		after += p.peerBytes(t)
	}
	// Each iteration, each of the two row-block boundaries moves one row
	// each way; the initial fill is split the same way, so nothing else.
	if halo := int64(iters * 2 * 2 * n * 4); after-before != halo {
		t.Errorf("bytes between nodes (their /metrics) = %d, want the halo minimum %d", after-before, halo)
	}
	if !strings.Contains(stdout, "on cluster (3 nodes") {
		t.Errorf("summary does not name the three nodes:\n%s", stdout)
	}

	code, stdout, stderr = submit(t, nil, "nodes", "--cluster", n1.quic, "--credentials", creds, "--client", "alice")
	if code != 0 {
		t.Fatalf("nodes: exit %d: %s", code, stderr)
	}
	for _, p := range procs {
		if !strings.Contains(stdout, p.name) || !strings.Contains(stdout, p.quic) {
			t.Errorf("nodes lacks %s at %s:\n%s", p.name, p.quic, stdout)
		}
	}
	t.Logf("acpp-submit nodes:\n%s", stdout)
	code, stdout, stderr = submit(t, nil, "status", "--cluster", n1.quic, "--credentials", creds, "--client", "alice")
	if code != 0 || strings.Count(stdout, "serving") != 3 {
		t.Errorf("status: exit %d, stdout:\n%s%s", code, stdout, stderr)
	}
	t.Logf("acpp-submit status:\n%s", stdout)

	if code, _, stderr = submit(t, nil, "run", "--cluster", n1.quic, "--credentials", creds, job); code != 2 || !strings.Contains(stderr, "--client NAME") {
		t.Errorf("run without --client: exit %d, stderr %q; want 2 naming --client", code, stderr)
	}
	n3.stop(t, 10*time.Second)
	// The others list n3 as left and count it as such, as their /healthz
	// (members=2) does.
	waitMembers(t, procs[:2], 2, 10*time.Second)
	code, stdout, stderr = submit(t, nil, "nodes", "--cluster", n1.quic, "--credentials", creds, "--client", "alice")
	if code != 0 || !strings.Contains(stdout, "2 alive, 1 left (as node n1 sees them)") {
		t.Errorf("nodes after n3 left: exit %d, stdout:\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = submit(t, nil, "nodes", "--cluster", n3.quic, "--credentials", creds, "--client", "alice")
	if code != 1 || !strings.Contains(stderr, "cluster unreachable: connect to "+n3.quic) {
		t.Errorf("nodes on a stopped node: exit %d, stderr %q; want 1 naming %s", code, stderr, n3.quic)
	}
}
