package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/acpp/acpp"
	_ "github.com/acpp/acpp/cuda" // a GPU where there is one
	"github.com/acpp/acpp/kernels"
	"github.com/acpp/acpp/liveview/queueview"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "liveview:", err)
		os.Exit(1)
	}
}

type config struct {
	addr             string
	n, iters, report int
	linger           time.Duration
	started          func(url string) // tests: the view is up
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("liveview", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8090", "where to serve the live view (keep it on loopback: it has no authentication)")
	fs.IntVar(&c.n, "n", 1024, "grid size (n×n float32)")
	fs.IntVar(&c.iters, "iters", 4000, "iterations")
	fs.IntVar(&c.report, "report", 100, "read one row near the hot edge on the host every this many iterations (>= 1)")
	fs.DurationVar(&c.linger, "linger", 0, "keep serving the view this long after the run (Ctrl-C ends it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return runConfig(ctx, c, out)
}

func runConfig(ctx context.Context, c config, out io.Writer) error {
	if c.n < 3 || c.iters < 0 || c.report < 1 {
		return fmt.Errorf("need -n >= 3, -iters >= 0 and -report >= 1 (got %d, %d, %d)", c.n, c.iters, c.report)
	}
	if err := kernels.Register(); err != nil {
		return err
	}
	q, err := acpp.NewQueue(ctx, acpp.WithAcceleratorsFirst())
	if err != nil {
		return err
	}
	defer q.Close()
	// 64 pages of rows: the page grid shows bands of rows.
	page := acpp.PageSize(max(1, c.n/64), c.n)
	grid, err := acpp.NewBufferFrom(q, initial(c.n), acpp.R2(c.n, c.n), acpp.CopyData(), page)
	if err != nil {
		return err
	}
	next, err := acpp.NewBuffer[float32](q, acpp.R2(c.n, c.n), page)
	if err != nil {
		return err
	}

	var done atomic.Int64
	ui, err := queueview.Serve(ctx, q, c.addr, queueview.Config{Title: "jacobi", Unit: "iterations",
		Names:    map[acpp.BufferID]string{grid.ID(): "grid", next.ID(): "next"},
		Progress: func() (int, int) { return int(done.Load()), c.iters }})
	if err != nil {
		return err
	}
	defer ui.Close()
	fmt.Fprintf(out, "live view: %s (jacobi %d×%d on %s)\n", ui.URL(), c.n, c.n, q.Device().ID)
	if c.started != nil {
		c.started(ui.URL())
	}

	src, dst := grid, next
	// A row near the hot edge, which the heat reaches soon.
	row := min(c.n/32+1, c.n-2)
	for it := range c.iters {
		if _, err := q.Submit(func(h *acpp.Handler) error {
			h.Launch("jacobi2d", acpp.R2(c.n, c.n), acpp.Read(h, src), acpp.Write(h, dst, acpp.NoInit))
			return nil
		}, acpp.Named("jacobi2d")); err != nil {
			return err
		}
		src, dst = dst, src
		if (it+1)%c.report != 0 && it+1 != c.iters {
			continue
		}
		// One row on the host: only its pages move (T3), and the read
		// waits for this iteration, which keeps the queue from running
		// far ahead of the progress shown.
		r, err := acpp.HostRead(ctx, src, acpp.Within(acpp.I2(row, 0), acpp.R2(1, c.n)))
		if err != nil {
			return err
		}
		v := r.At2(0, c.n/2)
		r.Close()
		done.Store(int64(it + 1))
		fmt.Fprintf(out, "iteration %d: cell (%d, %d) %.4f\n", it+1, row, c.n/2, v)
	}
	if err := q.Wait(ctx); err != nil {
		return err
	}
	if c.linger > 0 {
		fmt.Fprintf(out, "done; serving the view for %v more (Ctrl-C ends it)\n", c.linger)
		select {
		case <-time.After(c.linger):
		case <-ctx.Done():
		}
	}
	return nil
}

// initial is a grid with a hot top edge.
func initial(n int) []float32 {
	g := make([]float32, n*n)
	for j := range n {
		g[j] = 100
	}
	return g
}
