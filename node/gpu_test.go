package node_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	_ "github.com/acpp/acpp/cuda" // GPUs, where a driver is present
	"github.com/acpp/acpp/proto"
)

// TestGPUMemoryPagesMove_C3 moves boxes between GPU memories of two nodes
// (through host staging on both sides: device memory has no host view) and
// between host and GPU memory of one node. Skipped without a GPU.
func TestGPUMemoryPagesMove_C3(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := startClient(t, credDir, "alice", nodes...)
	inv, err := c.Inventory(testCtx(t), "n0")
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Memories) < 2 {
		t.Skip("no GPU memory on this machine")
	}
	t.Logf("GPU memory 1 is %s", inv.Memories[1].Device)
	ja, jb := openJob(t, c, "n0", 1), openJob(t, c, "n1", 1)
	rng := [3]uint64{4, 33, 65}
	const elem = 4
	size := int(rng[0]*rng[1]*rng[2]) * elem
	image := make([]byte, size)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range image {
		image[i] = byte(r.Uint32())
	}
	whole := []proto.Box{{Hi: rng}}
	boxes := []proto.Box{{Lo: [3]uint64{0, 1, 2}, Hi: [3]uint64{2, 30, 60}}, {Lo: [3]uint64{3, 0, 0}, Hi: [3]uint64{4, 33, 65}}}
	host := proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: elem}
	gpu := host
	gpu.ID, gpu.Mem = 2, 1
	submit(t, ja, host, gpu,
		proto.Instr{ID: 3, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: whole},
		proto.Instr{ID: 4, Kind: proto.InstrCopy, Deps: []uint64{2, 3}, Buffer: 1, Mem: 0, DstMem: 1, Boxes: whole},
		proto.Instr{ID: 5, Kind: proto.InstrSend, Deps: []uint64{4}, Buffer: 1, Mem: 1, PeerMem: 1, Boxes: boxes, Peer: "n1"},
	)
	submit(t, jb, host, gpu,
		proto.Instr{ID: 3, Kind: proto.InstrFill, Deps: []uint64{2}, Buffer: 1, Mem: 1, Pattern: []byte{0}},
		proto.Instr{ID: 4, Kind: proto.InstrRecv, Deps: []uint64{3}, Buffer: 1, Mem: 1, Boxes: boxes, Peer: "n0"},
		proto.Instr{ID: 5, Kind: proto.InstrCopy, Deps: []uint64{1, 4}, Buffer: 1, Mem: 1, DstMem: 0, Boxes: whole},
	)
	if err := ja.Upload(testCtx(t), 1, 0, rng, elem, whole, image); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if err := jb.ReadBack(testCtx(t), 6, []uint64{5}, 1, 0, rng, elem, whole, got); err != nil {
		t.Fatal(err)
	}
	if want := expectBoxes(make([]byte, size), image, rng, elem, boxes); !bytes.Equal(got, want) {
		t.Fatal("boxes sent GPU to GPU between nodes differ")
	}
	// Read back straight from GPU memory (staged through host memory).
	if err := ja.ReadBack(testCtx(t), 6, []uint64{5}, 1, 1, rng, elem, whole, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, image) {
		t.Fatal("read back from GPU memory differs from the upload")
	}
}
