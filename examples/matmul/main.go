package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/acpp/acpp"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "matmul:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("matmul", flag.ContinueOnError)
	n := fs.Int("n", 256, "matrix size (n×n); a multiple of -tile")
	tile := fs.Int("tile", 16, "work-group (tile) size per dimension")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tile <= 0 || *n <= 0 || *n%*tile != 0 {
		return fmt.Errorf("-n (%d) must be a positive multiple of -tile (%d)", *n, *tile)
	}
	N, T := *n, *tile
	q, err := acpp.NewQueue(ctx, acpp.WithKind(acpp.CPU))
	if err != nil {
		return err
	}
	defer q.Close()
	as, bs := make([]float32, N*N), make([]float32, N*N)
	for i := range as {
		as[i] = float32(i%17) / 8
		bs[i] = float32(i%13) / 4
	}
	A, err := acpp.NewBufferFrom(q, as, acpp.R2(N, N))
	if err != nil {
		return err
	}
	B, err := acpp.NewBufferFrom(q, bs, acpp.R2(N, N))
	if err != nil {
		return err
	}
	C, err := acpp.NewBuffer[float32](q, acpp.R2(N, N))
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = q.Submit(func(h *acpp.Handler) error {
		a, b := acpp.Read(h, A), acpp.Read(h, B)
		c := acpp.Write(h, C, acpp.NoInit)
		ta := acpp.LocalAccessor[float32](h, T*T)  // tile of A
		tb := acpp.LocalAccessor[float32](h, T*T)  // tile of B
		acc := acpp.LocalAccessor[float32](h, T*T) // one sum per item, kept across phases
		h.ParallelForND(acpp.R2(N, N), acpp.R2(T, T), func(g acpp.Group) {
			la, lb, sum := ta.Slice(g), tb.Slice(g), acc.Slice(g)
			g.Items(func(it acpp.NDItem) { sum[it.LocalLinear()] = 0 })
			for k0 := 0; k0 < N; k0 += T {
				// Phase 1: each item loads one element of each tile.
				g.Items(func(it acpp.NDItem) {
					i, j := it.GlobalID(0), it.GlobalID(1)
					li, lj := it.LocalID(0), it.LocalID(1)
					la[li*T+lj] = a.At2(i, k0+lj)
					lb[li*T+lj] = b.At2(k0+li, j)
				})
				// Barrier. Phase 2: accumulate from local memory only.
				g.Items(func(it acpp.NDItem) {
					li, lj := it.LocalID(0), it.LocalID(1)
					s := sum[li*T+lj]
					for k := 0; k < T; k++ {
						s += la[li*T+k] * lb[k*T+lj]
					}
					sum[li*T+lj] = s
				})
			}
			g.Items(func(it acpp.NDItem) { c.Set2(it.GlobalID(0), it.GlobalID(1), sum[it.LocalLinear()]) })
		})
		return nil
	}, acpp.Named("matmul"))
	if err != nil {
		return err
	}
	cs, err := C.Read(ctx)
	if err != nil {
		return err
	}
	el := time.Since(start)
	for i := 0; i < N; i++ {
		for j := 0; j < N; j++ {
			var want float32
			for k := 0; k < N; k++ {
				want += as[i*N+k] * bs[k*N+j]
			}
			if got := cs[i*N+j]; math.Abs(float64(got-want)) > 1e-3*math.Abs(float64(want))+1e-3 {
				return fmt.Errorf("C[%d,%d] = %v, want %v", i, j, got, want)
			}
		}
	}
	fmt.Fprintf(out, "matmul %d×%d, tiles %d×%d on %s: %v (%.2f GFLOP/s): ok\n", N, N, T, T, q.Device().ID,
		el.Round(time.Microsecond), 2*float64(N)*float64(N)*float64(N)/el.Seconds()/1e9)
	return nil
}
