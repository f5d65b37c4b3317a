package gpucheck

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/acpp/acpp"
	_ "github.com/acpp/acpp/cuda" // registers the CUDA backend (no devices without a driver)
	"github.com/acpp/acpp/kernels"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSameKernelOnCPUAndGPU_L3 runs the built-in Jacobi step (package kernels) through the
// embedded runtime on a GPU (when the CUDA backend finds one) and on the
// CPU, over the same buffer, and compares with a plain loop: NewQueue picks
// up the registered backend, coherence moves the pages between host and
// GPU, and both implementations agree bit for bit.
func TestSameKernelOnCPUAndGPU_L3(t *testing.T) {
	ctx := context.Background()
	if err := kernels.Register(); err != nil {
		t.Fatal(err)
	}
	q, err := acpp.NewQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var gpu acpp.DeviceID
	for _, d := range q.Devices() {
		if d.ID.Kind == acpp.CUDA {
			gpu = d.ID
			break
		}
	}
	if gpu.Kind != acpp.CUDA {
		t.Skip("no CUDA device")
	}
	cpu := acpp.DeviceID{Kind: acpp.CPU}
	const r, c, iters = 64, 80, 6
	in := make([]float32, r*c)
	for i := range in {
		in[i] = float32(i % 11)
	}
	ref := append([]float32(nil), in...)
	tmp := make([]float32, r*c)
	for range iters {
		for y := 0; y < r; y++ {
			for x := 0; x < c; x++ {
				i := y*c + x
				if y == 0 || x == 0 || y == r-1 || x == c-1 {
					tmp[i] = ref[i]
					continue
				}
				s := ref[i-c] + ref[i+c]
				s = s + ref[i-1]
				s = s + ref[i+1]
				tmp[i] = 0.25 * s
			}
		}
		ref, tmp = tmp, ref
	}
	A := must(acpp.NewBufferFrom(q, append([]float32(nil), in...), acpp.R2(r, c)))
	B := must(acpp.NewBuffer[float32](q, acpp.R2(r, c)))
	src, dst := A, B
	for it := range iters {
		dev := gpu
		if it%2 == 1 {
			dev = cpu
		}
		s, d := src, dst
		must(q.Submit(func(h *acpp.Handler) error {
			h.Launch("jacobi2d", acpp.R2(r, c), acpp.Read(h, s), acpp.Write(h, d, acpp.NoInit))
			return nil
		}, acpp.On(dev)))
		src, dst = dst, src
	}
	got := must(src.Read(ctx))
	for i := range ref {
		if got[i] != ref[i] {
			t.Fatalf("cell %d = %v, want %v", i, got[i], ref[i])
		}
	}
	st := q.Stats()
	if st.BytesHostToDevice == 0 || st.BytesDeviceToHost == 0 || st.Copies != st.CopiesPlanned {
		t.Fatalf("Stats() = %+v: want copies both ways, all planned copies run", st)
	}
	t.Logf("stats %+v", st)
}
