package node_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

func TestThreeNodesJoinAndAdvertiseDevices_C1(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	c := startClient(t, credDir, "alice", nodes...)
	for _, n := range nodes {
		for _, m := range n.Cluster().Members().Alive() {
			if m.Meta.QUICAddr == "" {
				t.Errorf("%s sees %s without a QUIC address", n.Name(), m.Name)
			}
			if d, ok := m.Meta.Device(cluster.DeviceCPU); !ok || d.Count < 1 || !d.Unified {
				t.Errorf("%s sees %s with CPU summary %+v, %v; want at least one unified CPU", n.Name(), m.Name, d, ok)
			}
		}
		inv, err := c.Inventory(testCtx(t), n.Name())
		if err != nil {
			t.Fatalf("Inventory(%s): %v", n.Name(), err)
		}
		if inv.Node != n.Name() || len(inv.Memories) == 0 || !inv.Memories[0].Host || len(inv.Devices) == 0 || inv.Devices[0].ID != "cpu:0" {
			t.Errorf("Inventory(%s) = %+v; want the node's name, host memory 0 and cpu:0", n.Name(), inv)
		}
	}
}

// A client that knows one node learns every member from it (MsgMembers):
// names, states, QUIC addresses and device summaries.
func TestMembersListsClusterForClients_C1(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	c := startClient(t, credDir, "alice", nodes[1])
	ms, err := c.Members(testCtx(t), nodes[1].Name())
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	if ms.Node != nodes[1].Name() || len(ms.Members) != 3 {
		t.Fatalf("Members = %+v; want 3 members as %s sees them", ms, nodes[1].Name())
	}
	for i, m := range ms.Members {
		n := nodes[i] // both sorted by name: n0, n1, n2
		if m.Name != n.Name() || m.State != "alive" || m.QUICAddr != n.QUICAddr() || m.GossipAddr != n.GossipAddr() {
			t.Errorf("member %d = %+v; want %s alive at QUIC %s, gossip %s", i, m, n.Name(), n.QUICAddr(), n.GossipAddr())
		}
		if len(m.Devices) == 0 || m.Devices[0].Kind != "cpu" || m.Devices[0].Count < 1 || !m.Devices[0].Unified {
			t.Errorf("member %s devices = %+v; want a unified CPU", m.Name, m.Devices)
		}
	}
}

// randomBoxes cuts k disjoint boxes out of rng: slabs along dimension d,
// one random box inside each slab.
func randomBoxes(r *rand.Rand, rng [3]uint64, k int) []proto.Box {
	d := 0
	for rng[d] == 1 && d < 2 {
		d++
	}
	k = min(k, int(rng[d]))
	cuts := []uint64{0}
	for i := 1; i < k; i++ {
		cuts = append(cuts, rng[d]*uint64(i)/uint64(k))
	}
	cuts = append(cuts, rng[d])
	var out []proto.Box
	for i := range k {
		var b proto.Box
		for dd := range 3 {
			lo, hi := uint64(0), rng[dd]
			if dd == d {
				lo, hi = cuts[i], cuts[i+1]
			}
			if hi <= lo {
				continue
			}
			a := lo + r.Uint64N(hi-lo)
			c := a + 1 + r.Uint64N(hi-a)
			b.Lo[dd], b.Hi[dd] = a, c
		}
		if n, ok := b.Elems(); ok && n > 0 {
			out = append(out, b)
		}
	}
	return out
}

func randomRange(r *rand.Rand, dims int) [3]uint64 {
	switch dims {
	case 1:
		return [3]uint64{1, 1, 1 + r.Uint64N(5000)}
	case 2:
		return [3]uint64{1, 1 + r.Uint64N(70), 1 + r.Uint64N(70)}
	}
	return [3]uint64{1 + r.Uint64N(16), 1 + r.Uint64N(16), 1 + r.Uint64N(16)}
}

// expectBoxes returns a buffer image that holds src inside boxes and base
// elsewhere.
func expectBoxes(base, src []byte, rng [3]uint64, elem uint32, boxes []proto.Box) []byte {
	out := bytes.Clone(base)
	for _, b := range boxes {
		dr, _ := proto.BoxRuns(out, rng, elem, b)
		sr, _ := proto.BoxRuns(src, rng, elem, b)
		for i := range dr {
			copy(dr[i], sr[i])
		}
	}
	return out
}

// TestPageBoxesMoveAlongNodes_C3 moves random 1–3D page boxes A→B→C→A
// with Send/Recv pairs, submitted to the nodes in random order (so pages
// often arrive before their Recv is ready), and checks every byte.
func TestPageBoxesMoveAlongNodes_C3(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	c := startClient(t, credDir, "alice", nodes...)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	const jobID = 7
	jobs := make([]*nodeclient.Job, 3)
	for i, n := range nodes {
		jobs[i] = openJob(t, c, n.Name(), jobID)
	}
	A, B, C := nodes[0].Name(), nodes[1].Name(), nodes[2].Name()
	for round := range 9 {
		rng := randomRange(r, 1+round%3)
		elem := []uint32{1, 4, 8}[r.IntN(3)]
		buf := uint64(round + 1)
		size := int(rng[0]*rng[1]*rng[2]) * int(elem)
		image := make([]byte, size)
		for i := range image {
			image[i] = byte(r.Uint32())
		}
		boxes := randomBoxes(r, rng, 1+r.IntN(4))
		whole := []proto.Box{{Hi: rng}}
		alloc := proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: buf, Range: rng, ElemSize: elem}
		batches := [3][]proto.Instr{
			{ // A: upload, send to B, clear the boxes, receive them back from C
				alloc,
				{ID: 2, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: buf, Boxes: whole},
				{ID: 3, Kind: proto.InstrSend, Deps: []uint64{2}, Buffer: buf, Boxes: boxes, Peer: B},
				{ID: 4, Kind: proto.InstrFill, Deps: []uint64{3}, Buffer: buf, Boxes: boxes, Pattern: []byte{0}},
				{ID: 5, Kind: proto.InstrRecv, Deps: []uint64{4}, Buffer: buf, Boxes: boxes, Peer: C},
			},
			{ // B: receive from A, send to C
				alloc,
				{ID: 2, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: buf, Boxes: boxes, Peer: A},
				{ID: 3, Kind: proto.InstrSend, Deps: []uint64{2}, Buffer: buf, Boxes: boxes, Peer: C},
			},
			{ // C: receive from B, send back to A
				alloc,
				{ID: 2, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: buf, Boxes: boxes, Peer: B},
				{ID: 3, Kind: proto.InstrSend, Deps: []uint64{2}, Buffer: buf, Boxes: boxes, Peer: A},
			},
		}
		// Instruction IDs are per job and node: offset them per round.
		base := uint64(round * 100)
		for i := range batches {
			for k := range batches[i] {
				batches[i][k].ID += base
				for d := range batches[i][k].Deps {
					batches[i][k].Deps[d] += base
				}
			}
		}
		for _, i := range r.Perm(3) {
			submit(t, jobs[i], batches[i]...)
		}
		if err := jobs[0].Upload(testCtx(t), buf, 0, rng, elem, whole, image); err != nil {
			t.Fatalf("round %d: upload: %v", round, err)
		}
		wait(t, jobs[0], base+5)
		wait(t, jobs[1], base+3)
		wait(t, jobs[2], base+3)
		gotA := make([]byte, size)
		if err := jobs[0].ReadBack(testCtx(t), base+6, []uint64{base + 5}, buf, 0, rng, elem, whole, gotA); err != nil {
			t.Fatalf("round %d: read back from A: %v", round, err)
		}
		if !bytes.Equal(gotA, image) {
			t.Fatalf("round %d (range %v, elem %d, boxes %v): A's buffer after the round trip differs from what was uploaded", round, rng, elem, boxes)
		}
		gotC := make([]byte, size)
		if err := jobs[2].ReadBack(testCtx(t), base+4, []uint64{base + 3}, buf, 0, rng, elem, whole, gotC); err != nil {
			t.Fatalf("round %d: read back from C: %v", round, err)
		}
		if want := expectBoxes(make([]byte, size), image, rng, elem, boxes); !bytes.Equal(gotC, want) {
			t.Fatalf("round %d (range %v, elem %d, boxes %v): C's buffer differs: the boxes must hold A's bytes and the rest zeros", round, rng, elem, boxes)
		}
	}
	// Metrics count the pages per peer and direction.
	for _, m := range []struct {
		n         *node.Node
		dir, peer string
	}{{nodes[1], "received", A}, {nodes[1], "sent", C}, {nodes[0], "received", "client"}, {nodes[0], "received", C}, {nodes[2], "sent", "client"}} {
		if got := counter(t, m.n, "acpp_node_page_bytes_total", map[string]string{"direction": m.dir, "peer": m.peer}); got == 0 {
			t.Errorf("%s: acpp_node_page_bytes_total{direction=%q, peer=%q} = 0", m.n.Name(), m.dir, m.peer)
		}
	}
	if got := counter(t, nodes[1], "acpp_node_instructions_total", map[string]string{"kind": "recv", "outcome": "ok"}); got != 9 {
		t.Errorf("n1 finished %v recv instructions ok, want 9", got)
	}
	for _, j := range jobs {
		if err := j.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if n.Allocated() != 0 || n.Jobs() != 0 {
			t.Errorf("%s after close: %d bytes allocated, %d jobs; want 0, 0", n.Name(), n.Allocated(), n.Jobs())
		}
	}
}

// TestWaitersFailWhenPeerStops_C5: a Recv waiting on a node that dies
// fails with an error naming it, within the failure detection time; its
// dependents fail too; a Send to the dead node fails at once.
func TestWaitersFailWhenPeerStops_C5(t *testing.T) {
	nodes := startNodes(t, 3, func(_ int, cfg *node.Config) { cfg.Cluster.Timing = cluster.DefaultLocalConfig().Timing })
	c := startClient(t, credDir, "alice", nodes[0])
	j := openJob(t, c, "n0", 1)
	rng := [3]uint64{1, 1, 1024}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4},
		proto.Instr{ID: 2, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: rng}}, Peer: "n2"},
		proto.Instr{ID: 3, Kind: proto.InstrFill, Deps: []uint64{2}, Buffer: 1, Pattern: []byte{1}},
		proto.Instr{ID: 4, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 8}}}, Peer: "n1"},
	)
	wait(t, j, 1)
	limit := cluster.DefaultLocalConfig().FailureDetectionTimeout(3) + 2*time.Second
	start := time.Now()
	nodes[2].Close() // abrupt: peers see a failure, not a leave
	err := j.Wait(testCtx(t), 2, 3)
	took := time.Since(start)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || !errors.Is(err, nodeclient.ErrNodeLost) {
		t.Fatalf("Wait = %v; want an InstrFailedError matching ErrNodeLost", err)
	}
	if got := fe.LostNodes(); !slices.Equal(got, []string{"n2"}) {
		t.Errorf("LostNodes = %v, want [n2]", got)
	}
	codes := map[uint64]proto.ErrorCode{}
	for _, f := range fe.Failed {
		codes[f.ID] = f.Code
	}
	if codes[2] != proto.CodeNodeLost || codes[3] != proto.CodeDepFailed {
		t.Errorf("failure codes %v; want 2: node lost, 3: dependency failed", codes)
	}
	if took > limit {
		t.Errorf("waiters failed after %v, want within the detection time %v", took, limit)
	}
	t.Logf("waiters failed %v after the node stopped (bound %v)", took, limit)

	// Sends to and Recvs from a node known to be gone fail at once.
	submit(t, j,
		proto.Instr{ID: 5, Kind: proto.InstrSend, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: rng}}, Peer: "n2"},
		proto.Instr{ID: 6, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: rng}}, Peer: "n2"},
	)
	if err := j.Wait(testCtx(t), 5, 6); !errors.Is(err, nodeclient.ErrNodeLost) {
		t.Errorf("Send/Recv with a failed node: Wait = %v, want node lost", err)
	}
	// A graceful leave fails waiters too, naming the node.
	if err := nodes[1].Drain(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	err = j.Wait(testCtx(t), 4)
	if !errors.As(err, &fe) || !slices.Equal(fe.LostNodes(), []string{"n1"}) {
		t.Errorf("after n1 left: Wait = %v, want node lost naming n1", err)
	}
}

func TestMemoryLimitFailsOnlyThatJob(t *testing.T) {
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) {
		cfg.MaxBytes = 4 << 20
		cfg.MaxJobBytes = 1 << 20
	})
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 1)
	j2 := openJob(t, c, "n0", 2)
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 512 << 10}, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrAlloc, Deps: []uint64{1}, Buffer: 2, Range: [3]uint64{1, 1, 600 << 10}, ElemSize: 1},
		proto.Instr{ID: 3, Kind: proto.InstrAlloc, Deps: []uint64{1}, Buffer: 3, Range: [3]uint64{1, 1, 256 << 10}, ElemSize: 1},
	)
	err := j.Wait(testCtx(t), 1, 2, 3)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 1 || fe.Failed[0].ID != 2 || fe.Failed[0].Code != proto.CodeMemoryLimit {
		t.Fatalf("Wait = %v; want exactly instruction 2 failed with the memory limit", err)
	}
	submit(t, j2, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 1 << 20}, ElemSize: 1})
	wait(t, j2, 1)
	if got, want := nodes[0].Allocated(), uint64(768<<10+1<<20); got != want {
		t.Errorf("Allocated = %d, want %d", got, want)
	}
	if err := j.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got, want := nodes[0].Allocated(), uint64(1<<20); got != want {
		t.Errorf("after closing job 1: Allocated = %d, want %d", got, want)
	}
}

func TestLeaseExpiryFreesJob(t *testing.T) {
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.JobLease = 300 * time.Millisecond })
	creds, _ := credentials.LoadClient(credDir, "alice")
	c, err := nodeclient.Start(nodeclient.Config{Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Connect(testCtx(t), nodes[0].QUICAddr()); err != nil {
		t.Fatal(err)
	}
	j := openJob(t, c, "n0", 9)
	submit(t, j, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 4096}, ElemSize: 4})
	wait(t, j, 1)
	// While the client renews, the job stays.
	time.Sleep(700 * time.Millisecond)
	if nodes[0].Jobs() != 1 {
		t.Fatalf("job closed although its client renewed the lease")
	}
	c.Close()
	eventually(t, 5*time.Second, "the silent client's job is freed", func() bool {
		return nodes[0].Jobs() == 0 && nodes[0].Allocated() == 0
	})
}

func TestSubmitRejectsBadBatches(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 3)
	submit(t, j, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 8}, ElemSize: 1})
	tests := []struct {
		name string
		in   proto.Instr
	}{
		{"id zero", proto.Instr{Kind: proto.InstrFree}},
		{"duplicate id", proto.Instr{ID: 1, Kind: proto.InstrFree}},
		{"unknown dep", proto.Instr{ID: 2, Kind: proto.InstrFree, Deps: []uint64{99}}},
		{"unknown kind", proto.Instr{ID: 2, Kind: 200}},
		{"send without peer", proto.Instr{ID: 2, Kind: proto.InstrSend, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 1}}}}},
		{"overlapping boxes", proto.Instr{ID: 2, Kind: proto.InstrCopy, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 4}}, {Lo: [3]uint64{0, 0, 2}, Hi: [3]uint64{1, 1, 5}}}}},
		{"zero element size", proto.Instr{ID: 2, Kind: proto.InstrAlloc, Range: [3]uint64{1, 1, 1}}},
		{"launch without kernel", proto.Instr{ID: 2, Kind: proto.InstrLaunch}},
		{"send to itself", proto.Instr{ID: 2, Kind: proto.InstrSend, Buffer: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 1}}}, Peer: "n0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := j.Submit(testCtx(t), tt.in)
			var re *transport.RemoteError
			if !errors.As(err, &re) || re.Code != proto.CodeBadInstr {
				t.Errorf("Submit(%+v) = %v, want a CodeBadInstr reply", tt.in, err)
			}
		})
	}
	// Runtime failures fail the instruction, not the batch.
	submit(t, j,
		proto.Instr{ID: 10, Kind: proto.InstrCopy, Deps: []uint64{1}, Buffer: 1, DstMem: 0, Mem: 7, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 1}}}},
		proto.Instr{ID: 11, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Pattern: []byte{1}, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 9}}}},
		proto.Instr{ID: 12, Kind: proto.InstrLaunch, Launch: &proto.Launch{Kernel: "no.such.kernel", Device: "cpu:0"}},
		proto.Instr{ID: 13, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 8}, ElemSize: 1, Deps: []uint64{1}},
	)
	err := j.Wait(testCtx(t), 10, 11, 12, 13)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 4 {
		t.Fatalf("Wait = %v, want 4 failures", err)
	}
}

var registerInc = sync.OnceFunc(func() {
	device.MustRegister(device.Kernel{
		Name:   "nodetest.inc_u32",
		Params: []device.Param{{Name: "data", Kind: device.ArgAccessor, Space: device.Global, ElemSize: 4}},
		Go: func(w *device.Work) {
			d := w.Data[0]
			for i := w.Lo[2]; i < w.Hi[2]; i++ {
				binary.LittleEndian.PutUint32(d[4*i:], binary.LittleEndian.Uint32(d[4*i:])+1)
			}
		},
	})
})

func TestLaunchKernelOnAllocation(t *testing.T) {
	registerInc()
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 4)
	const n = 10000
	rng := [3]uint64{1, 1, n}
	launch := proto.Instr{ID: 3, Kind: proto.InstrLaunch, Deps: []uint64{2}, Launch: &proto.Launch{
		Kernel: "nodetest.inc_u32", Device: "cpu:0", Global: rng,
		Args: []proto.KArg{{Kind: uint8(device.ArgAccessor), Buffer: 1, ElemSize: 4, Range: rng}},
	}}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4},
		proto.Instr{ID: 2, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Pattern: []byte{41, 0, 0, 0}},
		launch,
	)
	got := make([]byte, 4*n)
	if err := j.ReadBack(testCtx(t), 4, []uint64{3}, 1, 0, rng, 4, []proto.Box{{Hi: rng}}, got); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != 42 {
			t.Fatalf("element %d = %d after fill 41 and inc, want 42", i, v)
		}
	}
	// The completion feed lists the four instructions in order of
	// completion, numbered from 1; acknowledged events are gone.
	evs, err := j.Events(testCtx(t), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) || ev.Err != nil {
			t.Errorf("event %d = %+v, want Seq %d and no error", i, ev, i+1)
		}
		ids = append(ids, ev.ID)
	}
	if !slices.Equal(ids, []uint64{1, 2, 3, 4}) {
		t.Errorf("completion feed IDs %v, want [1 2 3 4]", ids)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	if evs, err := j.Events(ctx, 4, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events after the last = %v, %v; want none", evs, err)
	}
	// Forgotten instructions can no longer be named.
	if err := j.Forget(testCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	var re *transport.RemoteError
	if _, err := j.Poll(testCtx(t), 2); !errors.As(err, &re) || re.Code != proto.CodeBadInstr {
		t.Errorf("Poll of a forgotten instruction = %v, want CodeBadInstr", err)
	}
	if _, err := j.Submit(testCtx(t), proto.Instr{ID: 5, Kind: proto.InstrFree, Deps: []uint64{1}, Buffer: 1}); !errors.As(err, &re) || re.Code != proto.CodeBadInstr {
		t.Errorf("a dependency on a forgotten instruction = %v, want CodeBadInstr", err)
	}
	submit(t, j, proto.Instr{ID: 5, Kind: proto.InstrFree, Deps: []uint64{3}, Buffer: 1})
	wait(t, j, 5)
}

// TestWaitersFailWhenPeerRestarts_C5: a peer that comes back under the
// same name (same addresses, new boot) before anyone declared it failed
// will never send what its previous run was to send: waiters on it fail,
// naming it.
func TestWaitersFailWhenPeerRestarts_C5(t *testing.T) {
	var gossip, quic string
	nodes := startNodes(t, 2, nil)
	gossip, quic = nodes[1].GossipAddr(), nodes[1].QUICAddr()
	c := startClient(t, credDir, "alice", nodes[0])
	j := openJob(t, c, "n0", 1)
	rng := [3]uint64{1, 1, 64}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: rng}}, Peer: "n1"},
	)
	wait(t, j, 1)
	nodes[1].Close() // no leave; with LAN timing nobody notices for seconds
	cfg := node.DefaultLocalConfig()
	cfg.Cluster.Timing = cluster.DefaultLANConfig().Timing
	cfg.Name, cfg.CredentialsDir, cfg.CPUWorkers, cfg.Logger = "n1", credDir, 1, testLogger(t)
	cfg.GossipAddr, cfg.QUICAddr = gossip, quic
	cfg.Join = []string{nodes[0].GossipAddr()}
	again, err := node.Start(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("restart n1: %v", err)
	}
	defer again.Close()
	err = j.Wait(testCtx(t), 2)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || !slices.Equal(fe.LostNodes(), []string{"n1"}) || !strings.Contains(fe.Error(), "n1") {
		t.Fatalf("Wait = %v, want a node-lost failure naming n1", err)
	}
	t.Logf("%v", err)
}

// TestOldRunLossSparesNewRun_C5: news that a run of a peer is gone fails
// the Sends and Recvs that name that run (PeerBoot) or none, and only
// those: a peer restarted at once is opened by new jobs before every
// member has heard that its old run is gone, and their transfers with the
// new run must not fail for it. A run membership has not shown yet is not
// gone either: a Send to it waits for the news, a Recv for the pages.
func TestOldRunLossSparesNewRun_C5(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := startClient(t, credDir, "alice", nodes...)
	if got, want := openJob(t, c, "n1", 9).Boot(), nodes[1].Cluster().LocalMeta().BootID; got == 0 || got != want {
		t.Fatalf("JobOpened.Boot = %x, want the node's boot ID %x", got, want)
	}
	old := nodes[1].Cluster().LocalMeta().BootID
	newer := old + 1 // a run of n1 that n0 has not seen
	if err := nodes[1].Drain(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	nodes[1].Close()
	eventually(t, 10*time.Second, "n0 sees n1 leave", func() bool {
		m, ok := nodes[0].Cluster().Member("n1")
		return ok && m.State == cluster.StateLeft
	})
	j := openJob(t, c, "n0", 1)
	rng := [3]uint64{1, 1, 64}
	all := []proto.Box{{Hi: rng}}
	recv := func(id, boot uint64) proto.Instr {
		return proto.Instr{ID: id, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{box([3]uint64{0, 0, id}, [3]uint64{1, 1, id + 1})}, Peer: "n1", PeerBoot: boot}
	}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 1},
		recv(2, old), recv(3, 0), recv(4, newer),
		proto.Instr{ID: 5, Kind: proto.InstrSend, Deps: []uint64{1}, Buffer: 1, Boxes: all, Peer: "n1", PeerBoot: newer},
		proto.Instr{ID: 6, Kind: proto.InstrSend, Deps: []uint64{1}, Buffer: 1, Boxes: all, Peer: "n1", PeerBoot: old},
	)
	if err := j.Wait(testCtx(t), 2, 3, 6); !errors.Is(err, nodeclient.ErrNodeLost) {
		t.Fatalf("Send/Recv naming the run that left, or no run: Wait = %v, want node lost", err)
	}
	pending := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
		defer cancel()
		r, err := j.Poll(ctx, 4, 5)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: Poll = %v", what, err)
		}
		if len(r.Failed) > 0 || len(r.Done) > 0 {
			t.Fatalf("%s: the Recv and the Send naming the run not seen yet ended (%+v); want them waiting", what, r)
		}
	}
	pending("n1's old run left")
	nodes[0].PeerLostForTest("n1", old, "restarted") // the news comes again, as a restart
	pending("n1's old run restarted")
	nodes[0].PeerLostForTest("n1", newer, "failed")
	err := j.Wait(testCtx(t), 4, 5)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 2 || !slices.Equal(fe.LostNodes(), []string{"n1"}) {
		t.Fatalf("after the newer run failed: Wait = %v, want the Recv and the Send failed, naming n1", err)
	}
}

// C3: pages whose element size is not their allocation's fail the
// Recv they are for with an error that says so, whether the Recv was
// ready when they came (landing in place or in staging) or they came
// first and waited for it; nothing hangs, and closing returns every byte.
func TestRecvRefusesOtherElementSize_C3(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := startClient(t, credDir, "alice", nodes...)
	src, dst := openJob(t, c, "n0", 1), openJob(t, c, "n1", 1)
	rng := [3]uint64{1, 1, 64}
	whole := []proto.Box{{Hi: [3]uint64{1, 1, 16}}}
	for round, recvFirst := range []bool{true, false} {
		base := uint64(round * 10)
		// n0 holds 16 elements of 4 bytes, n1 64 of 1 byte: the same 64
		// bytes, but the box of 16 elements means other bytes on each side.
		send := []proto.Instr{
			{ID: base + 1, Kind: proto.InstrAlloc, Buffer: base + 1, Range: [3]uint64{1, 1, 16}, ElemSize: 4},
			{ID: base + 2, Kind: proto.InstrSend, Deps: []uint64{base + 1}, Buffer: base + 1, Boxes: whole, Peer: "n1"},
		}
		recv := []proto.Instr{
			{ID: base + 1, Kind: proto.InstrAlloc, Buffer: base + 1, Range: rng, ElemSize: 1},
			{ID: base + 2, Kind: proto.InstrRecv, Deps: []uint64{base + 1}, Buffer: base + 1, Boxes: whole, Peer: "n0"},
		}
		if recvFirst {
			submit(t, dst, recv...)
			wait(t, dst, base+1)
			submit(t, src, send...)
		} else {
			submit(t, src, send...)
			if err := src.Wait(testCtx(t), base+2); err != nil {
				t.Fatalf("early pages: the send should end once they are staged: %v", err)
			}
			submit(t, dst, recv...)
		}
		err := dst.Wait(testCtx(t), base+2)
		if err == nil || !strings.Contains(err.Error(), "4-byte elements") {
			t.Errorf("recv ready first %v: Wait = %v; want an error about the 4-byte elements", recvFirst, err)
		}
		_ = src.Wait(testCtx(t), base+2) // refused or sent: either way it ended
	}
	for _, j := range []*nodeclient.Job{src, dst} {
		if err := j.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if n.Allocated() != 0 {
			t.Errorf("%s after close: %d bytes allocated, want 0", n.Name(), n.Allocated())
		}
	}
}

// The completion feed gathers a busy job's completions: while the node
// still has instructions of the job to run (a Recv nobody sends to), a
// finished Alloc is reported only after ReportGather; with nothing left to
// run, at once; with gathering off (negative), at once too.
func TestFeedGathersWhileBusy(t *testing.T) {
	const gather = node.MaxReportGather
	for _, c := range []struct {
		name   string
		gather time.Duration
		busy   bool
		late   bool
	}{
		{"busy", gather, true, true},
		{"idle", gather, false, false},
		{"busy, gathering off", -1, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			nodes := startNodes(t, 2, func(_ int, cfg *node.Config) { cfg.ReportGather = c.gather })
			cl := startClient(t, credDir, "alice", nodes...)
			j := openJob(t, cl, "n0", 7)
			rng := [3]uint64{1, 1, 16}
			instrs := []proto.Instr{{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4}}
			if c.busy {
				// A Recv of pages n1 never sends: it stays to be finished.
				instrs = append(instrs, proto.Instr{ID: 2, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: rng}}, Peer: "n1"})
			}
			start := time.Now()
			submit(t, j, instrs...)
			evs, err := j.Events(testCtx(t), 0, 0)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 || evs[0].ID != 1 {
				t.Fatalf("events %+v, want the Alloc's", evs)
			}
			if c.late && took < gather*3/4 {
				t.Errorf("the busy job's completion was reported after %v, want it gathered for about %v", took, gather)
			}
			if !c.late && took >= gather {
				t.Errorf("the completion was reported after %v, want at once", took)
			}
		})
	}
}
