package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/acpp/acpp"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jacobi:", err)
		os.Exit(1)
	}
}

type config struct {
	n, iters, blocks int
	check            bool
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("jacobi", flag.ContinueOnError)
	var c config
	fs.IntVar(&c.n, "n", 1024, "grid size (n×n float32)")
	fs.IntVar(&c.iters, "iters", 100, "iterations")
	fs.IntVar(&c.blocks, "blocks", 8, "row blocks per iteration (command groups that can run in parallel)")
	fs.BoolVar(&c.check, "check", true, "compare with a sequential reference")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.n < 3 || c.iters < 0 || c.blocks < 1 || c.blocks > c.n-2 {
		return fmt.Errorf("need -n >= 3, -iters >= 0 and 1 <= -blocks <= n-2 (got %d, %d, %d)", c.n, c.iters, c.blocks)
	}
	q, err := acpp.NewQueue(ctx, acpp.WithKind(acpp.CPU))
	if err != nil {
		return err
	}
	defer q.Close()
	grid := initial(c.n)
	start := time.Now()
	res, err := Solve(ctx, q, grid, c.n, c.iters, c.blocks)
	if err != nil {
		return err
	}
	el := time.Since(start)
	if c.check {
		ref := reference(initial(c.n), c.n, c.iters)
		for i := range ref {
			if res[i] != ref[i] {
				return fmt.Errorf("cell (%d,%d) = %v, reference %v", i/c.n, i%c.n, res[i], ref[i])
			}
		}
	}
	st := q.Stats()
	fmt.Fprintf(out, "jacobi %d×%d, %d iterations, %d blocks on %s: %v, %d command groups, bytes copied host↔CPU %d: ok\n",
		c.n, c.n, c.iters, c.blocks, q.Device().ID, el.Round(time.Millisecond), st.Groups, st.BytesCopied)
	return nil
}

// initial is a grid with a hot top edge.
func initial(n int) []float32 {
	g := make([]float32, n*n)
	for j := 0; j < n; j++ {
		g[j] = 100
	}
	return g
}

// Solve runs iters Jacobi iterations over grid (n×n, updated in place) in
// row blocks, and returns it.
func Solve(ctx context.Context, q *acpp.Queue, grid []float32, n, iters, blocks int) ([]float32, error) {
	other := append([]float32(nil), grid...) // boundary values in both
	a, err := acpp.NewBufferFrom(q, grid, acpp.R2(n, n))
	if err != nil {
		return nil, err
	}
	b, err := acpp.NewBufferFrom(q, other, acpp.R2(n, n))
	if err != nil {
		return nil, err
	}
	inner := n - 2
	src, dst := a, b
	for it := 0; it < iters; it++ {
		for blk := 0; blk < blocks; blk++ {
			r0 := 1 + inner*blk/blocks
			r1 := 1 + inner*(blk+1)/blocks
			if r0 == r1 {
				continue
			}
			s, d := src, dst
			_, err := q.Submit(func(h *acpp.Handler) error {
				// Rows r0-1 … r1 (halo included) in, rows r0 … r1-1 out.
				in := acpp.ReadRange(h, s, acpp.R2(r1-r0+2, n), acpp.I2(r0-1, 0))
				out := acpp.WriteRange(h, d, acpp.R2(r1-r0, n-2), acpp.I2(r0, 1), acpp.NoInit)
				h.ParallelFor(acpp.R2(r1-r0, n-2), func(it acpp.Item) {
					i, j := it.ID(0), it.ID(1)
					// in is offset by (r0-1, 0): the cell is (i+1, j+1).
					v := (in.At2(i, j+1) + in.At2(i+2, j+1) + in.At2(i+1, j) + in.At2(i+1, j+2)) * 0.25
					out.Set2(i, j, v)
				})
				return nil
			}, acpp.Named("jacobi"))
			if err != nil {
				return nil, err
			}
		}
		src, dst = dst, src
	}
	if err := q.Wait(ctx); err != nil {
		return nil, err
	}
	if err := a.Close(); err != nil {
		return nil, err
	}
	if err := b.Close(); err != nil {
		return nil, err
	}
	if iters%2 == 1 {
		copy(grid, other)
	}
	return grid, nil
}

// reference is the same computation as a plain loop.
func reference(g []float32, n, iters int) []float32 {
	o := append([]float32(nil), g...)
	for it := 0; it < iters; it++ {
		for i := 1; i < n-1; i++ {
			for j := 1; j < n-1; j++ {
				o[i*n+j] = (g[(i-1)*n+j] + g[(i+1)*n+j] + g[i*n+j-1] + g[i*n+j+1]) * 0.25
			}
		}
		g, o = o, g
	}
	return g
}
