package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/jobfile/npy"
	"github.com/spf13/cobra"
	"go.uber.org/goleak"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/")

func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.DiscardHandler)) // the CUDA backend logs its absence there
	goleak.VerifyTestMain(m,
		// memberlist's TCP handlers end within its TCP timeout after Close.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).streamListen"),
		// A probe started just before Close waits out the probe interval
		// (a test whose node was stopped ends while the others probe it).
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

// writeJob writes text as a job file in a new temp dir and returns its path.
func writeJob(t *testing.T, name, text string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readNPY(t *testing.T, path string) *npy.Array {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func f32(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// plainJacobi is the job's computation in plain Go: a zero plate with a hot
// top row, iters Jacobi steps with the border copied.
func plainJacobi(n, iters int) []float32 {
	a, b := make([]float32, n*n), make([]float32, n*n)
	for x := range n {
		a[x] = 1
	}
	for range iters {
		for y := range n {
			for x := range n {
				i := y*n + x
				if y == 0 || x == 0 || y == n-1 || x == n-1 {
					b[i] = a[i]
					continue
				}
				s := a[i-n] + a[i+n]
				s = s + a[i-1]
				s = s + a[i+1]
				b[i] = 0.25 * s
			}
		}
		a, b = b, a
	}
	return a
}

// TestRunJacobiMatchesPlainGo_D3_L2: the Jacobi example (shrunk to 96×96 with
// its n param) run
// through Run on the embedded runtime equals a plain Go Jacobi bit for
// bit — the 100 ping-pong iterations ran in submission order — and, on
// CPU devices, nothing was copied (linked host allocation, L2).
func TestRunJacobiMatchesPlainGo_D3_L2(t *testing.T) {
	job := "../../../examples/jobs/jacobi.yaml"
	out := t.TempDir()
	var calls, last int
	res, err := Run(context.Background(), Config{JobFile: job, Params: map[string]string{"n": "96"}, OutDir: out, Devices: []string{"cpu"}, Window: 8, Record: true,
		Progress: func(done, total int) { calls++; last = done; _ = total }})
	if err != nil {
		t.Fatal(err)
	}
	a := readNPY(t, filepath.Join(out, "jacobi.npy"))
	if a.Dtype != "<f4" || len(a.Shape) != 2 || a.Shape[0] != 96 || a.Shape[1] != 96 {
		t.Fatalf("jacobi.npy is %s %v, want <f4 [96 96]", a.Dtype, a.Shape)
	}
	got, want := f32(a.Data), plainJacobi(96, 100)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("cell %d = %v, want %v (plain Go)", i, got[i], want[i])
		}
	}
	if len(res.Groups) != 102 || calls != 102 || last != 102 {
		t.Errorf("%d groups, %d progress calls ending at %d; want 102 (init, fill, 100 kernels)", len(res.Groups), calls, last)
	}
	if res.Stats.BytesCopied != 0 {
		t.Errorf("BytesCopied = %d, want 0 on CPU devices (linked, L2)", res.Stats.BytesCopied)
	}
	for i, g := range res.Groups[3:] {
		prev := res.Groups[i+2]
		if g.Timing.Started.Before(prev.Timing.Ended) {
			t.Fatalf("group %d started before %d ended: conflicting groups must run in order (D3)", g.ID, prev.ID)
		}
	}
	if res.Count != 102 || res.PerDevice[res.Devices[0]].N != 102 || res.PerStep[res.Devices[0]]["jacobi2d"].N != 100 {
		t.Errorf("tallies: count %d, per device %+v", res.Count, res.PerDevice)
	}
	if s := res.Summary(); !strings.Contains(s, "jacobi2d ×100") || !strings.Contains(s, "102 command groups") {
		t.Errorf("Summary() = %q, want the jacobi2d count and the group count", s)
	}
}

// C4: the embedded runtime splits a split step across several local
// devices of the default device's kind (three CPU devices stand in for
// GPUs here): the output equals the run on one device bit for bit, every
// device computes its contiguous chunks, and the summary says nothing of
// steps run whole. One device runs the step whole and says so.
func TestEmbeddedSplitAcrossLocalDevices_C4(t *testing.T) {
	job := "../../../examples/jobs/jacobi.yaml"
	params := map[string]string{"n": "96", "iters": "6"}
	one, three := t.TempDir(), t.TempDir()
	whole, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: one, Devices: []string{"cpu"}, Record: true})
	if err != nil {
		t.Fatal(err)
	}
	split, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: three, Devices: []string{"cpu"}, Record: true,
		queueOptions: []acpp.Option{acpp.WithCPUDevices(3)}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := readNPY(t, filepath.Join(one, "jacobi.npy")), readNPY(t, filepath.Join(three, "jacobi.npy"))
	if !bytes.Equal(a.Data, b.Data) {
		t.Fatal("jacobi.npy split over three devices differs from the run on one")
	}
	if whole.SplitGroups != 0 || !strings.Contains(whole.Summary(), "1 step asks for split; they ran whole") {
		t.Errorf("one device: %d groups split; summary %q", whole.SplitGroups, whole.Summary())
	}
	if split.SplitGroups != 6 || strings.Contains(split.Summary(), "ran whole") {
		t.Errorf("three devices: %d groups split, want 6; summary %q", split.SplitGroups, split.Summary())
	}
	kernels := 0
	for _, g := range split.Groups {
		if g.Label != "jacobi2d" {
			continue
		}
		kernels++
		var devs []string
		for _, c := range g.Chunks {
			devs = append(devs, c.Device)
			if c.Timing.Ended.IsZero() {
				t.Errorf("group %d: chunk %d has no end time", g.ID, c.ID)
			}
		}
		want := []string{"cpu:0", "cpu:0", "cpu:0", "cpu:0", "cpu:1", "cpu:1", "cpu:1", "cpu:1", "cpu:2", "cpu:2", "cpu:2", "cpu:2"}
		if !slices.Equal(devs, want) || g.Device != "cpu:0,cpu:1,cpu:2" {
			t.Fatalf("group %d ran its chunks on %v (device %q); want 4 chunks per device in order", g.ID, devs, g.Device)
		}
	}
	if kernels != 6 {
		t.Errorf("%d jacobi2d groups recorded, want 6", kernels)
	}
	for _, d := range []string{"cpu:1", "cpu:2"} {
		if split.PerDevice[d] == nil || split.PerDevice[d].N == 0 {
			t.Errorf("the summary counts no work on %s: %+v", d, split.PerDevice)
		}
	}
	// Border chunks with two chunks inside each block: the same bytes.
	params["borders"], params["chunks"] = "1", "2"
	borders := t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: borders, Devices: []string{"cpu"},
		queueOptions: []acpp.Option{acpp.WithCPUDevices(3)}}); err != nil {
		t.Fatal(err)
	}
	if c := readNPY(t, filepath.Join(borders, "jacobi.npy")); !bytes.Equal(a.Data, c.Data) {
		t.Fatal("jacobi.npy split with borders=1, chunks=2 differs from the run on one device")
	}
}

// B5, T3: without --device an accelerator is the default device (a fake
// that runs no kernel form stands in for a GPU here): fills and copies run
// on it, a kernel it cannot run goes to the CPU, and the output equals a
// CPU-only run bit for bit.
func TestDefaultAcceleratorHandsKernelsItCannotRunToCPU_B5_T3(t *testing.T) {
	if q, err := acpp.NewQueue(context.Background(), acpp.WithKind(acpp.CUDA)); err == nil {
		q.Close()
		t.Skip("a real GPU is here: it would take the kernels, and fake memory cannot be copied to it")
	}
	gpu := devicetest.NewFake(devicetest.FakeConfig{Forms: []device.Form{}})
	t.Cleanup(func() { gpu.Close() })
	job := "../../../examples/jobs/jacobi.yaml"
	params := map[string]string{"n": "64", "iters": "4"}
	cpuOut, gpuOut := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: cpuOut, Devices: []string{"cpu"}}); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: gpuOut, Record: true, queueOptions: []acpp.Option{acpp.WithDevices(gpu)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Devices[0] != "fake:0" {
		t.Errorf("devices %v: the accelerator should be the default", res.Devices)
	}
	for _, g := range res.Groups {
		if want := map[bool]string{true: "cpu:0", false: "fake:0"}[g.Kind == "kernel"]; g.Device != want {
			t.Errorf("%s group %q ran on %s, want %s", g.Kind, g.Label, g.Device, want)
		}
	}
	if a, b := readNPY(t, filepath.Join(cpuOut, "jacobi.npy")), readNPY(t, filepath.Join(gpuOut, "jacobi.npy")); !bytes.Equal(a.Data, b.Data) {
		t.Fatal("jacobi.npy with a default accelerator differs from the CPU run")
	}
}

// TestRunExamples: the saxpy and reduction examples give their documented
// results.
func TestRunExamples(t *testing.T) {
	out := t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: "../../../examples/jobs/saxpy.yaml", Params: map[string]string{"n": "65536"}, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	for i, v := range f32(readNPY(t, filepath.Join(out, "saxpy.npy")).Data) {
		if v != 2.5 {
			t.Fatalf("saxpy y[%d] = %v, want 2.5", i, v)
		}
	}
	// 2^18 items: 1024 partial sums, then 4, then 1.
	if _, err := Run(context.Background(), Config{JobFile: "../../../examples/jobs/reduction.yaml", Params: map[string]string{"n": "262144"}, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	if s := f32(readNPY(t, filepath.Join(out, "sum.npy")).Data); len(s) != 1 || s[0] != 65536 {
		t.Errorf("sum = %v, want [65536]", s)
	}
	raw, err := os.ReadFile(filepath.Join(out, "partial2.raw"))
	if err != nil || len(raw) != 4*4 {
		t.Fatalf("partial2.raw: %d bytes, %v; want 16", len(raw), err)
	}
	for i, v := range f32(raw) {
		if v != 16384 {
			t.Fatalf("partial2[%d] = %v, want 16384 (256 groups of 256×0.25 each)", i, v)
		}
	}
}

// TestRunMatmulExample_A3: the matmul example (2D work-groups with local
// tiles), at an odd size that needs the range rounded up.
func TestRunMatmulExample_A3(t *testing.T) {
	out := t.TempDir()
	params := map[string]string{"m": "37", "n": "21", "k": "50", "t": "8"}
	if _, err := Run(context.Background(), Config{JobFile: "../../../examples/jobs/matmul.yaml", Params: params, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	a := readNPY(t, filepath.Join(out, "matmul.npy"))
	if len(a.Shape) != 2 || a.Shape[0] != 37 || a.Shape[1] != 21 {
		t.Fatalf("matmul.npy shape %v, want [37 21]", a.Shape)
	}
	for i, v := range f32(a.Data) {
		if v != 100 {
			t.Fatalf("C[%d] = %v, want 2·50 = 100", i, v)
		}
	}
}

// TestRunCancelled: cancelling the context stops a long job promptly with
// the cause, and leaves no goroutine behind (TestMain checks).
func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop := errors.New("operator pressed ctrl-c")
	start := time.Now()
	_, err := Run(ctx, Config{JobFile: "../../../examples/jobs/jacobi.yaml", Params: map[string]string{"n": "64", "iters": "100000"},
		OutDir: t.TempDir(), Window: 16, Progress: func(done, total int) {
			if done == 5 {
				cancel(stop)
			}
		}})
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "job jacobi stopped") {
		t.Fatalf("Run after cancel = %v, want the cause", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Run took %s after a cancel, want it to stop promptly", el)
	}
}

// TestInitFromFiles: .npy and raw inputs become the buffers' contents.
func TestInitFromFiles(t *testing.T) {
	dir := t.TempDir()
	x := make([]float32, 10)
	for i := range x {
		x[i] = float32(i)
	}
	xb := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 40)
	var nb bytes.Buffer
	npy.Write(&nb, "<f4", []int{10}, xb)
	os.WriteFile(filepath.Join(dir, "x.npy"), nb.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "y.bin"), xb, 0o644)
	job := writeJob(t, "f.yaml", `buffers:
  x: {type: float32, range: 10, init: {file: `+filepath.Join(dir, "x.npy")+`}}
  y: {type: float32, range: 10, init: {file: `+filepath.Join(dir, "y.bin")+`}}
steps:
  - {kernel: saxpy, scalars: {a: 3}, accessors: [{buffer: x, mode: read}, {buffer: y, mode: read_write}]}
outputs:
  - {buffer: y, file: y.npy}
`)
	out := t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: job, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	for i, v := range f32(readNPY(t, filepath.Join(out, "y.npy")).Data) {
		if v != 4*float32(i) {
			t.Fatalf("y[%d] = %v, want %v", i, v, 4*float32(i))
		}
	}
}

// TestNoInitOnlyOnWholePages_T1: a no_init accessor is passed as no_init
// only when it covers whole pages of the declared page size (or the whole
// buffer): the runtime discards whole pages.
func TestNoInitOnlyOnWholePages_T1(t *testing.T) {
	s := &jobfile.Buffer{Name: "b", Type: "float32", Range: []int{64, 32}, PageSize: []int{16, 32}}
	b := &tbuf[float32]{s: s}
	for _, tc := range []struct {
		off, rng []int
		want     bool
	}{
		{nil, nil, true},
		{[]int{16, 0}, []int{32, 32}, true},
		{[]int{48, 0}, nil, true},
		{[]int{8, 0}, []int{16, 32}, false},
		{[]int{0, 0}, []int{16, 16}, false},
	} {
		if got := b.pageAligned(tc.off, tc.rng); got != tc.want {
			t.Errorf("pageAligned(%v, %v) = %v, want %v", tc.off, tc.rng, got, tc.want)
		}
	}
	s.PageSize = nil
	if b.pageAligned([]int{16, 0}, []int{16, 32}) {
		t.Error("pageAligned without a declared page size = true, want false")
	}
}

const smallJob = `
name: small
buffers:
  a: {type: float32, range: [64], init: {value: 1}}
  b: {type: float32, range: [64]}
  c: {type: float32, range: [64], init: {kernel: fill_f32, scalars: {v: 3}}}
steps:
  - copy: {from: {buffer: a}, to: {buffer: b}}
  - kernel: saxpy
    scalars: {a: 2}
    accessors: [{buffer: a, mode: read}, {buffer: c, mode: read_write}]
  - kernel: saxpy
    device: cpu:0
    scalars: {a: 1}
    accessors: [{buffer: b, mode: read}, {buffer: c, mode: read_write}]
outputs:
  - {buffer: c, file: c.raw}
`

// TestTraceAndDAG_D1: the trace has a track per device, a slice per group
// and an arrow per dependency; the DAG (golden) has the edges the conflict
// rules imply: the copy and the first saxpy both wait for a's init, each
// saxpy waits for the writer of c before it.
func TestTraceAndDAG_D1(t *testing.T) {
	res, err := Run(context.Background(), Config{JobFile: writeJob(t, "small.yaml", smallJob), OutDir: t.TempDir(), Devices: []string{"cpu:0"}, Record: true})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Outputs[0]
	data, _ := os.ReadFile(c.Path)
	for i, v := range f32(data) {
		if v != 6 {
			t.Fatalf("c[%d] = %v, want 3 + 2·1 + 1·1 = 6", i, v)
		}
	}
	var tb bytes.Buffer
	if err := res.WriteTrace(&tb); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Tid  int            `json:"tid"`
			Dur  float64        `json:"dur"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(tb.Bytes(), &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	count := map[string]int{}
	deps := 0
	for _, g := range res.Groups {
		deps += len(g.Deps)
	}
	for _, e := range tr.TraceEvents {
		count[e.Ph]++
		if e.Ph == "M" && e.Name == "thread_name" && e.Args["name"] != "device cpu:0" && e.Args["name"] != "host: outputs" {
			t.Errorf("track %v, want device cpu:0 and host: outputs only", e.Args["name"])
		}
		if e.Ph == "X" && e.Name != "output c" && (e.Tid != 1 || e.Dur < 0) {
			t.Errorf("slice %s on tid %d dur %v, want the device track", e.Name, e.Tid, e.Dur)
		}
	}
	if count["X"] != len(res.Groups)+1 || count["s"] != deps || count["f"] != deps || count["C"] < 2 {
		t.Errorf("trace events by phase %v; want %d slices (groups and the output), %d arrows, link counters", count, len(res.Groups)+1, deps)
	}
	var db bytes.Buffer
	if err := res.WriteDAG(&db); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "small.dot")
	if *rewrite {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, db.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if db.String() != string(want) {
		t.Errorf("DAG differs from %s (run with -rewrite and review):\n%s", golden, db.String())
	}
}

// TestRunErrorsNameTheLine: problems found while running say where in the
// job file they come from and what to do.
func TestRunErrorsNameTheLine(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "short.raw"), make([]byte, 10), 0o644)
	var nb bytes.Buffer
	npy.Write(&nb, "<f8", []int{4}, make([]byte, 32))
	os.WriteFile(filepath.Join(dir, "f64.npy"), nb.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "ok.npy"), func() []byte {
		var b bytes.Buffer
		npy.Write(&b, "<f4", []int{4}, make([]byte, 16))
		return b.Bytes()
	}(), 0o644)
	for _, tc := range []struct {
		name, job string
		want      []string
	}{
		{"missing file", "buffers:\n  a: {type: float32, range: [4], init: {file: nope.npy}}\nsteps: []\n",
			[]string{"j.yaml:2: buffers.a.init.file:", "no such file", "relative to the job file"}},
		{"raw size", "buffers:\n  a: {type: float32, range: [4], init: {file: short.raw}}\nsteps: []\n",
			[]string{"j.yaml:2:", "has 10 bytes", "needs 16"}},
		{"npy type", "buffers:\n  a: {type: float32, range: [4], init: {file: f64.npy}}\nsteps: []\n",
			[]string{"j.yaml:2:", "holds float64 [4]", "astype('<f4')"}},
		{"kernel refused", "buffers:\n  a: {type: float32, range: [64], init: {file: ok.npy}}\n  p: {type: float32, range: [1]}\nsteps:\n" +
			"  - kernel: reduce_sum_f32\n    range: [64]\n    work_group: [64]\n    scalars: {n: 64}\n    local: {scratch: 4}\n" +
			"    accessors: [{buffer: a, mode: read}, {buffer: p, mode: write}]\n",
			[]string{"j.yaml:5: steps[0]:", `kernel "reduce_sum_f32": scratch has 4 bytes, a work-group of 4 items needs 16`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := filepath.Join(dir, "j.yaml")
			text := strings.ReplaceAll(tc.job, "[64], init: {file: ok.npy}", "[4], init: {file: ok.npy}")
			if tc.name == "kernel refused" {
				text = strings.ReplaceAll(strings.ReplaceAll(text, "[64]", "[4]"), "n: 64", "n: 4")
			}
			os.WriteFile(job, []byte(text), 0o644)
			// On the CPU (a GPU, the default where there is one, refuses
			// the launch alike).
			_, err := Run(context.Background(), Config{JobFile: job, OutDir: t.TempDir(), Devices: []string{"cpu"}})
			if err == nil {
				t.Fatal("Run succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestJobShipsPTX_A2: a job-declared PTX kernel is checked against its
// module's entry (a wrong declaration names the line); on a machine
// without a GPU a correct one fails with a clear no-implementation error.
func TestJobShipsPTX_A2(t *testing.T) {
	dir := t.TempDir()
	mod, err := os.ReadFile("../../../cuda/kernels/ptx/saxpy.ptx")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "my.ptx"), mod, 0o644)
	job := func(third string) string {
		return `kernels:
  mysaxpy:
    ptx: my.ptx
    entry: saxpy
    params:
      - {name: a, kind: scalar, type: float32}
      - {name: x, kind: pointer, type: float32, const: true}
      - ` + third + `
buffers:
  x: {type: float32, range: [8], init: {value: 1}}
  y: {type: float32, range: [8], init: {value: 1}}
steps:
  - kernel: mysaxpy
    scalars: {a: 2}
    accessors: [{buffer: x, mode: read}, {buffer: y, mode: read_write}]
`
	}
	p := filepath.Join(dir, "ptx.yaml")
	os.WriteFile(p, []byte(job("{name: y, kind: accessor, type: float32}")), 0o644)
	_, err = Run(context.Background(), Config{JobFile: p, OutDir: dir, Devices: []string{"cpu"}})
	if err == nil || !strings.Contains(err.Error(), "ptx.yaml:5: kernels.mysaxpy.params:") {
		t.Fatalf("Run with a wrong parameter kind = %v, want a layout error at line 5 (params)", err)
	}
	os.WriteFile(p, []byte(job("{name: y, kind: pointer, type: float32}")), 0o644)
	_, err = Run(context.Background(), Config{JobFile: p, OutDir: dir, Devices: []string{"cpu"}})
	if !errors.Is(err, device.ErrNoImplementation) || !strings.Contains(err.Error(), "ptx.yaml:13: steps[0]") {
		t.Fatalf("Run of a PTX-only kernel on the CPU = %v, want ErrNoImplementation at line 13", err)
	}
}

// TestMainCommands: exit codes and messages of the command line.
func TestMainCommands(t *testing.T) {
	bad := writeJob(t, "bad.yaml", "buffers: {a: {type: float32, range: [4]}}\nsteps:\n  - kernel: saxpi\n")
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"no job", []string{"run"}, 2, "", "takes one job file"},
		{"bad flag", []string{"run", "--bogus", "x"}, 2, "", "unknown flag"},
		{"invalid job", []string{"run", bad}, 1, "", `bad.yaml:3: steps[0].kernel: unknown kernel "saxpi" (did you mean "saxpy"?)`},
		{"check invalid", []string{"check", bad}, 1, "", "unknown kernel"},
		{"check", []string{"check", "../../../examples/jobs/jacobi.yaml"}, 0, "102 command groups from 2 steps", ""},
		{"cluster run without client", []string{"run", "--cluster", "127.0.0.1:7946", bad}, 2, "", "--client NAME (or ACPP_CLIENT) is required with --cluster"},
		{"cluster address not host:port", []string{"run", "--cluster", "nohost", "--client", "alice", bad}, 2, "", `--cluster "nohost" is not host:port`},
		{"cluster with --device", []string{"run", "--cluster", "127.0.0.1:7946", "--client", "alice", "--device", "cpu", bad}, 2, "", "on a cluster use --nodes and --kinds"},
		{"nodes without cluster", []string{"nodes"}, 2, "", "needs --cluster"},
		{"kinds without cluster", []string{"run", "--kinds", "cuda", bad}, 2, "", "give --cluster ADDR too"},
		{"status without credentials", []string{"status", "--cluster", "127.0.0.1:7946", "--client", "alice", "--credentials", "/nonexistent"}, 1, "", "load client credentials \"alice\" from /nonexistent"},
		{"check with set", []string{"check", "--set", "n=2048", "../../../examples/jobs/jacobi.yaml"}, 0, "params: borders=0 chunks=4 iters=100 n=2048", ""},
		{"set unknown param", []string{"check", "--set", "m=2048", "../../../examples/jobs/jacobi.yaml"}, 2, "", `--set m: the job declares no param "m" (did you mean "n"?) (params: borders, chunks, iters, n, rows)`},
		{"devices", []string{"devices"}, 0, "cpu:0", ""},
		{"no such device", []string{"run", "--device", "cpu:7", "../../../examples/jobs/saxpy.yaml"}, 1, "", "acpp-submit devices lists"},
		{"kernels", []string{"kernels"}, 0, "saxpy(a float32, x *float32, y *float32)", ""},
		{"bad progress", []string{"run", "--progress", "sometimes", bad}, 2, "", "use auto, always or never"},
		{"unknown command", []string{"frob"}, 2, "", `unknown command "frob"`},
		{"malformed device", []string{"run", "--device", "gpu", bad}, 2, "", `--device "gpu": use cpu or cuda`},
		{"check malformed device", []string{"check", "--device", "gpu", bad}, 2, "", `--device "gpu": use cpu or cuda`},
		{"negative workers", []string{"run", "--workers", "-3", bad}, 2, "", "--workers -3: give a positive number"},
		// At most acpp.MaxWorkers: 10⁸ started 10⁸ goroutines and the
		// process died (docs/JOBS.md, acpp.WithWorkers).
		{"workers above the bound", []string{"run", "--workers", "1025", bad}, 2, "", "--workers 1025: give a positive number of worker goroutines, at most 1024"},
		{"huge workers", []string{"run", "--workers", "100000000", bad}, 2, "", "at most 1024"},
		// A job file is read only up to jobfile.MaxFileBytes: /dev/zero,
		// which has no end, was read until memory ran out.
		{"job file without end", []string{"check", "/dev/zero"}, 1, "", "job file is larger than 16777216 bytes"},
		{"negative window", []string{"run", "--window", "-1", bad}, 2, "", "--window -1: give a positive number"},
		{"unknown placement", []string{"run", "--placement", "foo", bad}, 2, "", `--placement "foo": use auto or round-robin`},
		{"placement without cluster", []string{"run", "--placement", "round-robin", bad}, 2, "", "--placement places steps on cluster nodes: give --cluster ADDR too"},
		{"cluster port out of range", []string{"run", "--cluster", "127.0.0.1:99999", "--client", "alice", bad}, 2, "", "a port in 1–65535"},
		{"cluster port 0", []string{"run", "--cluster", "127.0.0.1:0", "--client", "alice", bad}, 2, "", "a port in 1–65535"},
		{"cluster port 65536", []string{"run", "--cluster", "127.0.0.1:65536", "--client", "alice", bad}, 2, "", "a port in 1–65535"},
		// A word after a command that takes none is an unknown command
		// too (it exited 1).
		{"nodes extra", []string{"nodes", "extra", "--cluster", "127.0.0.1:7946", "--client", "alice"}, 2, "", `unknown command "extra" for "acpp-submit nodes"`},
		{"status extra", []string{"status", "extra"}, 2, "", `unknown command "extra" for "acpp-submit status"`},
		{"kernels extra", []string{"kernels", "extra"}, 2, "", `unknown command "extra" for "acpp-submit kernels"`},
		{"devices extra", []string{"devices", "extra"}, 2, "", `unknown command "extra" for "acpp-submit devices"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), tc.args, Env{Stdout: &out, Stderr: &errb})
			if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
				t.Errorf("Main(%q) = %d\nstdout %q\nstderr %q\nwant %d, stdout with %q, stderr with %q", tc.args, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
			}
		})
	}
}

// TestRunCommandWritesReports: run with --trace and --dag writes both and
// prints the summary.
func TestRunCommandWritesReports(t *testing.T) {
	dir := t.TempDir()
	job := writeJob(t, "small.yaml", smallJob)
	var out, errb bytes.Buffer
	args := []string{"run", "-o", dir, "--trace", filepath.Join(dir, "t.json"), "--dag", filepath.Join(dir, "d.dot"), job}
	if code := Main(context.Background(), args, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("Main(%q) = %d: %s", args, code, errb.String())
	}
	for _, f := range []string{"t.json", "d.dot", "c.raw"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if !strings.Contains(out.String(), "job small: 5 command groups") || !strings.Contains(errb.String(), "progress: 5/5") {
		t.Errorf("stdout %q stderr %q; want the summary and a plain progress line", out.String(), errb.String())
	}
	// On a terminal: a progress bar instead of lines.
	out.Reset()
	errb.Reset()
	args = []string{"run", "-o", dir, job}
	if code := Main(context.Background(), args, Env{Stdout: &out, Stderr: &errb, Terminal: true}); code != 0 {
		t.Fatalf("Main(%q) on a terminal = %d: %s", args, code, errb.String())
	}
	if strings.Contains(errb.String(), "progress:") || !strings.Contains(errb.String(), "small.yaml") {
		t.Errorf("stderr on a terminal = %q, want a progress bar (labelled with the job file), no plain lines", errb.String())
	}
}

var _ = jobfile.ErrInvalid

// TestCheckFindsWhatRunFinds: check reports the mistakes in the files a job
// names (a missing PTX module or CUDA C source, a PTX module without the
// entry, an init file of the wrong size or a directory) and steps pinned
// to a device this machine lacks, as run does, instead of calling the job
// valid.
func TestCheckFindsWhatRunFinds(t *testing.T) {
	text := `buffers:
  v: {type: float32, range: [33], init: {file: v.raw}}
  w: {type: float32, range: [4], init: {file: sub}}
kernels:
  kk: {ptx: missing.ptx, params: []}
  cc: {cuda: missing.cu, params: []}
  ee: {ptx: empty.ptx, entry: nosuch, params: []}
steps:
  - kernel: kk
    range: [1]
  - kernel: fill_f32
    device: cpu:7
    accessors: [{param: out, buffer: w, mode: write}]
    scalars: {v: 1}
`
	job := writeJob(t, "p.yaml", text)
	dir := filepath.Dir(job)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "v.raw"), []byte("abcd"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "empty.ptx"), []byte(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry other()\n{\n\tret;\n}\n"), 0o644))
	want := []string{
		"p.yaml:5: kernels.kk.ptx: open " + filepath.Join(dir, "missing.ptx") + ": no such file",
		"p.yaml:6: kernels.cc.cuda: open " + filepath.Join(dir, "missing.cu") + ": no such file",
		`p.yaml:7: kernels.ee.entry: entry "nosuch" is not in empty.ptx (entries: other)`,
		"p.yaml:2: buffers.v.init.file: " + filepath.Join(dir, "v.raw") + ` has 4 bytes, buffer "v" (float32 [33]) needs 132`,
		"p.yaml:3: buffers.w.init.file: " + filepath.Join(dir, "sub") + " is a directory",
		`p.yaml:9: steps[0]: no device here runs kernel "kk" (devices: cpu:0)`,
		"p.yaml:12: steps[1].device: no device cpu:7 here (devices: cpu:0)",
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"check", "--device", "cpu", job}, Env{Stdout: &out, Stderr: &errb}); code != 1 {
		t.Fatalf("check: exit %d, want 1\n%s%s", code, out.String(), errb.String())
	}
	// Every problem at once (JOBS.md), the device with the files, in line
	// order: the device error came only once the files were right.
	inOrder := func(what, got string, want []string) {
		t.Helper()
		at := -1
		for _, l := range []int{2, 3, 5, 6, 7, 9, 12} {
			for _, w := range want {
				if strings.HasPrefix(w, fmt.Sprintf("p.yaml:%d:", l)) {
					i := strings.Index(got, w)
					if i < 0 {
						t.Errorf("%s stderr lacks %q:\n%s", what, w, got)
					} else if i < at {
						t.Errorf("%s stderr has %q out of line order:\n%s", what, w, got)
					} else {
						at = i
					}
				}
			}
		}
	}
	inOrder("check", errb.String(), want)
	// run finds the same file mistakes, the init files' too, before anything
	// runs: no summary (it printed one of 0 command groups).
	errb.Reset()
	out.Reset()
	if code := Main(context.Background(), []string{"run", "--progress", "never", "--device", "cpu", "-o", t.TempDir(), job}, Env{Stdout: &out, Stderr: &errb}); code != 1 {
		t.Fatalf("run: exit %d, want 1\n%s", code, errb.String())
	}
	inOrder("run", errb.String(), want[:5])
	if out.Len() != 0 {
		t.Errorf("run of a job whose files are wrong printed %q, want nothing on stdout", out.String())
	}
	// With the files right, check still refuses the device.
	must(os.WriteFile(filepath.Join(dir, "v.raw"), make([]byte, 132), 0o644))
	must(os.Remove(filepath.Join(dir, "sub")))
	must(os.WriteFile(filepath.Join(dir, "sub"), make([]byte, 16), 0o644))
	fixed := strings.NewReplacer("  kk: {ptx: missing.ptx, params: []}\n  cc: {cuda: missing.cu, params: []}\n  ee: {ptx: empty.ptx, entry: nosuch, params: []}\n", "",
		"  - kernel: kk\n    range: [1]\n", "").Replace(text)
	fixed = strings.Replace(fixed, "kernels:\n", "", 1)
	must(os.WriteFile(job, []byte(fixed), 0o644))
	errb.Reset()
	if code := Main(context.Background(), []string{"check", "--device", "cpu", job}, Env{Stdout: &out, Stderr: &errb}); code != 1 || !strings.Contains(errb.String(), "steps[0].device: no device cpu:7 here (devices: cpu:0)") {
		t.Errorf("check of a step on cpu:7: exit %d\n%s", code, errb.String())
	}
}

// TestCheckRefusesLaunchesTheKernelCannotCompute_A3: a reduce_sum_f32 step
// over 100-item work-groups (the tree sum would drop items) or with too
// little scratch is refused by check, at the step's line, as run refuses
// it, instead of being called valid.
func TestCheckRefusesLaunchesTheKernelCannotCompute_A3(t *testing.T) {
	job := writeJob(t, "r.yaml", `buffers:
  a: {type: float32, range: [1000], init: {value: 1}}
  p: {type: float32, range: [10]}
steps:
  - kernel: reduce_sum_f32
    range: [1000]
    work_group: [100]
    scalars: {n: 1000}
    local: {scratch: 400}
    accessors: [{buffer: a, mode: read}, {buffer: p, mode: write}]
  - repeat:
      count: 2
      steps:
        - kernel: reduce_sum_f32
          range: [1024]
          work_group: [64]
          scalars: {n: 1000}
          local: {scratch: 4}
          accessors: [{buffer: a, mode: read}, {buffer: p, mode: write}]
`)
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"check", job}, Env{Stdout: &out, Stderr: &errb})
	for _, w := range []string{"r.yaml:5: steps[0]:", "a work-group of 100 items: the tree sum needs a power of two",
		"r.yaml:14: steps[1].repeat.steps[0]:", "scratch has 4 bytes, a work-group of 64 items needs 256"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("check stderr lacks %q", w)
		}
	}
	if code != 1 {
		t.Errorf("check: exit %d, want 1\n%s", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"run", "-q", "--device", "cpu", "-o", t.TempDir(), job}, Env{Stdout: &out, Stderr: &errb}); code != 1 ||
		!strings.Contains(errb.String(), "a work-group of 100 items") {
		t.Errorf("run: exit %d, stderr %q; want 1 and the same refusal", code, errb.String())
	}
	// run refuses such a launch before anything runs, as check does: a
	// later step's bad launch failed only after the groups before it ran.
	late := writeJob(t, "late.yaml", `buffers:
  a: {type: float32, range: [1000], init: {value: 1}}
  p: {type: float32, range: [10]}
steps:
  - fill: {buffer: a, value: 2}
  - kernel: reduce_sum_f32
    range: [1000]
    work_group: [100]
    scalars: {n: 1000}
    local: {scratch: 400}
    accessors: [{buffer: a, mode: read}, {buffer: p, mode: write}]
`)
	res, err := Run(context.Background(), Config{JobFile: late, OutDir: t.TempDir(), Devices: []string{"cpu"}})
	if err == nil || !strings.Contains(err.Error(), "late.yaml:6: steps[1]: ") || !strings.Contains(err.Error(), "a work-group of 100 items") {
		t.Fatalf("Run = %v, want the refusal at late.yaml:6", err)
	}
	if res != nil {
		t.Errorf("Run of a job with a launch the kernel cannot compute ran %d command groups first; want it refused before anything runs", res.Count)
	}
}

// TestCheckRefusesLaunchesPastBuffers_A2: a built-in launched over more
// items than its buffers hold (saxpy over 1000 items of 4-element buffers)
// is refused by check and run at the step's line. check said "valid"; on a
// GPU the run wrote past the buffers or faulted, which costs a node its GPU.
func TestCheckRefusesLaunchesPastBuffers_A2(t *testing.T) {
	job := writeJob(t, "oob.yaml", `buffers:
  x: {type: float32, range: [4], init: {value: 1}}
  y: {type: float32, range: [4], init: {value: 2}}
  g: {type: float32, range: [8, 8]}
steps:
  - kernel: saxpy
    range: [1000]
    accessors: [{buffer: x, mode: read}, {buffer: y, mode: read_write}]
    scalars: {a: 2}
  - kernel: fill_f32
    range: [8, 9]
    accessors: [{buffer: g, mode: write}]
    scalars: {v: 1}
outputs: [{buffer: y, file: y.npy}]
`)
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"check", job}, Env{Stdout: &out, Stderr: &errb})
	for _, w := range []string{"oob.yaml:6: steps[0]:", "reaches x[999], but x holds 4 elements", "reaches y[999], but y holds 4 elements",
		"oob.yaml:10: steps[1]:", "reaches out[64], but out holds 64 elements"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("check stderr lacks %q:\n%s", w, errb.String())
		}
	}
	if code != 1 {
		t.Errorf("check: exit %d, want 1", code)
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"run", "-q", "--device", "cpu", "-o", t.TempDir(), job}, Env{Stdout: &out, Stderr: &errb}); code != 1 ||
		!strings.Contains(errb.String(), "x holds 4 elements") {
		t.Errorf("run: exit %d, stderr %q; want 1 and the same refusal", code, errb.String())
	}
}

// TestCheckRefusesContradictoryRecovery_C5: a job file whose recovery
// section asks for checkpoints with on_node_loss: fail is refused by check,
// at the section, as a cluster run of it is refused (check called it
// valid); either field alone is fine.
func TestCheckRefusesContradictoryRecovery_C5(t *testing.T) {
	for _, tc := range []struct {
		recovery string
		want     string // "" valid
	}{
		{"{on_node_loss: fail, checkpoint: 10}", "checkpoint: 10 (the job file's recovery) has no effect with on_node_loss: fail"},
		{"{on_node_loss: fail, checkpoint: off}", ""},
		{"{on_node_loss: recover, checkpoint: 10}", ""},
		{"{checkpoint: 10}", ""},
	} {
		job := writeJob(t, "rec.yaml", "buffers:\n  x: {type: float32, range: [4]}\nsteps:\n  - fill: {buffer: x, value: 2}\nrecovery: "+tc.recovery+"\noutputs: [{buffer: x, file: x.npy}]\n")
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"check", job}, Env{Stdout: &out, Stderr: &errb})
		switch {
		case tc.want == "" && code != 0:
			t.Errorf("check with recovery %s: exit %d, want 0\n%s", tc.recovery, code, errb.String())
		case tc.want != "" && (code != 1 || !strings.Contains(errb.String(), "rec.yaml:5: recovery: "+tc.want)):
			t.Errorf("check with recovery %s: exit %d, stderr %q; want 1 and %q at line 5", tc.recovery, code, errb.String(), tc.want)
		}
	}
}

// TestClusterListFlagsTrimmed: --cluster, --nodes and --kinds take the
// lists their variables take: spaces around entries and empty entries are
// dropped ("--nodes 'n1, n2'" ran on n1 only, warning about a node " n2";
// "--cluster ADDR," was refused as --cluster "").
func TestClusterListFlagsTrimmed(t *testing.T) {
	for _, tc := range []struct {
		name                string
		args                []string
		env                 map[string]string
		addrs, nodes, kinds []string
	}{
		{"flags", []string{"--cluster", "127.0.0.1:7951, 127.0.0.1:7952,", "--nodes", "n1, n2", "--kinds", " cpu ,"}, nil,
			[]string{"127.0.0.1:7951", "127.0.0.1:7952"}, []string{"n1", "n2"}, []string{"cpu"}},
		{"repeated", []string{"--cluster", " 127.0.0.1:7951", "--cluster", "127.0.0.1:7952 ", "--nodes", "n1", "--nodes", " n2"}, nil,
			[]string{"127.0.0.1:7951", "127.0.0.1:7952"}, []string{"n1", "n2"}, nil},
		{"variables", nil, map[string]string{"ACPP_CLUSTER": "127.0.0.1:7951 ,", "ACPP_NODES": " n1,n2 ", "ACPP_KINDS": "cpu, "},
			[]string{"127.0.0.1:7951"}, []string{"n1", "n2"}, []string{"cpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cf clusterFlags
			cmd := &cobra.Command{Use: "run"}
			cf.add(cmd, Env{Getenv: func(k string) string { return tc.env[k] }}, true)
			if err := cmd.Flags().Parse(append([]string{"--client", "alice"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			cc, err := cf.config()
			if err != nil {
				t.Fatalf("config: %v", err)
			}
			if !slices.Equal(cc.Addrs, tc.addrs) || !slices.Equal(cc.Nodes, tc.nodes) || !slices.Equal(cc.Kinds, tc.kinds) {
				t.Errorf("Addrs %q, Nodes %q, Kinds %q; want %q, %q, %q", cc.Addrs, cc.Nodes, cc.Kinds, tc.addrs, tc.nodes, tc.kinds)
			}
		})
	}
}
