package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/credentials/credtest"
	"github.com/acpp/acpp/internal/testlog"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

var credDir, otherDir string

func TestMain(m *testing.M) {
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	var err error
	if credDir, err = makeCreds("lab", []string{"n0", "n1", "n2", "n3"}, []string{"alice", "bob"}); err == nil {
		otherDir, err = makeCreds("lab", []string{"n0"}, []string{"mallory"})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(cleanupAfter{m},
		// memberlist's TCP handlers end within its TCP timeout after Close.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).streamListen"),
		// A probe started just before Close waits out the probe interval.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

type cleanupAfter struct{ m *testing.M }

func (c cleanupAfter) Run() int {
	code := c.m.Run()
	os.RemoveAll(credDir)
	os.RemoveAll(otherDir)
	return code
}

func makeCreds(cluster string, nodes, clients []string) (string, error) {
	dir, err := os.MkdirTemp("", "acpp-node-creds-")
	if err != nil {
		return "", err
	}
	return dir, credtest.Create(dir, cluster, nodes, clients)
}

func testLogger(t testing.TB) *slog.Logger { return testlog.Default(t) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startNodes starts n local nodes n0..n(n-1), each joining the first, and
// waits until every one sees all of them alive.
func startNodes(t testing.TB, count int, mod func(i int, cfg *node.Config)) []*node.Node {
	t.Helper()
	ctx := testCtx(t)
	nodes := make([]*node.Node, count)
	for i := range count {
		cfg := node.DefaultLocalConfig()
		// LAN failure detection: the local preset's one-second verdicts
		// flap on a loaded 2-core machine under -race. Tests about failure
		// detection ask for the local timing.
		cfg.Cluster.Timing = cluster.DefaultLANConfig().Timing
		cfg.Name = fmt.Sprintf("n%d", i)
		cfg.CredentialsDir = credDir
		cfg.CPUWorkers = 2
		cfg.Logger = testLogger(t).With("node", cfg.Name)
		cfg.DrainTimeout = 2 * time.Second
		if i > 0 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		if mod != nil {
			mod(i, &cfg)
		}
		n, err := node.Start(ctx, cfg)
		if err != nil {
			t.Fatalf("start node %d: %v", i, err)
		}
		t.Cleanup(func() { n.Close() })
		nodes[i] = n
	}
	waitAlive(t, nodes, count)
	return nodes
}

func waitAlive(t testing.TB, nodes []*node.Node, want int) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("%d nodes see each other", want), func() bool {
		for _, n := range nodes {
			if len(n.Cluster().Members().Alive()) != want {
				return false
			}
		}
		return true
	})
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startClient starts a client with the credentials of name from dir and
// connects it to every node.
func startClient(t testing.TB, dir, name string, nodes ...*node.Node) *nodeclient.Client {
	t.Helper()
	creds, err := credentials.LoadClient(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := nodeclient.Start(nodeclient.Config{Credentials: creds, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, n := range nodes {
		got, err := c.Connect(testCtx(t), n.QUICAddr())
		if err != nil {
			t.Fatalf("connect to %s: %v", n.Name(), err)
		}
		if got != n.Name() {
			t.Fatalf("Connect(%s) = %q, want %q", n.QUICAddr(), got, n.Name())
		}
	}
	return c
}

func openJob(t testing.TB, c *nodeclient.Client, nodeName string, id uint64) *nodeclient.Job {
	t.Helper()
	j, err := c.Open(testCtx(t), nodeName, id, nodeclient.JobOptions{})
	if err != nil {
		t.Fatalf("open job %d on %s: %v", id, nodeName, err)
	}
	return j
}

func submit(t testing.TB, j *nodeclient.Job, instrs ...proto.Instr) {
	t.Helper()
	if _, err := j.Submit(testCtx(t), instrs...); err != nil {
		t.Fatalf("submit to %s: %v", j.Node(), err)
	}
}

func wait(t testing.TB, j *nodeclient.Job, ids ...uint64) {
	t.Helper()
	if err := j.Wait(testCtx(t), ids...); err != nil {
		t.Fatalf("wait on %s for %v: %v", j.Node(), ids, err)
	}
}

func box(lo, hi [3]uint64) proto.Box { return proto.Box{Lo: lo, Hi: hi} }
