package node_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

func shareableFakes(shareable ...bool) func(i int, cfg *node.Config) {
	return func(i int, cfg *node.Config) {
		cfg.ExtraDevices = []device.Device{devicetest.NewFake(devicetest.FakeConfig{Shareable: shareable[i]})}
	}
}

// Between device memories that can be mapped across processes of one
// host (CUDA IPC; here Fakes that share memory in the process), pages go
// by reference: the receiver copies them device to device, the bytes are
// counted as moved, nothing crosses the network (C3).
func TestPagesByReference_C3(t *testing.T) {
	nodes := startNodes(t, 2, shareableFakes(true, true))
	c := startClient(t, credDir, "alice", nodes...)
	mem, _ := memOf(t, c, "n0", "fake:0")
	deviceMemoryRoundTrip(t, c, mem)
	sent := counter(t, nodes[0], "acpp_node_page_transfers_by_reference_total", map[string]string{"direction": "sent", "peer": "n1"})
	recv := counter(t, nodes[1], "acpp_node_page_transfers_by_reference_total", map[string]string{"direction": "received", "peer": "n0"})
	if sent != 1 || recv != 1 {
		t.Errorf("transfers by reference: %v sent, %v received; want 1 and 1", sent, recv)
	}
	if b := counter(t, nodes[1], "acpp_node_page_bytes_total", map[string]string{"direction": "received", "peer": "n0"}); b == 0 {
		t.Error("bytes received by reference are not counted")
	}
}

// A receiver that cannot map the sender's memory refuses the reference,
// and the sender sends the bytes instead: the result is the same (C3).
func TestPagesByReferenceFallsBack_C3(t *testing.T) {
	nodes := startNodes(t, 2, shareableFakes(true, false))
	c := startClient(t, credDir, "alice", nodes...)
	mem, _ := memOf(t, c, "n0", "fake:0")
	deviceMemoryRoundTrip(t, c, mem)
	if n := counter(t, nodes[0], "acpp_node_page_transfers_by_reference_total", map[string]string{"direction": "sent"}); n != 0 {
		t.Errorf("%v transfers by reference to a receiver that cannot map them", n)
	}
	if n := counter(t, nodes[0], "acpp_node_page_transfers_total", map[string]string{"direction": "sent", "peer": "n1"}); n != 1 {
		t.Errorf("%v transfers sent as bytes, want 1", n)
	}
}

// Pages by reference that arrive before their Recv is armed wait, holding
// no memory, and the sender's Send ends only after the receiver copied
// them (its pages must not change before) (C3).
func TestPagesByReferenceEarly_C3(t *testing.T) {
	nodes := startNodes(t, 2, shareableFakes(true, true))
	c := startClient(t, credDir, "alice", nodes...)
	mem, _ := memOf(t, c, "n0", "fake:0")
	ja, jb := openJob(t, c, "n0", 1), openJob(t, c, "n1", 1)
	rng := [3]uint64{1, 8, 256}
	const elem = 4
	size := int(rng[0]*rng[1]*rng[2]) * elem
	image := randomBytes(size, 5)
	whole := []proto.Box{{Hi: rng}}
	rows := []proto.Box{{Lo: [3]uint64{0, 2, 0}, Hi: [3]uint64{1, 5, 256}}}
	host, dev := submitDeviceSend(t, ja, mem, rng, elem, rows)
	// n1's Recv waits for an upload of its own that comes later.
	submit(t, jb, host, dev,
		proto.Instr{ID: 3, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: whole},
		proto.Instr{ID: 4, Kind: proto.InstrCopy, Deps: []uint64{2, 3}, Buffer: 1, Mem: 0, DstMem: mem, Boxes: whole},
		proto.Instr{ID: 5, Kind: proto.InstrRecv, Deps: []uint64{4}, Buffer: 1, Mem: mem, Boxes: rows, Peer: "n0"},
		proto.Instr{ID: 6, Kind: proto.InstrCopy, Deps: []uint64{5}, Buffer: 1, Mem: mem, DstMem: 0, Boxes: whole},
	)
	if err := ja.Upload(testCtx(t), 1, 0, rng, elem, whole, image); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)                                    // the send is on its way, the recv not armed
	pctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond) // a long poll: it answers at the deadline
	res, err := ja.Poll(pctx, 5)
	cancel()
	if err != nil || len(res.Pending) != 1 {
		t.Fatalf("send by reference before the receiver's Recv was armed: %+v, %v; want it pending", res, err)
	}
	zeros := make([]byte, size)
	if err := jb.Upload(testCtx(t), 1, 0, rng, elem, whole, zeros); err != nil {
		t.Fatal(err)
	}
	wait(t, ja, 5)
	got := make([]byte, size)
	if err := jb.ReadBack(testCtx(t), 7, []uint64{6}, 1, 0, rng, elem, whole, got); err != nil {
		t.Fatal(err)
	}
	if want := expectBoxes(make([]byte, size), image, rng, elem, rows); !bytes.Equal(got, want) {
		t.Fatal("pages by reference that arrived early landed wrong")
	}
	if n := counter(t, nodes[1], "acpp_node_page_transfers_by_reference_total", map[string]string{"direction": "received"}); n != 1 {
		t.Errorf("%v transfers received by reference, want 1", n)
	}
}

// C3, B1: an allocation that went to a peer by reference is freed only
// after the peer unmapped it (CUDA leaves freeing exported memory that
// another process still has open undefined): an explicit Free while the
// receiver's part of the job is open, and the close of the sender's part
// before the receiver's, each unmap on the receiver first. The fakes count
// a Free of exported memory that is still mapped.
func TestLentAllocationUnmappedBeforeFree_C3_B1(t *testing.T) {
	fakes := []*devicetest.Fake{devicetest.NewFake(devicetest.FakeConfig{Shareable: true}), devicetest.NewFake(devicetest.FakeConfig{Shareable: true})}
	nodes := startNodes(t, 2, func(i int, cfg *node.Config) { cfg.ExtraDevices = []device.Device{fakes[i]} })
	c := startClient(t, credDir, "alice", nodes...)
	mem, _ := memOf(t, c, "n0", "fake:0")
	violations, mappedAtStart := devicetest.FreedWhileMapped(), devicetest.MappedImports()
	for round, explicit := range []bool{true, false} {
		ja, jb := deviceMemoryRoundTrip(t, c, mem)
		if devicetest.MappedImports() != mappedAtStart+1 {
			t.Fatalf("round %d: %d mappings after a transfer by reference, want %d", round, devicetest.MappedImports(), mappedAtStart+1)
		}
		frees := fakes[0].Stats().Frees
		if explicit {
			submit(t, ja, proto.Instr{ID: 10, Kind: proto.InstrFree, Deps: []uint64{5}, Buffer: 1, Mem: mem})
			wait(t, ja, 10)
		} else if err := ja.Close(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "n0 frees the allocation it lent", func() bool { return fakes[0].Stats().Frees > frees })
		if got := devicetest.FreedWhileMapped() - violations; got != 0 {
			t.Errorf("round %d (explicit free %v): %d frees of memory that n1 still had mapped", round, explicit, got)
		}
		if devicetest.MappedImports() != mappedAtStart {
			t.Errorf("round %d: n1 still has %d mappings, want %d", round, devicetest.MappedImports(), mappedAtStart)
		}
		open := []*nodeclient.Job{jb}
		if explicit {
			open = append(open, ja)
		}
		for _, j := range open {
			if err := j.Close(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range nodes {
		if n.Allocated() != 0 || n.Jobs() != 0 {
			t.Errorf("%s after close: %d bytes, %d jobs", n.Name(), n.Allocated(), n.Jobs())
		}
	}
}
