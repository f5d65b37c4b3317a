package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// The edges of the limits docs/NODE.md states: at each limit the node
// accepts, one past it refuses with the documented code, and it then
// serves the next job.

// fills is a chain of fills of buffer 1, IDs from..to.
func fills(from, to uint64) []proto.Instr {
	var out []proto.Instr
	for id := from; id <= to; id++ {
		out = append(out, proto.Instr{ID: id, Kind: proto.InstrFill, Deps: []uint64{id - 1}, Buffer: 1, Pattern: []byte{byte(id), 0, 0, 0}})
	}
	return out
}

// TestSubmitBatchEdge: one MsgSubmit of proto.MaxBatch (4096)
// instructions is accepted as a whole; one of 4097 is refused before it is
// decoded (CodeMalformed, naming the count and the bound), and the node
// serves the next job. (nodeclient splits longer lists, so the batch is
// sent as a raw message.)
func TestSubmitBatchEdge(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	raw := rawClient(t, "alice", nodes[0])
	ctx := testCtx(t)
	j := openJob(t, c, "n0", 1)
	submit(t, j, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 4}, ElemSize: 4})
	batch := fills(2, 1+proto.MaxBatch)
	var out proto.Submitted
	if err := raw.Call(ctx, credentials.Node("n0"), proto.MsgSubmit, &proto.Submit{Job: 1, Instrs: batch}, &out); err != nil {
		t.Fatalf("a batch of %d instructions: %v", len(batch), err)
	}
	wait(t, j, 1+proto.MaxBatch)
	over := fills(2+proto.MaxBatch, 2+2*proto.MaxBatch)
	err := raw.Call(ctx, credentials.Node("n0"), proto.MsgSubmit, &proto.Submit{Job: 1, Instrs: over}, &out)
	wantCode(t, "a batch of 4097 instructions", err, proto.CodeMalformed, "4097 instructions, at most 4096")
	// Nothing of the refused batch was added: its first ID is still free.
	submit(t, j, fills(2+proto.MaxBatch, 2+proto.MaxBatch)...)
	wait(t, j, 2+proto.MaxBatch)
	serves(t, c, 2)
}

// TestJobInstructionsAtTheLimit: a job may hold exactly MaxJobInstrs
// instruction records; the one past it is refused (CodeTooLarge) naming
// what the job holds and the limit.
func TestJobInstructionsAtTheLimit(t *testing.T) {
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.MaxJobInstrs = 8 })
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 1)
	submit(t, j, append([]proto.Instr{{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 4}, ElemSize: 4}}, fills(2, 8)...)...)
	wait(t, j, 8)
	_, err := j.Submit(testCtx(t), fills(9, 9)...)
	wantCode(t, "the instruction past MaxJobInstrs", err, proto.CodeTooLarge, "holds 8 instructions and this batch adds 1", "(8)")
	serves(t, c, 2)
}

// TestFeedLimitEdge: a job keeps FeedLimit unread completion events; the
// ones past it are not recorded, but their numbers still advance, so the
// client sees the gap. Once the client has read them, recording resumes.
func TestFeedLimitEdge(t *testing.T) {
	const limit = 8
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.FeedLimit = limit })
	c := startClient(t, credDir, "alice", nodes...)
	ctx := testCtx(t)
	j := openJob(t, c, "n0", 1)
	// 12 instructions finish while nobody reads the feed.
	submit(t, j, append([]proto.Instr{{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 4}, ElemSize: 4}}, fills(2, 12)...)...)
	wait(t, j, 12)
	evs, err := j.Events(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != limit {
		t.Fatalf("feed after 12 completions with FeedLimit %d: %d events, want %d", limit, len(evs), limit)
	}
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) || ev.ID != uint64(i+1) {
			t.Fatalf("event %d: seq %d, instruction %d; want %d, %d", i, ev.Seq, ev.ID, i+1, i+1)
		}
	}
	// Acknowledge them: nothing follows (9..12 were not recorded), and the
	// feed, having nothing to report, answers at the request's deadline.
	short, cancel := context.WithTimeout(ctx, 3*time.Second) // the node answers 200 ms before: room for a loaded machine
	evs, err = j.Events(short, limit, 100)
	cancel()
	if err != nil || len(evs) != 0 {
		t.Fatalf("feed after the first %d events: %+v, %v; want none (the events past FeedLimit were not recorded)", limit, evs, err)
	}
	// The next completion is recorded again, numbered after the four that
	// were not.
	submit(t, j, fills(13, 13)...)
	wait(t, j, 13)
	evs, err = j.Events(ctx, limit, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Seq != 13 || evs[0].ID != 13 {
		t.Fatalf("feed after reading %d events: %+v, want the one event seq 13 of instruction 13 (9..12 not recorded)", limit, evs)
	}
	serves(t, c, 2)
}

// TestJobLeaseBounds: a job opened without a lease gets the node's
// default (30 s); a client may ask for up to 10 minutes, and more is cut
// to that.
func TestJobLeaseBounds(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	for i, tc := range []struct{ ask, want time.Duration }{
		{0, 30 * time.Second},
		{time.Second, time.Second},
		{10 * time.Minute, 10 * time.Minute},
		{10*time.Minute + 1, 10 * time.Minute},
		{time.Hour, 10 * time.Minute},
	} {
		j, err := c.Open(testCtx(t), "n0", uint64(i+1), nodeclient.JobOptions{Lease: tc.ask})
		if err != nil {
			t.Fatalf("open with lease %v: %v", tc.ask, err)
		}
		if got := j.Lease(); got != tc.want {
			t.Errorf("lease asked %v: granted %v, want %v", tc.ask, got, tc.want)
		}
		if err := j.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJobKernelCountEdges: one request may carry 64 kernels, and a job
// may hold 256: the 65th kernel of a request is refused (CodeMalformed),
// and so is the 257th kernel of a job (CodeTooLarge); the node goes on
// serving.
func TestJobKernelCountEdges(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	raw := rawClient(t, "alice", nodes[0])
	ctx := testCtx(t)
	j := openJob(t, c, "n0", 1)
	specs := func(from, n int) []proto.KernelSpec {
		out := make([]proto.KernelSpec, n)
		for i := range out {
			out[i] = saxpySpec(fmt.Sprintf("lim.k%d", from+i))
		}
		return out
	}
	var got proto.JobKernelsRegistered
	if err := raw.Call(ctx, credentials.Node("n0"), proto.MsgJobKernels, &proto.JobKernels{Job: 1, Kernels: specs(0, proto.MaxKernelsPerRequest+1)}, &got); err == nil {
		t.Fatalf("a request of %d kernels was accepted", proto.MaxKernelsPerRequest+1)
	} else {
		wantCode(t, "a request of 65 kernels", err, proto.CodeMalformed, "65 kernels in one request, at most 64")
	}
	if err := raw.Call(ctx, credentials.Node("n0"), proto.MsgJobKernels, &proto.JobKernels{Job: 1, Kernels: specs(0, proto.MaxKernelsPerRequest)}, &got); err != nil || got.Kernels != 64 {
		t.Fatalf("a request of 64 kernels: %+v, %v; want 64 registered", got, err)
	}
	r, err := j.RegisterKernels(ctx, specs(64, 192)...)
	if err != nil || r.Kernels != 256 {
		t.Fatalf("kernels 65..256 of the job: %+v, %v; want 256 registered", r, err)
	}
	_, err = j.RegisterKernels(ctx, specs(256, 1)...)
	wantCode(t, "the job's 257th kernel", err, proto.CodeTooLarge, "257 kernels", "at most 256 kernels and 67108864 bytes")
	// The same kernels again are a retry, not new ones.
	if r, err := j.RegisterKernels(ctx, specs(0, 1)...); err != nil || r.Kernels != 256 {
		t.Errorf("a kernel the job has, again: %+v, %v; want accepted, still 256", r, err)
	}
	serves(t, c, 2)
}

// TestLargestKernelModuleRegisters: a module of exactly
// proto.MaxKernelModule (12 MiB) travels in one request, within the
// 16 MiB frame, and registers; one byte more is refused before sending.
func TestLargestKernelModuleRegisters(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 1)
	s := padded(saxpySpec("lim.big"), proto.MaxKernelModule)
	for len(s.PTX) < proto.MaxKernelModule {
		s.PTX = append(s.PTX, '\n')
	}
	s.PTX = s.PTX[:proto.MaxKernelModule]
	if s.PTX[len(s.PTX)-1] != '\n' {
		// The padding ends in the middle of a comment line: the module
		// still parses (a comment runs to the end of the text).
		s.PTX[len(s.PTX)-1] = '\n'
	}
	r, err := j.RegisterKernels(testCtx(t), s)
	if err != nil || r.Bytes != proto.MaxKernelModule {
		t.Fatalf("a module of %d bytes: %+v, %v; want registered", proto.MaxKernelModule, r, err)
	}
	s.Name, s.PTX = "lim.bigger", append(s.PTX, '\n')
	if _, err := j.RegisterKernels(testCtx(t), s); err == nil {
		t.Fatalf("a module of %d bytes was accepted", len(s.PTX))
	}
	serves(t, c, 2)
}
