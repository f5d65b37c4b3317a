package coordtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/credentials/credtest"
	"github.com/acpp/acpp/internal/testlog"
	"github.com/acpp/acpp/kernels"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
)

// Options tune a test cluster.
type Options struct {
	// CPUWorkers per node; 0 means 2.
	CPUWorkers int
	// Modify, when set, adjusts each node's config before it starts.
	Modify func(i int, cfg *node.Config)
	// Later is how many of the last nodes Start leaves for StartLater
	// (nodes that join the cluster while jobs run); their credentials
	// exist from the start.
	Later int
}

// Cluster is a running test cluster.
type Cluster struct {
	t     testing.TB
	Nodes []*node.Node
	// Dir holds the credentials: the CA, nodes n0…, clients "alice" and
	// "bob".
	Dir   string
	Creds *credentials.Credentials // client "alice"

	mu      sync.Mutex
	stopped map[int]bool
	client  *nodeclient.Client

	opts  Options
	names []string // every node's name, the later ones too
}

// Start starts n local nodes that know each other and registers the
// built-in kernels in this process (nodes in one process share the
// registry). It fails the test on error.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	if err := kernels.Register(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("n%d", i)
	}
	if err := credtest.Create(dir, "coordtest", names, []string{"alice", "bob"}); err != nil {
		t.Fatal(err)
	}
	creds, err := credentials.LoadClient(dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, Dir: dir, Creds: creds, stopped: map[int]bool{}, opts: opts, names: names}
	for range n - opts.Later {
		c.startNode()
	}
	c.converge()
	return c
}

// StartLater starts the next node Options.Later held back; it joins the
// cluster, and Start's nodes see it alive before StartLater returns.
func (c *Cluster) StartLater() *node.Node {
	c.t.Helper()
	if len(c.Nodes) == len(c.names) {
		c.t.Fatalf("coordtest: no node left to start later (Options.Later)")
	}
	nd := c.startNode()
	c.converge()
	return nd
}

// startNode starts node len(c.Nodes), joining node 0.
func (c *Cluster) startNode() *node.Node {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workers := c.opts.CPUWorkers
	if workers == 0 {
		workers = 2
	}
	i := len(c.Nodes)
	cfg := node.DefaultLocalConfig()
	cfg.Name = c.names[i]
	cfg.CredentialsDir = c.Dir
	cfg.CPUWorkers = workers
	cfg.Devices = "cpu"
	cfg.Logger = Logger(t).With("node", cfg.Name)
	cfg.DrainTimeout = 2 * time.Second
	if i > 0 {
		cfg.Join = []string{c.Nodes[0].GossipAddr()}
	}
	if c.opts.Modify != nil {
		c.opts.Modify(i, &cfg)
	}
	nd, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start node %d: %v", i, err)
	}
	t.Cleanup(func() { c.Stop(i) })
	c.Nodes = append(c.Nodes, nd)
	return nd
}

// converge waits until every started node sees all of them alive.
func (c *Cluster) converge() {
	t := c.t
	t.Helper()
	n := len(c.Nodes)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, nd := range c.Nodes {
			if len(nd.Cluster().Members().Alive()) != n {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %d nodes did not see each other within 20s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Addrs are the nodes' QUIC addresses, in order.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, nd := range c.Nodes {
		out[i] = nd.QUICAddr()
	}
	return out
}

// Config is a coordinator config for all nodes, with client alice's
// credentials, the cluster's shared client (jobs of one process share one
// client per identity) and a test logger.
func (c *Cluster) Config() coordinator.Config {
	return coordinator.Config{Nodes: c.Addrs(), Credentials: c.Creds, Client: c.Client(), Logger: Logger(c.t), LostTimeout: 5 * time.Second, PollInterval: time.Second}
}

// Client is alice's nodeclient, shared by the cluster's jobs; it is closed
// when the test ends (after the jobs opened later).
func (c *Cluster) Client() *nodeclient.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		cl, err := nodeclient.Start(nodeclient.Config{Credentials: c.Creds, Logger: Logger(c.t)})
		if err != nil {
			c.t.Fatal(err)
		}
		c.client = cl
		c.t.Cleanup(func() { cl.Close() })
	}
	return c.client
}

// Stop closes node i abruptly (peers see it fail). Calling it twice is safe.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	done := c.stopped[i]
	c.stopped[i] = true
	c.mu.Unlock()
	if !done {
		c.Nodes[i].Close()
	}
}

// PeerBytes is the sum over nodes of the page bytes they sent to other
// nodes, as counted by the nodes (acpp_node_page_bytes_total{direction=
// "sent", peer≠"client"}).
func (c *Cluster) PeerBytes() int64 {
	var n int64
	for i := range c.Nodes {
		for peer, v := range c.Sent(i) {
			if peer != "client" {
				n += v
			}
		}
	}
	return n
}

// Sent is node i's sent page bytes per peer ("client" for the job's client).
func (c *Cluster) Sent(i int) map[string]int64 { return c.counter(i, "sent") }

// Received is node i's received page bytes per peer.
func (c *Cluster) Received(i int) map[string]int64 { return c.counter(i, "received") }

func (c *Cluster) counter(i int, dir string) map[string]int64 {
	out := map[string]int64{}
	mfs, err := c.Nodes[i].Metrics().Gather()
	if err != nil {
		c.t.Fatalf("metrics of node %d: %v", i, err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "acpp_node_page_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "direction") == dir {
				out[label(m, "peer")] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Logger logs to t at Warn (Debug with ACPP_TEST_DEBUG set) until the test ends.
func Logger(t testing.TB) *slog.Logger { return testlog.Default(t) }
