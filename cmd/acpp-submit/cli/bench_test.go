package cli

import (
	"context"
	"testing"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/kernels"
)

// BenchmarkJacobiJob runs the Jacobi example at 512×512 (100 iterations)
// through the job runner and, in the same run, as a hand-written program
// over the acpp API doing the same submissions: the ratio of the two is the
// job runner's overhead (parsing, bookkeeping, output).
func BenchmarkJacobiJob(b *testing.B) {
	const n, iters = 512, 100
	dir := b.TempDir()
	job := "../../../examples/jobs/jacobi.yaml"
	params := map[string]string{"n": "512", "iters": "100"}
	ctx := context.Background()
	b.Run("job", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Run(ctx, Config{JobFile: job, Params: params, OutDir: dir, Devices: []string{"cpu"}}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*n*iters)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mcell/s")
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		if err := kernels.Register(); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			q, err := acpp.NewQueue(ctx, acpp.WithKind(acpp.CPU))
			if err != nil {
				b.Fatal(err)
			}
			grid, _ := acpp.NewBuffer[float32](q, acpp.R2(n, n), acpp.PageSize(64, n))
			next, _ := acpp.NewBuffer[float32](q, acpp.R2(n, n), acpp.PageSize(64, n))
			q.Submit(func(h *acpp.Handler) error { acpp.Fill(h, acpp.Write(h, grid, acpp.NoInit), 0); return nil })
			q.Submit(func(h *acpp.Handler) error {
				acpp.Fill(h, acpp.WriteRange(h, grid, acpp.R2(1, n), acpp.I2(0, 0)), 1)
				return nil
			})
			for range iters {
				in, out := grid, next
				q.Submit(func(h *acpp.Handler) error {
					h.Launch("jacobi2d", acpp.R2(n, n), acpp.Read(h, in), acpp.Write(h, out, acpp.NoInit))
					return nil
				})
				grid, next = next, grid
			}
			if _, err := grid.Read(ctx); err != nil {
				b.Fatal(err)
			}
			grid.Close()
			next.Close()
			if err := q.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*n*iters)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mcell/s")
	})
}
