package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/node"
)

// TestClusterJacobiMatchesEmbedded_C3: the Jacobi example on three
// in-process nodes (one address given, the others discovered) gives bit
// for bit the embedded result, and the nodes move exactly the halo rows
// between them: each iteration, each of the two block boundaries one row
// each way (one row per page).
func TestClusterJacobiMatchesEmbedded_C3(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	const n, iters = 48, 6
	// Two chunks per device: neighbouring chunks share a device, so only
	// the three blocks' edges move.
	params := map[string]string{"n": "48", "iters": "6", "rows": "1", "chunks": "2"}
	job := "../../../examples/jobs/jacobi.yaml"

	emb := t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: emb, Devices: []string{"cpu"}}); err != nil {
		t.Fatalf("embedded: %v", err)
	}
	out := t.TempDir()
	before := c.PeerBytes()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{JobFile: job, Params: params, OutDir: out, Record: true,
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice"}})
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	want, _ := os.ReadFile(filepath.Join(emb, "jacobi.npy"))
	got, _ := os.ReadFile(filepath.Join(out, "jacobi.npy"))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("cluster jacobi.npy (%d bytes) differs from the embedded one (%d bytes)", len(got), len(want))
	}
	halo := int64(iters * 2 * 2 * n * 4)
	if moved := c.PeerBytes() - before; moved != halo {
		t.Errorf("bytes between nodes (counted by the nodes) = %d, want the halo minimum %d", moved, halo)
	}
	// Border chunks of 2 rows at the blocks' edges: the same result, the
	// same halo.
	bparams := map[string]string{"n": "48", "iters": "6", "rows": "1", "borders": "2"}
	bout := t.TempDir()
	before = c.PeerBytes()
	if _, err := Run(ctx, Config{JobFile: job, Params: bparams, OutDir: bout,
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice"}}); err != nil {
		t.Fatalf("cluster with borders: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(bout, "jacobi.npy")); !bytes.Equal(got, want) {
		t.Error("cluster jacobi.npy with border chunks differs from the embedded one")
	}
	if moved := c.PeerBytes() - before; moved != halo {
		t.Errorf("bytes between nodes with border chunks = %d, want the halo minimum %d", moved, halo)
	}
	if len(res.Cluster.Nodes) != 3 {
		t.Errorf("nodes = %v, want the three discovered from one address", res.Cluster.Nodes)
	}
	for _, g := range res.Groups {
		if g.Label == "jacobi2d" && len(g.Chunks) != 6 {
			t.Errorf("group %d has %d chunks, want 2 per device on 3 devices", g.ID, len(g.Chunks))
		}
	}
	sum := res.Summary()
	for _, s := range []string{"on cluster (3 nodes", "between nodes " + bytesStr(halo), "n0/cpu:0", "n2/cpu:0", "wrote "} {
		if !strings.Contains(sum, s) {
			t.Errorf("summary lacks %q:\n%s", s, sum)
		}
	}
	t.Log(sum)
	var tr bytes.Buffer
	if err := res.WriteTrace(&tr); err != nil {
		t.Fatalf("trace: %v", err)
	}
	// A track per device, the split steps' chunks as slices on them.
	for _, s := range []string{"acpp cluster", `"name":"device n1/cpu:0"`, `"chunk":`, `"name":"link n0→n1 (bytes)"`, `"name":"link n1→n0"`} {
		if !strings.Contains(tr.String(), s) {
			t.Errorf("trace lacks %s", s)
		}
	}
	// Every move between nodes is a slice on its link's track, timed by
	// the nodes, carrying its bytes: together exactly the halo.
	var doc struct {
		TraceEvents []struct {
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			Dur  float64        `json:"dur"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(tr.Bytes(), &doc); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	var sent float64
	slicesSeen := 0
	var seen []string // for the failure message: which slices, when the count is off
	for _, ev := range doc.TraceEvents {
		if ev.Cat != "transfer" || ev.Ph != "X" || ev.Args["from"] == "client" || ev.Args["to"] == "client" || ev.Args["from"] == ev.Args["to"] {
			continue
		}
		slicesSeen++
		sent += ev.Args["bytes"].(float64)
		seen = append(seen, fmt.Sprintf("group %v %v→%v %v B", ev.Args["group"], ev.Args["from"], ev.Args["to"], ev.Args["bytes"]))
		if ev.Dur < 0 {
			t.Errorf("transfer slice with negative duration: %+v", ev)
		}
	}
	if int64(sent) != halo || slicesSeen != iters*2*2 {
		t.Errorf("trace has %d transfer slices between nodes with %v bytes; want %d slices, the halo %d bytes:\n%s", slicesSeen, sent, iters*2*2, halo, strings.Join(seen, "\n"))
	}
}

// TestClusterCommands_C1: nodes lists every member with its QUIC address
// and devices; status lists each member's jobs; an unreachable cluster is a
// clear error with exit code 1.
func TestClusterCommands_C1(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	env := func(out, errb *bytes.Buffer) Env { return Env{Stdout: out, Stderr: errb} }
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"nodes", "--cluster", c.Addrs()[1], "--credentials", c.Dir, "--client", "alice"}, env(&out, &errb)); code != 0 {
		t.Fatalf("nodes: exit %d: %s", code, errb.String())
	}
	for i, a := range c.Addrs() {
		if !strings.Contains(out.String(), a) || !strings.Contains(out.String(), "n"+string(rune('0'+i))) {
			t.Errorf("nodes output lacks n%d at %s:\n%s", i, a, out.String())
		}
	}
	if !strings.Contains(out.String(), "cpu×1") || !strings.Contains(out.String(), "3 members") {
		t.Errorf("nodes output:\n%s", out.String())
	}
	t.Log("\n" + out.String())
	out.Reset()
	// kernels --cluster: what the nodes advertise (here every node has the
	// built-in kernels).
	if code := Main(context.Background(), []string{"kernels", "--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", "alice"}, env(&out, &errb)); code != 0 {
		t.Fatalf("kernels --cluster: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "fill_f32") || !strings.Contains(out.String(), "every node") || !strings.Contains(out.String(), "on 3 nodes (n0, n1, n2)") {
		t.Errorf("kernels --cluster output:\n%s", out.String())
	}
	t.Log("\n" + out.String())
	out.Reset()
	if code := Main(context.Background(), []string{"status", "--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", "alice"}, env(&out, &errb)); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "serving") || !strings.Contains(out.String(), "3 members; 0 job openings") {
		t.Errorf("status output:\n%s", out.String())
	}
	t.Log("\n" + out.String())
	// With a job open on every node: a row per (job, node).
	job, err := coordinator.Open(context.Background(), c.Config())
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code := Main(context.Background(), []string{"status", "--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", "alice"}, env(&out, &errb))
	job.Close(context.Background())
	id := strconv.FormatUint(job.ID(), 10)
	if code != 0 || strings.Count(out.String(), id) != 3 || !strings.Contains(out.String(), "3 job openings") || !strings.Contains(out.String(), "alice") {
		t.Errorf("status with job %s open: exit %d\n%s", id, code, out.String())
	}
	t.Log("\n" + out.String())

	// Nothing listens on the port of a stopped node.
	addr := c.Addrs()[2]
	c.Stop(2)
	out.Reset()
	errb.Reset()
	// The dial gives up at the context's deadline (acpp-submit's own
	// limit is 5 s).
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	code = Main(ctx, []string{"run", "--cluster", addr, "--credentials", c.Dir, "--client", "alice", "../../../examples/jobs/saxpy.yaml"}, env(&out, &errb))
	if code != 1 || !strings.Contains(errb.String(), "cluster unreachable: connect to "+addr) || !strings.Contains(errb.String(), "is acpp-node running there") {
		t.Errorf("run on a stopped node: exit %d, stderr %q; want 1 and a message naming the address", code, errb.String())
	}
	t.Logf("unreachable reported in %v: %s", time.Since(start), errb.String())
}

// TestStatusShowsOwnJobs_C6: acpp-submit status shows a client its own
// jobs only and says so in its first line; an operator sees every
// client's jobs, and runs a job with acpp-submit as a client does.
func TestStatusShowsOwnJobs_C6(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	if _, err := credentials.CreateOperator(c.Dir, "ops", credentials.IssueConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ja, err := coordinator.Open(ctx, c.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ja.Close(context.Background())
	bobCreds, err := credentials.LoadClient(c.Dir, "bob")
	if err != nil {
		t.Fatal(err)
	}
	bcfg := c.Config()
	bcfg.Client, bcfg.Credentials = nil, bobCreds
	jb, err := coordinator.Open(ctx, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer jb.Close(context.Background())
	a, b := strconv.FormatUint(ja.ID(), 10), strconv.FormatUint(jb.ID(), 10)

	status := func(client string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Main(ctx, []string{"status", "--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", client}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
			t.Fatalf("status as %s: exit %d: %s", client, code, errb.String())
		}
		t.Logf("status as %s:\n%s", client, out.String())
		return out.String()
	}
	// Each job is open on both nodes: 4 openings, 2 of them each client's.
	for _, tt := range []struct {
		client, mine, other string
	}{{"alice", a, b}, {"bob", b, a}} {
		out := status(tt.client)
		first, _, _ := strings.Cut(out, "\n")
		if !strings.Contains(first, "Jobs of client/"+tt.client+" only") || !strings.Contains(first, "an operator") {
			t.Errorf("status as %s: first line %q does not say the view is limited to its own jobs", tt.client, first)
		}
		if strings.Count(out, tt.mine) != 2 || strings.Contains(out, tt.other) || !strings.Contains(out, "4 job openings (a job counts once per node it runs on), 2 of them yours") {
			t.Errorf("status as %s: want its job %s on both nodes, not job %s, 2 of 4 openings its own:\n%s", tt.client, tt.mine, tt.other, out)
		}
	}
	out := status("ops")
	if first, _, _ := strings.Cut(out, "\n"); first != "Jobs of every client (as operator/ops)." {
		t.Errorf("status as operator: first line %q, want it to say every client's jobs", first)
	}
	if strings.Count(out, a) != 2 || strings.Count(out, b) != 2 || !strings.Contains(out, "alice") || !strings.Contains(out, "bob") || strings.Contains(out, "of them yours") {
		t.Errorf("status as operator: want jobs %s (alice) and %s (bob) on both nodes:\n%s", a, b, out)
	}

	var runOut, errb bytes.Buffer
	if code := Main(ctx, []string{"run", "--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", "ops", "--out-dir", t.TempDir(), "../../../examples/jobs/saxpy.yaml"}, Env{Stdout: &runOut, Stderr: &errb}); code != 0 {
		t.Errorf("run as operator: exit %d: %s", code, errb.String())
	}
}

// TestClusterElementTypes: fills, copies and value initialisations of
// buffers of several element types give on a cluster the bytes they give
// embedded. 4-byte elements (int32 here) run on the nodes' fill_f32 and
// copy_f32, the others through the client: the summary counts those
// (HostOps, from the events whose device is "client").
func TestClusterElementTypes(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	job := writeJob(t, "types.yaml", `buffers:
  d: {type: float64, range: [4, 8], init: {value: 2.5}}
  d2: {type: float64, range: [4, 8]}
  i: {type: int32, range: [64], init: {value: -3}}
  i2: {type: int32, range: [64], init: {value: 7}}
  b: {type: uint8, range: [16], init: {value: 9}}
steps:
  - fill: {buffer: d, value: 1.5, offset: [1, 2], range: [2, 3]}
  - copy: {from: {buffer: d}, to: {buffer: d2}}
  - fill: {buffer: i, value: 11, offset: [8], range: [16]}
  - copy: {from: {buffer: i, offset: [4], range: [32]}, to: {buffer: i2, offset: [16]}}
  - fill: {buffer: b, value: 200, offset: [3], range: [5]}
outputs:
  - {buffer: d2, file: d2.npy}
  - {buffer: i2, file: i2.npy}
  - {buffer: b, file: b.npy}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	emb, out := t.TempDir(), t.TempDir()
	if _, err := Run(ctx, Config{JobFile: job, OutDir: emb, Devices: []string{"cpu"}}); err != nil {
		t.Fatalf("embedded: %v", err)
	}
	res, err := Run(ctx, Config{JobFile: job, OutDir: out, Record: true,
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice"}})
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	for _, f := range []string{"d2.npy", "i2.npy", "b.npy"} {
		want, _ := os.ReadFile(filepath.Join(emb, f))
		got, _ := os.ReadFile(filepath.Join(out, f))
		if len(want) == 0 || !bytes.Equal(got, want) {
			t.Errorf("cluster %s (%d bytes) differs from the embedded one (%d bytes)", f, len(got), len(want))
		}
	}
	// Through the client: d's init, fill and copy, b's init and fill.
	if res.Cluster.HostOps != 5 {
		t.Errorf("HostOps = %d, want 5 (the float64 and uint8 fills and copies)", res.Cluster.HostOps)
	}
	for _, g := range res.Groups {
		onNodes := strings.HasPrefix(g.Accesses[0], "i") // i and i2: int32
		if onNodes == (g.Device == "client") || g.Device == "" {
			t.Errorf("group %q ran on %q", g.Label, g.Device)
		}
	}
	sum := res.Summary()
	if !strings.Contains(sum, "note: 5 fills or copies ran through the client") {
		t.Errorf("summary lacks the client note:\n%s", sum)
	}
	t.Log(sum)
}

// The recovery policy of a cluster run (issue 15, item 3): bad values are
// usage errors that say what to give; the flags apply only with
// --cluster; the job file's recovery section takes effect when no flag
// says otherwise, and the flags win over it.
func TestRecoveryFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--cluster", "127.0.0.1:1", "--client", "a", "--on-node-loss", "retry", "x.yaml"}, "want recover or fail"},
		{[]string{"run", "--cluster", "127.0.0.1:1", "--client", "a", "--checkpoint", "0", "x.yaml"}, "want auto, off or a number"},
		{[]string{"run", "--on-node-loss", "fail", "x.yaml"}, "give --cluster ADDR too"},
	} {
		code, _, errs := runMain(tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}

	c := coordtest.Start(t, 2, coordtest.Options{})
	// A policy that contradicts itself is refused before the dial (exit 2
	// at once; no node answers at port 1).
	if code, _, errs := runMain("run", "--cluster", "127.0.0.1:1", "--credentials", c.Dir, "--client", "alice", "--on-node-loss", "fail", "--checkpoint", "5",
		"-o", t.TempDir(), "../../../examples/jobs/jacobi.yaml"); code != 2 || !strings.Contains(errs, "--checkpoint 5 has no effect with --on-node-loss fail") {
		t.Errorf("--on-node-loss fail --checkpoint 5, no node at the address: exit %d, stderr %q; want 2 and the usage error", code, errs)
	}
	dir := t.TempDir()
	job := filepath.Join(dir, "job.yaml")
	src, err := os.ReadFile("../../../examples/jobs/jacobi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(job, append(src, []byte("recovery:\n  on_node_loss: recover\n  checkpoint: 3\n")...), 0o644)
	params := map[string]string{"n": "32", "iters": "10"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{JobFile: job, Params: params, OutDir: t.TempDir(),
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Summary(); !strings.Contains(s, "node loss: recover; checkpoints: 3,") {
		t.Errorf("summary with the job file's recovery section:\n%s", s)
	}
	if len(res.Cluster.Checkpoints) == 0 {
		t.Errorf("checkpoint: 3 took no checkpoint in a job of %d groups\n%s", res.Count, res.Summary())
	}
	res, err = Run(ctx, Config{JobFile: job, Params: params, OutDir: t.TempDir(),
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice", OnNodeLoss: "fail", Checkpoint: "off"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Summary(); !strings.Contains(s, "node loss: fail; checkpoints: off, 0 taken") {
		t.Errorf("summary with flags over the job file:\n%s", s)
	}
	// A checkpoint interval with the fail policy would do nothing: refused.
	_, err = Run(ctx, Config{JobFile: job, Params: params, OutDir: t.TempDir(),
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice", OnNodeLoss: "fail"}})
	if err == nil || !strings.Contains(err.Error(), "checkpoint: 3 (the job file's recovery) has no effect with --on-node-loss fail") {
		t.Errorf("--on-node-loss fail with the job file's checkpoint: 3 = %v, want it refused, naming where each came from", err)
	}
	// The other way round: the message names the flag the user gave and
	// the job file's policy, not a flag the user never passed.
	os.WriteFile(job, append(src, []byte("recovery:\n  on_node_loss: fail\n")...), 0o644)
	_, err = Run(ctx, Config{JobFile: job, Params: params, OutDir: t.TempDir(),
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice", Checkpoint: "5"}})
	if err == nil || !strings.Contains(err.Error(), "--checkpoint 5 has no effect with on_node_loss: fail (the job file's recovery)") {
		t.Errorf("--checkpoint 5 with the job file's on_node_loss: fail = %v, want it refused, naming where each came from", err)
	}
}

// TestSelectionOfNoDeviceNamesTheFlags_C1: --kinds or --nodes that select
// none of the cluster's devices fail naming those flags and what the
// members have, not the Go API's options (WithKind, Config.Devices) a
// command-line user never sees.
func TestSelectionOfNoDeviceNamesTheFlags_C1(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	job := writeJob(t, "job.yaml", twoBuffersJob)
	for _, tc := range []struct{ flags []string }{
		{[]string{"--kinds", "cuda"}},
		{[]string{"--nodes", "n7"}},
	} {
		args := append([]string{"run", "--cluster", c.Addrs()[0], "--credentials", c.Dir, "--client", "alice", "--out-dir", t.TempDir()}, tc.flags...)
		code, out, errs := runMain(append(args, job)...)
		want := strings.Join(tc.flags, " ") + " selects none of the cluster's devices (n0 cpu×1"
		if code == 0 || !strings.Contains(errs, want) || strings.Contains(errs, "WithKind") || strings.Contains(errs, "WithNodes") || strings.Contains(errs, "Config.Devices") {
			t.Errorf("run %v: exit %d\n%s%s\nwant an error containing %q in the flags' words", tc.flags, code, out, errs, want)
		}
	}
}

// TestMemberDeadBeforeOpenIsLeftOut_C1_C5: a member the given node still
// lists alive but that died before the run dialled it (killed a moment
// before, not yet detected) is left out of the job, as the coordinator
// leaves out a discovered member it cannot reach: the job runs on the
// others, bit for bit. acpp-submit used to require every listed member
// and failed the run with "cluster unreachable: … connect to node …".
func TestMemberDeadBeforeOpenIsLeftOut_C1_C5(t *testing.T) {
	// LAN failure detection (seconds): n2 stays listed alive after it
	// stops, for longer than the run takes to list and dial the members.
	c := coordtest.Start(t, 3, coordtest.Options{Modify: func(_ int, cfg *node.Config) {
		cfg.Cluster.Timing = cluster.DefaultLANConfig().Timing
	}})
	params := map[string]string{"n": "32", "iters": "4", "rows": "1", "chunks": "1"}
	job := "../../../examples/jobs/jacobi.yaml"
	emb := t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: emb, Devices: []string{"cpu"}}); err != nil {
		t.Fatalf("embedded: %v", err)
	}
	c.Stop(2)
	ms := c.Nodes[0].Cluster().Members().Alive()
	if len(ms) != 3 {
		t.Skipf("n0 saw n2's failure already (%d members alive): nothing to check", len(ms))
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{JobFile: job, Params: params, OutDir: out,
		Cluster: &ClusterConfig{Addrs: c.Addrs()[:1], CredentialsDir: c.Dir, Client: "alice"}})
	if err != nil {
		t.Fatalf("a member died before the run dialled it: the run should go on without it, got %v", err)
	}
	want, _ := os.ReadFile(filepath.Join(emb, "jacobi.npy"))
	got, _ := os.ReadFile(filepath.Join(out, "jacobi.npy"))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatal("jacobi.npy differs from the embedded run's")
	}
	if strings.Join(res.Cluster.Nodes, ",") != "n0,n1" {
		t.Errorf("nodes = %v, want n0 and n1 (n2 is dead)", res.Cluster.Nodes)
	}
}
