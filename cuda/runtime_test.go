package cuda_test

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"unsafe"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/cuda" // importing it registers the CUDA backend
	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/kernels"
)

// runDAG runs a DAG that alternates between dev0 and dev1: saxpy on the
// whole of y, then a ranged copy of part of y into x on the other device,
// so pages of both buffers move back and forth. It returns y and x.
func runDAG(t *testing.T, q *acpp.Queue, dev0, dev1 device.ID) ([]float32, []float32) {
	t.Helper()
	ctx := context.Background()
	const n = 1<<16 + 100
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i] = float32(i%97) * 0.25
		ys[i] = float32(i%13) - 6
	}
	x, err := acpp.NewBufferFrom(q, xs, acpp.R1(n), acpp.PageSize(4096), acpp.CopyData())
	if err != nil {
		t.Fatal(err)
	}
	y, err := acpp.NewBufferFrom(q, ys, acpp.R1(n), acpp.PageSize(4096), acpp.CopyData())
	if err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 6; step++ {
		on, other := dev0, dev1
		if step%2 == 1 {
			on, other = dev1, dev0
		}
		a := float32(step) + 0.5
		if _, err := q.Submit(func(h *acpp.Handler) error {
			h.Launch("saxpy", acpp.R1(n), acpp.Scalar(a), acpp.ReadRaw(h, x), acpp.ReadWriteRaw(h, y))
			return nil
		}, acpp.On(on)); err != nil {
			t.Fatal(err)
		}
		part := 5000 + 3000*step
		if _, err := q.Submit(func(h *acpp.Handler) error {
			src := acpp.ReadRange(h, y, acpp.R1(part), acpp.I1(1000*step))
			dst := acpp.WriteRange(h, x, acpp.R1(part), acpp.I1(7*step))
			h.Launch("copy_f32", acpp.R1(part), src, dst)
			return nil
		}, acpp.On(other)); err != nil {
			t.Fatal(err)
		}
	}
	yv, err := y.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	xv, err := x.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return yv, xv
}

// TestEmbeddedRuntimeCPUAndGPU_T3_T4: the embedded runtime with a CPU and a
// GPU device runs a DAG that moves pages back and forth between them, gives
// bit for bit what the CPU alone gives, and runs exactly the copies
// coherence planned.
func TestEmbeddedRuntimeCPUAndGPU_T3_T4(t *testing.T) {
	if err := kernels.Register(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	q, err := acpp.NewQueue(ctx, acpp.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var gpu, cpu *device.ID
	for _, info := range q.Devices() {
		id := info.ID
		switch id.Kind {
		case device.KindCUDA:
			if gpu == nil {
				gpu = &id
			}
		case device.KindCPU:
			if cpu == nil {
				cpu = &id
			}
		}
	}
	if gpu == nil || cpu == nil {
		t.Skipf("needs a CPU and a CUDA device; this machine has %v (GPU tests run on the GPU machine, docs/CUDA.md)", q.Devices())
	}
	gotY, gotX := runDAG(t, q, *gpu, *cpu)
	st := q.Stats()
	if st.Copies == 0 || st.Copies != st.CopiesPlanned {
		t.Errorf("copies run %d, planned by coherence %d: want equal and > 0", st.Copies, st.CopiesPlanned)
	}
	if st.BytesHostToDevice == 0 || st.BytesDeviceToHost == 0 {
		t.Errorf("stats %+v: want pages moved both ways", st)
	}
	t.Logf("mixed CPU/GPU run: %+v", st)

	ref, err := acpp.NewQueue(ctx, acpp.WithKind(device.KindCPU), acpp.WithCPUDevices(2))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	var cpus []device.ID
	for _, info := range ref.Devices() {
		if info.ID.Kind == device.KindCPU {
			cpus = append(cpus, info.ID)
		}
	}
	if len(cpus) < 2 {
		cpus = append(cpus, cpus[0])
	}
	wantY, wantX := runDAG(t, ref, cpus[0], cpus[1])
	for i := range wantY {
		if math.Float32bits(gotY[i]) != math.Float32bits(wantY[i]) || math.Float32bits(gotX[i]) != math.Float32bits(wantX[i]) {
			t.Fatalf("element %d: CPU+GPU gives y=%v x=%v, the CPU alone y=%v x=%v", i, gotY[i], gotX[i], wantY[i], wantX[i])
		}
	}
}

// BenchmarkRuntimeTransfer moves a 256 MiB buffer through the embedded
// runtime: h2d is a CPU group that overwrites the buffer without touching
// it (NoInit, so the GPU's copy becomes outdated at no cost) followed by a
// GPU group that reads it (one 256 MiB host→device copy); d2h is the
// mirror image. raw is a synchronous pinned cuMemcpy of 256 MiB with the
// same bindings, in the same run.
func BenchmarkRuntimeTransfer(b *testing.B) {
	if err := kernels.Register(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithLogger(slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	var gpu, cpu *device.ID
	for _, info := range q.Devices() {
		id := info.ID
		if id.Kind == device.KindCUDA && gpu == nil {
			gpu = &id
		}
		if id.Kind == device.KindCPU && cpu == nil {
			cpu = &id
		}
	}
	if gpu == nil {
		b.Skip("needs a CUDA device")
	}
	const n = 64 << 20 // floats: 256 MiB
	buf, err := acpp.NewBuffer[float32](q, acpp.R1(n), acpp.PageSize(n))
	if err != nil {
		b.Fatal(err)
	}
	hostWrites := func() {
		if _, err := q.Submit(func(h *acpp.Handler) error {
			acpp.Write(h, buf, acpp.NoInit)
			h.SingleTask(func() {})
			return nil
		}, acpp.On(*cpu)); err != nil {
			b.Fatal(err)
		}
	}
	gpuUses := func(write bool) {
		if _, err := q.Submit(func(h *acpp.Handler) error {
			if write {
				acpp.WriteRaw(h, buf, acpp.NoInit)
			} else {
				acpp.ReadRaw(h, buf)
			}
			h.Launch("empty", acpp.R1(1))
			return nil
		}, acpp.On(*gpu)); err != nil {
			b.Fatal(err)
		}
	}
	hostReads := func() {
		if _, err := q.Submit(func(h *acpp.Handler) error {
			acpp.Read(h, buf)
			h.SingleTask(func() {})
			return nil
		}, acpp.On(*cpu)); err != nil {
			b.Fatal(err)
		}
	}
	wait := func() {
		if err := q.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// warm up: allocations on both sides, the host side page-locked
	hostWrites()
	gpuUses(false)
	hostReads()
	wait()
	devs, err := cuda.Open(ctx, cuda.Config{})
	if err != nil || len(devs) == 0 {
		b.Fatalf("cuda.Open: %v", err)
	}
	defer devs[0].Close()
	d := devs[0]
	dm, err := d.Alloc(device.MemDevice, 4*n)
	if err != nil {
		b.Fatal(err)
	}
	hm, err := d.Alloc(device.MemHost, 4*n)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(dm)
	defer d.Free(hm)
	gb := func(b *testing.B) {
		b.ReportMetric(4*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	}
	b.Run("h2d/raw", func(b *testing.B) {
		_ = d.Do(func(t *cuda.Thread) error {
			for b.Loop() {
				if err := t.Lib.MemcpyHtoD(driver.DevicePtr(dm.Addr), uintptr(unsafe.Pointer(&hm.Host[0])), 4*n); err != nil {
					b.Fatal(err)
				}
			}
			return nil
		})
		gb(b)
	})
	b.Run("h2d/runtime", func(b *testing.B) {
		c0 := q.Stats().BytesHostToDevice
		for b.Loop() {
			hostWrites()
			gpuUses(false)
			wait()
		}
		b.ReportMetric(float64(q.Stats().BytesHostToDevice-c0)/float64(b.N), "bytes-h2d/op")
		gb(b)
	})
	b.Run("d2h/raw", func(b *testing.B) {
		_ = d.Do(func(t *cuda.Thread) error {
			for b.Loop() {
				if err := t.Lib.MemcpyDtoH(uintptr(unsafe.Pointer(&hm.Host[0])), driver.DevicePtr(dm.Addr), 4*n); err != nil {
					b.Fatal(err)
				}
			}
			return nil
		})
		gb(b)
	})
	b.Run("d2h/runtime", func(b *testing.B) {
		c0 := q.Stats().BytesDeviceToHost
		for b.Loop() {
			gpuUses(true)
			hostReads()
			wait()
		}
		b.ReportMetric(float64(q.Stats().BytesDeviceToHost-c0)/float64(b.N), "bytes-d2h/op")
		gb(b)
	})
}
