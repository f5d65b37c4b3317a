package cuda

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/exec"
	"github.com/acpp/acpp/kernels"
)

// The recognizer finds the shortest period that the last minRepeats
// periods share, and only then: Jacobi's ping-pong (A B A B ...) has
// period 2 after three rounds, a repeated kernel period 1, and a change of
// parameters or a sequence with no repetition none.
func TestRecognizerFindsRepeatingPeriod(t *testing.T) {
	sig := func(name string) launchSig {
		return launchSig{fn: driver.Function(name[0]), grid: [3]uint32{4, 1, 1}, block: [3]uint32{128, 1, 1}, params: []byte(name)}
	}
	for _, c := range []struct {
		seq  string // one letter a launch
		want int
	}{
		{"ab", 0},
		{"abab", 0},
		{"ababa", 0},
		{"ababab", 2},
		{"abababa", 2}, // the period in phase: b a
		{"aaa", 1},
		{"aa", 0},
		{"abcabcabc", 3},
		{"abcdabcdabcd", 4},
		{"abcdeabcdeabcde", 0}, // longer than maxPeriod
		{"ababac", 0},
		{"xababab", 2},
	} {
		var r recognizer
		for _, ch := range c.seq {
			r.push(sig(string(ch)))
		}
		if r.period != c.want {
			t.Errorf("%s: period %d, want %d", c.seq, r.period, c.want)
			continue
		}
		if c.want > 0 {
			got := ""
			for _, s := range r.pattern() {
				got += string(s.params)
			}
			if want := c.seq[len(c.seq)-c.want:]; got != want {
				t.Errorf("%s: pattern %q, want %q", c.seq, got, want)
			}
		}
	}
	// Same function and geometry, other parameter bytes: another launch.
	var r recognizer
	for i := range 6 {
		s := sig("a")
		s.params = []byte{byte(i)}
		r.push(s)
	}
	if r.period != 0 {
		t.Errorf("launches with different parameters: period %d, want 0", r.period)
	}
	r.reset()
	if r.pattern() != nil || len(r.hist) != 0 {
		t.Error("reset kept history")
	}
}

// jacobiPingPong enqueues steps Jacobi steps A→B, B→A, ... on queue 0 of d
// while its owner is held busy, so that its next batch holds them all (as
// launches that pile up behind a busy owner do), and waits for them.
func jacobiPingPong(t testing.TB, d *Device, A, B *device.Mem, n, steps int) {
	t.Helper()
	jac := builtin(t, "jacobi2d")
	rg := [3]int{1, n, n}
	ops := [2]device.LaunchOp{
		{Kernel: jac, Range: device.NDRange{Global: rg}, Args: []device.Arg{accArg(A, rg), accArg(B, rg)}},
		{Kernel: jac, Range: device.NDRange{Global: rg}, Args: []device.Arg{accArg(B, rg), accArg(A, rg)}},
	}
	gate := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = d.Do(func(*Thread) error { close(held); <-gate; return nil })
	}()
	<-held
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range steps {
		wg.Add(1)
		if err := d.Enqueue(0, ops[i%2], func(err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// A Jacobi ping-pong of 101 steps gives the same bits with graph replay as
// without, and with it most of its launches went through graphs: after 6
// plain launches the period (A→B, B→A) is seen, and the 47 whole periods
// that follow in the batch go as graphs of 8 (5 of them), 4, 2 and 1
// periods, each captured once.
func TestGraphReplaySameBits(t *testing.T) {
	const n, steps = 256, 101
	grid := make([]byte, 4*n*n)
	for i, f := 0, f32s(grid); i < n*n; i++ {
		f[i] = float32(i%1013)*0.001 - 0.3
	}
	var out [2][]byte
	for k, off := range []bool{true, false} {
		d := openGPUs(t, Config{NoGraphs: off})[0]
		A := upload(t, d, grid)
		B := upload(t, d, grid)
		jacobiPingPong(t, d, A, B, n, steps)
		out[k] = download(t, d, B) // the odd number of steps ends in B
		st := d.GraphStats()
		t.Logf("graphs off=%v: %+v", off, st)
		if off && st != (GraphStats{}) {
			t.Errorf("NoGraphs: stats %+v, want none", st)
		}
		if !off {
			if want := (GraphStats{Captures: 4, Launches: 8, Replaced: 94}); st != want {
				t.Errorf("stats %+v, want %+v", st, want)
			}
		}
	}
	sameBits(t, "jacobi2d ping-pong with graphs", f32s(out[1]), f32s(out[0]))
}

// Behind a deep queue (40 spin kernels of a few hundred µs on the stream),
// a Jacobi ping-pong enqueued one launch at a time, so that the owner sees
// each alone, is held back and replayed as graphs of 8 periods; the run
// left when the launches stop is released once the queue drains (the
// completer wakes the owner). Every done is called, and the grid is the
// same bits as without graphs.
func TestGraphReplayHoldsBehindDeepQueue(t *testing.T) {
	const n, steps = 256, 61
	grid := make([]byte, 4*n*n)
	for i, f := 0, f32s(grid); i < n*n; i++ {
		f[i] = float32(i%977)*0.002 - 0.5
	}
	spinK, jac := builtin(t, "spin"), builtin(t, "jacobi2d")
	rg := [3]int{1, n, n}
	var out [2][]byte
	for k, off := range []bool{true, false} {
		d := openGPUs(t, Config{NoGraphs: off})[0]
		A := upload(t, d, grid)
		B := upload(t, d, grid)
		ops := [2]device.LaunchOp{
			{Kernel: jac, Range: device.NDRange{Global: rg}, Args: []device.Arg{accArg(A, rg), accArg(B, rg)}},
			{Kernel: jac, Range: device.NDRange{Global: rg}, Args: []device.Arg{accArg(B, rg), accArg(A, rg)}},
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		done := func(err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
			wg.Done()
		}
		enqueue := func(op device.LaunchOp) {
			wg.Add(1)
			if err := d.Enqueue(0, op, done); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 40 { // each its own cycles: no period among them
			enqueue(device.LaunchOp{Kernel: spinK, Range: device.NDRange{Global: [3]int{1, 1, 1}}, Args: []device.Arg{scalarU64(600_000 + uint64(i))}})
		}
		for i := range steps {
			enqueue(ops[i%2])
			// 20 µs apart, a few owner batches' worth: time.Sleep would
			// take a millisecond on some machines, and the queue would
			// drain before the run is held.
			for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
			}
		}
		all := make(chan struct{})
		go func() { wg.Wait(); close(all) }()
		select {
		case <-all:
		case <-time.After(60 * time.Second):
			t.Fatal("not every launch finished within 60 s (a held run never released?)")
		}
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		out[k] = download(t, d, B)
		st := d.GraphStats()
		t.Logf("graphs off=%v: %+v", off, st)
		if !off && st.Replaced < 32 {
			t.Errorf("stats %+v: want most of the %d launches replaced (held behind the queue)", st, steps)
		}
	}
	sameBits(t, "jacobi2d ping-pong held behind a deep queue", f32s(out[1]), f32s(out[0]))
}

// jacobiQueue is a queue over this machine's devices with issue-ahead and
// graph replay set through their environment variables (read when the
// queue opens its devices), and two n×n grids on its GPU.
type jacobiQueue struct {
	name string
	q    *acpp.Queue
	gpu  device.ID
	a, b *acpp.Buffer[float32]
	n    int
}

func openJacobiQueue(t testing.TB, name string, ahead, graphs bool, n int, grid []float32) *jacobiQueue {
	t.Helper()
	if err := kernels.Register(); err != nil {
		t.Fatal(err)
	}
	set := func(k string, on bool) {
		v := "1"
		if !on {
			v = "0"
		}
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		t.Cleanup(func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		})
	}
	set(exec.IssueAheadEnv, ahead)
	set(GraphsEnv, graphs)
	q, err := acpp.NewQueue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	jq := &jacobiQueue{name: name, q: q, n: n}
	found := false
	for _, info := range q.Devices() {
		if info.ID.Kind == device.KindCUDA {
			jq.gpu, found = info.ID, true
			break
		}
	}
	if !found {
		t.Skip("no CUDA device; GPU tests run on the GPU machine (docs/CUDA.md)")
	}
	if jq.a, err = acpp.NewBufferFrom(q, append([]float32(nil), grid...), acpp.R2(n, n), acpp.CopyData()); err != nil {
		t.Fatal(err)
	}
	if jq.b, err = acpp.NewBufferFrom(q, append([]float32(nil), grid...), acpp.R2(n, n), acpp.CopyData()); err != nil {
		t.Fatal(err)
	}
	return jq
}

// steps submits k Jacobi steps on the GPU, ping-pong between a and b
// (starting a→b), and waits for them.
func (jq *jacobiQueue) steps(t testing.TB, k int) {
	src, dst := jq.a, jq.b
	for range k {
		s, d := src, dst
		if _, err := jq.q.Submit(func(h *acpp.Handler) error {
			h.Launch("jacobi2d", acpp.R2(jq.n, jq.n), acpp.Read(h, s), acpp.Write(h, d, acpp.NoInit))
			return nil
		}, acpp.On(jq.gpu)); err != nil {
			t.Fatal(err)
		}
		src, dst = dst, src
	}
	if err := jq.q.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func jacobiGrid(n int) []float32 {
	g := make([]float32, n*n)
	for i := range g {
		g[i] = float32(i%1013)*0.001 - 0.3
	}
	return g
}

// The embedded runtime's Jacobi chain on a GPU gives the same bits with
// issue-ahead and graph replay as with neither.
func TestRuntimeJacobiChainSameBits_D3(t *testing.T) {
	const n, steps = 256, 301
	grid := jacobiGrid(n)
	var got [2][]float32
	before := graphTotals.replaced.Load()
	for k, on := range []bool{false, true} {
		jq := openJacobiQueue(t, fmt.Sprint(on), on, on, n, grid)
		jq.steps(t, steps)
		v, err := jq.b.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got[k] = v
	}
	t.Logf("launches replaced by graphs: %d", graphTotals.replaced.Load()-before)
	for i := range got[0] {
		if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
			t.Fatalf("point %d: %v with issue-ahead and graphs, %v without", i, got[1][i], got[0][i])
		}
	}
}

// BenchmarkJacobiChain: per-step cost of a chain of dependent Jacobi steps
// (jacobi2d n×n, ping-pong A→B, B→A) on one GPU, all in one process:
//
//	raw-launch      cuLaunchKernel back to back on the owner thread, then one sync
//	raw-graph2      the two kernels captured into one graph, replayed per two steps
//	raw-graph16     16 steps captured into one graph, replayed
//	wait            the embedded runtime (acpp.NewQueue) with issue-ahead and graphs off:
//	                each step waits for the last one's completion to reach the host
//	ahead           issue-ahead on, graphs off
//	ahead-graphs    issue-ahead and graph replay on (the default)
//
// us/step is the wall time of chain steps, submission to the last
// completion, over chain; the runtime rows also report x-raw-launch, their
// per-step time over raw-launch's (the target: below 1). The variants run
// interleaved, one chain each per iteration. ACPP_BENCH_CHAIN=VARIANT runs
// that runtime variant alone, at 256² (for a CPU profile of it).
func BenchmarkJacobiChain(b *testing.B) {
	const chain = 2048
	if only := os.Getenv("ACPP_BENCH_CHAIN"); only != "" {
		ahead, graphs := strings.HasPrefix(only, "ahead"), strings.HasSuffix(only, "graphs")
		jq := openJacobiQueue(b, only, ahead, graphs, 256, jacobiGrid(256))
		jq.steps(b, 64)
		replaced, glaunches := graphTotals.replaced.Load(), graphTotals.launches.Load()
		for b.Loop() {
			jq.steps(b, chain)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N*chain), only+"-us/step")
		r, l := graphTotals.replaced.Load()-replaced, graphTotals.launches.Load()-glaunches
		b.ReportMetric(float64(r)/float64(b.N*chain), "replaced/step")
		if l > 0 {
			b.ReportMetric(float64(r)/float64(l), "kernels/graph")
		}
		return
	}
	for _, n := range []int{256, 2048} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			grid := jacobiGrid(n)
			d := openGPUs(b, Config{NoGraphs: true})[0]
			raw := gpuJacobi(b, d, n, grid)
			qs := []*jacobiQueue{
				openJacobiQueue(b, "wait", false, false, n, grid),
				openJacobiQueue(b, "ahead", true, false, n, grid),
				openJacobiQueue(b, "ahead-graphs", true, true, n, grid),
			}
			for _, jq := range qs {
				jq.steps(b, 64) // the grids move to the GPU; graphs are captured
			}
			names := []string{"raw-launch", "raw-graph2", "raw-graph16"}
			for _, jq := range qs {
				names = append(names, jq.name)
			}
			took := make([]time.Duration, len(names))
			replaced, glaunches := graphTotals.replaced.Load(), graphTotals.launches.Load()
			for b.Loop() {
				for k := range 3 {
					took[k] += raw.chain(b, k, chain)
				}
				for k, jq := range qs {
					start := time.Now()
					jq.steps(b, chain)
					took[3+k] += time.Since(start)
				}
			}
			per := func(k int) float64 { return float64(took[k].Nanoseconds()) / 1e3 / float64(b.N*chain) }
			for k, nm := range names {
				b.ReportMetric(per(k), nm+"-us/step")
			}
			for k := 3; k < len(names); k++ {
				b.ReportMetric(per(k)/per(0), names[k]+"-x-raw-launch")
			}
			r, l := graphTotals.replaced.Load()-replaced, graphTotals.launches.Load()-glaunches
			b.ReportMetric(float64(r)/float64(b.N*chain), "replaced/step")
			if l > 0 {
				b.ReportMetric(float64(r)/float64(l), "kernels/graph")
			}
		})
	}
}

// rawJacobi holds the raw baselines' launches and graphs on one device.
type rawJacobi struct {
	d       *Device
	ls      [2]*rawLaunch
	g2, g16 driver.GraphExec
}

func gpuJacobi(b *testing.B, d *Device, n int, grid []float32) *rawJacobi {
	bs := make([]byte, 4*len(grid))
	copy(f32s(bs), grid)
	A := upload(b, d, bs)
	B := upload(b, d, bs)
	jac := builtin(b, "jacobi2d")
	rg := [3]int{1, n, n}
	nd := device.NDRange{Global: rg}
	r := &rawJacobi{d: d, ls: [2]*rawLaunch{
		prepareRaw(b, d, jac, nd, []device.Arg{accArg(A, rg), accArg(B, rg)}, nil),
		prepareRaw(b, d, jac, nd, []device.Arg{accArg(B, rg), accArg(A, rg)}, nil),
	}}
	if err := d.Do(func(t *Thread) error {
		s := t.Streams[0]
		capture := func(steps int) (driver.GraphExec, error) {
			if err := t.Lib.StreamBeginCapture(s, driver.StreamCaptureModeThread); err != nil {
				return 0, err
			}
			for i := range steps {
				if err := r.ls[i%2].launch(t); err != nil {
					return 0, err
				}
			}
			g, err := t.Lib.StreamEndCapture(s)
			if err != nil {
				return 0, err
			}
			defer t.Lib.GraphDestroy(g) //nolint:errcheck
			return t.Lib.GraphInstantiate(g)
		}
		var err error
		if r.g2, err = capture(2); err != nil {
			return err
		}
		r.g16, err = capture(16)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = d.Do(func(t *Thread) error {
			_ = t.Lib.GraphExecDestroy(r.g2)
			return t.Lib.GraphExecDestroy(r.g16)
		})
	})
	return r
}

// chain runs steps steps of variant k (0 launches, 1 the 2-step graph, 2
// the 16-step graph) on the owner thread and waits for them.
func (r *rawJacobi) chain(b *testing.B, k, steps int) time.Duration {
	var took time.Duration
	if err := r.d.Do(func(t *Thread) error {
		s := t.Streams[0]
		start := time.Now()
		switch k {
		case 0:
			for i := range steps {
				if err := r.ls[i%2].launch(t); err != nil {
					return err
				}
			}
		case 1:
			for range steps / 2 {
				if err := t.Lib.GraphLaunch(r.g2, s); err != nil {
					return err
				}
			}
		case 2:
			for range steps / 16 {
				if err := t.Lib.GraphLaunch(r.g16, s); err != nil {
					return err
				}
			}
		}
		err := t.Lib.StreamSynchronize(s)
		took = time.Since(start)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return took
}
