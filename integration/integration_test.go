package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// startThree starts n1, n2, n3 (n2 and n3 join n1) and waits until each
// reports three members on /healthz; it returns how long that took.
func startThree(t testing.TB, credDir string) ([]*proc, time.Duration) {
	start := time.Now()
	n1 := startNode(t, credDir, "n1", nil)
	procs := []*proc{n1}
	// n2 and n3 may only join once n1 listens.
	waitMembers(t, procs, 1, 15*time.Second)
	procs = append(procs, startNode(t, credDir, "n2", []string{n1.gossip}), startNode(t, credDir, "n3", []string{n1.gossip}))
	waitMembers(t, procs, 3, 15*time.Second)
	return procs, time.Since(start)
}

func instr(id uint64, kind proto.InstrKind, deps ...uint64) proto.Instr {
	return proto.Instr{ID: id, Kind: kind, Deps: deps}
}

// TestThreeProcessesMovePagesAndDetectKill_C1_C3_C5: three acpp-node
// processes form a cluster; pages go A→B→C→A and are checked bytewise; a
// Recv waiting on C fails naming C within the detection time after C is
// SIGKILLed; the others stop cleanly on SIGTERM.
func TestThreeProcessesMovePagesAndDetectKill_C1_C3_C5(t *testing.T) {
	credDir := makeCredentials(t, "itest", []string{"n1", "n2", "n3"}, []string{"alice"})
	procs, took := startThree(t, credDir)
	t.Logf("3 processes up and converged in %v", took)
	c := client(t, credDir, "alice", procs...)
	for _, p := range procs {
		inv, err := c.Inventory(ctx(t), p.name)
		if err != nil || len(inv.Devices) == 0 {
			t.Fatalf("inventory of %s: %+v, %v", p.name, inv, err)
		}
	}
	const jobID = 42
	jobs := make([]*nodeclient.Job, 3)
	for i, p := range procs {
		j, err := c.Open(ctx(t), p.name, jobID, nodeclient.JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jobs[i] = j
	}
	rng := [3]uint64{8, 64, 96}
	const elem = 4
	size := int(rng[0]*rng[1]*rng[2]) * elem
	image := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range image {
		image[i] = byte(r.Uint32())
	}
	boxes := []proto.Box{
		{Lo: [3]uint64{0, 0, 0}, Hi: [3]uint64{2, 64, 96}},   // whole planes: one run
		{Lo: [3]uint64{3, 5, 7}, Hi: [3]uint64{6, 40, 50}},   // strided
		{Lo: [3]uint64{7, 63, 95}, Hi: [3]uint64{8, 64, 96}}, // one element
		{Lo: [3]uint64{2, 10, 0}, Hi: [3]uint64{3, 11, 96}},  // one row
	}
	whole := []proto.Box{{Hi: rng}}
	A, B, C := "n1", "n2", "n3"
	alloc := proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: elem}
	with := func(in proto.Instr, boxes []proto.Box, peer string) proto.Instr {
		in.Buffer, in.Boxes, in.Peer = 1, boxes, peer
		return in
	}
	fill := with(instr(4, proto.InstrFill, 3), boxes, "")
	fill.Pattern = []byte{0}
	batches := [][]proto.Instr{
		{alloc, with(instr(2, proto.InstrUpload, 1), whole, ""), with(instr(3, proto.InstrSend, 2), boxes, B), fill, with(instr(5, proto.InstrRecv, 4), boxes, C)},
		{alloc, with(instr(2, proto.InstrRecv, 1), boxes, A), with(instr(3, proto.InstrSend, 2), boxes, C)},
		{alloc, with(instr(2, proto.InstrRecv, 1), boxes, B), with(instr(3, proto.InstrSend, 2), boxes, A)},
	}
	for _, i := range []int{2, 0, 1} { // C first, A before B: B's pages may come early
		if _, err := jobs[i].Submit(ctx(t), batches[i]...); err != nil {
			t.Fatalf("submit to %s: %v", jobs[i].Node(), err)
		}
	}
	if err := jobs[0].Upload(ctx(t), 1, 0, rng, elem, whole, image); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if err := jobs[0].ReadBack(ctx(t), 6, []uint64{5}, 1, 0, rng, elem, whole, got); err != nil {
		t.Fatalf("read back from A: %v", err)
	}
	if !bytes.Equal(got, image) {
		t.Fatal("A's buffer after A→B→C→A differs from what was uploaded")
	}
	gotB := make([]byte, size)
	if err := jobs[1].ReadBack(ctx(t), 4, []uint64{3}, 1, 0, rng, elem, whole, gotB); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for _, b := range boxes {
		wr, _ := proto.BoxRuns(want, rng, elem, b)
		sr, _ := proto.BoxRuns(image, rng, elem, b)
		for i := range wr {
			copy(wr[i], sr[i])
		}
	}
	if !bytes.Equal(gotB, want) {
		t.Fatal("B's buffer must hold A's bytes in the boxes and zeros elsewhere")
	}

	// A built-in kernel (package kernels) runs on B's CPU over buffer 2.
	krng := [3]uint64{1, 16, 32}
	v := make([]byte, 4)
	binary.LittleEndian.PutUint32(v, math.Float32bits(2.5))
	launch := proto.Instr{ID: 11, Kind: proto.InstrLaunch, Deps: []uint64{10}, Launch: &proto.Launch{
		Kernel: "fill_f32", Device: "cpu:0", Global: krng,
		Args: []proto.KArg{{Kind: 2 /* accessor */, Buffer: 2, ElemSize: 4, Range: krng}, {Kind: 5 /* scalar */, Scalar: v}},
	}}
	if _, err := jobs[1].Submit(ctx(t), proto.Instr{ID: 10, Kind: proto.InstrAlloc, Buffer: 2, Range: krng, ElemSize: 4}, launch); err != nil {
		t.Fatal(err)
	}
	kgot := make([]byte, 16*32*4)
	if err := jobs[1].ReadBack(ctx(t), 12, []uint64{11}, 2, 0, krng, 4, []proto.Box{{Hi: krng}}, kgot); err != nil {
		t.Fatalf("fill_f32 on %s: %v", B, err)
	}
	for i := 0; i < len(kgot); i += 4 {
		if f := math.Float32frombits(binary.LittleEndian.Uint32(kgot[i:])); f != 2.5 {
			t.Fatalf("element %d = %v after fill_f32(2.5)", i/4, f)
		}
	}

	// C5: a Recv on A waiting for pages from C fails naming C after C is
	// killed, within the failure detection time.
	if _, err := jobs[0].Submit(ctx(t), with(instr(7, proto.InstrRecv, 6), whole, C), with(instr(8, proto.InstrSend, 6), whole, C)); err == nil {
		// 8 races with the kill: it may complete or fail; 7 cannot complete.
	} else {
		t.Fatal(err)
	}
	if err := jobs[0].Wait(ctx(t), 8); err != nil && !errors.Is(err, nodeclient.ErrNodeLost) {
		t.Fatalf("send to C: %v", err)
	}
	limit := cluster.DefaultLocalConfig().FailureDetectionTimeout(3) + 2*time.Second
	start := time.Now()
	procs[2].kill()
	err := jobs[0].Wait(ctx(t), 7)
	took = time.Since(start)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || !slices.Equal(fe.LostNodes(), []string{C}) {
		t.Fatalf("Wait for a Recv from the killed node = %v; want a failure naming %s", err, C)
	}
	if took > limit {
		t.Errorf("the waiter failed after %v, want within the detection time %v", took, limit)
	}
	t.Logf("waiter failed %v after SIGKILL (bound %v): %v", took, limit, err)
	for _, j := range jobs[:2] {
		if err := j.Close(ctx(t)); err != nil {
			t.Errorf("close job on %s: %v", j.Node(), err)
		}
	}
	c.Close()
	for _, p := range procs[:2] {
		p.stop(t, 10*time.Second)
	}
	if out := procs[0].output(); !strings.Contains(out, "stopped cleanly") {
		t.Errorf("n1 did not log a clean stop")
	}
}

// TestSecurity_C6: a node with the wrong gossip key cannot join; a client
// or a node without a certificate of the cluster CA is refused; a job
// cannot read another job's buffer.
func TestSecurity_C6(t *testing.T) {
	credDir := makeCredentials(t, "itest", []string{"n1", "n2", "n3", "n4"}, []string{"alice", "bob"})
	other := makeCredentials(t, "itest", []string{"n3"}, []string{"mallory"})
	n1 := startNode(t, credDir, "n1", nil)
	waitMembers(t, []*proc{n1}, 1, 15*time.Second)
	n2 := startNode(t, credDir, "n2", []string{n1.gossip})
	waitMembers(t, []*proc{n1, n2}, 2, 15*time.Second)

	// Wrong gossip key: n4's certificate is fine, its key is another
	// cluster's. Its join fails and, with --join-retry 0, it exits with an
	// error at once (by default it would keep retrying, and failing, for a
	// minute).
	wrongKey := filepath.Join(t.TempDir(), "wrongkey")
	copyDir(t, credDir, wrongKey)
	if err := os.Remove(filepath.Join(wrongKey, "gossip.key")); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(other, "gossip.key"), filepath.Join(wrongKey, "gossip.key"))
	n4 := startNode(t, wrongKey, "n4", []string{n1.gossip}, "--join-retry", "0")
	select {
	case <-n4.done:
		if n4.exitErr == nil || !strings.Contains(n4.output(), "join") {
			t.Errorf("n4 with the wrong gossip key: exit %v; want a failed join\n%s", n4.exitErr, n4.output())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("n4 with the wrong gossip key is still running")
	}
	if strings.Contains(n1.healthz(), "members=3") {
		t.Error("n1 counts n4 as a member")
	}

	// A client of another CA cannot connect.
	c := client(t, credDir, "alice", n1, n2)
	if _, err := client0(t, other, "mallory").Connect(ctx(t), n1.quic); err == nil {
		t.Error("a client with a certificate of another CA connected")
	}
	// A node of another CA (with the right gossip key, so it is a member)
	// cannot exchange pages: n1 refuses its certificate.
	rogue := filepath.Join(t.TempDir(), "rogue")
	copyDir(t, other, rogue)
	os.Remove(filepath.Join(rogue, "gossip.key"))
	copyFile(t, filepath.Join(credDir, "gossip.key"), filepath.Join(rogue, "gossip.key"))
	n3 := startNode(t, rogue, "n3", []string{n1.gossip})
	waitMembers(t, []*proc{n1, n2, n3}, 3, 15*time.Second)
	j, err := c.Open(ctx(t), "n1", 1, nodeclient.JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rng := [3]uint64{1, 1, 256}
	whole := []proto.Box{{Hi: rng}}
	secret := bytes.Repeat([]byte("secret!!"), 32)
	if _, err := j.Submit(ctx(t),
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: whole},
		proto.Instr{ID: 3, Kind: proto.InstrSend, Deps: []uint64{2}, Buffer: 1, Boxes: whole, Peer: "n3"},
	); err != nil {
		t.Fatal(err)
	}
	if err := j.Upload(ctx(t), 1, 0, rng, 1, whole, secret); err != nil {
		t.Fatal(err)
	}
	if err := j.Wait(ctx(t), 3); err == nil {
		t.Error("n1 sent pages to a node whose certificate is not of the cluster CA")
	} else {
		t.Logf("send to the rogue node refused: %v", err)
	}

	// Job isolation: bob can neither take over alice's job nor read her
	// buffer from a job of his own.
	bob := client(t, credDir, "bob", n1)
	var re *transport.RemoteError
	if _, err := bob.Open(ctx(t), "n1", 1, nodeclient.JobOptions{}); !errors.As(err, &re) || re.Code != proto.CodeNotOwner {
		t.Errorf("bob opening alice's job: %v, want CodeNotOwner", err)
	}
	bj, err := bob.Open(ctx(t), "n1", 2, nodeclient.JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(secret))
	err = bj.ReadBack(ctx(t), 1, nil, 1, 0, rng, 1, whole, got)
	if err == nil || bytes.Contains(got, []byte("secret")) {
		t.Errorf("bob read alice's buffer: %v, %q", err, got)
	}
	for _, p := range []*proc{n1, n2, n3} {
		p.stop(t, 10*time.Second)
	}
}

func client0(t testing.TB, dir, name string) *nodeclient.Client { return client(t, dir, name) }

func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		copyFile(t, p, filepath.Join(dst, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkConvergence3Processes measures the time from starting three
// acpp-node processes (local timing preset) until each reports three
// members on /healthz.
func BenchmarkConvergence3Processes(b *testing.B) {
	credDir := makeCredentials(b, "bench", []string{"n1", "n2", "n3"}, nil)
	var total time.Duration
	n := 0
	for b.Loop() {
		procs, took := startThree(b, credDir)
		total += took
		n++
		for _, p := range procs {
			p.stop(b, 10*time.Second)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/converge")
}

// TestConfigFileEnvAndJSONLogs: acpp-node run takes its settings from a
// YAML file and ACPP_* variables, logs JSON when told to, serves /metrics
// and stops cleanly on SIGINT.
func TestConfigFileEnvAndJSONLogs(t *testing.T) {
	credDir := makeCredentials(t, "itest", []string{"cfgnode"}, nil)
	health := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	file := filepath.Join(t.TempDir(), "node.yaml")
	yaml := fmt.Sprintf("name: cfgnode\ncredentials: %s\ntiming: local\ngossip_addr: 127.0.0.1:%d\nquic_addr: 127.0.0.1:%d\nhttp_addr: %s\ndevices: cpu\n",
		credDir, freePort(t), freePort(t), health)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nodeBinary(t), "run")
	cmd.Env = append(os.Environ(), "ACPP_CONFIG="+file, "ACPP_LOG_FORMAT=json", "ACPP_MAX_JOB_BYTES=64MiB")
	var out bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout, cmd.Stderr = syncWriter{&mu, &out}, syncWriter{&mu, &out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	p := &proc{name: "cfgnode", health: health, done: make(chan struct{})}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.healthz(), "ok cfgnode members=1") {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("node from a config file not healthy:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "acpp_node_cluster_members 1") {
		t.Errorf("/metrics lacks acpp_node_cluster_members 1")
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Errorf("unclean exit after SIGINT: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10 s of SIGINT")
	}
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var sawStart bool
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", l)
			continue
		}
		if rec["msg"] == "job opened" || rec["msg"] == "node started" {
			sawStart = true
		}
	}
	if !sawStart {
		t.Errorf("no \"node started\" record in the JSON log:\n%s", out.String())
	}
}
