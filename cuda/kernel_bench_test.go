package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acpp/acpp"
	cpudev "github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/cuda/benchref"
	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/cuda/nvrtc"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/exec"
	acppkernels "github.com/acpp/acpp/kernels"
)

// The built-in kernels against hand-written CUDA C (cuda/benchref), in one
// run on one GPU. scripts/bench runs these and prints the ratios.
//
// Environment:
//
//	ACPP_BENCH_REF        cubin or PTX of cuda/benchref/ref.cu (scripts/bench
//	                      builds it with nvcc); unset: NVRTC compiles it
//	ACPP_BENCH_CANDIDATE  a folder of PTX made by cuda/kernels/gen.sh: its
//	                      jacobi.ptx and saxpy.ptx are measured too, jacobi
//	                      under each shape of ACPP_BENCH_SHAPES
//	ACPP_BENCH_SHAPES     "BXxBYxROWS,..." (block x, block y, rows per thread)
//	                      for the candidate Jacobi; default a small sweep

// refKernels are the hand-written references, loaded on one device.
type refKernels struct {
	how                                    string
	naive, strip, saxpy, fill, copy, empty driver.Function
}

func loadRefs(b *testing.B, d *Device) *refKernels {
	b.Helper()
	var img []byte
	how := ""
	if p := os.Getenv("ACPP_BENCH_REF"); p != "" {
		var err error
		if img, err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
		how = "ACPP_BENCH_REF=" + p
	} else {
		c := d.cfg.NVRTC
		if c == nil {
			c = nvrtc.Default
		}
		res, err := c.Compile(nvrtc.Program{Source: benchref.Source, Name: "ref.cu"}, d.attrs.Major, d.attrs.Minor)
		if err != nil {
			b.Skipf("references need nvcc (ACPP_BENCH_REF) or NVRTC: %v", err)
		}
		img, how = res.PTX, fmt.Sprintf("NVRTC compute_%d", res.Arch)
	}
	r := &refKernels{how: how}
	err := d.Do(func(t *Thread) error {
		m, err := t.Lib.ModuleLoadData(img)
		if err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			fn   *driver.Function
		}{{"jacobi_naive", &r.naive}, {"jacobi_strip", &r.strip}, {"saxpy", &r.saxpy}, {"fill", &r.fill}, {"copy", &r.copy}, {"empty", &r.empty}} {
			if *f.fn, err = t.Lib.ModuleGetFunction(m, f.name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatalf("loading the references (%s): %v", how, err)
	}
	b.Logf("references: %s", how)
	return r
}

// candidate returns the built-in kernel name with its PTX read from
// ACPP_BENCH_CANDIDATE, or nil.
func candidate(b *testing.B, name, file string) *device.Kernel {
	dir := os.Getenv("ACPP_BENCH_CANDIDATE")
	if dir == "" {
		return nil
	}
	m, err := os.ReadFile(dir + "/" + file + ".ptx")
	if err != nil {
		b.Fatal(err)
	}
	k := *builtin(b, name)
	k.PTX = &device.PTX{Module: m, Entry: k.PTX.Entry}
	return &k
}

// gpuTime returns the GPU time per launch of steps launches (launch(i) for
// i in [0, steps)), measured with events on stream 0, after two warm-up
// launches.
func gpuTime(b *testing.B, d *Device, steps int, launch func(t *Thread, i int) error) time.Duration {
	var per time.Duration
	err := d.Do(func(t *Thread) error {
		s := t.Streams[0]
		e0, err := t.Lib.EventCreate(0)
		if err != nil {
			return err
		}
		defer t.Lib.EventDestroy(e0) //nolint:errcheck
		e1, err := t.Lib.EventCreate(0)
		if err != nil {
			return err
		}
		defer t.Lib.EventDestroy(e1) //nolint:errcheck
		for i := range 2 {
			if err := launch(t, i); err != nil {
				return err
			}
		}
		if err := t.Lib.EventRecord(e0, s); err != nil {
			return err
		}
		for i := range steps {
			if err := launch(t, i); err != nil {
				return err
			}
		}
		if err := t.Lib.EventRecord(e1, s); err != nil {
			return err
		}
		if err := t.Lib.EventSynchronize(e1); err != nil {
			return err
		}
		ms, err := t.Lib.EventElapsedTime(e0, e1)
		per = time.Duration(float64(ms) * 1e6 / float64(steps))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return per
}

// rawLaunch launches k as the backend would (its packed arguments, its
// geometry with the built-in's launch hint), straight through the driver
// on stream 0: the kernel's own time, without the backend's queueing.
type rawLaunch struct {
	fn     driver.Function
	cfg    driver.LaunchConfig
	params []byte
}

func prepareRaw(b *testing.B, d *Device, k *device.Kernel, r device.NDRange, args []device.Arg, g *geometry) *rawLaunch {
	var rl *rawLaunch
	err := d.Do(func(t *Thread) error {
		f, err := d.function(k)
		if err != nil {
			return err
		}
		p, _, err := packArgs(k, r, args, d.kernelAddr)
		if err != nil {
			return err
		}
		geo := g
		if geo == nil {
			x, err := hintedGeometry(r, d.attrs.MaxThreadsPerBlock, f.hint)
			if err != nil {
				return err
			}
			geo = &x
		}
		rl = &rawLaunch{fn: f.fn, cfg: driver.LaunchConfig{Grid: geo.Grid, Block: geo.Block, Stream: t.Streams[0]}, params: p}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return rl
}

func (rl *rawLaunch) launch(t *Thread) error { return t.Lib.LaunchKernel(rl.fn, &rl.cfg, rl.params) }

func params(vals ...any) []byte {
	var buf []byte
	for _, v := range vals {
		switch v := v.(type) {
		case uint64:
			for len(buf)%8 != 0 {
				buf = append(buf, 0)
			}
			buf = append(buf, u64(v)...)
		case int32:
			for len(buf)%4 != 0 {
				buf = append(buf, 0)
			}
			buf = append(buf, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		case float32:
			for len(buf)%4 != 0 {
				buf = append(buf, 0)
			}
			buf = append(buf, f32(v)...)
		}
	}
	return buf
}

type shape struct{ bx, by, rows int }

func benchShapes(b *testing.B) []shape {
	s := os.Getenv("ACPP_BENCH_SHAPES")
	if s == "" {
		s = "32x8x1,32x8x4,32x8x8,32x8x16,32x4x16,64x4x8,128x2x8,128x1x16,256x1x8"
	}
	var out []shape
	for _, f := range strings.Split(s, ",") {
		p := strings.Split(f, "x")
		if len(p) != 3 {
			b.Fatalf("ACPP_BENCH_SHAPES: %q is not BXxBYxROWS", f)
		}
		var v [3]int
		for i := range p {
			n, err := strconv.Atoi(p[i])
			if err != nil || n <= 0 {
				b.Fatalf("ACPP_BENCH_SHAPES: %q is not BXxBYxROWS", f)
			}
			v[i] = n
		}
		out = append(out, shape{v[0], v[1], v[2]})
	}
	return out
}

// stepReport reports the GPU time of one step and the bandwidth it reaches
// counting one read and one write of the grid.
func stepReport(b *testing.B, per time.Duration, bytes int) {
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/step")
	b.ReportMetric(float64(bytes)/per.Seconds()/1e9, "GB/s")
}

// BenchmarkKernels: each built-in kernel's GPU time against hand-written
// CUDA C on the same GPU in the same run. jacobi/N (N×N float32, one step
// reads and writes the grid once): ref-naive and ref-strip-R (R rows per
// thread) are cuda/benchref's kernels; acpp is the built-in as the backend
// launches it, straight through the driver; acpp-enqueue the same through
// Enqueue (queueing included, pipelined). Each variant's output is
// compared bit for bit with the built-in's first. saxpy/N likewise.
func BenchmarkKernels(b *testing.B) {
	d := openGPUs(b, Config{})[0]
	ref := loadRefs(b, d)
	const steps = 20
	jac := builtin(b, "jacobi2d")
	cand := candidate(b, "jacobi2d", "jacobi")
	for _, n := range []int{4096, 16384} {
		grid := make([]byte, 4*n*n)
		for i, f := 0, f32s(grid); i < n*n; i++ {
			f[i] = float32(i%1013)*0.001 - 0.3
		}
		A0 := upload(b, d, grid) // the initial grid, copied into A before each check
		A := mustAlloc(b, d, device.MemDevice, 4*n*n)
		B := mustAlloc(b, d, device.MemDevice, 4*n*n)
		rg := [3]int{1, n, n}
		nd := device.NDRange{Global: rg}
		acppLaunch := [2]*rawLaunch{
			prepareRaw(b, d, jac, nd, []device.Arg{accArg(A, rg), accArg(B, rg)}, nil),
			prepareRaw(b, d, jac, nd, []device.Arg{accArg(B, rg), accArg(A, rg)}, nil),
		}
		// The built-in's output of one step A→B is what every variant must give.
		oneStep := func(launch func(t *Thread) error) []byte {
			if err := d.Do(func(t *Thread) error {
				if err := t.Lib.MemcpyDtoDAsync(driver.DevicePtr(A.Addr), driver.DevicePtr(A0.Addr), uint64(A.Bytes), t.Streams[0]); err != nil {
					return err
				}
				if err := launch(t); err != nil {
					return err
				}
				return t.Lib.StreamSynchronize(t.Streams[0])
			}); err != nil {
				b.Fatal(err)
			}
			return download(b, d, B)
		}
		// What every variant must give for one step A0→B: the Go
		// implementation's order of additions (kernels/impl.go).
		want := make([]float32, n*n)
		g := f32s(grid)
		for y := 0; y < n; y++ {
			for x := 0; x < n; x++ {
				i := y*n + x
				if y == 0 || x == 0 || y == n-1 || x == n-1 {
					want[i] = g[i]
					continue
				}
				s := g[i-n] + g[i+n]
				s = s + g[i-1]
				s = s + g[i+1]
				want[i] = 0.25 * s
			}
		}
		check := func(b *testing.B, name string, launch func(t *Thread) error) {
			got := f32s(oneStep(launch))
			bad, first := 0, -1
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					if bad++; first < 0 {
						first = i
					}
				}
			}
			if bad > 0 {
				b.Fatalf("jacobi/%d/%s: %d of %d points differ from the Go implementation's, first (%d, %d): %g, want %g",
					n, name, bad, n*n, first/n, first%n, got[first], want[first])
			}
		}
		bytesPerStep := 8 * n * n
		refNaive := func(i int) *rawLaunch {
			src, dst := A, B
			if i%2 == 1 {
				src, dst = B, A
			}
			bs := uint32(32)
			return &rawLaunch{fn: ref.naive, cfg: driver.LaunchConfig{Grid: [3]uint32{(uint32(n) + bs - 1) / bs, (uint32(n) + 7) / 8, 1}, Block: [3]uint32{bs, 8, 1}},
				params: params(uint64(src.Addr), uint64(dst.Addr), int32(n))}
		}
		refStrip := func(i, bx, by, rows int) *rawLaunch {
			src, dst := A, B
			if i%2 == 1 {
				src, dst = B, A
			}
			ty := (n + rows - 1) / rows
			return &rawLaunch{fn: ref.strip, cfg: driver.LaunchConfig{Grid: [3]uint32{uint32((n + bx - 1) / bx), uint32((ty + by - 1) / by), 1}, Block: [3]uint32{uint32(bx), uint32(by), 1}},
				params: params(uint64(src.Addr), uint64(dst.Addr), int32(n), int32(rows))}
		}
		run := func(name string, mk func(i int) *rawLaunch) {
			b.Run(fmt.Sprintf("jacobi/%d/%s", n, name), func(b *testing.B) {
				ls := [2]*rawLaunch{mk(0), mk(1)}
				check(b, name, func(t *Thread) error {
					l := *ls[0]
					l.cfg.Stream = t.Streams[0]
					return l.launch(t)
				})
				var total time.Duration
				for b.Loop() {
					total += gpuTime(b, d, steps, func(t *Thread, i int) error {
						l := ls[i%2]
						l.cfg.Stream = t.Streams[0]
						return l.launch(t)
					})
				}
				stepReport(b, total/time.Duration(b.N), bytesPerStep)
			})
		}
		run("ref-naive", refNaive)
		for _, s := range []shape{{32, 8, 8}, {128, 1, 16}, {32, 4, 32}} {
			run(fmt.Sprintf("ref-strip-%dx%dx%d", s.bx, s.by, s.rows), func(i int) *rawLaunch { return refStrip(i, s.bx, s.by, s.rows) })
		}
		run("acpp", func(i int) *rawLaunch { return acppLaunch[i] })
		b.Run(fmt.Sprintf("jacobi/%d/acpp-enqueue", n), func(b *testing.B) {
			ops := [2]device.LaunchOp{
				{Kernel: jac, Range: nd, Args: []device.Arg{accArg(A, rg), accArg(B, rg)}},
				{Kernel: jac, Range: nd, Args: []device.Arg{accArg(B, rg), accArg(A, rg)}},
			}
			var total time.Duration
			for b.Loop() {
				total += enqueueTime(b, d, steps, func(i int) device.Op { return ops[i%2] })
			}
			stepReport(b, total/time.Duration(b.N), bytesPerStep)
		})
		if cand != nil {
			for _, s := range benchShapes(b) {
				run(fmt.Sprintf("cand-%dx%dx%d", s.bx, s.by, s.rows), func(i int) *rawLaunch {
					args := []device.Arg{accArg(A, rg), accArg(B, rg)}
					if i%2 == 1 {
						args = []device.Arg{accArg(B, rg), accArg(A, rg)}
					}
					g, err := hintedGeometry(nd, 1024, &kernels.Launch{Block: [3]int{1, s.by, s.bx}, PerThread: [3]int{1, s.rows, 1}})
					if err != nil {
						b.Fatal(err)
					}
					return prepareRaw(b, d, cand, nd, args, &g)
				})
			}
		}
		for _, m := range []*device.Mem{A0, A, B} {
			_ = d.Free(m)
		}
	}

	// saxpy over 64 Mi floats: 12 bytes per element (x, y read, y written).
	const sn = 64 << 20
	x := mustAlloc(b, d, device.MemDevice, 4*sn)
	y := mustAlloc(b, d, device.MemDevice, 4*sn)
	sax := builtin(b, "saxpy")
	snd := device.NDRange{Global: [3]int{1, 1, sn}}
	sargs := []device.Arg{scalarF32(0.5), ptrArg(x, 4), ptrArg(y, 4)}
	saxpyRun := func(name string, l *rawLaunch) {
		b.Run("saxpy/64Mi/"+name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += gpuTime(b, d, steps, func(t *Thread, i int) error {
					l.cfg.Stream = t.Streams[0]
					return l.launch(t)
				})
			}
			stepReport(b, total/time.Duration(b.N), 12*sn)
		})
	}
	saxpyRun("ref", &rawLaunch{fn: ref.saxpy, cfg: driver.LaunchConfig{Grid: [3]uint32{sn / 256, 1, 1}, Block: [3]uint32{256, 1, 1}},
		params: params(int32(sn), float32(0.5), uint64(x.Addr), uint64(y.Addr))})
	saxpyRun("acpp", prepareRaw(b, d, sax, snd, sargs, nil))
	if c := candidate(b, "saxpy", "saxpy"); c != nil {
		saxpyRun("cand", prepareRaw(b, d, c, snd, sargs, nil))
	}

	// fill_f32 and copy_f32 over the same 64 Mi floats, as a 1D range (4
	// and 8 bytes an element).
	elementwise := func(name string, bytes int, l *rawLaunch) {
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += gpuTime(b, d, steps, func(t *Thread, i int) error {
					l.cfg.Stream = t.Streams[0]
					return l.launch(t)
				})
			}
			stepReport(b, total/time.Duration(b.N), bytes)
		})
	}
	grid1 := driver.LaunchConfig{Grid: [3]uint32{sn / 256, 1, 1}, Block: [3]uint32{256, 1, 1}}
	rg1 := [3]int{1, 1, sn}
	fargs := []device.Arg{accArg(y, rg1), scalarF32(1.5)}
	elementwise("fill/64Mi/ref", 4*sn, &rawLaunch{fn: ref.fill, cfg: grid1, params: params(uint64(y.Addr), float32(1.5), int32(sn))})
	elementwise("fill/64Mi/acpp", 4*sn, prepareRaw(b, d, builtin(b, "fill_f32"), snd, fargs, nil))
	if c := candidate(b, "fill_f32", "fill"); c != nil {
		elementwise("fill/64Mi/cand", 4*sn, prepareRaw(b, d, c, snd, fargs, nil))
	}
	ranged1 := func(m *device.Mem) device.Arg {
		return device.Arg{Kind: device.ArgRangedAccessor, Space: m.Space(), Mem: m, ElemSize: 4, Range: rg1, AccessRange: rg1}
	}
	cargs := []device.Arg{ranged1(x), ranged1(y)}
	elementwise("copy/64Mi/ref", 8*sn, &rawLaunch{fn: ref.copy, cfg: grid1, params: params(uint64(x.Addr), uint64(y.Addr), int32(sn))})
	elementwise("copy/64Mi/acpp", 8*sn, prepareRaw(b, d, builtin(b, "copy_f32"), snd, cargs, nil))
	if c := candidate(b, "copy_f32", "copy"); c != nil {
		elementwise("copy/64Mi/cand", 8*sn, prepareRaw(b, d, c, snd, cargs, nil))
		for _, per := range []int{2, 4, 8} {
			g, err := hintedGeometry(snd, 1024, &kernels.Launch{Block: [3]int{1, 1, 256}, PerThread: [3]int{1, 1, per}})
			if err != nil {
				b.Fatal(err)
			}
			elementwise(fmt.Sprintf("copy/64Mi/cand-%d", per), 8*sn, prepareRaw(b, d, c, snd, cargs, &g))
		}
	}
}

// enqueueTime is gpuTime for ops given to Enqueue on queue 0 (stream 0):
// the events are recorded by Do, which the owner runs in order with the
// enqueued ops.
func enqueueTime(b *testing.B, d *Device, steps int, op func(i int) device.Op) time.Duration {
	var e0, e1 driver.Event
	if err := d.Do(func(t *Thread) error {
		var err error
		if e0, err = t.Lib.EventCreate(0); err != nil {
			return err
		}
		e1, err = t.Lib.EventCreate(0)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	done := func(err error) {
		if err != nil {
			b.Error(err)
		}
		wg.Done()
	}
	for i := range 2 { // warm up
		wg.Add(1)
		if err := d.Enqueue(0, op(i), done); err != nil {
			b.Fatal(err)
		}
	}
	_ = d.Do(func(t *Thread) error { return t.Lib.EventRecord(e0, t.Streams[0]) })
	for i := range steps {
		wg.Add(1)
		if err := d.Enqueue(0, op(i), done); err != nil {
			b.Fatal(err)
		}
	}
	var per time.Duration
	err := d.Do(func(t *Thread) error {
		if err := t.Lib.EventRecord(e1, t.Streams[0]); err != nil {
			return err
		}
		if err := t.Lib.EventSynchronize(e1); err != nil {
			return err
		}
		ms, err := t.Lib.EventElapsedTime(e0, e1)
		per = time.Duration(float64(ms) * 1e6 / float64(steps))
		_ = t.Lib.EventDestroy(e0)
		_ = t.Lib.EventDestroy(e1)
		return err
	})
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	return per
}

// BenchmarkSubmitWait: one small kernel (saxpy over 1 Mi floats, about 5 µs
// on an H100) launched and waited for, one at a time. raw-spin: cuLaunchKernel
// then cuStreamQuery until done, on the owner thread; raw-blocking:
// cuLaunchKernel, cuEventRecord of a blocking-sync event and
// cuEventSynchronize. The backend rows are Enqueue and a wait for done,
// with each completion strategy: backend-* wait on a channel (park at
// once); backend-spin-spinwait waits as the runtime's Node.Wait does
// under CompletionSpin (spinThenPark: device.SpinUntil for the device's
// SpinWait, then park). What a user gets: runtime-spin is the executor
// (exec.Runtime over the CPU and the GPU in spin mode: Submit of the
// launch as a group, then Node.Wait); queue-* is acpp.NewQueue with
// ACPP_CUDA_COMPLETION set (Submit of h.Launch("saxpy", ...) over two
// buffers on the GPU, then the event's Wait; -qwait: q.Wait instead). The spin rows compare with
// raw-spin, the others with raw-blocking (scripts/bench).
func BenchmarkSubmitWait(b *testing.B) {
	const n = 1 << 20
	k := builtin(b, "saxpy")
	nd := device.NDRange{Global: [3]int{1, 1, n}}
	setup := func(b *testing.B, cfg Config) (*Device, device.LaunchOp) {
		d := openGPUs(b, cfg)[0]
		x := mustAlloc(b, d, device.MemDevice, 4*n)
		y := mustAlloc(b, d, device.MemDevice, 4*n)
		op := device.LaunchOp{Kernel: k, Range: nd, Args: []device.Arg{scalarF32(0.5), ptrArg(x, 4), ptrArg(y, 4)}}
		if err := do(b, d, 0, op); err != nil {
			b.Fatal(err)
		}
		return d, op
	}
	raw := func(b *testing.B, blocking bool) {
		d, op := setup(b, Config{})
		rl := prepareRaw(b, d, k, nd, op.Args, nil)
		_ = d.Do(func(t *Thread) error {
			rl.cfg.Stream = t.Streams[0]
			ev, err := t.Lib.EventCreate(driver.EventBlockingSync | driver.EventDisableTiming)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := rl.launch(t); err != nil {
					b.Fatal(err)
				}
				if blocking {
					if err := t.Lib.EventRecord(ev, t.Streams[0]); err != nil {
						b.Fatal(err)
					}
					if err := t.Lib.EventSynchronize(ev); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for {
					err := t.Lib.StreamQuery(t.Streams[0])
					if err == nil {
						break
					}
					if !isNotReady(err) {
						b.Fatal(err)
					}
				}
			}
			return t.Lib.EventDestroy(ev)
		})
	}
	// cpu reports process CPU time per op over the loop (the spin rows
	// keep cores busy: this says how many).
	cpu := func(b *testing.B, loop func()) {
		b.ReportAllocs()
		c0 := cpuTime()
		loop()
		b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	b.Run("raw-spin", func(b *testing.B) { raw(b, false) })
	b.Run("raw-blocking", func(b *testing.B) { raw(b, true) })
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"backend-poll", Config{}},
		{"backend-blocking-sync", Config{Completion: CompletionBlockingSync}},
		{"backend-callback", Config{Completion: CompletionCallback}},
		{"backend-spin", Config{Completion: CompletionSpin}},
	} {
		b.Run(c.name, func(b *testing.B) {
			d, op := setup(b, c.cfg)
			// The plainest wait a caller can do: one channel, reused.
			ch := make(chan error, 1)
			done := func(err error) { ch <- err }
			cpu(b, func() {
				for b.Loop() {
					if err := d.Enqueue(0, op, done); err != nil {
						b.Fatal(err)
					}
					if err := <-ch; err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
	b.Run("backend-spin-spinwait", func(b *testing.B) {
		d, op := setup(b, Config{Completion: CompletionSpin})
		var w spinThenPark
		spin := d.SpinWait()
		var sub submitClock
		cpu(b, func() {
			for b.Loop() {
				sub.start()
				if err := d.Enqueue(0, op, w.done); err != nil {
					b.Fatal(err)
				}
				sub.stop()
				if err := w.wait(spin); err != nil {
					b.Fatal(err)
				}
			}
		})
		sub.report(b)
	})
	b.Run("runtime-spin", func(b *testing.B) {
		d, op := setup(b, Config{Completion: CompletionSpin})
		c := cpudev.New(0, 1)
		defer c.Close()
		rt, err := exec.New(exec.Config{Devices: []device.Device{c, d}})
		if err != nil {
			b.Fatal(err)
		}
		defer rt.Close(context.Background())
		ctx := context.Background()
		g := exec.Group{Name: "saxpy", Device: d, Ops: []device.Op{op}}
		var sub submitClock
		cpu(b, func() {
			for b.Loop() {
				sub.start()
				nd, err := rt.Submit(g)
				if err != nil {
					b.Fatal(err)
				}
				sub.stop()
				if err := nd.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		sub.report(b)
	})
	for _, row := range []struct {
		m     Completion
		qwait bool // wait with q.Wait instead of the event's Wait
	}{{CompletionSpin, false}, {CompletionSpin, true}, {CompletionBlockingSync, false}} {
		m := row.m
		name := "queue-" + m.String()
		if row.qwait {
			name += "-qwait"
		}
		b.Run(name, func(b *testing.B) {
			b.Setenv(CompletionEnv, m.String())
			if err := acppkernels.Register(); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			q, err := acpp.NewQueue(ctx, acpp.WithKind(device.KindCUDA))
			if err != nil {
				b.Skipf("no CUDA device for a queue: %v", err)
			}
			defer q.Close()
			gpu := q.Device().ID
			xs := make([]float32, n)
			for i := range xs {
				xs[i] = float32(i%1000) * 0.001
			}
			x, err := acpp.NewBufferFrom(q, xs, acpp.R1(n), acpp.CopyData())
			if err != nil {
				b.Fatal(err)
			}
			y, err := acpp.NewBufferFrom(q, xs, acpp.R1(n), acpp.CopyData())
			if err != nil {
				b.Fatal(err)
			}
			saxpy := func(h *acpp.Handler) error {
				h.Launch("saxpy", acpp.R1(n), acpp.Scalar(float32(0.5)), acpp.ReadRaw(h, x), acpp.ReadWriteRaw(h, y))
				return nil
			}
			var sub submitClock
			step := func() {
				sub.start()
				ev, err := q.Submit(saxpy, acpp.On(gpu))
				if err != nil {
					b.Fatal(err)
				}
				sub.stop()
				wait := ev.Wait
				if row.qwait {
					wait = q.Wait
				}
				if err := wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			step() // the buffers move to the GPU
			sub = submitClock{}
			cpu(b, func() {
				for b.Loop() {
					step()
				}
			})
			sub.report(b)
		})
	}
}

// spinThenPark is one op's done, waited for as exec's Node.Wait waits for
// a node on a device that asks for a spin (device.SpinWaiter): spin on fin
// for up to the bound, then park on a channel made only then. done and
// wait are the node's finish and Wait, without the executor around them.
type spinThenPark struct {
	fin  atomic.Bool
	err  error // written before fin is set
	mu   sync.Mutex
	park chan struct{} // a parked waiter's; guarded by mu
}

func (w *spinThenPark) done(err error) {
	w.err = err
	w.mu.Lock()
	w.fin.Store(true)
	c := w.park
	w.park = nil
	w.mu.Unlock()
	if c != nil {
		close(c)
	}
}

// wait returns done's error and makes w ready for the next op.
func (w *spinThenPark) wait(spin time.Duration) error {
	if !device.SpinUntil(&w.fin, spin, nil) {
		w.mu.Lock()
		if w.fin.Load() {
			w.mu.Unlock()
		} else {
			c := make(chan struct{})
			w.park = c
			w.mu.Unlock()
			<-c
		}
	}
	w.fin.Store(false)
	return w.err
}

func isNotReady(err error) bool { return errors.Is(err, driver.ErrNotReady) }

// submitClock sums the time spent in the submit call of a submit→wait loop
// (Enqueue, exec Submit or Queue.Submit): the rest of an op is the wait.
type submitClock struct {
	t0  time.Time
	sum time.Duration
	n   int
}

func (c *submitClock) start() { c.t0 = time.Now() }
func (c *submitClock) stop()  { c.sum += time.Since(c.t0); c.n++ }

// report adds submit-µs/op to b's results.
func (c *submitClock) report(b *testing.B) {
	if c.n > 0 {
		b.ReportMetric(float64(c.sum.Nanoseconds())/1e3/float64(c.n), "submit-µs/op")
	}
}
