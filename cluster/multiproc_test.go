package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/cluster/clustertest"
)

// childEnv names the member a re-executed test binary runs as.
const childEnv = "ACPP_CLUSTER_CHILD"

// childMain is one member process of TestMultiProcessConverge. It speaks a
// line protocol: it prints "addr HOST:PORT" when started, reads "join
// ADDR" and "leave" from stdin, and prints "converged N" when it sees N
// alive members (N from ACPP_CLUSTER_CHILD_N).
func childMain(name string) int {
	want, _ := strconv.Atoi(os.Getenv("ACPP_CLUSTER_CHILD_N"))
	cfg := cluster.DefaultLocalConfig()
	cfg.Name = name
	cfg.GossipKeys = [][]byte{clustertest.Key}
	ctx := context.Background()
	c, err := cluster.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	sub := c.Subscribe()
	defer sub.Close()
	fmt.Printf("addr %s\n", c.Addr())
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
	}()
	alive := len(sub.Snapshot().Alive())
	for {
		select {
		case ev := <-sub.Events():
			alive = len(c.Members().Alive())
			if alive == want && ev.Type == cluster.EventJoin {
				fmt.Printf("converged %d\n", alive)
			}
		case cmd, ok := <-cmds:
			if !ok || cmd == "leave" {
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				c.Leave(lctx)
				cancel()
				return 0
			}
			if addr, ok := strings.CutPrefix(cmd, "join "); ok {
				if _, err := c.Join(ctx, addr); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
		}
	}
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	addr  string
}

// TestMultiProcessConverge measures how long three member processes take
// to converge: from the moment members 1 and 2 are told to join member 0
// until all three see three alive members. Processes are started and
// listening before the clock starts. It is a measurement, not a check, so
// it runs only when asked:
//
//	ACPP_CLUSTER_MULTIPROC=1 go test ./cluster -run MultiProcess -v -count 5
func TestMultiProcessConverge(t *testing.T) {
	if os.Getenv("ACPP_CLUSTER_MULTIPROC") == "" {
		t.Skip("set ACPP_CLUSTER_MULTIPROC=1 to measure multi-process convergence")
	}
	const n = 3
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	children := make([]*child, n)
	for i := range n {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=p%d", childEnv, i), fmt.Sprintf("ACPP_CLUSTER_CHILD_N=%d", n))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ch := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
		go func() {
			defer close(ch.lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				ch.lines <- sc.Text()
			}
		}()
		t.Cleanup(func() {
			stdin.Close() // the child leaves and exits
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("child %d: %v", i, err)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Errorf("child %d did not exit", i)
			}
		})
		children[i] = ch
	}
	next := func(c *child, prefix string) string {
		select {
		case l, ok := <-c.lines:
			if !ok || !strings.HasPrefix(l, prefix) {
				t.Fatalf("child said %q (open %v), want %q...", l, ok, prefix)
			}
			return strings.TrimPrefix(l, prefix)
		case <-time.After(20 * time.Second):
			t.Fatalf("child said nothing within 20s, want %q", prefix)
		}
		return ""
	}
	for _, c := range children {
		c.addr = next(c, "addr ")
	}
	start := time.Now()
	for _, c := range children[1:] {
		fmt.Fprintf(c.stdin, "join %s\n", children[0].addr)
	}
	for _, c := range children {
		next(c, "converged ")
	}
	t.Logf("%d processes converged in %v", n, time.Since(start))
}
