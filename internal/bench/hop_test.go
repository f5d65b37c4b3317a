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
// Since the transport keeps streams open between small transfers and
// polls (sessions), a second reference is the same round trip on one
// stream kept open: x_rtt_kept and x_rtt_steady_kept.
//
// ns/hop is the whole chain (from the first Submit to Wait's return) over
// its groups, so it includes submitting and issuing the chain and the last
// completion's report. ns/hop-steady leaves those out: it is the time from
// the end of the chain's first kernel to the end of its last, by the
// nodes' clocks (GroupTrace), over the hops between them; x_rtt_steady
// compares it with the same raw round trip. submit-ns/group is the
// client's Submit per group and startup-ns/chain the time from the first
// Submit until a node started the chain's first instruction (the Send of
// the page the first group needs). cpu-ns/hop and
// cpu-ns/raw-rtt are the process's CPU time (both nodes, the client and
// the raw echo server) per hop and per raw round trip: steadier than wall
// time on a loaded machine.
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

	// The same round trip on one stream kept open (as the transport's
	// sessions keep theirs): the reference without a stream's setup.
	kept, err := qc.OpenStreamSync(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer kept.Close()
	rttKept := func() {
		var msg [16]byte
		kept.Write(msg[:])
		if _, err := io.ReadFull(kept, msg[:]); err != nil {
			b.Fatal(err)
		}
	}

	var mu sync.Mutex
	var firstStart, firstEnd, lastEnd time.Time
	cfg := c.Config()
	cfg.OnGroupDone = func(tr coordinator.GroupTrace) {
		mu.Lock()
		defer mu.Unlock()
		for _, in := range tr.Instrs {
			if !in.Start.IsZero() && (firstStart.IsZero() || in.Start.Before(firstStart)) {
				firstStart = in.Start
			}
			if in.Kind != "kernel" {
				continue
			}
			if firstEnd.IsZero() || in.End.Before(firstEnd) {
				firstEnd = in.End
			}
			if in.End.After(lastEnd) {
				lastEnd = in.End
			}
		}
	}
	job, err := coordinator.Open(ctx, cfg)
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
	var steady, submit, startup time.Duration
	chain := func() time.Duration {
		mu.Lock()
		firstStart, firstEnd, lastEnd = time.Time{}, time.Time{}, time.Time{}
		mu.Unlock()
		t0 := time.Now()
		for i := range batch {
			if _, err := job.Submit(ctx, group(i)); err != nil {
				b.Fatal(err)
			}
		}
		submit += time.Since(t0)
		if err := job.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		mu.Lock()
		steady += lastEnd.Sub(firstEnd)
		startup += firstStart.Sub(t0)
		mu.Unlock()
		return d
	}
	chain() // connections, allocations on both nodes
	for range batch {
		rtt()
		rttKept()
	}
	steady, submit, startup = 0, 0, 0
	var hop, raw, rawKept, hopCPU, rawCPU time.Duration
	for b.Loop() {
		c0 := cpuTime()
		hop += chain()
		c1 := cpuTime()
		t0 := time.Now()
		for range batch {
			rtt()
		}
		t1 := time.Now()
		raw += t1.Sub(t0)
		rawCPU += cpuTime() - c1
		for range batch {
			rttKept()
		}
		rawKept += time.Since(t1)
		hopCPU += c1 - c0
	}
	n := float64(b.N * batch)
	b.ReportMetric(float64(hop.Nanoseconds())/n, "ns/hop")
	b.ReportMetric(float64(raw.Nanoseconds())/n, "ns/raw-rtt")
	b.ReportMetric(float64(hop)/float64(raw), "x_rtt")
	b.ReportMetric(float64(rawKept.Nanoseconds())/n, "ns/raw-rtt-kept")
	b.ReportMetric(float64(hop)/float64(rawKept), "x_rtt_kept")
	// The steady part of a chain of batch groups spans batch-1 hops.
	perSteady := float64(steady.Nanoseconds()) / float64(b.N*(batch-1))
	b.ReportMetric(perSteady, "ns/hop-steady")
	b.ReportMetric(perSteady/(float64(raw.Nanoseconds())/n), "x_rtt_steady")
	b.ReportMetric(perSteady/(float64(rawKept.Nanoseconds())/n), "x_rtt_steady_kept")
	// Where the rest of a chain goes: its Submit calls (per group), and the
	// time from the first Submit until a node started the chain's first
	// instruction (per chain).
	b.ReportMetric(float64(submit.Nanoseconds())/n, "submit-ns/group")
	b.ReportMetric(float64(startup.Nanoseconds())/float64(b.N), "startup-ns/chain")
	if hopCPU > 0 && rawCPU > 0 {
		b.ReportMetric(float64(hopCPU.Nanoseconds())/n, "cpu-ns/hop")
		b.ReportMetric(float64(rawCPU.Nanoseconds())/n, "cpu-ns/raw-rtt")
	}
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
						// 16 bytes in, 16 out, until the caller's end: one
						// round trip on a fresh stream, or many on a kept one.
						var msg [16]byte
						for {
							if _, err := io.ReadFull(s, msg[:]); err != nil {
								s.Close()
								return
							}
							s.Write(msg[:])
						}
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
