package cuda

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// The benchmarks need a GPU; each compares the backend with a raw baseline
// made of the same bindings, in the same run. docs/CUDA.md records the
// figures and the command.

const transferBytes = 256 << 20

// inFlight bounds the ops a pipelined benchmark has queued and not seen
// done, as a runtime's executor does: without it b.Loop would queue far
// more work than it can time.
const inFlight = 256

func gbps(b *testing.B, bytes int64) {
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkTransfer: 256 MiB host→device and device→host. raw is a
// synchronous cuMemcpyHtoD/DtoH of pinned memory on the owner thread;
// backend is one CopyOp through Enqueue and done from host USM; cpu-mem is
// the backend from the CPU device's (Go heap) memory, page-locked on its
// first copy; cpu-mem-unpinned the same with pinning off (PinMinBytes < 0).
func BenchmarkTransfer(b *testing.B) {
	d := openGPUs(b, Config{})[0]
	dev := mustAlloc(b, d, device.MemDevice, transferBytes)
	pinned := mustAlloc(b, d, device.MemHost, transferBytes)
	// CPU-device memory (Go heap): pinned on its first copy by d, never by
	// np (PinMinBytes < 0).
	pageable := &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemDevice, Bytes: transferBytes, Host: make([]byte, transferBytes)}
	pageable2 := &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemDevice, Bytes: transferBytes, Host: make([]byte, transferBytes)}
	for i := range pageable.Host {
		pageable.Host[i] = byte(i)
	}
	np := openGPUs(b, Config{PinMinBytes: -1})[0]
	devNP := mustAlloc(b, np, device.MemDevice, transferBytes)
	box := func(src, dst *device.Mem) device.CopyOp {
		return device.CopyOp{Src: linear(src), Dst: linear(dst), Size: [3]int{1, 1, transferBytes}, ElemSize: 1}
	}
	hostPtr := uintptrOf(pinned.Host)
	cases := []struct {
		name string
		run  func(b *testing.B)
	}{
		{"h2d/raw", func(b *testing.B) {
			_ = d.Do(func(t *Thread) error {
				for b.Loop() {
					if err := t.Lib.MemcpyHtoD(driver.DevicePtr(dev.Addr), hostPtr, transferBytes); err != nil {
						b.Fatal(err)
					}
				}
				return nil
			})
		}},
		{"h2d/backend", func(b *testing.B) {
			for b.Loop() {
				if err := do(b, d, 0, box(pinned, dev)); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"h2d/backend-cpu-mem", func(b *testing.B) {
			for b.Loop() { // the first copy page-locks the CPU memory
				if err := do(b, d, 0, box(pageable, dev)); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"h2d/backend-cpu-mem-unpinned", func(b *testing.B) {
			for b.Loop() {
				if err := do(b, np, 0, box(pageable2, devNP)); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"d2h/raw", func(b *testing.B) {
			_ = d.Do(func(t *Thread) error {
				for b.Loop() {
					if err := t.Lib.MemcpyDtoH(hostPtr, driver.DevicePtr(dev.Addr), transferBytes); err != nil {
						b.Fatal(err)
					}
				}
				return nil
			})
		}},
		{"d2h/backend", func(b *testing.B) {
			for b.Loop() {
				if err := do(b, d, 0, box(dev, pinned)); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"d2h/backend-cpu-mem", func(b *testing.B) {
			for b.Loop() {
				if err := do(b, d, 0, box(dev, pageable)); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"d2h/backend-cpu-mem-unpinned", func(b *testing.B) {
			for b.Loop() {
				if err := do(b, np, 0, box(devNP, pageable2)); err != nil {
					b.Fatal(err)
				}
			}
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.run(b)
			gbps(b, transferBytes)
		})
	}
}

// emptyKernel returns the built-in empty kernel's function on d.
func emptyFunction(b *testing.B, d *Device) *function {
	var f *function
	if err := d.Do(func(t *Thread) error {
		var err error
		f, err = d.function(builtin(b, "empty"))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkLaunchEmpty: submission cost of an empty kernel, pipelined (no
// wait between launches). raw: cuLaunchKernel back to back on the owner
// thread; backend: Enqueue of a LaunchOp, done counted (identical launches
// queue up behind the owner, so graph replay turns runs of them into graph
// launches); backend-nographs: the same with Config.NoGraphs, every launch
// a cuLaunchKernel; graph: the same launches replayed from a CUDA graph of
// 256 captured launches (ns/op is per kernel).
func BenchmarkLaunchEmpty(b *testing.B) {
	d := openGPUs(b, Config{})[0]
	f := emptyFunction(b, d)
	nd := make([]byte, 48)
	for i := 0; i < 3; i++ {
		nd[8*i] = 1
	}
	cfg := func(t *Thread) *driver.LaunchConfig {
		return &driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Stream: t.Streams[0]}
	}
	// ns/launch includes draining the stream at the end (b.Loop's own
	// ns/op does not see the wait after the loop).
	perLaunch := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/launch")
	}
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		_ = d.Do(func(t *Thread) error {
			c := cfg(t)
			start := time.Now()
			for b.Loop() {
				if err := t.Lib.LaunchKernel(f.fn, c, nd); err != nil {
					b.Fatal(err)
				}
			}
			err := t.Lib.StreamSynchronize(t.Streams[0])
			perLaunch(b, start)
			return err
		})
	})
	nographs := openGPUs(b, Config{NoGraphs: true})[0]
	backend := func(b *testing.B, d *Device) {
		b.ReportAllocs()
		op := device.LaunchOp{Kernel: builtin(b, "empty"), Range: device.NDRange{Global: [3]int{1, 1, 1}}}
		var wg sync.WaitGroup
		window := make(chan struct{}, inFlight)
		done := func(err error) {
			if err != nil {
				b.Error(err)
			}
			<-window
			wg.Done()
		}
		start := time.Now()
		for b.Loop() {
			wg.Add(1)
			window <- struct{}{}
			if err := d.Enqueue(0, op, done); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		perLaunch(b, start)
	}
	b.Run("backend", func(b *testing.B) { backend(b, d) })
	b.Run("backend-nographs", func(b *testing.B) { backend(b, nographs) })
	b.Run("graph", func(b *testing.B) {
		const per = 256
		_ = d.Do(func(t *Thread) error {
			s := t.Streams[0]
			if err := t.Lib.StreamBeginCapture(s, driver.StreamCaptureModeThread); err != nil {
				b.Fatal(err)
			}
			c := cfg(t)
			for i := 0; i < per; i++ {
				if err := t.Lib.LaunchKernel(f.fn, c, nd); err != nil {
					b.Fatal(err)
				}
			}
			g, err := t.Lib.StreamEndCapture(s)
			if err != nil {
				b.Fatal(err)
			}
			x, err := t.Lib.GraphInstantiate(g)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			start := time.Now()
			for b.Loop() {
				if n%per == 0 {
					if err := t.Lib.GraphLaunch(x, s); err != nil {
						b.Fatal(err)
					}
				}
				n++
			}
			err = t.Lib.StreamSynchronize(s)
			perLaunch(b, start)
			_ = t.Lib.GraphExecDestroy(x)
			_ = t.Lib.GraphDestroy(g)
			return err
		})
	})
}

// BenchmarkSaxpy: y = a*x + y on 64 Mi floats (3 × 256 MiB moved per op).
// latency: launch and wait for each (raw: cuLaunchKernel +
// cuStreamSynchronize on the owner thread; backend: Enqueue + done).
// pipelined: launches back to back, one wait at the end (throughput).
func BenchmarkSaxpy(b *testing.B) {
	const n = 64 << 20
	for _, mc := range []struct {
		name string
		cfg  Config
	}{
		{"poll", Config{}},
		{"poll-max20us", Config{PollMax: 20 * time.Microsecond}},
		{"blocking-sync", Config{Completion: CompletionBlockingSync}},
	} {
		b.Run(mc.name, func(b *testing.B) {
			d := openGPUs(b, mc.cfg)[0]
			x := mustAlloc(b, d, device.MemDevice, 4*n)
			y := mustAlloc(b, d, device.MemDevice, 4*n)
			k := builtin(b, "saxpy")
			args := []device.Arg{scalarF32(2), ptrArg(x, 4), ptrArg(y, 4)}
			op := device.LaunchOp{Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, n}}, Args: args}
			if err := do(b, d, 0, op); err != nil { // load the module
				b.Fatal(err)
			}
			raw := func(b *testing.B, pipelined bool) {
				_ = d.Do(func(t *Thread) error {
					f, err := d.function(k)
					if err != nil {
						b.Fatal(err)
					}
					params, _, err := packArgs(k, op.Range, args, d.kernelAddr)
					if err != nil {
						b.Fatal(err)
					}
					g, _ := launchGeometry(op.Range, d.attrs.MaxThreadsPerBlock)
					c := &driver.LaunchConfig{Grid: g.Grid, Block: g.Block, Stream: t.Streams[0]}
					start := time.Now()
					for b.Loop() {
						if err := t.Lib.LaunchKernel(f.fn, c, params); err != nil {
							b.Fatal(err)
						}
						if !pipelined {
							if err := t.Lib.StreamSynchronize(t.Streams[0]); err != nil {
								b.Fatal(err)
							}
						}
					}
					err = t.Lib.StreamSynchronize(t.Streams[0])
					b.ReportMetric(3*4*n*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
					return err
				})
			}
			backend := func(b *testing.B, pipelined bool) {
				b.ReportAllocs()
				var wg sync.WaitGroup
				window := make(chan struct{}, inFlight)
				done := func(err error) {
					if err != nil {
						b.Error(err)
					}
					<-window
					wg.Done()
				}
				start := time.Now()
				for b.Loop() {
					wg.Add(1)
					window <- struct{}{}
					if err := d.Enqueue(0, op, done); err != nil {
						b.Fatal(err)
					}
					if !pipelined {
						wg.Wait()
					}
				}
				wg.Wait()
				b.ReportMetric(3*4*n*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
			}
			b.Run("latency/raw", func(b *testing.B) { raw(b, false) })
			b.Run("latency/backend", func(b *testing.B) { backend(b, false) })
			b.Run("pipelined/raw", func(b *testing.B) { raw(b, true) })
			b.Run("pipelined/backend", func(b *testing.B) { backend(b, true) })
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompletion compares the completion strategies: latency of one
// empty kernel from Enqueue to done, and for a kernel that keeps the GPU
// busy for about 1 ms, the latency and the host CPU time burnt while
// waiting (cpu-µs/op; a core busy-waiting would show about 1000).
func BenchmarkCompletion(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"poll-max200us", Config{Completion: CompletionPoll, PollMax: 200 * time.Microsecond}},
		{"poll-max50us", Config{Completion: CompletionPoll, PollMax: 50 * time.Microsecond}},
		{"poll-max20us", Config{Completion: CompletionPoll, PollMax: 20 * time.Microsecond}},
		{"blocking-sync", Config{Completion: CompletionBlockingSync}},
		{"callback", Config{Completion: CompletionCallback}},
	} {
		b.Run(c.name, func(b *testing.B) {
			d := openGPUs(b, c.cfg)[0]
			empty := device.LaunchOp{Kernel: builtin(b, "empty"), Range: device.NDRange{Global: [3]int{1, 1, 1}}}
			cycles := uint64(1980) * 1000 // about 1 ms at the H200's boost clock
			spin := device.LaunchOp{Kernel: builtin(b, "spin"), Range: device.NDRange{Global: [3]int{1, 1, 1}}, Args: []device.Arg{scalarU64(cycles)}}
			_ = do(b, d, 0, spin)
			for _, c := range []struct {
				name string
				op   device.LaunchOp
			}{{"empty", empty}, {"spin1ms", spin}} {
				b.Run(c.name, func(b *testing.B) {
					b.ReportAllocs()
					c0 := cpuTime()
					for b.Loop() {
						if err := do(b, d, 0, c.op); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
				})
			}
		})
	}
}

// BenchmarkPeer: 1 GiB from one GPU's memory to another's. raw:
// cuMemcpyPeerAsync + cuStreamSynchronize on the owner thread; peer: a
// CopyOp through the backend with peer access; staged: the backend with
// NoPeer (through pinned host memory).
func BenchmarkPeer(b *testing.B) {
	const n = 1 << 30
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"peer", Config{}}, {"staged", Config{NoPeer: true}}} {
		b.Run(c.name, func(b *testing.B) {
			devs := openGPUs(b, c.cfg)
			if len(devs) < 2 {
				b.Skipf("needs two GPUs, this machine has %d", len(devs))
			}
			src := mustAlloc(b, devs[0], device.MemDevice, n)
			dst := mustAlloc(b, devs[1], device.MemDevice, n)
			if c.name == "peer" {
				b.Run("raw", func(b *testing.B) {
					d := devs[1]
					_ = d.Do(func(t *Thread) error {
						for b.Loop() {
							if err := t.Lib.MemcpyPeerAsync(driver.DevicePtr(dst.Addr), d.ctx, driver.DevicePtr(src.Addr), devs[0].ctx, n, t.Streams[0]); err != nil {
								b.Fatal(err)
							}
							if err := t.Lib.StreamSynchronize(t.Streams[0]); err != nil {
								b.Fatal(err)
							}
						}
						return nil
					})
					gbps(b, n)
				})
			}
			b.Run("backend", func(b *testing.B) {
				op := device.CopyOp{Src: linear(src), Dst: linear(dst), Size: [3]int{1, 1, n}, ElemSize: 1}
				for b.Loop() {
					if err := do(b, devs[0], 0, op); err != nil {
						b.Fatal(err)
					}
				}
				gbps(b, n)
			})
		})
	}
}

// BenchmarkFillDevice: 256 MiB fills of device memory on a GPU with a
// 1-byte (cuMemsetD8), float32 (D32), int16 at an odd count (D16) and
// float64 (a seed block doubled by device copies) pattern, each iteration also timing a D8
// memset of the same bytes (the memset baseline), reported as x-memset.
func BenchmarkFillDevice(b *testing.B) {
	const n = 256 << 20
	d := openGPUs(b, Config{})[0]
	m := mustAlloc(b, d, device.MemDevice, n)
	for _, tc := range []struct {
		name  string
		pat   []byte
		bytes int
	}{
		{"u8", []byte{7}, n}, {"f32", []byte{0, 0, 0x80, 0x3f}, n}, {"i16-odd", []byte{1, 2}, n - 2},
		{"f64", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, n},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var base, fill time.Duration
			for b.Loop() {
				t := time.Now()
				if err := do(b, d, 0, device.FillOp{Dst: m, Bytes: n, Pattern: []byte{0}}); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := do(b, d, 0, device.FillOp{Dst: m, Bytes: tc.bytes, Pattern: tc.pat}); err != nil {
					b.Fatal(err)
				}
				base += t1.Sub(t)
				fill += time.Since(t1)
			}
			gb := float64(tc.bytes) * float64(b.N) / 1e9
			b.ReportMetric(gb/fill.Seconds(), "GB/s")
			b.ReportMetric(base.Seconds()/fill.Seconds(), "x-memset")
		})
	}
}
