package acpp

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

// barePool is the baseline for the dispatch benchmark: GOMAXPROCS
// goroutines that run funcs from a channel, and a WaitGroup.
type barePool struct {
	work chan func()
	wg   sync.WaitGroup // tasks
	done sync.WaitGroup // workers
}

func newBarePool() *barePool {
	p := &barePool{work: make(chan func(), 1024)}
	n := runtime.GOMAXPROCS(0)
	p.done.Add(n)
	for range n {
		go func() {
			defer p.done.Done()
			for f := range p.work {
				f()
				p.wg.Done()
			}
		}()
	}
	return p
}

func (p *barePool) dispatch(f func()) { p.wg.Add(1); p.work <- f }
func (p *barePool) close()            { close(p.work); p.done.Wait() }

// BenchmarkSubmitEmpty measures submit → complete of an empty kernel with
// one accessor, pipelined (a batch submitted, then one Wait), against a bare
// goroutine pool dispatching the same empty work in the same run.
// read: independent groups (readers); read_write: a dependency chain.
func BenchmarkSubmitEmpty(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"read", "read_write"} {
		b.Run(mode, func(b *testing.B) {
			q := newQueue(b)
			buf := must(NewBuffer[int32](q, R1(1)))
			must(q.Submit(func(h *Handler) error { Fill(h, Write(h, buf, NoInit), 0); return nil }))
			if err := q.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			pool := newBarePool()
			defer pool.close()
			// The coherence core alone, for the same accesses: how much of a
			// group's cost is planning.
			core := coherence.New(coherence.Config{})
			geo := must(coherence.NewGeometry(coherence.Dims{1, 1, 1}, 4, coherence.Dims{}))
			host := coherence.AllocID{}
			if err := core.AddBuffer(coherence.BufferSpec{ID: 1, Geometry: geo, HostData: &host}); err != nil {
				b.Fatal(err)
			}
			cmode := coherence.Read
			if mode == "read_write" {
				cmode = coherence.ReadWrite
			}
			var cid coherence.CGID
			const batch = 256
			var tq, tp, tc, ts time.Duration
			empty := func() {}
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				for range batch {
					var err error
					if mode == "read" {
						_, err = q.Submit(func(h *Handler) error {
							a := Read(h, buf)
							h.SingleTask(func() { _ = a })
							return nil
						})
					} else {
						_, err = q.Submit(func(h *Handler) error {
							a := ReadWrite(h, buf)
							h.SingleTask(func() { _ = a })
							return nil
						})
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				ts += time.Since(t0)
				if err := q.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				for range batch {
					pool.dispatch(empty)
				}
				pool.wg.Wait()
				t2 := time.Now()
				first := cid + 1
				for range batch {
					cid++
					if _, err := core.Submit(coherence.CommandGroup{ID: cid, Accesses: []coherence.Access{
						{Buffer: 1, Pages: geo.All(), Mode: cmode, Target: host}}}); err != nil {
						b.Fatal(err)
					}
				}
				for id := first; id <= cid; id++ {
					core.Complete(id)
				}
				tc += time.Since(t2)
				tp += t2.Sub(t1)
				tq += t1.Sub(t0)
			}
			n := float64(b.N * batch)
			b.ReportMetric(float64(tq.Nanoseconds())/n, "ns/group")
			b.ReportMetric(float64(tp.Nanoseconds())/n, "ns/pooltask")
			b.ReportMetric(float64(tq)/float64(tp), "x_pool")
			b.ReportMetric(float64(tc.Nanoseconds())/n, "core_ns/group")
			b.ReportMetric(float64(ts.Nanoseconds())/n, "submit_ns/group")
		})
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// handSaxpy is the baseline: a parallel loop over plain slices, one
// contiguous range per GOMAXPROCS goroutine.
func handSaxpy(a float32, x, y []float32) {
	n := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	wg.Add(n)
	for w := range n {
		lo, hi := len(x)*w/n, len(x)*(w+1)/n
		go func() {
			defer wg.Done()
			xs, ys := x[lo:hi], y[lo:hi]
			for i := range xs {
				ys[i] = a*xs[i] + ys[i]
			}
		}()
	}
	wg.Wait()
}

// BenchmarkSaxpy compares saxpy through each accessor variant with
// handSaxpy over the same memory in the same run (x_hand = accessor speed /
// hand speed; ≥ 0.8 is the target for raw). "chunks" kernels loop over a
// chunk (ParallelForChunks); "items" kernels are called per item
// (ParallelFor). Size: ACPP_BENCH_SAXPY_N elements (default 64 Mi).
func BenchmarkSaxpy(b *testing.B) {
	ctx := context.Background()
	n := envInt("ACPP_BENCH_SAXPY_N", 64<<20)
	q := newQueue(b)
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = 1, 2
	}
	x := must(NewBufferFrom(q, xs, R1(n)))
	y := must(NewBufferFrom(q, ys, R1(n)))
	const a = float32(0.5)
	kernels := []struct {
		name string
		cgf  func(h *Handler) error
	}{
		{"raw/chunks", func(h *Handler) error {
			xa, ya := ReadRaw(h, x), ReadWriteRaw(h, y)
			h.ParallelForChunks(R1(n), func(lo, hi ID) {
				for i := lo[0]; i < hi[0]; i++ {
					ya.Set(i, a*xa.At(i)+ya.At(i))
				}
			})
			return nil
		}},
		{"unranged/chunks", func(h *Handler) error {
			xa, ya := Read(h, x), ReadWrite(h, y)
			h.ParallelForChunks(R1(n), func(lo, hi ID) {
				for i := lo[0]; i < hi[0]; i++ {
					ya.Set(i, a*xa.At(i)+ya.At(i))
				}
			})
			return nil
		}},
		{"ranged/chunks", func(h *Handler) error {
			xa, ya := ReadRange(h, x, R1(n), I1(0)), ReadWriteRange(h, y, R1(n), I1(0))
			h.ParallelForChunks(R1(n), func(lo, hi ID) {
				for i := lo[0]; i < hi[0]; i++ {
					ya.Set(i, a*xa.At(i)+ya.At(i))
				}
			})
			return nil
		}},
		{"raw/items", func(h *Handler) error {
			xa, ya := ReadRaw(h, x), ReadWriteRaw(h, y)
			h.ParallelFor(R1(n), func(it Item) { i := it.ID(0); ya.Set(i, a*xa.At(i)+ya.At(i)) })
			return nil
		}},
		{"unranged/items", func(h *Handler) error {
			xa, ya := Read(h, x), ReadWrite(h, y)
			h.ParallelFor(R1(n), func(it Item) { i := it.ID(0); ya.Set(i, a*xa.At(i)+ya.At(i)) })
			return nil
		}},
		{"ranged/items", func(h *Handler) error {
			xa, ya := ReadRange(h, x, R1(n), I1(0)), ReadWriteRange(h, y, R1(n), I1(0))
			h.ParallelFor(R1(n), func(it Item) { i := it.ID(0); ya.Set(i, a*xa.At(i)+ya.At(i)) })
			return nil
		}},
	}
	for _, k := range kernels {
		b.Run(k.name, func(b *testing.B) {
			var tk, th time.Duration
			for b.Loop() {
				t0 := time.Now()
				ev, err := q.Submit(k.cgf)
				if err != nil {
					b.Fatal(err)
				}
				if err := ev.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				// Between groups the host may touch the slices: the buffers
				// are linked to them and nothing is in flight.
				handSaxpy(a, xs, ys)
				th += time.Since(t1)
				tk += t1.Sub(t0)
			}
			b.ReportMetric(float64(12*n)*float64(b.N)/tk.Seconds()/1e9, "GB/s")
			b.ReportMetric(float64(12*n)*float64(b.N)/th.Seconds()/1e9, "hand_GB/s")
			b.ReportMetric(float64(th)/float64(tk), "x_hand")
		})
	}
}

// BenchmarkJacobi runs the 2D Jacobi stencil of examples/jacobi on the CPU:
// ACPP_BENCH_JACOBI_N² float32 (default 4096²), ACPP_BENCH_JACOBI_ITERS
// iterations (default 100), 8 row blocks, ranged accessors. It reports the
// bytes copied between host and CPU (0: the CPU is linked to the host
// allocation, L2).
func BenchmarkJacobi(b *testing.B) {
	ctx := context.Background()
	n := envInt("ACPP_BENCH_JACOBI_N", 4096)
	iters := envInt("ACPP_BENCH_JACOBI_ITERS", 100)
	const blocks = 8
	for _, form := range []string{"items", "chunks"} {
		b.Run(form, func(b *testing.B) {
			q := newQueue(b)
			ga, gb := make([]float32, n*n), make([]float32, n*n)
			for j := 0; j < n; j++ {
				ga[j], gb[j] = 100, 100
			}
			A := must(NewBufferFrom(q, ga, R2(n, n)))
			B := must(NewBufferFrom(q, gb, R2(n, n)))
			inner := n - 2
			for b.Loop() {
				src, dst := A, B
				for range iters {
					for blk := range blocks {
						r0, r1 := 1+inner*blk/blocks, 1+inner*(blk+1)/blocks
						s, d := src, dst
						_, err := q.Submit(func(h *Handler) error {
							in := ReadRange(h, s, R2(r1-r0+2, n), I2(r0-1, 0))
							out := WriteRange(h, d, R2(r1-r0, n-2), I2(r0, 1), NoInit)
							if form == "items" {
								h.ParallelFor(R2(r1-r0, n-2), func(it Item) {
									i, j := it.ID(0), it.ID(1)
									out.Set2(i, j, (in.At2(i, j+1)+in.At2(i+2, j+1)+in.At2(i+1, j)+in.At2(i+1, j+2))*0.25)
								})
								return nil
							}
							h.ParallelForChunks(R2(r1-r0, n-2), func(lo, hi ID) {
								for i := lo[0]; i < hi[0]; i++ {
									for j := lo[1]; j < hi[1]; j++ {
										out.Set2(i, j, (in.At2(i, j+1)+in.At2(i+2, j+1)+in.At2(i+1, j)+in.At2(i+1, j+2))*0.25)
									}
								}
							})
							return nil
						})
						if err != nil {
							b.Fatal(err)
						}
					}
					src, dst = dst, src
				}
				if err := q.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			st := q.Stats()
			b.ReportMetric(float64(st.BytesCopied)/float64(b.N), "bytes_copied/op")
			b.ReportMetric(float64(n-2)*float64(n-2)*float64(iters)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mcells/s")
		})
	}
}

// BenchmarkSubmitWaitFake is the launch path of BenchmarkSubmitWait (cuda)
// without a GPU: one tiny named kernel (acpptest.add over 256 floats)
// launched on an in-order fake GPU that asks its waiters to spin, and
// waited for, one at a time. device: the fake's Enqueue and a spin on the
// done flag (the backend alone); queue: Queue.Submit of h.Launch with a
// ReadWrite accessor, then Event.Wait. x_device = queue time / device time
// in the same run: what the public API and the executor add to a launch.
func BenchmarkSubmitWaitFake(b *testing.B) {
	ctx := context.Background()
	registerTestKernels()
	const n = 256
	f := devicetest.NewFake(devicetest.FakeConfig{InOrder: true, SpinWait: 50 * time.Microsecond})
	defer f.Close()
	q := newQueue(b, WithDevices(f), WithDevice(device.KindFake, 0), WithDevice(CPU, 0))
	buf := must(NewBuffer[float32](q, R1(n)))
	cgf := func(h *Handler) error {
		h.Launch("acpptest.add", R1(n), ReadWrite(h, buf), Scalar(float32(1)))
		return nil
	}
	var tsub time.Duration
	step := func() {
		t0 := time.Now()
		ev, err := q.Submit(cgf, On(fakeID))
		if err != nil {
			b.Fatal(err)
		}
		tsub += time.Since(t0)
		if err := ev.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	step() // the buffer moves to the fake
	tsub = 0
	mem := must(f.Alloc(device.MemDevice, 4*n))
	defer f.Free(mem)
	k := must(device.Kernels.Lookup("acpptest.add"))
	op := device.LaunchOp{Name: "acpptest.add", Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, n}},
		Args: []device.Arg{{Kind: device.ArgRangedAccessor, Mem: mem, Range: [3]int{1, 1, n}}, {Kind: device.ArgScalar, Scalar: []byte{0, 0, 128, 63}}}}
	var flag atomic.Bool
	done := func(err error) {
		if err != nil {
			b.Error(err)
		}
		flag.Store(true)
	}
	raw := func() {
		flag.Store(false)
		if err := f.Enqueue(0, op, done); err != nil {
			b.Fatal(err)
		}
		for !device.SpinUntil(&flag, time.Millisecond, nil) {
		}
	}
	var tq, td time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		step()
		t1 := time.Now()
		raw()
		td += time.Since(t1)
		tq += t1.Sub(t0)
	}
	b.ReportMetric(float64(tq.Nanoseconds())/float64(b.N), "queue_ns/op")
	b.ReportMetric(float64(td.Nanoseconds())/float64(b.N), "device_ns/op")
	b.ReportMetric(float64(tq)/float64(td), "x_device")
	b.ReportMetric(float64(tsub.Nanoseconds())/float64(b.N), "submit_ns/op")
}
