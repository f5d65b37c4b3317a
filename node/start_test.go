package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/credentials/credtest"
	"github.com/acpp/acpp/node"
)

// unusedAddr is 127.0.0.1 and a TCP port nobody listens on (freed a
// moment ago).
func unusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return ln.Addr().String()
}

func httpGet(url string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitingConfig is a node that waits a minute for a --join address where
// nobody is.
func waitingConfig(t *testing.T, logs io.Writer) node.Config {
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.CredentialsDir, cfg.CPUWorkers = "n0", credDir, 1
	cfg.Join = []string{unusedAddr(t)}
	cfg.Cluster.JoinRetry = time.Minute
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return cfg
}

// TestHealthzStartingThenCleanStopBeforeJoin: the HTTP endpoint opens
// before the node joins, so /healthz answers 503 "starting" (and /metrics
// answers) while it waits for its --join addresses; a stop then (SIGTERM:
// ctx ends) is clean: Run returns nil and logs "stopped before joining".
// Before, nothing listened until the join, and Run failed with "node:
// context canceled" (acpp-node exited 1).
func TestHealthzStartingThenCleanStopBeforeJoin(t *testing.T) {
	var logs logBuffer
	cfg := waitingConfig(t, &logs)
	cfg.HTTPAddr = unusedAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, cfg) }()
	eventually(t, 10*time.Second, "/healthz answers 503 starting", func() bool {
		code, body := httpGet("http://" + cfg.HTTPAddr + "/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "starting")
	})
	if code, body := httpGet("http://" + cfg.HTTPAddr + "/metrics"); code != http.StatusOK || !strings.Contains(body, "acpp_node_cluster_members_by_state") {
		t.Errorf("/metrics while starting: %d", code)
	}
	if code, body := httpGet("http://" + cfg.HTTPAddr + "/ui/view.json"); code != http.StatusOK || !strings.Contains(body, "starting") {
		t.Errorf("/ui/view.json while starting: %d %s", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run stopped before joining = %v, want nil (a clean stop)", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return 15 s after its context ended")
	}
	if !strings.Contains(logs.String(), "stopped before joining") {
		t.Errorf("logs lack \"stopped before joining\":\n%s", logs.String())
	}
}

// TestBusyHTTPAddrFailsBeforeJoin: a --http-addr in use is found at once,
// not after the node has waited for (and joined) its cluster.
func TestBusyHTTPAddrFailsBeforeJoin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var logs logBuffer
	cfg := waitingConfig(t, &logs)
	cfg.HTTPAddr = ln.Addr().String()
	start := time.Now()
	n, err := node.Start(testCtx(t), cfg)
	if err == nil {
		n.Close()
		t.Fatal("Start with a busy --http-addr succeeded")
	}
	if !strings.Contains(err.Error(), "--http-addr "+cfg.HTTPAddr) {
		t.Errorf("Start error = %v; want it to name --http-addr %s", err, cfg.HTTPAddr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("busy --http-addr found after %v; want at once", d)
	}
}

// TestClusterStatsOnMetrics_C1: /metrics has the membership's counters
// (CLUSTER.md, "Monitoring"): members by state, events, resyncs and
// memberlist's health score, and the certificate's time left.
func TestClusterStatsOnMetrics_C1(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	if err := nodes[1].Drain(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	nodes[1].Close()
	eventually(t, 20*time.Second, "n0 sees n1 left", func() bool {
		m, ok := nodes[0].Cluster().Member("n1")
		return ok && m.State == cluster.StateLeft
	})
	for state, want := range map[string]float64{"alive": 1, "left": 1, "failed": 0} {
		if got := counter(t, nodes[0], "acpp_node_cluster_members_by_state", map[string]string{"state": state}); got != want {
			t.Errorf("acpp_node_cluster_members_by_state{state=%q} = %v, want %v", state, got, want)
		}
	}
	if got := counter(t, nodes[0], "acpp_node_cluster_events_total", nil); got < 3 {
		t.Errorf("acpp_node_cluster_events_total = %v, want at least 3 (two joins, a leave)", got)
	}
	mfs, err := nodes[0].Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"acpp_node_cluster_resyncs_total", "acpp_node_cluster_health_score", "acpp_node_cluster_members", "acpp_node_certificate_expiry_seconds"} {
		if !have[name] {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if d := counter(t, nodes[0], "acpp_node_certificate_expiry_seconds", nil); d < 360*86400 || d > 366*86400 {
		t.Errorf("acpp_node_certificate_expiry_seconds = %v, want about a year", d)
	}
}

// TestCertificateExpiryWarned: the node logs its certificate's expiry at
// start, warns when less than 30 days are left, and exports the seconds
// left.
func TestCertificateExpiryWarned(t *testing.T) {
	dir := t.TempDir()
	if err := credtest.Create(dir, "lab", nil, nil); err != nil {
		t.Fatal(err)
	}
	iss, err := credentials.CreateNode(dir, "n7", credentials.IssueConfig{Validity: 10 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.CredentialsDir, cfg.CPUWorkers = "n7", dir, 1
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	n, err := node.Start(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	want := "not_after=" + iss.NotAfter.UTC().Format(time.RFC3339)
	var line string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "certificate") {
			line = l
			break
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "expires soon") || !strings.Contains(line, want) || !strings.Contains(line, "acpp-node credentials node n7") {
		t.Errorf("certificate log line = %q; want a warning with %s and how to renew", line, want)
	}
	if d := counter(t, n, "acpp_node_certificate_expiry_seconds", nil); d < 9*86400 || d > 10*86400 {
		t.Errorf("acpp_node_certificate_expiry_seconds = %v, want about 10 days", d)
	}
}

// TestStartErrorsNameTheFlag: cluster start-up failures name acpp-node's
// setting, not cluster.Config's field (BindPort, JoinRetry), and a gossip
// key the cluster refuses fails at once instead of after --join-retry.
func TestStartErrorsNameTheFlag(t *testing.T) {
	seed := startNodes(t, 1, nil)[0]
	start := func(mod func(cfg *node.Config)) (time.Duration, error) {
		var logs logBuffer
		cfg := waitingConfig(t, &logs)
		cfg.Name = "n1"
		mod(&cfg)
		t0 := time.Now()
		n, err := node.Start(testCtx(t), cfg)
		if err == nil {
			n.Close()
			t.Fatal("Start succeeded")
		}
		t.Logf("error: %v", err)
		return time.Since(t0), err
	}
	t.Run("gossip port in use", func(t *testing.T) {
		_, err := start(func(cfg *node.Config) { cfg.GossipAddr, cfg.Join = seed.GossipAddr(), nil })
		if msg := err.Error(); !strings.Contains(msg, "--gossip-addr") || strings.Contains(msg, "BindPort") {
			t.Errorf("error = %q; want it to name --gossip-addr, not BindPort", msg)
		}
	})
	t.Run("join timeout", func(t *testing.T) {
		_, err := start(func(cfg *node.Config) { cfg.Cluster.JoinRetry = 500 * time.Millisecond })
		if msg := err.Error(); !strings.Contains(msg, "--join-retry 500ms") || strings.Contains(msg, "JoinRetry") || !errors.Is(err, cluster.ErrJoin) {
			t.Errorf("error = %q; want it to name --join-retry 500ms, not JoinRetry", msg)
		}
	})
	t.Run("wrong gossip key", func(t *testing.T) {
		creds, err := credentials.LoadNode(credDir, "n1")
		if err != nil {
			t.Fatal(err)
		}
		d, err := start(func(cfg *node.Config) {
			cfg.Credentials, cfg.GossipKeys = creds, [][]byte{[]byte("another-key-of-32-bytes-length!!")}
			cfg.Join = []string{seed.GossipAddr()}
		})
		if !errors.Is(err, cluster.ErrGossipKey) || !strings.Contains(err.Error(), "no installed keys could decrypt the message") {
			t.Errorf("error = %v; want the cluster's refusal of the key", err)
		}
		if d > 10*time.Second {
			t.Errorf("a refused key failed the start after %v; want at once, not after --join-retry (1m)", d)
		}
	})
	t.Run("key readable by others", func(t *testing.T) {
		dir, err := makeCreds("lab", []string{"n1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(filepath.Join(dir, "nodes", "n1.key"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = start(func(cfg *node.Config) { cfg.Credentials, cfg.CredentialsDir = nil, dir })
		if err == nil {
			t.Fatal("a node key readable by others was accepted")
		}
		if msg := err.Error(); !errors.Is(err, credentials.ErrInsecureKey) || !strings.Contains(msg, "chmod 600") || strings.Contains(msg, "issue them") {
			t.Errorf("error = %q; want the chmod advice alone (issuing new credentials does not help)", msg)
		}
	})
}
