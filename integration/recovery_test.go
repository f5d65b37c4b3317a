package integration

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/internal/testlog"
)

// Jobs that survive (issue 15): real acpp-node processes on loopback, CPU
// devices, the Jacobi example split over every node (halos travel between
// nodes every iteration, so every node holds the only copy of its block);
// a node is killed, stopped, drained or added while the job runs, and the
// output is bit for bit the embedded run's.

// survivalSet is a Jacobi of about three seconds on three CPU nodes here.
// The job must outlast every fault the tests inject (a kill up to half a
// second, a stop, a drain or a join a few hundred milliseconds after it
// opened on a node): 1500 iterations of a 512² Jacobi take about 3 s on
// the 2-core CI machine (400 took 0.6–0.8 s once the coordinator got
// faster, and a kill at 0.8 s found the job finished). The small window
// paces the run: groups are submitted as it goes, so a node that joins
// meanwhile gets work.
func survivalSet() []string {
	return []string{"--set", "n=512", "--set", "iters=1500", "--set", "rows=1", "--set", "chunks=1", "--progress", "never", "--window", "16"}
}

var survivalRef struct {
	once sync.Once
	data []byte
}

// survivalReference is the embedded run's jacobi.npy (made once).
func survivalReference(t *testing.T) []byte {
	survivalRef.once.Do(func() {
		dir := t.TempDir()
		if code, out, errs := submit(t, nil, append([]string{"run", "-q", "-o", dir, "--device", "cpu", jacobiJob(t)}, survivalSet()...)...); code != 0 {
			t.Fatalf("embedded run: exit %d\n%s%s", code, out, errs)
		}
		survivalRef.data, _ = os.ReadFile(filepath.Join(dir, "jacobi.npy"))
	})
	if len(survivalRef.data) == 0 {
		t.Fatal("no embedded reference")
	}
	return survivalRef.data
}

// clusterRun is an acpp-submit run --cluster started in the background.
type clusterRun struct {
	cmd       *exec.Cmd
	out, errs bytes.Buffer
	dir       string
	done      chan error
}

func startClusterRun(t *testing.T, creds string, addr string, extra ...string) *clusterRun {
	t.Helper()
	r := &clusterRun{dir: t.TempDir(), done: make(chan error, 1)}
	args := append([]string{"run", "--cluster", addr, "-o", r.dir, jacobiJob(t)}, survivalSet()...)
	r.cmd = exec.Command(submitBinary(t), append(args, extra...)...)
	r.cmd.Env = append(os.Environ(), "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true", "ACPP_CREDENTIALS="+creds, "ACPP_CLIENT=alice")
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.errs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
		}
	})
	return r
}

// finish waits for the run and checks it succeeded with the reference
// output; it returns what the run printed.
func (r *clusterRun) finish(t *testing.T, ref []byte) string {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("acpp-submit run --cluster: %v\n%s%s", err, r.out.String(), r.errs.String())
		}
	case <-time.After(90 * time.Second):
		r.cmd.Process.Kill()
		t.Fatalf("acpp-submit run --cluster did not finish in 90 s\n%s%s", r.out.String(), r.errs.String())
	}
	got, err := os.ReadFile(filepath.Join(r.dir, "jacobi.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, ref) {
		t.Fatalf("jacobi.npy differs from the embedded run's\n%s%s", r.out.String(), r.errs.String())
	}
	return r.out.String() + r.errs.String()
}

// A node SIGKILLed at a seeded random moment: the job completes, recovers
// on the two nodes left, and its output equals the embedded run's (C5).
func TestJacobiSurvivesNodeKill_C5(t *testing.T) {
	ref := survivalReference(t)
	seeds := []uint64{1, 2}
	if s := os.Getenv("ACPP_CHAOS_SEEDS"); s != "" { // scripts/chaos: more seeds
		var lo, hi uint64
		if _, err := fmt.Sscanf(s, "%d-%d", &lo, &hi); err != nil || lo > hi {
			t.Fatalf("ACPP_CHAOS_SEEDS=%q: want FROM-TO, e.g. 1-20", s)
		}
		seeds = nil
		for x := lo; x <= hi; x++ {
			seeds = append(seeds, x)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 4711))
			creds := makeCredentials(t, "survive", []string{"n1", "n2", "n3"}, []string{"alice"})
			procs, _ := startThree(t, creds)
			r := startClusterRun(t, creds, procs[0].quic)
			victim := procs[1+rng.IntN(2)]
			delay := time.Duration(rng.IntN(500)) * time.Millisecond
			waitJobOpen(t, victim)
			time.Sleep(delay)
			victim.kill()
			out := r.finish(t, ref)
			if !strings.Contains(out, "node "+victim.name+" lost at group") || !strings.Contains(out, "recovered") {
				t.Fatalf("%s killed %v after the job opened there: the run should tell the loss and the recovery\n%s", victim.name, delay, out)
			}
			// n1 survives every seed: it counts the reopened job and the
			// launches it ran again.
			m := metrics(t, procs[0])
			if metricValue(m, "acpp_node_job_recoveries_total") < 1 || metricValue(m, "acpp_node_replayed_launches_total") < 1 {
				t.Errorf("n1's /metrics after the recovery:\n%s", grepLines(m, "recover", "replayed"))
			}
			t.Logf("%s killed %v after the job opened there:\n%s", victim.name, delay, out)
		})
	}
}

// A node stopped with SIGSTOP (a hang: it keeps its connections, answers
// nothing) is declared lost after LostTimeout and the job recovers (C5).
func TestJacobiSurvivesNodeHang_C5(t *testing.T) {
	ref := survivalReference(t)
	creds := makeCredentials(t, "hang", []string{"n1", "n2", "n3"}, []string{"alice"})
	procs, _ := startThree(t, creds)
	r := startClusterRun(t, creds, procs[0].quic)
	victim := procs[2]
	waitJobOpen(t, victim)
	time.Sleep(500 * time.Millisecond)
	victim.cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { victim.cmd.Process.Signal(syscall.SIGCONT) })
	out := r.finish(t, ref)
	if !strings.Contains(out, "node n3 lost at group") || !strings.Contains(out, "recovered") {
		t.Fatalf("n3 stopped: the run should tell the loss and the recovery\n%s", out)
	}
	t.Log(out)
}

// A member stopped with SIGSTOP (a hung host, or one cut off: no answer,
// no refusal) a moment before acpp.Connect with one address, still listed
// alive by the node asked: Open leaves it out once the membership
// sees it failed, about a second with the local timing preset. It waited
// out the 10 s dial timeout; a member killed after it answered the dial
// cost the 15 s idle timeout of its inventory or job open call (chaos
// campaign 2026-11-28: 2 of 197 runs took 18.5 and 19.5 s) (C1, C5).
func TestMemberHungDuringOpenIsLeftOutAtOnce_C1_C5(t *testing.T) {
	creds := makeCredentials(t, "hungopen", []string{"n1", "n2", "n3"}, []string{"alice"})
	procs, _ := startThree(t, creds)
	victim := procs[2]
	victim.cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { victim.cmd.Process.Signal(syscall.SIGCONT) })
	var logs testlog.Buffer
	start := time.Now()
	q, err := acpp.Connect(ctx(t), []string{procs[0].quic}, acpp.WithCredentials(creds, "alice"),
		acpp.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("n3 stopped: Connect should open the job on n1 and n2, got %v\n%s", err, logs.String())
	}
	defer q.Close()
	left := grepLines(logs.String(), "left out of the job")
	if !strings.Contains(left, "node=n3") && !strings.Contains(left, victim.quic) {
		t.Skipf("n1 saw n3's failure before Connect listed the members (Connect took %v): nothing to check\n%s", took, logs.String())
	}
	if n := len(q.Devices()); n != 2 || !strings.Contains(left, "n3 failed") || took > 6*time.Second {
		t.Fatalf("n3 stopped: Connect should leave it out when the membership sees it failed (about 1 s), not after the 10 s dial timeout; it took %v, %d devices\n%s", took, n, logs.String())
	}
	t.Logf("Connect took %v: %s", took.Round(time.Millisecond), left)
}

// Two of three nodes SIGKILLed at once, one of them the node the run was
// given (and the one the job's membership watch asks first): the job
// recovers on the node left, bit for bit. It used to hang for good (the
// second loss, seen while the recovery reopened the job, restarted it
// without cancelling the epoch the first pass had started), and after that
// fix it still took 13 s and more (the watch kept asking the dead node, so
// nothing told the recovery that its other survivor was dead too: its
// close and reopen there ran to their 3 s and 10 s timeouts) (C5).
func TestJacobiSurvivesTwoNodesKilledAtOnce_C5(t *testing.T) {
	ref := survivalReference(t)
	creds := makeCredentials(t, "twokills", []string{"n1", "n2", "n3"}, []string{"alice"})
	procs, _ := startThree(t, creds)
	r := startClusterRun(t, creds, procs[0].quic)
	waitJobOpen(t, procs[2])
	time.Sleep(300 * time.Millisecond)
	procs[0].kill()
	procs[2].kill()
	out := r.finish(t, ref)
	m := regexp.MustCompile(`nodes (n1, n3|n3, n1) lost at group \d+: recovered .* in ([0-9.]+m?s) \(detection`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("n1 and n3 killed: the run should tell one recovery from both\n%s", out)
	}
	took, err := time.ParseDuration(m[2])
	if err != nil {
		t.Fatal(err)
	}
	if took >= 10*time.Second { // the reopen's timeout on a dead node
		t.Errorf("the recovery took %v: it waited for a dead node's timeouts\n%s", took, out)
	}
	t.Log(out)
}

// A node that joins while the job runs is offered to it: the summary
// shows groups on it, and the output is unchanged (issue 15, item 4).
func TestNodeJoinsRunningJob(t *testing.T) {
	ref := survivalReference(t)
	creds := makeCredentials(t, "join", []string{"n1", "n2", "n3"}, []string{"alice"})
	n1 := startNode(t, creds, "n1", nil)
	waitMembers(t, []*proc{n1}, 1, 15*time.Second)
	n2 := startNode(t, creds, "n2", []string{n1.gossip})
	waitMembers(t, []*proc{n1, n2}, 2, 15*time.Second)
	// survivalSet's small window: the run submits as it goes, so groups
	// submitted after the join can use n3 (with the default window the
	// whole job is submitted at once, before n3 exists).
	r := startClusterRun(t, creds, n1.quic)
	time.Sleep(300 * time.Millisecond)
	n3 := startNode(t, creds, "n3", []string{n1.gossip})
	waitMembers(t, []*proc{n1, n2, n3}, 3, 15*time.Second)
	out := r.finish(t, ref)
	if !strings.Contains(out, "node n3 joined the job") || !strings.Contains(out, "n3/cpu:0") {
		t.Fatalf("n3 joined while the job ran: the run should use it\n%s", out)
	}
	t.Log(out)
}

// SIGTERM on a node while the job runs: it drains, its pages go to
// another node before it leaves, nothing is lost or re-run, and it exits
// cleanly (issue 15, item 5).
func TestDrainedNodeHandsOverItsPages(t *testing.T) {
	ref := survivalReference(t)
	creds := makeCredentials(t, "drain", []string{"n1", "n2", "n3"}, []string{"alice"})
	n3, r := runWhileN3Drains(t, creds)
	n3.stop(t, 60*time.Second)
	out := r.finish(t, ref)
	if !strings.Contains(out, "node n3 drained") {
		t.Fatalf("n3 drained: the run should tell it\n%s", out)
	}
	if strings.Contains(out, "lost at group") {
		t.Fatalf("a drained node must not count as lost (nothing re-run)\n%s", out)
	}
	t.Log(out)
}

// metricValue is the value of an unlabelled metric in /metrics text (-1
// when it is missing).
func metricValue(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			var v float64
			fmt.Sscan(f[1], &v)
			return v
		}
	}
	return -1
}

func grepLines(text string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// runWhileN3Drains starts n1, n2 and n3 (n3 with time to hand its pages
// over) and the Jacobi run on them, and returns once the job has run on
// n3 for a moment: the time to drain it.
func runWhileN3Drains(t *testing.T, creds string) (*proc, *clusterRun) {
	t.Helper()
	n1 := startNode(t, creds, "n1", nil)
	waitMembers(t, []*proc{n1}, 1, 15*time.Second)
	n2 := startNode(t, creds, "n2", []string{n1.gossip})
	n3 := startNode(t, creds, "n3", []string{n1.gossip}, "--drain-timeout", "60s")
	waitMembers(t, []*proc{n1, n2, n3}, 3, 15*time.Second)
	// survivalSet's small window paces the run, so the drain lands while
	// it runs also on a quiet machine.
	r := startClusterRun(t, creds, n1.quic)
	waitJobOpen(t, n3)
	time.Sleep(300 * time.Millisecond)
	return n3, r
}

// waitJobOpen waits until a job is open on p (its /metrics acpp_node_jobs).
func waitJobOpen(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(metrics(t, p), "acpp_node_jobs") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no job opened on %s within 30 s", p.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// `acpp-node drain ADDR` with an operator's credentials drains a node as
// SIGTERM does: the job running on it hands its pages over, nothing is
// re-run, and the node's process exits 0 (issue 15, item 5).
func TestAcppNodeDrainCommand(t *testing.T) {
	ref := survivalReference(t)
	creds := makeCredentials(t, "drain2", []string{"n1", "n2", "n3"}, []string{"alice"})
	run(t, "credentials", "--dir", creds, "operator", "ops")
	n3, r := runWhileN3Drains(t, creds)
	if out := run(t, "drain", "--credentials", creds, "--client", "ops", "--reason", "test", n3.quic); !strings.Contains(out, "node n3 drains") {
		t.Fatalf("acpp-node drain said %q", out)
	}
	select {
	case <-n3.done:
		if n3.exitErr != nil {
			t.Errorf("n3 after acpp-node drain: %v", n3.exitErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("n3 still runs 60 s after acpp-node drain")
	}
	out := r.finish(t, ref)
	if !strings.Contains(out, "node n3 drained") || strings.Contains(out, "lost at group") {
		t.Fatalf("n3 drained by acpp-node drain: the run should tell it, with nothing lost\n%s", out)
	}
}
