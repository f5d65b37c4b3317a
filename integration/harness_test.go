package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/internal/nodeproc"
	"github.com/acpp/acpp/node/nodeclient"
)

func TestMain(m *testing.M) {
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	goleak.VerifyTestMain(cleanup{m})
}

type cleanup struct{ m *testing.M }

func (c cleanup) Run() int {
	code := c.m.Run()
	nodeproc.Cleanup()
	return code
}

// nodeBinary builds acpp-node once per test run.
func nodeBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	return nodeproc.Build(t, "github.com/acpp/acpp/cmd/acpp-node")
}

// run runs the acpp-node binary to completion (credentials subcommands).
func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(nodeBinary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("acpp-node %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// makeCredentials creates a credentials directory with the credentials
// subcommand.
func makeCredentials(t testing.TB, cluster string, nodes, clients []string) string {
	dir := filepath.Join(t.TempDir(), "creds")
	run(t, "credentials", "--dir", dir, "init", "--cluster", cluster)
	run(t, append([]string{"credentials", "--dir", dir, "node"}, nodes...)...)
	if len(clients) > 0 {
		run(t, append([]string{"credentials", "--dir", dir, "client"}, clients...)...)
	}
	return dir
}

// freePort returns a port free for TCP and UDP on 127.0.0.1.
func freePort(t testing.TB) int { return nodeproc.FreePort(t) }

// proc is one acpp-node process.
type proc struct {
	name                 string
	gossip, quic, health string
	cmd                  *exec.Cmd
	log                  *bytes.Buffer
	logMu                *sync.Mutex
	done                 chan struct{}
	exitErr              error
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (p *proc) output() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.log.String()
}

// startNode starts acpp-node run with the local timing preset; extra flags
// are appended. The process is killed when t ends if it still runs.
func startNode(t testing.TB, credDir, name string, join []string, extra ...string) *proc {
	t.Helper()
	return startNodeAt(t, credDir, name, fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("127.0.0.1:%d", freePort(t)), join, extra...)
}

// startNodeAt is startNode at given gossip, QUIC and health addresses.
func startNodeAt(t testing.TB, credDir, name, gossip, quic, health string, join []string, extra ...string) *proc {
	t.Helper()
	return startBinaryAt(t, nodeBinary(t), credDir, name, gossip, quic, health, join, extra...)
}

// startBinary is startNode with another node binary (a custom node built
// on node/nodecmd, which takes acpp-node's flags).
func startBinary(t testing.TB, bin, credDir, name string, join []string, extra ...string) *proc {
	t.Helper()
	return startBinaryAt(t, bin, credDir, name, fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("127.0.0.1:%d", freePort(t)), join, extra...)
}

func startBinaryAt(t testing.TB, bin, credDir, name, gossip, quic, health string, join []string, extra ...string) *proc {
	t.Helper()
	p := &proc{
		name: name, gossip: gossip, quic: quic, health: health,
		log: &bytes.Buffer{}, logMu: &sync.Mutex{}, done: make(chan struct{}),
	}
	args := []string{"run", "--name", name, "--credentials", credDir, "--timing", "local",
		"--gossip-addr", p.gossip, "--quic-addr", p.quic, "--http-addr", p.health,
		"--cpu-workers", "2", "--drain-timeout", "3s", "--log-level", "debug"}
	for _, j := range join {
		args = append(args, "--join", j)
	}
	args = append(args, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true")
	w := syncWriter{p.logMu, p.log}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("---- log of %s ----\n%s", p.name, p.output())
		}
	})
	return p
}

// healthz returns the body of /healthz, or "" when it is not ready.
func (p *proc) healthz() string {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + p.health + "/healthz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// waitMembers polls /healthz until each process reports n members.
func waitMembers(t testing.TB, procs []*proc, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	want := fmt.Sprintf("members=%d ", n)
	for {
		ok := true
		for _, p := range procs {
			select {
			case <-p.done:
				t.Fatalf("%s exited early: %v", p.name, p.exitErr)
			default:
			}
			if !strings.Contains(p.healthz(), want) {
				ok = false
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("nodes did not report %d members within %v", n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and fails t unless the process exits 0 in time.
func (p *proc) stop(t testing.TB, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		t.Logf("%s exited %v after SIGTERM", p.name, time.Since(start).Round(time.Millisecond))
		if p.exitErr != nil {
			t.Errorf("%s: unclean exit after SIGTERM: %v", p.name, p.exitErr)
		}
	case <-time.After(timeout):
		t.Errorf("%s did not exit within %v of SIGTERM", p.name, timeout)
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func client(t testing.TB, credDir, name string, procs ...*proc) *nodeclient.Client {
	t.Helper()
	creds, err := credentials.LoadClient(credDir, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := nodeclient.Start(nodeclient.Config{Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, p := range procs {
		got, err := c.Connect(ctx(t), p.quic)
		if err != nil {
			t.Fatalf("connect to %s: %v", p.name, err)
		}
		if got != p.name {
			t.Fatalf("node at %s is %q, want %q", p.quic, got, p.name)
		}
	}
	return c
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}
