package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/kernels"
)

// BenchmarkClusterHop (issue 16, item 4) is the latency of one dependent
// command group between two nodes on loopback: a chain of read-write
// fill_f32 groups on one 4-byte buffer, alternately pinned to n0 and n1,
// so that each group waits for the previous one and its page crosses to
// the other node (in-process nodes, real QUIC transports). The reference,
// in the same run, is a raw quic-go round trip between the same
// credentials (16 bytes each way on a fresh stream, as the transport's
// BenchmarkRoundTrip). x_rtt = hop / raw round trip; the issue asks ≤ 2.
func BenchmarkClusterHop(b *testing.B) {
	if err := kernels.Register(); err != nil {
		b.Fatal(err)
	}
	c := coordtest.Start(b, 2, coordtest.Options{})
	ctx := context.Background()
	qc := rawPair(b, c.Dir)
	rtt := func() {
		s, err := qc.OpenStreamSync(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var msg [16]byte
		s.Write(msg[:])
		s.Close()
		if _, err := io.ReadAll(s); err != nil {
			b.Fatal(err)
		}
	}

	job, err := coordinator.Open(ctx, c.Config())
	if err != nil {
		b.Fatal(err)
	}
	defer job.Close(ctx)
	buf, err := job.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
	if err != nil {
		b.Fatal(err)
	}
	group := func(i int) coordinator.Group {
		return coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, 1}, Device: fmt.Sprintf("n%d/cpu:0", i%2),
			Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: buf, Mode: coordinator.ReadWrite}), coordinator.ScalarF32(1)}}
	}
	const batch = 64
	chain := func() time.Duration {
		t0 := time.Now()
		for i := range batch {
			if _, err := job.Submit(ctx, group(i)); err != nil {
				b.Fatal(err)
			}
		}
		if err := job.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	chain() // connections, allocations on both nodes
	for range batch {
		rtt()
	}
	var hop, raw time.Duration
	for b.Loop() {
		hop += chain()
		t0 := time.Now()
		for range batch {
			rtt()
		}
		raw += time.Since(t0)
	}
	n := float64(b.N * batch)
	b.ReportMetric(float64(hop.Nanoseconds())/n, "ns/hop")
	b.ReportMetric(float64(raw.Nanoseconds())/n, "ns/raw-rtt")
	b.ReportMetric(float64(hop)/float64(raw), "x_rtt")
}

// rawPair is a raw quic-go connection from node n0's credentials to an
// echo server with n1's, on loopback.
func rawPair(b *testing.B, dir string) *quic.Conn {
	srv, err := credentials.LoadNode(dir, "n1")
	if err != nil {
		b.Fatal(err)
	}
	cli, err := credentials.LoadNode(dir, "n0")
	if err != nil {
		b.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", srv.ServerTLS(), &quic.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			wg.Go(func() {
				for {
					s, err := conn.AcceptStream(context.Background())
					if err != nil {
						return
					}
					wg.Go(func() {
						io.ReadAll(s)
						var reply [16]byte
						s.Write(reply[:])
						s.Close()
					})
				}
			})
		}
	})
	qc, err := quic.DialAddr(context.Background(), ln.Addr().String(), cli.ClientTLS(nil), &quic.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		qc.CloseWithError(0, "")
		ln.Close()
		wg.Wait()
	})
	return qc
}
