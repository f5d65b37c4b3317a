//go:build gpu

// GPU tests of splitting through the root API: build and run them on a
// machine with a CUDA driver with
//
//	go test -tags gpu -run GPU -v .
//
// Without the tag the root package's tests never load the CUDA backend.

package acpp

import (
	"slices"
	"testing"
	"time"

	_ "github.com/acpp/acpp/cuda" // registers the CUDA backend (no devices without a driver)
)

// C4 (GPU): named kernels split across the CPU and a GPU (different
// memories: each chunk's region moves to its device, halos each sweep)
// give bit for bit the unsplit CPU result; so does a split over every
// device of the queue.
func TestSplitCPUAndGPU_C4_GPU(t *testing.T) {
	registerBuiltins(t)
	q := newQueue(t)
	var gpus []DeviceID
	for _, d := range q.Devices() {
		if d.ID.Kind == CUDA {
			gpus = append(gpus, d.ID)
		}
	}
	if len(gpus) == 0 {
		t.Skip("no CUDA device")
	}
	cpu := newQueue(t, WithDevice(CPU, 0))
	const n, rows, cols, iters = 1 << 22, 2048, 2048, 10
	t0 := time.Now()
	wantS := saxpyRun(t, cpu, n, false)
	wantJ := jacobiRun(t, cpu, rows, cols, iters, false)
	t.Logf("unsplit on the CPU: %v", time.Since(t0))
	for _, tc := range []struct {
		name string
		opts []SubmitOption
	}{
		{"gpu only", []SubmitOption{On(gpus[0])}},
		{"cpu+gpu", []SubmitOption{Split(cpuID, gpus[0])}},
		{"gpu+cpu, 8 chunks", []SubmitOption{SplitWith(SplitOpts{Devices: []DeviceID{gpus[0], cpuID}, Chunks: 8})}},
		{"every device", []SubmitOption{Split()}},
	} {
		name, opts := tc.name, tc.opts
		before := q.Stats()
		t0 := time.Now()
		gotS := saxpyRun(t, q, n, false, opts...)
		gotJ := jacobiRun(t, q, rows, cols, iters, false, opts...)
		st := q.Stats()
		t.Logf("%s: %v for saxpy 3×%d and Jacobi %d sweeps of %d×%d (uploads and read-backs included); %d groups, %d copies, %d MB copied",
			name, time.Since(t0), n, iters, rows, cols, st.Groups-before.Groups, st.Copies-before.Copies, (st.BytesCopied-before.BytesCopied)>>20)
		if !slices.Equal(gotS, wantS) {
			t.Errorf("%s: saxpy differs from the unsplit CPU result", name)
		}
		if !slices.Equal(gotJ, wantJ) {
			t.Errorf("%s: Jacobi differs from the unsplit CPU result", name)
		}
	}
}
