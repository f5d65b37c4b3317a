// Command custom-node runs y = a·x² + y with the kernel custom.poly, which
// examples/custom-node/node's nodes carry: embedded on this machine by
// default, or on a cluster of those nodes with --cluster. The result is the
// same bit for bit.
//
//	go run ./examples/custom-node                       # embedded
//	go run ./examples/custom-node --cluster 127.0.0.1:7947 --credentials creds --client alice
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/examples/custom-node/poly"
)

func main() {
	clusterAddrs := flag.String("cluster", "", "QUIC addresses of the custom nodes, comma-separated (empty: run embedded)")
	creds := flag.String("credentials", "", "credentials directory (acpp-node credentials … client NAME)")
	client := flag.String("client", "", "client name of the credentials")
	n := flag.Int("n", 1<<20, "elements")
	steps := flag.Int("steps", 4, "launches")
	flag.Parse()
	ctx := context.Background()
	var q *acpp.Queue
	var err error
	if *clusterAddrs == "" {
		q, err = acpp.NewQueue(ctx)
	} else {
		q, err = acpp.Connect(ctx, strings.Split(*clusterAddrs, ","), acpp.WithCredentials(*creds, *client))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "custom-node:", err)
		os.Exit(1)
	}
	ys, err := poly.Run(ctx, q, *n, *steps)
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "custom-node:", err)
		os.Exit(1)
	}
	fmt.Printf("custom.poly: %d elements, %d steps, crc32 %08x, y[1] = %v\n", *n, *steps, poly.Checksum(ys), ys[1])
}
