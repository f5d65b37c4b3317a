package node_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	_ "github.com/acpp/acpp/cuda" // GPUs, where a driver is present
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// memOf returns the memory that device id of node uses, or false.
func memOf(t *testing.T, c *nodeclient.Client, nodeName, id string) (uint32, bool) {
	inv, err := c.Inventory(testCtx(t), nodeName)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if d.ID == id {
			return d.Mem, true
		}
	}
	return 0, false
}

// deviceMemoryRoundTrip moves boxes between device memories (no host view)
// of two nodes, through staging on both sides, and between host and device
// memory of one node, and checks every byte.
func deviceMemoryRoundTrip(t *testing.T, c *nodeclient.Client, mem uint32) (ja, jb *nodeclient.Job) {
	ja, jb = openJob(t, c, "n0", 1), openJob(t, c, "n1", 1)
	rng := [3]uint64{4, 33, 65}
	const elem = 4
	size := int(rng[0]*rng[1]*rng[2]) * elem
	image := randomBytes(size, 3)
	whole := []proto.Box{{Hi: rng}}
	boxes := []proto.Box{{Lo: [3]uint64{0, 1, 2}, Hi: [3]uint64{2, 30, 60}}, {Lo: [3]uint64{3, 0, 0}, Hi: [3]uint64{4, 33, 65}}}
	host, dev := submitDeviceSend(t, ja, mem, rng, elem, boxes)
	submit(t, jb, host, dev,
		proto.Instr{ID: 3, Kind: proto.InstrFill, Deps: []uint64{2}, Buffer: 1, Mem: mem, Pattern: []byte{0}},
		proto.Instr{ID: 4, Kind: proto.InstrRecv, Deps: []uint64{3}, Buffer: 1, Mem: mem, Boxes: boxes, Peer: "n0"},
		proto.Instr{ID: 5, Kind: proto.InstrCopy, Deps: []uint64{1, 4}, Buffer: 1, Mem: mem, DstMem: 0, Boxes: whole},
	)
	if err := ja.Upload(testCtx(t), 1, 0, rng, elem, whole, image); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if err := jb.ReadBack(testCtx(t), 6, []uint64{5}, 1, 0, rng, elem, whole, got); err != nil {
		t.Fatal(err)
	}
	if want := expectBoxes(make([]byte, size), image, rng, elem, boxes); !bytes.Equal(got, want) {
		t.Fatal("boxes sent device memory to device memory between nodes differ")
	}
	// Read back straight from device memory (staged through host memory).
	if err := ja.ReadBack(testCtx(t), 6, []uint64{5}, 1, mem, rng, elem, whole, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, image) {
		t.Fatal("read back from device memory differs from the upload")
	}
	return ja, jb
}

// TestGPUMemoryPagesMove_C3 runs the round trip on the first GPU.
// Skipped without one.
func TestGPUMemoryPagesMove_C3(t *testing.T) {
	nodes := startNodes(t, 2, nil)
	c := startClient(t, credDir, "alice", nodes...)
	mem, ok := memOf(t, c, "n0", "cuda:0")
	if !ok {
		t.Skip("no GPU on this machine")
	}
	deviceMemoryRoundTrip(t, c, mem)
}

// TestDeviceMemoryPagesMove_C3 runs the round trip on an in-memory device
// without a host view (devicetest.Fake), so the staging paths run
// everywhere.
func TestDeviceMemoryPagesMove_C3(t *testing.T) {
	nodes := startNodes(t, 2, func(_ int, cfg *node.Config) {
		cfg.ExtraDevices = []device.Device{devicetest.NewFake(devicetest.FakeConfig{})}
	})
	c := startClient(t, credDir, "alice", nodes...)
	mem, ok := memOf(t, c, "n0", "fake:0")
	if !ok || mem == 0 {
		t.Fatalf("fake:0 uses memory %d (%v), want a memory of its own", mem, ok)
	}
	deviceMemoryRoundTrip(t, c, mem)
}

// TestDeviceFailureFailsInstruction: an op the device fails fails its
// instruction (CodeDevice) and its dependents (CodeDepFailed); the job
// goes on.
func TestDeviceFailureFailsInstruction(t *testing.T) {
	boom := errors.New("injected copy failure")
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) {
		fake := devicetest.NewFake(devicetest.FakeConfig{})
		cfg.ExtraDevices = []device.Device{devicetest.NewFaulty(fake, devicetest.FailOps(func(op device.Op) bool {
			_, ok := op.(device.CopyOp)
			return ok
		}, boom))}
	})
	c := startClient(t, credDir, "alice", nodes...)
	mem, _ := memOf(t, c, "n0", "fake:0")
	j := openJob(t, c, "n0", 1)
	rng := [3]uint64{1, 1, 64}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrAlloc, Buffer: 1, Mem: mem, Range: rng, ElemSize: 1},
		proto.Instr{ID: 3, Kind: proto.InstrCopy, Deps: []uint64{1, 2}, Buffer: 1, DstMem: mem, Boxes: []proto.Box{{Hi: rng}}},
		proto.Instr{ID: 4, Kind: proto.InstrFill, Deps: []uint64{3}, Buffer: 1, Mem: mem, Pattern: []byte{1}},
		proto.Instr{ID: 5, Kind: proto.InstrFill, Deps: []uint64{2}, Buffer: 1, Mem: mem, Pattern: []byte{2}},
	)
	err := j.Wait(testCtx(t), 3, 4, 5)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 2 {
		t.Fatalf("Wait = %v, want instructions 3 and 4 failed", err)
	}
	codes := map[uint64]proto.ErrorCode{}
	for _, f := range fe.Failed {
		codes[f.ID] = f.Code
	}
	if codes[3] != proto.CodeDevice || codes[4] != proto.CodeDepFailed {
		t.Errorf("failure codes %v, want 3: device, 4: dependency failed", codes)
	}
}

// randomBytes is n bytes from a PCG seeded with seed (tests' page images).
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// submitDeviceSend submits to j (on n0) buffer 1 of range rng allocated in
// host memory (instruction 1) and in memory mem (2), an upload of the
// whole buffer (3), its copy into mem (4) and a Send of boxes from mem to
// n1 (5); it returns the two allocations for the receiver's job.
func submitDeviceSend(t *testing.T, j *nodeclient.Job, mem uint32, rng [3]uint64, elem uint32, boxes []proto.Box) (host, dev proto.Instr) {
	t.Helper()
	whole := []proto.Box{{Hi: rng}}
	host = proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: elem}
	dev = host
	dev.ID, dev.Mem = 2, mem
	submit(t, j, host, dev,
		proto.Instr{ID: 3, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: whole},
		proto.Instr{ID: 4, Kind: proto.InstrCopy, Deps: []uint64{2, 3}, Buffer: 1, Mem: 0, DstMem: mem, Boxes: whole},
		proto.Instr{ID: 5, Kind: proto.InstrSend, Deps: []uint64{4}, Buffer: 1, Mem: mem, PeerMem: mem, Boxes: boxes, Peer: "n1"},
	)
	return host, dev
}
