// Command acpp-submit runs acpp job files: on the embedded runtime of this
// machine by default, or on a cluster of acpp-node agents with --cluster;
// nodes and status list a cluster's members and jobs. See docs/JOBS.md.
//
//	acpp-submit run examples/jobs/jacobi.yaml
//	acpp-submit run --cluster 127.0.0.1:7951 --credentials creds --client alice examples/jobs/jacobi.yaml
//	acpp-submit nodes --cluster 127.0.0.1:7951 --credentials creds --client alice
//	acpp-submit run --trace trace.json --dag dag.dot examples/jobs/jacobi.yaml
//	acpp-submit check JOB
//	acpp-submit kernels
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/acpp/acpp/cmd/acpp-submit/cli"
)

func main() {
	// Backends that have no logger of their own log to the default one:
	// warnings and errors only (acpp-submit run -v logs runtime events).
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.Env{
		Stdout:   os.Stdout,
		Stderr:   os.Stderr,
		Getenv:   os.Getenv,
		Terminal: cli.IsTerminal(os.Stderr),
	})
	stop()
	os.Exit(code)
}
