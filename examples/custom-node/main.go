// Command custom-node runs y = a·x² + y with the kernel custom.poly, which
// examples/custom-node/node's nodes carry: embedded on this machine by
// default, or on a cluster of those nodes with --cluster (their QUIC
// addresses, --quic-addr). The result is the same bit for bit.
//
//	go run ./examples/custom-node                       # embedded
//	go run ./examples/custom-node --cluster 127.0.0.1:7951 --credentials creds --client alice
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/examples/custom-node/poly"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "custom-node:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("custom-node", flag.ContinueOnError)
	clusterAddrs := fs.String("cluster", "", "QUIC addresses of the custom nodes, comma-separated (empty: run embedded)")
	creds := fs.String("credentials", "", "credentials directory (acpp-node credentials … client NAME)")
	client := fs.String("client", "", "client name of the credentials")
	n := fs.Int("n", 1<<20, "elements (> 1)")
	steps := fs.Int("steps", 4, "launches (>= 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every setting is a flag (-n, -steps, --cluster …)", fs.Arg(0))
	}
	if *n < 2 || *steps < 0 {
		return fmt.Errorf("need -n >= 2 and -steps >= 0 (got %d, %d)", *n, *steps)
	}
	var q *acpp.Queue
	var err error
	if *clusterAddrs == "" {
		q, err = acpp.NewQueue(ctx)
	} else {
		q, err = acpp.Connect(ctx, strings.Split(*clusterAddrs, ","), acpp.WithCredentials(*creds, *client))
	}
	if err != nil {
		return err
	}
	ys, err := poly.Run(ctx, q, *n, *steps)
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "custom.poly: %d elements, %d steps, crc32 %08x, y[1] = %v\n", *n, *steps, poly.Checksum(ys), ys[1])
	return nil
}
