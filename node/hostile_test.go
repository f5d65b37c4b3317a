package node_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// rawClient is a transport with a client's credentials that sends bodies
// as they are (msgpack.RawMessage), as a hostile or buggy client would.
func rawClient(t *testing.T, name string, n *node.Node) *transport.Transport {
	t.Helper()
	creds, err := credentials.LoadClient(credDir, name)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.Start(transport.Config{Credentials: creds, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if _, err := tr.DialAddr(testCtx(t), n.QUICAddr()); err != nil {
		t.Fatal(err)
	}
	return tr
}

// emptyMaps is a body {key: [n empty maps]}.
func emptyMaps(key string, n int, elem byte) msgpack.RawMessage {
	b := []byte{0x81, 0xa0 | byte(len(key))}
	b = append(b, key...)
	b = append(b, 0xdd, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(n))
	for range n {
		b = append(b, elem)
	}
	return b
}

func wantCode(t *testing.T, what string, err error, code proto.ErrorCode, words ...string) {
	t.Helper()
	var re *transport.RemoteError
	if !errors.As(err, &re) || re.Code != code {
		t.Errorf("%s: %v, want a %v reply", what, err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(re.Message, w) {
			t.Errorf("%s: %q does not say %q", what, re.Message, w)
		}
	}
}

func wantFailed(t *testing.T, what string, err error, code proto.ErrorCode, words ...string) {
	t.Helper()
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) == 0 || fe.Failed[0].Code != code {
		t.Errorf("%s: %v, want an instruction failed with %v", what, err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(fe.Failed[0].Message, w) {
			t.Errorf("%s: %q does not say %q", what, fe.Failed[0].Message, w)
		}
	}
}

// serves checks that the node still runs a small job to the end.
func serves(t *testing.T, c *nodeclient.Client, id uint64) {
	t.Helper()
	j := openJob(t, c, "n0", id)
	rng := [3]uint64{1, 1, 256}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4},
		proto.Instr{ID: 2, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Pattern: []byte{7, 0, 0, 0}},
	)
	got := make([]byte, 4*256)
	if err := j.ReadBack(testCtx(t), 3, []uint64{2}, 1, 0, rng, 4, []proto.Box{{Hi: rng}}, got); err != nil {
		t.Fatalf("the node no longer serves a job: %v", err)
	}
	if binary.LittleEndian.Uint32(got[1020:]) != 7 {
		t.Fatalf("read back %v, want 7s", got[1020:])
	}
	if err := j.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestHostileClientLeavesNodeUp: an authenticated client that sends what
// no correct client sends gets a clear refusal or failed instruction for
// each, and the node serves the next job.
func TestHostileClientLeavesNodeUp(t *testing.T) {
	registerInc()
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) {
		cfg.MaxBytes = 64 << 20
		cfg.MaxJobBytes = 32 << 20
	})
	c := startClient(t, credDir, "alice", nodes...)
	raw := rawClient(t, "alice", nodes[0])
	// Each part has a context of its own (testCtx of its t): one 30 s
	// context for all of them ran out on a loaded 2-core machine, where
	// the parts together took 37 s, and failed the parts after it.
	n0 := credentials.Node("n0")
	j := openJob(t, c, "n0", 1)

	t.Run("amplifying bodies", func(t *testing.T) {
		ctx := testCtx(t)
		// 4 MiB of empty maps: 1.2 GB of KernelSpecs before MaxDecodedBytes.
		err := raw.Call(ctx, n0, proto.MsgJobKernels, emptyMaps("k", 4<<20, 0x80), nil)
		wantCode(t, "JobKernels of empty maps", err, proto.CodeTooLarge, "split it")
		err = raw.Call(ctx, n0, proto.MsgWait, emptyMaps("is", 8<<20, 0x01), nil)
		wantCode(t, "Wait of 8M IDs", err, proto.CodeTooLarge, "split it")
		err = raw.Call(ctx, n0, proto.MsgUnmapRef, emptyMaps("a", 8<<20, 0x01), nil)
		wantCode(t, "UnmapRef of 8M allocations", err, proto.CodeTooLarge)
		serves(t, c, 100)
	})
	t.Run("huge allocations", func(t *testing.T) {
		ctx := testCtx(t)
		submit(t, j,
			proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1 << 20, 1 << 20, 1 << 20}, ElemSize: 1},
			proto.Instr{ID: 2, Kind: proto.InstrAlloc, Buffer: 2, Range: [3]uint64{1, 1, 1 << 40}, ElemSize: 1 << 20})
		wantFailed(t, "1 EiB allocation", j.Wait(ctx, 1), proto.CodeMemoryLimit, "memory limit")
		wantFailed(t, "1 EiB allocation", j.Wait(ctx, 2), proto.CodeMemoryLimit)
		_, err := j.Submit(ctx, proto.Instr{ID: 3, Kind: proto.InstrAlloc, Buffer: 3, Range: [3]uint64{1 << 40, 1 << 40, 1 << 40}, ElemSize: 1})
		wantCode(t, "overflowing range", err, proto.CodeBadInstr, "too large")
	})
	t.Run("unknown allocations and instructions", func(t *testing.T) {
		ctx := testCtx(t)
		bx := []proto.Box{{Hi: [3]uint64{1, 1, 4}}}
		submit(t, j,
			proto.Instr{ID: 10, Kind: proto.InstrFill, Buffer: 99, Pattern: []byte{1}},
			proto.Instr{ID: 11, Kind: proto.InstrCopy, Buffer: 99, DstMem: 0, Boxes: bx},
			proto.Instr{ID: 12, Kind: proto.InstrFree, Buffer: 99},
			proto.Instr{ID: 13, Kind: proto.InstrReadBack, Buffer: 99, Boxes: bx, Ticket: 5},
			proto.Instr{ID: 14, Kind: proto.InstrLaunch, Launch: &proto.Launch{Kernel: "nodetest.inc_u32", Device: "cpu:0", Global: [3]uint64{1, 1, 4},
				Args: []proto.KArg{{Kind: uint8(device.ArgAccessor), Buffer: 99, ElemSize: 4, Range: [3]uint64{1, 1, 4}}}}},
			proto.Instr{ID: 15, Kind: proto.InstrSend, Buffer: 99, Boxes: bx, Peer: "n7"},
			proto.Instr{ID: 16, Kind: proto.InstrFill, Buffer: 1, Mem: 42, Pattern: []byte{1}},
			proto.Instr{ID: 17, Kind: proto.InstrLaunch, Launch: &proto.Launch{Kernel: "nodetest.inc_u32", Device: "cuda:9", Global: [3]uint64{1, 1, 4}}},
		)
		for id := uint64(10); id <= 17; id++ {
			err := j.Wait(ctx, id)
			var fe *nodeclient.InstrFailedError
			if !errors.As(err, &fe) {
				t.Errorf("instruction %d on an unknown allocation, device or peer: %v, want it failed", id, err)
				continue
			}
			t.Logf("instruction %d: %s", id, fe.Failed[0].Message)
		}
		_, err := j.Submit(ctx, proto.Instr{ID: 20, Kind: proto.InstrFree, Deps: []uint64{1 << 60}})
		wantCode(t, "unknown dependency", err, proto.CodeBadInstr, "not submitted")
		serves(t, c, 101)
	})
	t.Run("absurd launches", func(t *testing.T) {
		ctx := testCtx(t)
		rng := [3]uint64{1, 1, 16}
		submit(t, j, proto.Instr{ID: 30, Kind: proto.InstrAlloc, Buffer: 30, Range: rng, ElemSize: 4})
		wait(t, j, 30)
		acc := proto.KArg{Kind: uint8(device.ArgAccessor), Buffer: 30, ElemSize: 4, Range: rng}
		many := make([]proto.KArg, proto.MaxKernelArgs)
		for i := range many {
			many[i] = acc
		}
		cases := []proto.Launch{
			{Global: [3]uint64{1, 1, 1 << 40}, Args: []proto.KArg{acc}},                                                     // far past the accessor
			{Global: [3]uint64{1 << 40, 1 << 40, 1 << 40}, Args: []proto.KArg{acc}},                                         // 2^120 items
			{Global: [3]uint64{1, 1, 16}, Local: [3]uint64{1, 1, 7}, Args: []proto.KArg{acc}},                               // local does not divide global
			{Global: [3]uint64{1, 1, 16}, Local: [3]uint64{0, 1, 16}, Args: []proto.KArg{acc}},                              // a zero local dimension
			{Global: [3]uint64{1, 1, 16}, Args: many},                                                                       // 256 arguments for 1 parameter
			{Global: [3]uint64{1, 1, 16}},                                                                                   // none
			{Global: [3]uint64{1, 1, 16}, Args: []proto.KArg{{Kind: uint8(device.ArgScalar), Scalar: make([]byte, 1<<20)}}}, // a scalar for an accessor
			{Global: [3]uint64{1, 1, 16}, Args: []proto.KArg{{Kind: uint8(device.ArgAccessor), Buffer: 30, ElemSize: 4, Range: rng, AccessOffset: [3]uint64{0, 0, 1 << 63}, AccessRange: [3]uint64{1, 1, 1 << 63}}}},
			{Global: [3]uint64{1, 1, 16}, Args: []proto.KArg{{Kind: uint8(device.ArgAccessor), Buffer: 30, ElemSize: 4, Range: [3]uint64{1, 1, 1 << 40}}}}, // lies about the range
			{Global: [3]uint64{1, 1, 16}, Args: []proto.KArg{{Kind: uint8(device.ArgAccessor), Buffer: 30, ElemSize: 4, Range: rng, Offset: 1 << 62}}},
			{Global: [3]uint64{1, 1, 16}, Args: []proto.KArg{{Kind: 200}}},
		}
		// (A global offset past any allocation is no error: it only shifts
		// the ids a kernel sees.)
		for i, l := range cases {
			l.Kernel, l.Device = "nodetest.inc_u32", "cpu:0"
			id := uint64(40 + i)
			if _, err := j.Submit(ctx, proto.Instr{ID: id, Kind: proto.InstrLaunch, Deps: []uint64{30}, Launch: &l}); err != nil {
				t.Logf("launch %d refused: %v", i, err)
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := j.Wait(wctx, id)
			cancel()
			var fe *nodeclient.InstrFailedError
			if !errors.As(err, &fe) {
				t.Errorf("launch %d (%+v): %v, want it refused or failed", i, l.Global, err)
				continue
			}
			t.Logf("launch %d failed: %s", i, fe.Failed[0].Message)
		}
		serves(t, c, 102)
	})
	t.Run("uploads and read-backs out of range", func(t *testing.T) {
		ctx := testCtx(t)
		rng := [3]uint64{1, 1, 16}
		submit(t, j, proto.Instr{ID: 60, Kind: proto.InstrAlloc, Buffer: 60, Range: rng, ElemSize: 4})
		wait(t, j, 60)
		out := []proto.Box{{Hi: [3]uint64{1, 1, 1 << 30}}}
		submit(t, j, proto.Instr{ID: 61, Kind: proto.InstrReadBack, Deps: []uint64{60}, Buffer: 60, Boxes: out, Ticket: 9})
		wantFailed(t, "read back past the allocation", j.Wait(ctx, 61), proto.CodeTransfer)
		submit(t, j, proto.Instr{ID: 62, Kind: proto.InstrUpload, Deps: []uint64{60}, Buffer: 60, Boxes: []proto.Box{{Hi: rng}}})
		// Pages whose header lies: other boxes, element size, job, sizes.
		lies := []proto.PageHeader{
			{Job: 1, Buffer: 60, ElemSize: 4, Boxes: out},
			{Job: 1, Buffer: 60, ElemSize: 1 << 20, Boxes: []proto.Box{{Hi: rng}}},
			{Job: 1, Buffer: 61, ElemSize: 4, Boxes: []proto.Box{{Hi: rng}}},
			{Job: 77, Buffer: 60, ElemSize: 4, Boxes: []proto.Box{{Hi: rng}}},
			{Job: 1, Buffer: 60, ElemSize: 4, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 8}}}},
		}
		for i, h := range lies {
			h := h
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := raw.SendPages(sctx, n0, &h, [][]byte{make([]byte, 64)})
			cancel()
			if err == nil {
				t.Logf("lying header %d accepted (staged as early pages?)", i)
				continue
			}
			t.Logf("lying header %d: %v", i, err)
		}
		// A truthful upload still lands.
		if err := j.Upload(ctx, 60, 0, rng, 4, []proto.Box{{Hi: rng}}, make([]byte, 64)); err != nil {
			t.Errorf("upload after the lies: %v", err)
		}
		serves(t, c, 103)
	})
	t.Run("deep dependency chain", func(t *testing.T) {
		ctx := testCtx(t)
		jc := openJob(t, c, "n0", 2)
		const chain = 40000
		// The chain hangs on an upload that never comes; closing the job
		// fails it all.
		submit(t, jc, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 4}, ElemSize: 1},
			proto.Instr{ID: 2, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 4}}}})
		for lo := uint64(3); lo < chain; lo += proto.MaxBatch {
			var batch []proto.Instr
			for id := lo; id < min(lo+proto.MaxBatch, chain); id++ {
				batch = append(batch, proto.Instr{ID: id, Kind: proto.InstrFill, Deps: []uint64{id - 1}, Buffer: 1, Pattern: []byte{1}})
			}
			submit(t, jc, batch...)
		}
		start := time.Now()
		if err := jc.Close(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("closing a chain of %d took %v", chain, time.Since(start))
		serves(t, c, 104)
	})
	t.Run("many recvs", func(t *testing.T) {
		ctx := testCtx(t)
		jr := openJob(t, c, "n0", 3)
		submit(t, jr, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 4}, ElemSize: 1})
		const recvs = 40000
		for lo := uint64(2); lo < recvs; lo += proto.MaxBatch {
			var batch []proto.Instr
			for id := lo; id < min(lo+proto.MaxBatch, recvs); id++ {
				batch = append(batch, proto.Instr{ID: id, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 4}}}})
			}
			submit(t, jr, batch...)
		}
		start := time.Now()
		if err := jr.Close(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("closing a job with %d armed uploads took %v", recvs, time.Since(start))
		serves(t, c, 105)
	})
	t.Run("many concurrent jobs", func(t *testing.T) {
		ctx := testCtx(t)
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := range 200 {
			wg.Go(func() {
				id := uint64(1000 + i)
				jj, err := c.Open(ctx, "n0", id, nodeclient.JobOptions{})
				if err != nil {
					errs <- err
					return
				}
				defer jj.Close(ctx)
				if _, err := jj.Submit(ctx, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 1 << 20}, ElemSize: 1}); err != nil {
					errs <- err
					return
				}
				if err := jj.Wait(ctx, 1); err != nil {
					var fe *nodeclient.InstrFailedError
					if !errors.As(err, &fe) || fe.Failed[0].Code != proto.CodeMemoryLimit {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent job: %v", err)
		}
		serves(t, c, 106)
	})
	serves(t, c, 107)
}

// A job keeps at most Config.MaxJobInstrs instruction records: a batch past
// it is refused (CodeTooLarge) instead of growing the node's memory
// without end, and once the client lets the node forget finished ones,
// the job goes on.
func TestJobInstructionsBounded(t *testing.T) {
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.MaxJobInstrs = 64 })
	c := startClient(t, credDir, "alice", nodes...)
	ctx := testCtx(t)
	j := openJob(t, c, "n0", 1)
	rng := [3]uint64{1, 1, 16}
	batch := []proto.Instr{{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4}}
	for id := uint64(2); id <= 60; id++ {
		batch = append(batch, proto.Instr{ID: id, Kind: proto.InstrFill, Deps: []uint64{id - 1}, Buffer: 1, Pattern: []byte{byte(id), 0, 0, 0}})
	}
	submit(t, j, batch...)
	wait(t, j, 60)
	more := func(from uint64) []proto.Instr {
		var out []proto.Instr
		for id := from; id < from+10; id++ {
			// A chain: fills of one allocation that run at once race.
			out = append(out, proto.Instr{ID: id, Kind: proto.InstrFill, Deps: []uint64{id - 1}, Buffer: 1, Pattern: []byte{1, 0, 0, 0}})
		}
		return out
	}
	_, err := j.Submit(ctx, more(61)...)
	wantCode(t, "a batch past MaxJobInstrs", err, proto.CodeTooLarge, "holds 60 instructions", "Submit.Forget")
	if err := j.Forget(ctx, 60); err != nil {
		t.Fatal(err)
	}
	submit(t, j, more(61)...)
	wait(t, j, 70)
	serves(t, c, 2)
}

// One client may hold at most Config.MaxClientJobs jobs open on a node;
// past it JobOpen is refused (CodeTooLarge), and once it closes one, it
// may open another. Another client is not counted against it.
func TestClientJobsBounded(t *testing.T) {
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.MaxClientJobs = 2 })
	alice := startClient(t, credDir, "alice", nodes...)
	ctx := testCtx(t)
	j1 := openJob(t, alice, "n0", 1)
	openJob(t, alice, "n0", 2)
	_, err := alice.Open(ctx, "n0", 3, nodeclient.JobOptions{})
	wantCode(t, "a third job of one client", err, proto.CodeTooLarge, "holds 2 jobs open", "at most 2")
	openJob(t, alice, "n0", 2) // the same job again: not a new one
	if err := j1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	openJob(t, alice, "n0", 3)
	bob := startClient(t, credDir, "bob", nodes...)
	openJob(t, bob, "n0", 4)
}
