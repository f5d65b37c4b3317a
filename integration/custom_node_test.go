package integration

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/examples/custom-node/poly"
	"github.com/acpp/acpp/internal/nodeproc"
	"github.com/acpp/acpp/jobfile/npy"
)

// customNodeBinary builds examples/custom-node/node: acpp-node with the
// kernel custom.poly of its own (node/nodecmd).
func customNodeBinary(t testing.TB) string {
	t.Helper()
	nodeBinary(t) // skips with -short
	return nodeproc.Build(t, "github.com/acpp/acpp/examples/custom-node/node")
}

// connectTraced opens a cluster queue on procs with alice's credentials,
// recording the device of each finished coordinator group.
func connectTraced(t *testing.T, creds string, procs []*proc) (*acpp.Queue, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var devs []string
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.quic)
	}
	q, err := acpp.Connect(ctx(t), addrs, acpp.WithCredentials(creds, "alice"), acpp.WithCoordinator(func(cfg *coordinator.Config) {
		cfg.OnGroupDone = func(tr coordinator.GroupTrace) {
			if tr.Device != "" {
				mu.Lock()
				devs = append(devs, tr.Device)
				mu.Unlock()
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(devs) }
}

// Issue 13 §1: a team's own node binary (examples/custom-node/node, built
// on node/nodecmd) runs its Go kernel on the cluster: three such nodes give
// the embedded result bit for bit, and every group ran on a custom node.
func TestCustomNodeRunsItsKernel_C4(t *testing.T) {
	bin := customNodeBinary(t)
	creds := makeCredentials(t, "custom", []string{"n1", "n2", "n3"}, []string{"alice"})
	n1 := startBinary(t, bin, creds, "n1", nil)
	n2 := startBinary(t, bin, creds, "n2", []string{n1.gossip})
	n3 := startBinary(t, bin, creds, "n3", []string{n1.gossip})
	procs := []*proc{n1, n2, n3}
	waitMembers(t, procs, 3, 20*time.Second)

	local, err := acpp.NewQueue(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want, err := poly.Run(ctx(t), local, 50_000, 6)
	local.Close()
	if err != nil {
		t.Fatal(err)
	}
	q, devices := connectTraced(t, creds, procs)
	got, err := poly.Run(ctx(t), q, 50_000, 6)
	if err != nil {
		t.Fatal(err)
	}
	if poly.Checksum(got) != poly.Checksum(want) || !slices.Equal(got, want) {
		t.Fatalf("custom.poly on three custom nodes differs from the embedded run (crc %08x, want %08x)", poly.Checksum(got), poly.Checksum(want))
	}
	ran := devices()
	if len(ran) < 6 {
		t.Fatalf("%d coordinator groups reported, want the 6 launches at least: %v", len(ran), ran)
	}
}

// Issue 13 §1, §3: on a custom node with a GPU, custom.poly's CUDA C form
// (compiled by NVRTC at its first launch, -fmad=false) gives the Go form's
// result bit for bit. Skips where the node finds no GPU.
func TestCustomNodeCUDACMatchesGo_GPU(t *testing.T) {
	bin := customNodeBinary(t)
	creds := makeCredentials(t, "gpu", []string{"n1"}, []string{"alice"})
	n1 := startBinary(t, bin, creds, "n1", nil)
	waitMembers(t, []*proc{n1}, 1, 20*time.Second)
	q, err := acpp.Connect(ctx(t), []string{n1.quic}, acpp.WithCredentials(creds, "alice"), acpp.WithKind(acpp.CUDA))
	if errors.Is(err, acpp.ErrNoDevice) {
		t.Skipf("the node has no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	local, err := acpp.NewQueue(ctx(t), acpp.WithKind(acpp.CPU))
	if err != nil {
		t.Fatal(err)
	}
	want, err := poly.Run(ctx(t), local, 1<<20, 4)
	local.Close()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := poly.Run(ctx(t), q, 1<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4 launches on %v (first compiles with NVRTC) and read-back: %v", q.ClusterDevices(), time.Since(start))
	if !slices.Equal(got, want) {
		t.Fatalf("custom.poly's CUDA C form on the GPU differs from its Go form (crc %08x, want %08x)", poly.Checksum(got), poly.Checksum(want))
	}
}

// Issue 13 §1–2: in a mixed cluster (one stock acpp-node, two custom) the
// coordinator places custom.poly only on the nodes that advertise it; on
// stock nodes alone it is refused at Submit, naming the kernel.
func TestCustomKernelPlacedOnlyWhereItIs(t *testing.T) {
	bin := customNodeBinary(t)
	creds := makeCredentials(t, "mixed", []string{"n1", "n2", "n3", "s1", "s2"}, []string{"alice"})
	n1 := startNode(t, creds, "n1", nil) // stock acpp-node
	n2 := startBinary(t, bin, creds, "n2", []string{n1.gossip})
	n3 := startBinary(t, bin, creds, "n3", []string{n1.gossip})
	procs := []*proc{n1, n2, n3}
	waitMembers(t, procs, 3, 20*time.Second)

	q, devices := connectTraced(t, creds, procs)
	if _, err := poly.Run(ctx(t), q, 30_000, 12); err != nil {
		t.Fatal(err)
	}
	ran := devices()
	t.Logf("devices of the 12 launches: %v", ran)
	if len(ran) < 12 {
		t.Fatalf("%d coordinator groups reported, want the 12 launches at least", len(ran))
	}
	for _, d := range ran {
		if strings.HasPrefix(d, "n1/") {
			t.Errorf("a group ran on the stock node: %v", ran)
			break
		}
	}

	// acpp-submit kernels --cluster says which nodes have it.
	submitBinary(t)
	env := []string{"ACPP_CREDENTIALS=" + creds, "ACPP_CLIENT=alice"}
	code, stdout, stderr := submit(t, env, "kernels", "--cluster", n1.quic)
	if code != 0 || !regexp.MustCompile(`(?m)^custom\.poly\s+n2, n3$`).MatchString(stdout) || !regexp.MustCompile(`(?m)^fill_f32\s+every node$`).MatchString(stdout) {
		t.Errorf("acpp-submit kernels --cluster: exit %d\n%s%s", code, stdout, stderr)
	}
	// A job file names the nodes' own kernel: acpp-submit (which does not
	// register it) takes its declaration from the nodes, checks the job
	// against it and runs it on n2 and n3.
	out := t.TempDir()
	job, err := filepath.Abs(filepath.Join("..", "examples", "custom-node", "poly.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = submit(t, env, "check", "--cluster", n1.quic, "--set", "n=4096", job)
	if code != 0 || !strings.Contains(stdout, "valid") || !strings.Contains(stdout, "kernels on the cluster: custom.poly on n2, n3") {
		t.Errorf("check --cluster of a job naming custom.poly: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = submit(t, env, "run", "--cluster", n1.quic, "--progress", "never", "--set", "n=4096", "-o", out, job)
	if code != 0 {
		t.Fatalf("run --cluster of a job naming custom.poly: exit %d\n%s%s", code, stdout, stderr)
	}
	ys := readF32Npy(t, filepath.Join(out, "poly.npy"))
	if len(ys) != 4096 || ys[0] != 5.875 || ys[4095] != 5.875 {
		t.Errorf("poly.npy: %d values, first %v, want 4096 of 5.875", len(ys), ys[:min(4, len(ys))])
	}
	if code, stdout, stderr = submit(t, env, "check", "--set", "n=16", job); code == 0 || !strings.Contains(stdout+stderr, "custom.poly") {
		t.Errorf("check without --cluster of a job naming a node's own kernel: exit %d\n%s%s; want an unknown-kernel error", code, stdout, stderr)
	}

	s1 := startNode(t, creds, "s1", nil)
	s2 := startNode(t, creds, "s2", []string{s1.gossip})
	waitMembers(t, []*proc{s1, s2}, 2, 20*time.Second)
	stock, _ := connectTraced(t, creds, []*proc{s1, s2})
	_, err = poly.Run(ctx(t), stock, 1000, 1)
	if err == nil || !strings.Contains(err.Error(), `run kernel "custom.poly"`) || !strings.Contains(err.Error(), "s1 does not have it") || !strings.Contains(err.Error(), "s2 does not have it") {
		t.Fatalf("custom.poly on stock nodes only: %v, want a refusal naming the kernel and each node without it", err)
	}
	t.Logf("refusal on stock nodes: %v", err)
}

// BenchmarkCustomKernelOnNode (issue 13): custom.poly's kernel time on a
// custom node (its Go form over the node's own allocations, 2 CPU workers)
// against the same kernel embedded (2 workers) in the same run, n = 4 Mi
// floats, data resident on both. x_embedded = embedded time / node time
// (≥ 0.95 is the target). Kernel times: the node's own kernel instruction
// times (GroupTrace), and the embedded event's Timing.
func BenchmarkCustomKernelOnNode(b *testing.B) {
	bin := customNodeBinary(b)
	creds := makeCredentials(b, "bench", []string{"n1"}, []string{"alice"})
	n1 := startBinary(b, bin, creds, "n1", nil)
	waitMembers(b, []*proc{n1}, 1, 20*time.Second)
	const n = 4 << 20
	var mu sync.Mutex
	var nodeKernel time.Duration
	q, err := acpp.Connect(ctx(b), []string{n1.quic}, acpp.WithCredentials(creds, "alice"), acpp.WithKind(acpp.CPU), acpp.WithCoordinator(func(cfg *coordinator.Config) {
		cfg.OnGroupDone = func(tr coordinator.GroupTrace) {
			for _, in := range tr.Instrs {
				if in.Kind == "kernel" {
					mu.Lock()
					nodeKernel += in.End.Sub(in.Start)
					mu.Unlock()
				}
			}
		}
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	local, err := acpp.NewQueue(ctx(b), acpp.WithWorkers(2))
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	poly.Register()
	type bufs struct{ x, y *acpp.Buffer[float32] }
	mk := func(q *acpp.Queue) bufs {
		xs, ys := make([]float32, n), make([]float32, n)
		for i := range xs {
			xs[i], ys[i] = float32(i%97)/97, 1
		}
		return bufs{must(acpp.NewBufferFrom(q, xs, acpp.R1(n), acpp.CopyData())), must(acpp.NewBufferFrom(q, ys, acpp.R1(n), acpp.CopyData()))}
	}
	launch := func(q *acpp.Queue, bb bufs) *acpp.Event {
		ev, err := q.Submit(func(h *acpp.Handler) error {
			h.Launch(poly.Name, acpp.R1(n), acpp.Scalar(float32(0.5)), acpp.ReadRaw(h, bb.x), acpp.ReadWriteRaw(h, bb.y))
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := ev.Wait(ctx(b)); err != nil {
			b.Fatal(err)
		}
		return ev
	}
	cb, lb := mk(q), mk(local)
	launch(q, cb) // uploads, allocations
	launch(local, lb)
	mu.Lock()
	nodeKernel = 0
	mu.Unlock()
	var embedded time.Duration
	for b.Loop() {
		launch(q, cb)
		embedded += launch(local, lb).Timing().Duration()
	}
	if err := q.Wait(ctx(b)); err != nil {
		b.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the last trace
	mu.Lock()
	nk := nodeKernel
	mu.Unlock()
	b.ReportMetric(float64(nk.Nanoseconds())/float64(b.N), "node_ns/launch")
	b.ReportMetric(float64(embedded.Nanoseconds())/float64(b.N), "embedded_ns/launch")
	b.ReportMetric(float64(embedded)/float64(nk), "x_embedded")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// readF32Npy reads a float32 .npy file.
func readF32Npy(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(a.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return out
}
