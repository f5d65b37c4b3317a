// Package nodeproc helps tests that run the project's commands as real
// processes on loopback (integration/, the coordinator's multi-process
// test): it builds a command once per test binary and finds ports free for
// both TCP and UDP.
package nodeproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex // guards dir and built
	dir   string
	built = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds the command package pkg (e.g. "github.com/acpp/acpp/cmd/acpp-node")
// with CGO_ENABLED=0, once per test binary, and returns the executable's
// path. Call Cleanup from TestMain to remove the executables.
//
// Where ACPP_PREBUILT names a folder, an executable there named as the
// package's last path element is used instead of building it: a machine
// without Go (the GPU machine) runs test binaries with commands built
// elsewhere.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	if pre := os.Getenv("ACPP_PREBUILT"); pre != "" {
		p := filepath.Join(pre, path.Base(pkg))
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	mu.Lock()
	if dir == "" {
		d, err := os.MkdirTemp("", "acpp-nodeproc-")
		if err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		dir = d
	}
	b := built[pkg]
	if b == nil {
		b = &build{path: filepath.Join(dir, path.Base(pkg))}
		built[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Cleanup removes what Build made. Call it once, after the tests ran.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
	dir, built = "", map[string]*build{}
}

var (
	handedMu sync.Mutex
	handed   = map[int]bool{} // ports FreePort gave out in this process
)

// FreePort returns a port of 127.0.0.1 that is free for TCP and UDP (a node
// uses both on its gossip port, and UDP on its QUIC port), and that it did
// not return before in this process.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			// The kernel may hand a port it just freed out again before
			// the process it went to binds it (two nodes of one test got
			// the same port): never give one twice in a test binary.
			handedMu.Lock()
			dup := handed[port]
			handed[port] = true
			handedMu.Unlock()
			if !dup {
				return port
			}
		}
	}
	t.Fatal("no port of 127.0.0.1 free for both TCP and UDP")
	return 0
}
