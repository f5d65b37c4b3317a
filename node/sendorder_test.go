package node_test

import (
	"testing"

	"github.com/acpp/acpp/proto"
)

// TestSendsOfTheSamePagesArriveInOrder_C3: node A sends the same box to B
// again and again, overwriting it with a fill after each send. B matches
// pages to Recvs by what they describe, so the transfers must reach it in
// the order they were sent or a Recv gets another round's bytes; they do
// because each fill waits for its send, and a send completes only once B
// has the pages (docs/NODE.md, "Matching": a send that let its
// dependents go earlier would have to keep this order some other way). B
// arms one Recv at a time, each behind the read-back of the one before,
// so the pages wait in B's staging in the order they came.
func TestSendsOfTheSamePagesArriveInOrder_C3(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := startClient(t, credDir, "alice", nodes...)
	A, B := nodes[0].Name(), nodes[1].Name()
	ja, jb := openJob(t, c, A, 9), openJob(t, c, B, 9)
	rng := [3]uint64{1, 1, 64}
	whole := []proto.Box{{Hi: rng}}
	const rounds = 16
	batch := []proto.Instr{{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4}}
	prev := uint64(1)
	for k := range rounds {
		fill := uint64(2 + 2*k)
		batch = append(batch,
			proto.Instr{ID: fill, Kind: proto.InstrFill, Deps: []uint64{prev}, Buffer: 1, Boxes: whole, Pattern: []byte{byte(k + 1)}},
			proto.Instr{ID: fill + 1, Kind: proto.InstrSend, Deps: []uint64{fill}, Buffer: 1, Boxes: whole, Peer: B})
		prev = fill + 1
	}
	submit(t, jb, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4})
	submit(t, ja, batch...)
	dep := uint64(1)
	got := make([]byte, 4*rng[2])
	for k := range rounds {
		recv := uint64(1000 + 2*k)
		submit(t, jb, proto.Instr{ID: recv, Kind: proto.InstrRecv, Deps: []uint64{dep}, Buffer: 1, Boxes: whole, Peer: A})
		if err := jb.ReadBack(testCtx(t), recv+1, []uint64{recv}, 1, 0, rng, 4, whole, got); err != nil {
			t.Fatalf("round %d: read back from %s: %v", k, B, err)
		}
		for i, b := range got {
			if b != byte(k+1) {
				t.Fatalf("round %d: byte %d of %s's buffer = %d, want %d: its Recv got the pages of another round", k, i, B, b, k+1)
			}
		}
		dep = recv + 1
	}
	wait(t, ja, prev)
}
