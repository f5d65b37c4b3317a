package coordinator_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openJob(t testing.TB, c *coordtest.Cluster, mod func(*coordinator.Config)) *coordinator.Job {
	t.Helper()
	cfg := c.Config()
	if mod != nil {
		mod(&cfg)
	}
	j, err := coordinator.Open(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		j.Close(ctx)
	})
	return j
}

func f32bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

func bytesF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// jacobiRef runs iters Jacobi steps in plain Go, with the kernel's order of
// float operations: out = 0.25*(((up+down)+left)+right), borders copied.
func jacobiRef(in []float32, rows, cols, iters int) []float32 {
	a := append([]float32(nil), in...)
	b := make([]float32, len(a))
	for range iters {
		jacobiStep(a, b, rows, cols)
		a, b = b, a
	}
	return a
}

func jacobiInput(rows, cols int) []float32 {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32((i*7919)%1009) / 17
	}
	return v
}

// runJacobi runs iters steps on buffers a, b of rows×cols and returns the
// buffer holding the result.
func runJacobi(t testing.TB, j *coordinator.Job, a, b *coordinator.Buffer, rows, cols, iters int, split *coordinator.Split, pin string) *coordinator.Buffer {
	t.Helper()
	ctx := testCtx(t)
	for range iters {
		_, err := j.Submit(ctx, coordinator.Group{
			Kernel: "jacobi2d", Range: coordinator.Dims{1, rows, cols}, Split: split, Device: pin,
			Args: []coordinator.Arg{
				coordinator.Acc(coordinator.Accessor{Buffer: a, Mode: coordinator.Read, Map: coordinator.Neighbourhood(1)}),
				coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, NoInit: true, Map: coordinator.OneToOne()}),
			},
		})
		if err != nil {
			t.Fatalf("Submit jacobi: %v", err)
		}
		a, b = b, a
	}
	return a
}
