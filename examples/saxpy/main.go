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
		fmt.Fprintln(os.Stderr, "saxpy:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("saxpy", flag.ContinueOnError)
	n := fs.Int("n", 1<<24, "vector length in elements")
	a := fs.Float64("a", 2.5, "the scalar a")
	form := fs.String("kernel", "closure", "closure (a Go func literal: embedded only) or named (the registered Go kernel example.saxpy, kernel.go: can run on nodes that register it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n <= 0 {
		return fmt.Errorf("-n %d: the length must be > 0", *n)
	}
	if f := float64(float32(*a)); math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("-a %v: a must be a finite float32 (the check compares every element)", *a)
	}
	if *form != "closure" && *form != "named" {
		return fmt.Errorf("-kernel %q: use closure or named", *form)
	}

	q, err := acpp.NewQueue(ctx, acpp.WithKind(acpp.CPU))
	if err != nil {
		return err
	}
	defer q.Close()

	xs, ys := make([]float32, *n), make([]float32, *n)
	for i := range xs {
		xs[i], ys[i] = float32(i%1000), float32(i%7)
	}
	x, err := acpp.NewBufferFrom(q, xs, acpp.R1(*n))
	if err != nil {
		return err
	}
	y, err := acpp.NewBufferFrom(q, ys, acpp.R1(*n))
	if err != nil {
		return err
	}
	av := float32(*a)
	start := time.Now()
	ev, err := q.Submit(func(h *acpp.Handler) error {
		xa := acpp.ReadRaw(h, x)
		ya := acpp.ReadWriteRaw(h, y)
		if *form == "named" { // the same group with the named kernel
			h.Launch("example.saxpy", acpp.R1(*n), acpp.Scalar(av), xa, ya)
			return nil
		}
		h.ParallelFor(acpp.R1(*n), func(it acpp.Item) {
			i := it.ID(0)
			ya.Set(i, av*xa.At(i)+ya.At(i))
		})
		return nil
	})
	if err != nil {
		return err
	}
	if err := ev.Wait(ctx); err != nil {
		return err
	}
	el := time.Since(start)
	if err := y.Close(); err != nil { // writes back into ys (a no-op on the CPU: linked)
		return err
	}
	if err := x.Close(); err != nil {
		return err
	}
	for i := range ys {
		if want := av*float32(i%1000) + float32(i%7); ys[i] != want {
			return fmt.Errorf("y[%d] = %v, want %v", i, ys[i], want)
		}
	}
	st := q.Stats()
	fmt.Fprintf(out, "saxpy (%s) n=%d on %s: %v (%.2f GB/s), bytes copied %d: ok\n", *form, *n, q.Device().ID, el.Round(time.Microsecond),
		float64(12*(*n))/el.Seconds()/1e9, st.BytesCopied)
	return nil
}
