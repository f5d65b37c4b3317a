package coordinator_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/credentials/credtest"
	"github.com/acpp/acpp/internal/nodeproc"
)

// The multi-process test runs the coordinator against three acpp-node
// processes on loopback. It builds acpp-node (slow on a loaded machine), so
// it runs only with ACPP_MULTIPROC=1 and without -short:
//
//	ACPP_MULTIPROC=1 go test -run MultiProcess -v ./coordinator

type nodeProc struct {
	name, quic, http string
	cmd              *exec.Cmd
	done             chan struct{}
	mu               sync.Mutex
	log              strings.Builder
}

func (p *nodeProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func loopbackPort(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", nodeproc.FreePort(t)) }

// peerBytesHTTP sums acpp_node_page_bytes_total{direction="sent"} to
// peers other than the client from a node's /metrics.
func peerBytesHTTP(t *testing.T, p *nodeProc) int64 {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
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

func TestMultiProcessJacobiAndKill_C3_C5(t *testing.T) {
	if testing.Short() || os.Getenv("ACPP_MULTIPROC") == "" {
		t.Skip("set ACPP_MULTIPROC=1 (and no -short) to build acpp-node and run three processes")
	}
	bin := nodeproc.Build(t, "github.com/acpp/acpp/cmd/acpp-node")
	t.Cleanup(nodeproc.Cleanup)
	dir := filepath.Join(t.TempDir(), "creds")
	if err := credtest.Create(dir, "mp", []string{"n0", "n1", "n2"}, []string{"alice"}); err != nil {
		t.Fatal(err)
	}
	var procs []*nodeProc
	var gossip0 string
	for i := range 3 {
		p := &nodeProc{name: fmt.Sprintf("n%d", i), quic: loopbackPort(t), http: loopbackPort(t), done: make(chan struct{})}
		g := loopbackPort(t)
		if i == 0 {
			gossip0 = g
		}
		args := []string{"run", "--name", p.name, "--credentials", dir, "--timing", "local", "--gossip-addr", g,
			"--quic-addr", p.quic, "--http-addr", p.http, "--cpu-workers", "2", "--devices", "cpu", "--drain-timeout", "3s"}
		if i > 0 {
			args = append(args, "--join", gossip0)
		}
		p.cmd = exec.Command(bin, args...)
		p.cmd.Env = append(os.Environ(), "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true")
		p.cmd.Stdout, p.cmd.Stderr = p, p
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() {
			p.cmd.Process.Kill()
			<-p.done
			if t.Failed() {
				p.mu.Lock()
				t.Logf("---- %s ----\n%s", p.name, p.log.String())
				p.mu.Unlock()
			}
		})
		procs = append(procs, p)
		if i == 0 { // the others join it: wait until it serves
			for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
				if resp, err := http.Get("http://" + p.http + "/healthz"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						break
					}
				}
				if time.Since(start) > 30*time.Second {
					t.Fatal("n0 did not serve /healthz within 30s")
				}
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for ready := 0; ready < 3; {
		ready = 0
		for _, p := range procs {
			if resp, err := http.Get("http://" + p.http + "/healthz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.Contains(string(b), "members=3 ") {
					ready++
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the three acpp-node processes did not see each other within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	creds, err := credentials.LoadClient(dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	j, err := coordinator.Open(ctx, coordinator.Config{Nodes: []string{procs[0].quic, procs[1].quic, procs[2].quic}, Credentials: creds, LostTimeout: 2 * time.Second, PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close(ctx)

	const rows, cols, iters = 96, 128, 8
	in := jacobiInput(rows, cols)
	pg := coordinator.Dims{1, 1, cols}
	a, _ := j.NewBuffer(coordinator.BufferSpec{Name: "a", Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg, Init: f32bytes(in)})
	b, _ := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg})
	res := runJacobi(t, j, a, b, rows, cols, iters, &coordinator.Split{}, "")
	got, err := j.Read(ctx, res, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	if g := bytesF32(got); !slices.Equal(g, jacobiRef(in, rows, cols, iters)) {
		t.Fatal("Jacobi on three processes differs from plain Go")
	}
	var moved int64
	for _, p := range procs {
		moved += peerBytesHTTP(t, p)
	}
	if halo := int64((iters - 1) * 2 * 2 * cols * 4); moved != halo {
		t.Errorf("bytes between the processes (their /metrics) = %d, want the halo minimum %d", moved, halo)
	}

	// Kill n2 while it spins. The rows of b that only n2 holds (its block
	// of the last write of b, minus the halo row n1 received) are lost; a
	// is on the client since the Read.
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "spin", Range: coordinator.Dims{1, 1, 1}, Device: "n2/cpu:0", Args: []coordinator.Arg{coordinator.ScalarU64(1 << 40)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	procs[2].cmd.Process.Kill()
	err = j.Wait(ctx)
	var nl *coordinator.NodeLostError
	if !errors.As(err, &nl) || nl.Node != "n2" {
		t.Fatalf("Wait after SIGKILL of n2 = %v, want a *NodeLostError for n2", err)
	}
	t.Logf("reported %v after SIGKILL: %v", time.Since(killed).Round(time.Millisecond), err)
	if took := time.Since(killed); took > 10*time.Second {
		t.Errorf("loss reported after %v, want within the detection time", took)
	}
	want := []coordinator.LostRange{{Buffer: `buffer "b"`, Boxes: []coherence.Box{{Lo: coordinator.Dims{0, 2*rows/3 + 1, 0}, Hi: coordinator.Dims{1, rows, cols}}}}}
	if len(nl.Lost) != 1 || nl.Lost[0].Buffer != want[0].Buffer || !slices.Equal(nl.Lost[0].Boxes, want[0].Boxes) {
		t.Errorf("lost %+v, want %+v", nl.Lost, want)
	}
}
