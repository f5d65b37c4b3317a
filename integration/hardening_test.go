package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/node/nodeclient"
)

// jacobiJob is the Jacobi example: small enough that many runs at once fit
// a 2-core machine, split over every node's devices so that halo rows
// travel between nodes and the result comes back by read-back from each.
func jacobiJob(t testing.TB) string {
	t.Helper()
	job, err := filepath.Abs("../examples/jobs/jacobi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// jacobiSet is the --set flags of a Jacobi run with iters iterations.
func jacobiSet(iters int) []string {
	return []string{"--set", "n=32", "--set", fmt.Sprintf("iters=%d", iters), "--set", "rows=1", "--set", "chunks=1", "--progress", "never"}
}

// embeddedJacobi runs the job on this machine's CPU and returns jacobi.npy.
func embeddedJacobi(t testing.TB, iters int) []byte {
	t.Helper()
	dir := t.TempDir()
	if code, out, errs := submit(t, nil, append([]string{"run", "-o", dir, "--device", "cpu", jacobiJob(t)}, jacobiSet(iters)...)...); code != 0 {
		t.Fatalf("embedded run (iters=%d): exit %d\n%s%s", iters, code, out, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "jacobi.npy"))
	if err != nil || len(b) == 0 {
		t.Fatalf("embedded run (iters=%d) wrote no jacobi.npy: %v", iters, err)
	}
	return b
}

// clusterJacobi runs the job on the cluster at addr as client and returns
// jacobi.npy, or an error with acpp-submit's output.
func clusterJacobi(t testing.TB, creds, client, addr string, iters int) ([]byte, error) {
	dir := t.TempDir()
	code, stdout, stderr := submit(t, []string{"ACPP_CREDENTIALS=" + creds, "ACPP_CLIENT=" + client},
		append([]string{"run", "--cluster", addr, "-o", dir, jacobiJob(t)}, jacobiSet(iters)...)...)
	if code != 0 {
		return nil, fmt.Errorf("acpp-submit run --cluster as %s (iters=%d): exit %d\n%s%s", client, iters, code, stdout, stderr)
	}
	return os.ReadFile(filepath.Join(dir, "jacobi.npy"))
}

// TestConcurrentJobsOfOneClientIdentity_C4: sixteen acpp-submit processes
// at once, eight with client alice's certificate and eight with bob's, run
// Jacobi jobs of four sizes on a three-node cluster; every result is bit
// for bit the embedded run's. A node sends a job's read-backs to the
// process that opened the job, not to whichever process of the identity
// holds the cached connection (before: most runs failed with "no read back
// of job … is expected").
func TestConcurrentJobsOfOneClientIdentity_C4(t *testing.T) {
	submitBinary(t)
	creds := makeCredentials(t, "many", []string{"n1", "n2", "n3"}, []string{"alice", "bob"})
	procs, _ := startThree(t, creds)
	iters := []int{2, 4, 6, 8}
	want := map[int][]byte{}
	for _, it := range iters {
		want[it] = embeddedJacobi(t, it)
	}
	const jobs = 16
	errs := make([]error, jobs)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range jobs {
		client := []string{"alice", "bob"}[i%2]
		it := iters[(i/2)%len(iters)]
		addr := procs[i%len(procs)].quic
		wg.Go(func() {
			got, err := clusterJacobi(t, creds, client, addr, it)
			if err == nil && !bytes.Equal(got, want[it]) {
				err = fmt.Errorf("%s (iters=%d): jacobi.npy (%d bytes) differs from the embedded run's (%d bytes)", client, it, len(got), len(want[it]))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			t.Errorf("job %d: %v", i, err)
		}
	}
	t.Logf("%d concurrent jobs of 2 clients: %d failed, %v", jobs, failed, time.Since(start).Round(time.Millisecond))
}

// restart starts node p again after it exited, under the same name and at
// the same addresses, joining join.
func (p *proc) restart(t testing.TB, credDir string, join []string) *proc {
	t.Helper()
	select {
	case <-p.done:
	default:
		t.Fatalf("restart of %s while it runs", p.name)
	}
	return startNodeAt(t, credDir, p.name, p.gossip, p.quic, p.health, join)
}

// TestRestartedNodeServesTheNextJob_C5: after node n2 is killed with
// SIGKILL and started again at once under the same name and addresses, the
// very next job (which moves halo rows between n2 and both other nodes)
// succeeds, bit for bit, as do the jobs after it, and long-lived clients
// reach the new run at their first call. Before, the survivors and the
// clients kept their QUIC connections to the dead process and the next
// jobs and calls failed with "connection to peer lost: received a
// stateless reset".
func TestRestartedNodeServesTheNextJob_C5(t *testing.T) {
	submitBinary(t)
	creds := makeCredentials(t, "restart", []string{"n1", "n2", "n3"}, []string{"alice"})
	procs, _ := startThree(t, creds)
	n1, n2, n3 := procs[0], procs[1], procs[2]
	want := embeddedJacobi(t, 4)
	// Every pair of nodes holds a connection now.
	for _, p := range procs {
		if got, err := clusterJacobi(t, creds, "alice", p.quic, 4); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("job before the restart: %v (result equal: %v)", err, bytes.Equal(got, want))
		}
	}
	for round := range 2 {
		// Two long-lived clients (acpp.Connect's kind) hold connections to
		// n2's run that is about to die.
		dialing, calling := client(t, creds, "alice", n2), client(t, creds, "alice", n2)
		start := time.Now()
		n2.kill()
		n2 = n2.restart(t, creds, []string{n1.gossip})
		waitMembers(t, []*proc{n2}, 3, 15*time.Second)
		t.Logf("round %d: n2 killed, restarted and sees 3 members after %v", round, time.Since(start).Round(time.Millisecond))
		// A client that connects again (as each coordinator job does) and
		// one that just calls both reach the new run at once.
		if name, err := dialing.Connect(ctx(t), n2.quic); err != nil || name != "n2" {
			t.Fatalf("round %d: client connects to the restarted n2: %q, %v", round, name, err)
		}
		for _, c := range []*nodeclient.Client{dialing, calling} {
			if inv, err := c.Inventory(ctx(t), "n2"); err != nil || inv.Node != "n2" {
				t.Fatalf("round %d: a client's first call to the restarted n2: %+v, %v", round, inv, err)
			}
		}
		for i, via := range []*proc{n1, n3, n2} {
			got, err := clusterJacobi(t, creds, "alice", via.quic, 4)
			if err != nil {
				t.Fatalf("round %d: job %d after the restart of n2 (via %s, %v after the kill): %v", round, i+1, via.name, time.Since(start).Round(time.Millisecond), err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d: job %d after the restart of n2: result differs from the embedded run's", round, i+1)
			}
		}
		if !strings.Contains(n2.healthz(), "members=3 ") {
			t.Errorf("round %d: n2 healthz %q, want 3 members", round, n2.healthz())
		}
	}
}
