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
		fmt.Fprintln(os.Stderr, "reduction:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("reduction", flag.ContinueOnError)
	n := fs.Int("n", 1<<22, "elements; a multiple of -group")
	group := fs.Int("group", 256, "work-group size; a power of two")
	if err := fs.Parse(args); err != nil {
		return err
	}
	G := *group
	if G <= 0 || G&(G-1) != 0 || *n <= 0 || *n%G != 0 {
		return fmt.Errorf("-group (%d) must be a power of two and -n (%d) a positive multiple of it", G, *n)
	}
	N := *n
	q, err := acpp.NewQueue(ctx, acpp.WithKind(acpp.CPU))
	if err != nil {
		return err
	}
	defer q.Close()
	in, err := acpp.NewBuffer[int64](q, acpp.R1(N))
	if err != nil {
		return err
	}
	partial, err := acpp.NewBuffer[int64](q, acpp.R1(N/G))
	if err != nil {
		return err
	}
	total, err := acpp.NewBuffer[int64](q, acpp.R1(1))
	if err != nil {
		return err
	}
	start := time.Now()
	// Fill the input on the device: x[i] = i.
	if _, err := q.Submit(func(h *acpp.Handler) error {
		x := acpp.WriteRaw(h, in, acpp.NoInit)
		h.ParallelForChunks(acpp.R1(N), func(lo, hi acpp.ID) {
			for i := lo[0]; i < hi[0]; i++ {
				x.Set(i, int64(i))
			}
		})
		return nil
	}); err != nil {
		return err
	}
	if _, err := q.Submit(func(h *acpp.Handler) error {
		x := acpp.Read(h, in)
		p := acpp.Write(h, partial, acpp.NoInit)
		loc := acpp.LocalAccessor[int64](h, G)
		h.ParallelForND(acpp.R1(N), acpp.R1(G), func(g acpp.Group) {
			l := loc.Slice(g)
			g.Items(func(it acpp.NDItem) { l[it.LocalID(0)] = x.At(it.GlobalID(0)) })
			for s := G / 2; s > 0; s /= 2 {
				g.Items(func(it acpp.NDItem) { // a barrier between phases
					if i := it.LocalID(0); i < s {
						l[i] += l[i+s]
					}
				})
			}
			p.Set(g.ID(0), l[0])
		})
		return nil
	}, acpp.Named("partial sums")); err != nil {
		return err
	}
	if _, err := q.Submit(func(h *acpp.Handler) error {
		p := acpp.Read(h, partial)
		t := acpp.Write(h, total, acpp.NoInit)
		h.SingleTask(func() {
			var s int64
			for v := range p.Values() {
				s += v
			}
			t.Set(0, s)
		})
		return nil
	}, acpp.Named("final sum")); err != nil {
		return err
	}
	got, err := total.Read(ctx)
	if err != nil {
		return err
	}
	el := time.Since(start)
	if want := int64(N) * int64(N-1) / 2; got[0] != want {
		return fmt.Errorf("sum = %d, want %d", got[0], want)
	}
	fmt.Fprintf(out, "reduction of %d int64 in groups of %d on %s: %v, sum %d: ok\n", N, G, q.Device().ID, el.Round(time.Microsecond), got[0])
	return nil
}
