package transport

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/credentials/credtest"
)

// credDir holds a cluster CA "lab" with nodes n1..n4 and client alice, and
// otherDir a second CA of the same cluster name with node n2 (a stranger).
var credDir, otherDir string

func TestMain(m *testing.M) {
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	var err error
	if credDir, err = makeCreds("lab", []string{"n1", "n2", "n3", "n4"}, []string{"alice"}); err == nil {
		otherDir, err = makeCreds("lab", []string{"n2"}, []string{"mallory"})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(cleanupAfter{m})
}

// cleanupAfter removes the credentials once the tests ran, before
// goleak.VerifyTestMain checks for leaks and exits.
type cleanupAfter struct{ m *testing.M }

func (c cleanupAfter) Run() int {
	code := c.m.Run()
	os.RemoveAll(credDir)
	os.RemoveAll(otherDir)
	return code
}

func makeCreds(cluster string, nodes, clients []string) (string, error) {
	dir, err := os.MkdirTemp("", "acpp-creds-")
	if err != nil {
		return "", err
	}
	return dir, credtest.Create(dir, cluster, nodes, clients)
}

// directory is a stand-in for cluster membership: node name → address.
type directory struct {
	mu    sync.Mutex
	addrs map[string]string
}

func (d *directory) set(name, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.addrs == nil {
		d.addrs = map[string]string{}
	}
	d.addrs[name] = addr
}

func (d *directory) resolve(_ context.Context, name string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.addrs[name]; ok {
		return a, nil
	}
	return "", fmt.Errorf("node %s is not a member", name)
}

func loadNode(t testing.TB, dir, name string) *credentials.Credentials {
	t.Helper()
	c, err := credentials.LoadNode(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// startNode starts a listening transport for node name of credDir,
// registered in dir, closed when the test ends.
func startNode(t testing.TB, d *directory, name string, mod func(*Config)) *Transport {
	t.Helper()
	cfg := Config{
		Credentials: loadNode(t, credDir, name),
		ListenAddr:  "127.0.0.1:0",
		Resolve:     d.resolve,
		Logger:      testLogger(t),
		DialTimeout: 15 * time.Second, // generous: under -race on a loaded machine handshakes can lose packets to full socket buffers
	}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if d != nil {
		d.set(cfg.Credentials.Identity.Name, tr.Addr().String())
	}
	return tr
}

func startClient(t testing.TB, dir, name string) *Transport {
	t.Helper()
	c, err := credentials.LoadClient(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Start(Config{Credentials: c, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (t *Transport) connCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.all)
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}
