package coordinator_test

import (
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/node"
)

// The recovery path with GPU memory (issue 15): three in-process nodes
// share this machine's first GPU; n2's GPU holds the only copy of a
// buffer when n2 stops; a checkpoint read it back from the GPU before, and
// the consumer on n0's GPU gets the right data after the replay.
// Skipped without a GPU.
//
//	CGO_ENABLED=0 go test -c -o .carry/coordinator.test ./coordinator
//	./.carry/coordinator.test -test.run 'TestRecoverOnGPU_C5' -test.v
func TestRecoverOnGPU_C5(t *testing.T) {
	skipWithoutGPU(t)
	c := coordtest.Start(t, 3, coordtest.Options{Modify: func(_ int, cfg *node.Config) { cfg.Devices = "cpu,cuda:0" }})
	j := openJob(t, c, func(cfg *coordinator.Config) { cfg.Checkpoint = 1 })
	gpus := 0
	for _, d := range j.Devices() {
		if d.Kind == "cuda" {
			gpus++
		}
	}
	if gpus < 3 {
		t.Skipf("no GPU here (devices %v)", j.Devices())
	}
	ctx := testCtx(t)
	const n = 1 << 22
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(i % 977)
	}
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Name: "y", Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	fill(t, j, y, n, 0.5, "n2/cuda:0")
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "saxpy", Range: coordinator.Dims{1, 1, n}, Device: "n2/cuda:0", Args: saxpyArgs(3, x, y)}); err != nil {
		t.Fatal(err)
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.Stop(2)
	out, _ := j.NewBuffer(coordinator.BufferSpec{Name: "out", Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "copy_f32", Range: coordinator.Dims{1, 1, n}, Device: "n0/cuda:0",
		Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: y, Mode: coordinator.Read}), coordinator.Acc(coordinator.Accessor{Buffer: out, Mode: coordinator.Write, NoInit: true})}}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Read(ctx, out, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatalf("Read after losing n2: %v", err)
	}
	for i, v := range bytesF32(got) {
		if want := 3*float32(i%977) + 0.5; v != want {
			t.Fatalf("out[%d] = %v, want %v", i, v, want)
		}
	}
	st := j.Stats().Recovery
	t.Logf("recovery on GPUs: %+v", st)
	if st.Checkpoints == 0 {
		t.Errorf("no checkpoint taken with Checkpoint: 1")
	}
}
