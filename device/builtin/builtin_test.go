package builtin_test

import (
	"context"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/builtin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func queue(t *testing.T) *acpp.Queue {
	t.Helper()
	q, err := acpp.NewQueue(context.Background(), acpp.WithKind(acpp.CPU))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRegisteredWithBothImplementations(t *testing.T) {
	for _, n := range []string{"saxpy", "fill_f32", "copy_f32", "jacobi2d", "matmul_tiled", "reduce_sum_f32", "empty"} {
		k, err := device.Kernels.Lookup(n)
		if err != nil || !k.Has(device.FormGo) || !k.Has(device.FormPTX) {
			t.Errorf("kernel %q: %v, Go %v, PTX %v", n, err, err == nil && k.Has(device.FormGo), err == nil && k.Has(device.FormPTX))
		}
	}
	if !slices.Contains(builtin.Names(), "saxpy") {
		t.Errorf("Names() = %v", builtin.Names())
	}
}

func TestBuiltinsOnCPU(t *testing.T) {
	ctx := context.Background()
	q := queue(t)
	const n = 1000
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i), 1
	}
	x := must(acpp.NewBufferFrom(q, xs, acpp.R1(n)))
	y := must(acpp.NewBufferFrom(q, ys, acpp.R1(n)))
	must(q.Submit(func(h *acpp.Handler) error {
		h.Launch("saxpy", acpp.R1(n), acpp.Scalar(float32(2)), acpp.ReadRaw(h, x), acpp.ReadWriteRaw(h, y))
		return nil
	}))
	if v := must(y.Read(ctx)); v[999] != 1999 {
		t.Fatalf("saxpy: y[999] = %v, want 1999", v[999])
	}
	// fill + copy of a ranged region.
	g := must(acpp.NewBuffer[float32](q, acpp.R2(4, 4)))
	must(q.Submit(func(h *acpp.Handler) error {
		h.Launch("fill_f32", acpp.R2(4, 4), acpp.Write(h, g, acpp.NoInit), acpp.Scalar(float32(3)))
		return nil
	}))
	must(q.Submit(func(h *acpp.Handler) error {
		h.Launch("copy_f32", acpp.R2(1, 2), acpp.ReadRange(h, y, acpp.R1(2), acpp.I1(0)), acpp.WriteRange(h, g, acpp.R2(1, 2), acpp.I2(2, 1)))
		return nil
	}))
	if v := must(g.Read(ctx)); v[2*4+1] != 1 || v[2*4+2] != 3 || v[2*4+3] != 3 || v[0] != 3 {
		t.Fatalf("fill + copy: %v", v)
	}
	// jacobi2d against a plain loop.
	const r, c = 16, 12
	in := make([]float32, r*c)
	for i := range in {
		in[i] = float32(i % 7)
	}
	a := must(acpp.NewBufferFrom(q, append([]float32(nil), in...), acpp.R2(r, c)))
	b := must(acpp.NewBuffer[float32](q, acpp.R2(r, c)))
	must(q.Submit(func(h *acpp.Handler) error {
		h.Launch("jacobi2d", acpp.R2(r, c), acpp.Read(h, a), acpp.Write(h, b, acpp.NoInit))
		return nil
	}))
	got := must(b.Read(ctx))
	for yy := 0; yy < r; yy++ {
		for xx := 0; xx < c; xx++ {
			i := yy*c + xx
			want := in[i]
			if yy > 0 && xx > 0 && yy < r-1 && xx < c-1 {
				want = 0.25 * (in[i-c] + in[i+c] + in[i-1] + in[i+1])
			}
			if got[i] != want {
				t.Fatalf("jacobi2d (%d,%d) = %v, want %v", yy, xx, got[i], want)
			}
		}
	}
}

func TestMatmulAndReduce_A3(t *testing.T) {
	ctx := context.Background()
	q := queue(t)
	const M, N, K, T = 8, 12, 20, 4
	as, bs := make([]float32, M*K), make([]float32, K*N)
	for i := range as {
		as[i] = float32(i%5) - 2
	}
	for i := range bs {
		bs[i] = float32(i%3) + 0.5
	}
	A := must(acpp.NewBufferFrom(q, as, acpp.R1(M*K)))
	B := must(acpp.NewBufferFrom(q, bs, acpp.R1(K*N)))
	C := must(acpp.NewBuffer[float32](q, acpp.R1(M*N)))
	must(q.Submit(func(h *acpp.Handler) error {
		h.LaunchND("matmul_tiled", acpp.R2(M, N), acpp.R2(T, T), acpp.ReadRaw(h, A), acpp.ReadRaw(h, B), acpp.WriteRaw(h, C, acpp.NoInit),
			acpp.Scalar(uint64(M)), acpp.Scalar(uint64(N)), acpp.Scalar(uint64(K)),
			acpp.LocalAccessor[float32](h, T*T), acpp.LocalAccessor[float32](h, T*T))
		return nil
	}))
	cs := must(C.Read(ctx))
	for i := 0; i < M; i++ {
		for j := 0; j < N; j++ {
			var want float32
			for k := 0; k < K; k++ {
				want += as[i*K+k] * bs[k*N+j]
			}
			if cs[i*N+j] != want {
				t.Fatalf("C[%d,%d] = %v, want %v", i, j, cs[i*N+j], want)
			}
		}
	}
	const n, G = 1000, 64
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = 1
	}
	X := must(acpp.NewBufferFrom(q, xs, acpp.R1(n)))
	P := must(acpp.NewBuffer[float32](q, acpp.R1(16)))
	must(q.Submit(func(h *acpp.Handler) error {
		h.LaunchND("reduce_sum_f32", acpp.R1(16*G), acpp.R1(G), acpp.ReadRaw(h, X), acpp.WriteRaw(h, P, acpp.NoInit),
			acpp.Scalar(uint64(n)), acpp.LocalAccessor[float32](h, G))
		return nil
	}))
	var sum float32
	for _, v := range must(P.Read(ctx)) {
		sum += v
	}
	if sum != n {
		t.Fatalf("reduce_sum_f32 total = %v, want %d", sum, n)
	}
}
