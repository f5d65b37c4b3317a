package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

const benchBytes = 256 << 20

// BenchmarkPageTransfer256MiB moves 256 MiB from one node's allocation to
// another's: through the node path (a Send/Recv instruction pair, pages
// written straight into the destination allocation) and, as the baseline
// in the same run, through two bare transports (transport.SendPages into
// a preallocated buffer). docs/NODE.md has the figures.
func BenchmarkPageTransfer256MiB(b *testing.B) {
	b.Run("transport", func(b *testing.B) { benchTransport(b, benchBytes) })
	for _, mem := range []uint32{0, 1} {
		name := "node"
		if mem == 1 {
			name = "node-gpu-memory"
		}
		b.Run(name, func(b *testing.B) { benchNodePath(b, mem, benchBytes) })
	}
}

// BenchmarkPageHop64KiB is the latency of one 64 KiB transfer (a halo row
// of a 16384-wide float32 grid) between two nodes: bare transport, then
// Send/Recv between host allocations and between GPU allocations (staged
// through pinned memory), in the same run.
func BenchmarkPageHop64KiB(b *testing.B) {
	const size = 64 << 10
	b.Run("transport", func(b *testing.B) { benchTransport(b, size) })
	b.Run("node", func(b *testing.B) { benchNodePath(b, 0, size) })
	b.Run("node-gpu-memory", func(b *testing.B) { benchNodePath(b, 1, size) })
}

func benchTransport(b *testing.B, size uint64) {
	whole := []proto.Box{{Hi: [3]uint64{1, 1, size}}}
	ca, _ := credentials.LoadNode(credDir, "n2")
	cb, _ := credentials.LoadNode(credDir, "n3")
	dst := make([]byte, size)
	src := make([]byte, size)
	tb, err := transport.Start(transport.Config{Credentials: cb, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	tb.HandlePages(func(context.Context, credentials.Identity, *proto.PageHeader) (transport.PageSink, error) {
		return transport.PageSink{Dst: [][]byte{dst}}, nil
	})
	addr := tb.Addr().String()
	ta, err := transport.Start(transport.Config{Credentials: ca, ListenAddr: "127.0.0.1:0",
		Resolve: func(context.Context, string) (string, error) { return addr, nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer ta.Close()
	h := &proto.PageHeader{Job: 1, Buffer: 1, ElemSize: 1, Boxes: whole}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := ta.SendPages(ctx, credentials.Node("n3"), h, [][]byte{src}); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// benchNodePath moves size bytes between allocations in memory mem of two
// nodes with Send/Recv pairs.
func benchNodePath(b *testing.B, mem uint32, size uint64) {
	rng := [3]uint64{1, 1, size}
	whole := []proto.Box{{Hi: rng}}
	nodes := startNodes(b, 2, nil)
	c := startClient(b, credDir, "alice", nodes...)
	if inv, err := c.Inventory(testCtx(b), "n0"); err != nil || len(inv.Memories) <= int(mem) {
		b.Skipf("no memory %d on this machine", mem)
	}
	ja, jb := openJob(b, c, "n0", 1), openJob(b, c, "n1", 1)
	alloc := proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Mem: mem, Range: rng, ElemSize: 1}
	submit(b, ja, alloc)
	submit(b, jb, alloc)
	wait(b, ja, 1)
	wait(b, jb, 1)
	id := uint64(1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		id++
		submit(b, jb, proto.Instr{ID: id, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Mem: mem, Boxes: whole, Peer: "n0"})
		submit(b, ja, proto.Instr{ID: id, Kind: proto.InstrSend, Deps: []uint64{1}, Buffer: 1, Mem: mem, PeerMem: mem, Boxes: whole, Peer: "n1"})
		wait(b, jb, id)
		wait(b, ja, id)
	}
	b.StopTimer()
	ja.Close(context.Background())
	jb.Close(context.Background())
}

// BenchmarkInstrRoundTrip is the latency of one small instruction (a
// 64-byte fill) from Submit to the end of its Wait, client to node on
// loopback, against the transport's bare ping in the same run.
func BenchmarkInstrRoundTrip(b *testing.B) {
	nodes := startNodes(b, 1, nil)
	c := startClient(b, credDir, "alice", nodes...)
	j := openJob(b, c, "n0", 1)
	submit(b, j, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 64}, ElemSize: 1})
	wait(b, j, 1)
	b.Run("ping", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Ping(testCtx(b), "n0"); err != nil {
				b.Fatal(err)
			}
		}
	})
	id := uint64(1) // instruction IDs are unique per job, across sub-benchmark runs
	b.Run("submit+wait", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			id++
			submit(b, j, proto.Instr{ID: id, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Pattern: []byte{byte(id)}})
			wait(b, j, id)
		}
	})
	b.Run("batch-of-100", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			batch := make([]proto.Instr, 100)
			for i := range batch {
				id++
				batch[i] = proto.Instr{ID: id, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Pattern: []byte{byte(id)}}
			}
			submit(b, j, batch...)
			wait(b, j, id)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/instr")
	})
}
