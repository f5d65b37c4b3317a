package cuda_test

import (
	"context"
	"log/slog"
	"math"
	"testing"

	"github.com/acpp/acpp"
	_ "github.com/acpp/acpp/cuda" // registers the CUDA backend
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
