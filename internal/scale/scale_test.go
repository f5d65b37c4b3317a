//go:build linux

package scale

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/credentials/credtest"
	"github.com/acpp/acpp/internal/nodeproc"
)

// Settings from the environment (scripts/scale sets them).
func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

func envInts(t *testing.T, name, def string) []int {
	var out []int
	for _, f := range envList(name, def) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	return out
}

func envDur(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return d
	}
	return def
}

// proc is one acpp-node process.
type proc struct {
	name, gossip, quic, http string
	cmd                      *exec.Cmd
	done                     chan struct{}
	mu                       sync.Mutex
	log                      strings.Builder
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log.Len() < 1<<16 {
		p.log.Write(b)
	}
	return len(b), nil
}

// Ports come from below the ephemeral range (Linux: 32768 and up): 64
// nodes dial QUIC from ephemeral UDP ports, and a port that was free when
// picked (nodeproc.FreePort) was sometimes taken by such a dialer before
// its node bound it.
var (
	portMu   sync.Mutex
	nextPort = 20000 + int(time.Now().UnixNano()%6000)
)

func addr(t *testing.T) string {
	portMu.Lock()
	defer portMu.Unlock()
	for range 12000 {
		p := nextPort
		nextPort++
		if nextPort >= 32000 {
			nextPort = 20000
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err == nil {
			u.Close()
			return fmt.Sprintf("127.0.0.1:%d", p)
		}
	}
	t.Fatal("no free port of 127.0.0.1 in [20000, 32000)")
	return ""
}

// harness starts acpp-node processes of one cluster.
type harness struct {
	t      *testing.T
	bin    string
	creds  string
	timing string
	procs  []*proc
}

func (h *harness) start(name string, join string) *proc {
	t := h.t
	p := &proc{name: name, gossip: addr(t), quic: addr(t), http: addr(t), done: make(chan struct{})}
	args := []string{"run", "--name", name, "--credentials", h.creds, "--timing", h.timing,
		"--gossip-addr", p.gossip, "--quic-addr", p.quic, "--http-addr", p.http,
		"--devices", "cpu", "--cpu-workers", "1", "--drain-timeout", "1s", "--log-level", "warn"}
	if join != "" {
		args = append(args, "--join", join)
	}
	p.cmd = exec.Command(h.bin, args...)
	p.cmd.Env = append(os.Environ(), "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true")
	p.cmd.Stdout, p.cmd.Stderr = p, p
	// The nodes die with the harness, even when it is killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	h.procs = append(h.procs, p)
	return p
}

// kill sends SIGKILL and waits for the process to exit.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (h *harness) stopAll() {
	for _, p := range h.procs {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range h.procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.kill()
		}
	}
	h.procs = nil
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// members is what p's /healthz reports ("ok NAME members=N jobs=J"), -1
// when it does not answer.
func (p *proc) members() int {
	resp, err := httpClient.Get("http://" + p.http + "/healthz")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_, rest, ok := strings.Cut(string(b), "members=")
	if resp.StatusCode != http.StatusOK || !ok {
		return -1
	}
	f, _, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(strings.TrimSpace(f))
	if err != nil {
		return -1
	}
	return n
}

// counts asks every process at once.
func counts(ps []*proc) []int {
	out := make([]int, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { out[i] = p.members() })
	}
	wg.Wait()
	return out
}

// pollInterval spaces the /healthz rounds: each round costs every node a
// request, which a starved host feels.
const pollInterval = 100 * time.Millisecond

// waitAll polls until every process of ps reports want members; ok is
// false after timeout.
func waitAll(ps []*proc, want int, since time.Time, timeout time.Duration) (time.Duration, bool) {
	for {
		all := true
		for _, n := range counts(ps) {
			if n != want {
				all = false
				break
			}
		}
		if all {
			return time.Since(since), true
		}
		if time.Since(since) > timeout {
			return time.Since(since), false
		}
		time.Sleep(pollInterval)
	}
}

// hold polls ps for d and counts the rounds in which some process saw
// fewer than want members (a live member declared dead: a flap).
func hold(ps []*proc, want int, d time.Duration) (bad, rounds int) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(pollInterval) {
		rounds++
		for _, n := range counts(ps) {
			if n >= 0 && n < want {
				bad++
				break
			}
		}
	}
	return bad, rounds
}

// GossipResult is one cluster size under one timing preset. Times are in
// seconds; -1 means the cluster did not converge within the timeout.
type GossipResult struct {
	Timing  string  `json:"timing"`
	Members int     `json:"members"`
	StartS  float64 `json:"start_s"` // first process started → every process sees all
	JoinS   float64 `json:"join_s"`  // one more started → every process sees it
	KillS   float64 `json:"kill_s"`  // that one SIGKILLed → every survivor dropped it
	// FlapRounds counts the poll rounds (every 100 ms, HoldS seconds after
	// convergence) in which some process saw fewer members than run.
	FlapRounds int `json:"flap_rounds"`
	HoldRounds int `json:"hold_rounds"`
	// NodeCPU is the mean CPU time a node process used per second of the
	// hold (0.05: 5% of one core), the /healthz polls included.
	NodeCPU float64 `json:"node_cpu"`
	Load1   float64 `json:"load1"` // the host's 1-minute load average at the end
}

// CoordResult is the coordinator's cost for one cluster size.
type CoordResult struct {
	Members int `json:"members"`
	// NsPerChunk is the client's Submit time per chunk group (placement,
	// splitting, the plan, issuing), NsPerGroup per split group.
	NsPerChunk float64 `json:"ns_per_chunk"`
	NsPerGroup float64 `json:"ns_per_group"`
	// SubmitCPUPerChunk is the CPU time of the Submit calls themselves per
	// chunk group, in ns (the calling thread's CPU time, the goroutine
	// locked to it): the coordinator's own cost, which the issue bounds.
	SubmitCPUPerChunk float64 `json:"submit_cpu_ns_per_chunk"`
	// CPUPerChunk is the client process's CPU time (user and system, every
	// goroutine: planning, issuing, the transport, completions) per chunk
	// group, in ns: unlike the Submit time it does not count the time the
	// client waits for a CPU that the nodes hold.
	CPUPerChunk float64 `json:"cpu_ns_per_chunk"`
	// ChunksPerS is the dispatch rate: chunk groups submitted and waited
	// for per second of wall time.
	ChunksPerS float64 `json:"chunks_per_s"`
	// ClientHeapMiB is the client's live heap after the run (after a GC),
	// AllocPerChunk the bytes it allocated per chunk group.
	ClientHeapMiB float64 `json:"client_heap_mib"`
	AllocPerChunk float64 `json:"alloc_bytes_per_chunk"`
	// NodeRSSMiB is the mean resident memory of a node process.
	NodeRSSMiB float64 `json:"node_rss_mib"`
	Steps      int     `json:"steps"`
}

// Results is what the harness writes to scale.json.
type Results struct {
	Date        string         `json:"date"`
	Host        string         `json:"host"`
	CPUs        int            `json:"cpus"`
	Gossip      []GossipResult `json:"gossip"`
	Coordinator []CoordResult  `json:"coordinator"`
}

func secs(d time.Duration, ok bool) float64 {
	if !ok {
		return -1
	}
	return math.Round(d.Seconds()*100) / 100
}

func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU is the calling thread's CPU time, CLOCK_THREAD_CPUTIME_ID
// (lock the goroutine to its thread around what is measured; getrusage's
// RUSAGE_THREAD is too coarse for a few Submit calls).
func threadCPU() time.Duration {
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// procsCPU is the CPU time (user and system) the processes used so far
// (Linux /proc/PID/stat; clock ticks of 10 ms).
func procsCPU(ps []*proc) time.Duration {
	var total time.Duration
	for _, p := range ps {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return total
}

// rssMiB is a process's resident memory (Linux), -1 elsewhere.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// TestScale measures gossip convergence for each preset and cluster size
// and the coordinator's cost per group over the same real processes, and
// writes scale.json and the plots to ACPP_SCALE_OUT (default: the test's
// temporary directory, logged).
//
//	ACPP_SCALE=1                 run at all (scripts/scale sets it)
//	ACPP_SCALE_MEMBERS=1,4,16,64 cluster sizes
//	ACPP_SCALE_TIMING=lan,local  presets for the gossip part
//	ACPP_SCALE_COORD=lan         the preset whose clusters also run the coordinator part ("" none)
//	ACPP_SCALE_CHUNKS=4096       timed chunk groups per size: Jacobi steps of one chunk per member, at least 16 steps (after 2 untimed)
//	ACPP_SCALE_HOLD=5s           how long to watch for flaps after convergence
//	ACPP_SCALE_TIMEOUT=60s       how long each convergence may take
func TestScale(t *testing.T) {
	if testing.Short() || os.Getenv("ACPP_SCALE") == "" {
		t.Skip("scale harness: set ACPP_SCALE=1 (scripts/scale) to run acpp-node processes")
	}
	sizes := envInts(t, "ACPP_SCALE_MEMBERS", "1,4,16,64")
	timings := envList("ACPP_SCALE_TIMING", "lan,local")
	coordTiming := os.Getenv("ACPP_SCALE_COORD")
	if _, set := os.LookupEnv("ACPP_SCALE_COORD"); !set {
		coordTiming = "lan"
	}
	chunks := envInts(t, "ACPP_SCALE_CHUNKS", "4096")[0]
	holdFor := envDur(t, "ACPP_SCALE_HOLD", 5*time.Second)
	timeout := envDur(t, "ACPP_SCALE_TIMEOUT", 60*time.Second)
	out := os.Getenv("ACPP_SCALE_OUT")
	if out == "" {
		out = t.TempDir()
	}
	bin := nodeproc.Build(t, "github.com/acpp/acpp/cmd/acpp-node")
	maxN := 0
	for _, n := range sizes {
		maxN = max(maxN, n)
	}
	names := make([]string, maxN+1)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	creds := filepath.Join(t.TempDir(), "creds")
	if err := credtest.Create(creds, "scale", names, []string{"alice"}); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	res := Results{Date: time.Now().UTC().Format(time.RFC3339), Host: host, CPUs: runtime.NumCPU()}
	for _, timing := range timings {
		for _, n := range sizes {
			h := &harness{t: t, bin: bin, creds: creds, timing: timing}
			steps := max(16, (chunks/n+7)/8*8)
			g, c := runSize(t, h, n, timeout, holdFor, timing == coordTiming, steps)
			h.stopAll()
			res.Gossip = append(res.Gossip, g)
			t.Logf("gossip %s members=%d: start %.2fs join %.2fs kill %.2fs flaps %d/%d node CPU %.3f load %.1f",
				timing, n, g.StartS, g.JoinS, g.KillS, g.FlapRounds, g.HoldRounds, g.NodeCPU, g.Load1)
			if c != nil {
				res.Coordinator = append(res.Coordinator, *c)
				t.Logf("coordinator members=%d: submit %.0f ns/chunk wall, %.0f ns/chunk CPU (%.0f ns/group wall), client CPU %.0f ns/chunk, %.0f chunks/s, client heap %.1f MiB, %.0f B/chunk, node RSS %.1f MiB",
					n, c.NsPerChunk, c.SubmitCPUPerChunk, c.NsPerGroup, c.CPUPerChunk, c.ChunksPerS, c.ClientHeapMiB, c.AllocPerChunk, c.NodeRSSMiB)
			}
			time.Sleep(2 * time.Second) // let the host settle between sizes
		}
	}
	if err := write(out, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s", out)
}

// TestReplot redraws the plots from a scale.json (ACPP_SCALE_REPLOT names
// it; the PNGs go beside it), for a change to the plots alone.
func TestReplot(t *testing.T) {
	path := os.Getenv("ACPP_SCALE_REPLOT")
	if path == "" {
		t.Skip("set ACPP_SCALE_REPLOT to a scale.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if err := writePlots(filepath.Dir(path), res); err != nil {
		t.Fatal(err)
	}
}

// runSize starts n processes (the first one alone, the others joining it
// at once), measures convergence, a join and a kill, and optionally the
// coordinator over the n processes.
func runSize(t *testing.T, h *harness, n int, timeout, holdFor time.Duration, coord bool, steps int) (GossipResult, *CoordResult) {
	g := GossipResult{Timing: h.timing, Members: n}
	first := time.Now()
	seed := h.start("n0", "")
	for i := 1; i < n; i++ {
		h.start(fmt.Sprintf("n%d", i), seed.gossip)
	}
	ps := append([]*proc(nil), h.procs...)
	d, ok := waitAll(ps, n, first, timeout)
	g.StartS = secs(d, ok)
	if !ok {
		cs := counts(ps)
		t.Logf("%s members=%d: not converged after %v: %v", h.timing, n, d, cs)
		for i, p := range ps {
			if cs[i] < 0 {
				p.mu.Lock()
				l := p.log.String()
				p.mu.Unlock()
				select {
				case <-p.done:
					l = "(exited) " + l
				default:
				}
				t.Logf("%s does not answer: %.2000s", p.name, l)
			}
		}
	}
	c0, t0 := procsCPU(ps), time.Now()
	g.FlapRounds, g.HoldRounds = hold(ps, n, holdFor)
	g.NodeCPU = math.Round((procsCPU(ps)-c0).Seconds()/time.Since(t0).Seconds()/float64(n)*1000) / 1000
	if !ok { // a join or a kill would measure nothing
		g.JoinS, g.KillS, g.Load1 = -1, -1, load1()
		return g, nil
	}
	var c *CoordResult
	if coord {
		c = runCoordinator(t, ps, h.creds, steps)
	}
	// One more member joins, then dies.
	joined := time.Now()
	extra := h.start(fmt.Sprintf("n%d", n), seed.gossip)
	d, ok = waitAll(append(ps, extra), n+1, joined, timeout)
	g.JoinS = secs(d, ok)
	killed := time.Now()
	extra.kill()
	d, ok = waitAll(ps, n, killed, timeout)
	g.KillS = secs(d, ok)
	g.Load1 = load1()
	return g, c
}

// runCoordinator runs Jacobi steps split over every process's CPU device
// (16 rows of 256 floats each, one page per row) and times the client.
func runCoordinator(t *testing.T, ps []*proc, credDir string, steps int) *CoordResult {
	creds, err := credentials.LoadClient(credDir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addrs := make([]string, len(ps))
	for i, p := range ps {
		addrs[i] = p.quic
	}
	j, err := coordinator.Open(ctx, coordinator.Config{Nodes: addrs, Credentials: creds, LostTimeout: 30 * time.Second, PollInterval: time.Second})
	if err != nil {
		t.Fatalf("Open over %d nodes: %v", len(ps), err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		j.Close(cctx)
	}()
	const cols, rowsPer, batch = 256, 16, 8
	m := len(ps)
	rows := rowsPer * m
	init := make([]byte, 4*rows*cols)
	for i := range rows * cols {
		binary.LittleEndian.PutUint32(init[4*i:], math.Float32bits(float32((i*7919)%1009)/17))
	}
	pg := coordinator.Dims{1, 1, cols}
	a, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg, Init: init})
	if err != nil {
		t.Fatal(err)
	}
	b, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg})
	if err != nil {
		t.Fatal(err)
	}
	split := &coordinator.Split{}
	step := func() {
		if _, err := j.Submit(ctx, coordinator.Group{
			Kernel: "jacobi2d", Range: coordinator.Dims{1, rows, cols}, Split: split,
			Args: []coordinator.Arg{
				coordinator.Acc(coordinator.Accessor{Buffer: a, Mode: coordinator.Read, Map: coordinator.Neighbourhood(1)}),
				coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, NoInit: true, Map: coordinator.OneToOne()}),
			},
		}); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		a, b = b, a
	}
	for range 2 { // uploads, allocations, connections
		step()
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var submit, submitCPU time.Duration
	done := 0
	cpu0 := cpuTime()
	start := time.Now()
	for done < steps {
		runtime.LockOSThread()
		t0, c0 := time.Now(), threadCPU()
		for range batch {
			step()
		}
		submitCPU += threadCPU() - c0
		submit += time.Since(t0)
		runtime.UnlockOSThread()
		done += batch
		if err := j.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wall := time.Since(start)
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&m1)
	runtime.GC()
	var m2 runtime.MemStats
	runtime.ReadMemStats(&m2)
	var rss float64
	for _, p := range ps {
		rss += rssMiB(p.cmd.Process.Pid)
	}
	chunks := float64(done * m)
	return &CoordResult{
		Members:           m,
		NsPerChunk:        math.Round(float64(submit.Nanoseconds()) / chunks),
		NsPerGroup:        math.Round(float64(submit.Nanoseconds()) / float64(done)),
		CPUPerChunk:       math.Round(float64(cpu.Nanoseconds()) / chunks),
		SubmitCPUPerChunk: math.Round(float64(submitCPU.Nanoseconds()) / chunks),
		ChunksPerS:        math.Round(chunks / wall.Seconds()),
		ClientHeapMiB:     math.Round(float64(m2.HeapInuse)/(1<<20)*10) / 10,
		AllocPerChunk:     math.Round(float64(m1.TotalAlloc-m0.TotalAlloc) / chunks),
		NodeRSSMiB:        math.Round(rss/float64(len(ps))*10) / 10,
		Steps:             done,
	}
}

// write saves scale.json and the plots into dir.
func write(dir string, res Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return writePlots(dir, res)
}

func nanIfNeg(v float64) float64 {
	if v < 0 {
		return math.NaN()
	}
	return v
}

func writePlots(dir string, res Results) error {
	var xs []float64
	gp := Plot{Title: fmt.Sprintf("Gossip convergence, acpp-node processes on one %d-CPU host", res.CPUs),
		XLabel: "members", YLabel: "seconds until every node agrees", LogX: true}
	byTiming := map[string][]GossipResult{}
	var order []string
	for _, g := range res.Gossip {
		if _, ok := byTiming[g.Timing]; !ok {
			order = append(order, g.Timing)
		}
		byTiming[g.Timing] = append(byTiming[g.Timing], g)
		if !containsF(xs, float64(g.Members)) {
			xs = append(xs, float64(g.Members))
		}
	}
	for _, tm := range order {
		for _, kind := range []string{"start", "join", "kill"} {
			s := Series{Name: tm + ": " + kind}
			var never []string
			for _, g := range byTiming[tm] {
				v := map[string]float64{"start": g.StartS, "join": g.JoinS, "kill": g.KillS}[kind]
				s.X, s.Y = append(s.X, float64(g.Members)), append(s.Y, nanIfNeg(v))
				if v < 0 {
					never = append(never, strconv.Itoa(g.Members))
				}
			}
			if len(never) > 0 { // a gap in the line: say why
				s.Name += " (" + strings.Join(never, ",") + ": never)"
			}
			gp.Series = append(gp.Series, s)
		}
	}
	if len(xs) > 0 {
		lo, hi := xs[0], xs[0]
		for _, x := range xs {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		gp.Series = append(gp.Series, Series{Name: "goal 5 s", X: []float64{lo, hi}, Y: []float64{5, 5}, Dashed: true})
		if err := savePlot(filepath.Join(dir, "scale-gossip.png"), gp); err != nil {
			return err
		}
	}
	if len(res.Coordinator) == 0 {
		return nil
	}
	cp := Plot{Title: "Coordinator cost per chunk group (split Jacobi, real processes)",
		XLabel: "members", YLabel: "microseconds per chunk group", LogX: true}
	s := Series{Name: "submit CPU"}
	cpu := Series{Name: "client CPU, all"}
	var base float64
	for _, c := range res.Coordinator {
		s.X, s.Y = append(s.X, float64(c.Members)), append(s.Y, c.SubmitCPUPerChunk/1000)
		cpu.X, cpu.Y = append(cpu.X, float64(c.Members)), append(cpu.Y, c.CPUPerChunk/1000)
		if c.Members == 4 {
			base = c.SubmitCPUPerChunk / 1000
		}
	}
	cp.Series = append(cp.Series, s, cpu)
	if base > 0 {
		cp.Series = append(cp.Series, Series{Name: "1.5x submit at 4", X: []float64{s.X[0], s.X[len(s.X)-1]}, Y: []float64{1.5 * base, 1.5 * base}, Dashed: true})
	}
	return savePlot(filepath.Join(dir, "scale-coordinator.png"), cp)
}

func savePlot(path string, p Plot) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := LinePlot(f, p); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
