package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// FuzzPages: page transfers arriving at a node (the header a peer or a
// client sends, before or after the Upload or Recv that waits for them)
// are refused or land: a sink's runs add up to the header's payload, the
// node does not panic, and closing the job returns every byte, staged
// pages included.
func FuzzPages(f *testing.F) {
	// An allocation of 1×4×16 4-byte elements; an Upload of its first row
	// and the client's pages for it, after and before the Upload, and cut
	// short.
	f.Add([]byte{3, 15, 0, 0, 0, 0, 0, 1, 1, 16})
	f.Add([]byte{3, 15, 0, 32, 0, 0, 0, 1, 1, 16})
	f.Add([]byte{3, 15, 0, 64, 0, 0, 0, 1, 1, 16})
	// A Recv of two boxes from n2 and n2's pages, after and before it (an
	// offline node fails the Recv: n2 is no member; the pages stay staged
	// until the job closes).
	f.Add([]byte{3, 15, 0, 3, 0, 0, 0, 1, 1, 8, 0, 1, 0, 1, 1, 8})
	f.Add([]byte{3, 15, 0, 35, 0, 0, 0, 1, 1, 8, 0, 1, 0, 1, 1, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := fuzzBytes(data)
		n := offlineNode(t)
		j := newJob(n, 1, credentials.Client("alice"), time.Minute, 512<<10)
		n.jobs[1] = j
		elem := []uint32{4, 4, 8, 1}
		alloc := proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, uint64(b.next()%4) + 1, uint64(b.next()%64) + 1}, ElemSize: elem[b.next()%4]}
		box := func() proto.Box {
			lo := [3]uint64{uint64(b.next() % 2), uint64(b.next() % 5), uint64(b.next() % 70)}
			return proto.Box{Lo: lo, Hi: [3]uint64{lo[0] + uint64(b.next()%2), lo[1] + uint64(b.next()%5), lo[2] + uint64(b.next()%70)}}
		}
		c := b.next()
		wait := proto.Instr{ID: 2, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{box()}}
		from := credentials.Client("alice")
		if c&1 != 0 {
			wait.Kind, wait.Peer, from = proto.InstrRecv, "n2", credentials.Node("n2")
		}
		if c&2 != 0 {
			wait.Boxes = append(wait.Boxes, box())
		}
		if c&4 != 0 {
			from = credentials.Client("bob")
		}
		h := &proto.PageHeader{Job: 1, Buffer: 1, ElemSize: alloc.ElemSize, Boxes: wait.Boxes}
		if c&8 != 0 {
			h.Buffer, h.Mem, h.ElemSize = uint64(b.next()%3), uint32(b.next()%3), elem[b.next()%4]
		}
		if c&16 != 0 {
			h.Boxes = []proto.Box{box()}
		}
		early := c&32 != 0
		if !early {
			if _, err := j.submit([]proto.Instr{alloc, wait}, 0); err != nil {
				return
			}
		}
		sink, err := n.onPages(context.Background(), from, h)
		if err == nil {
			total, verr := h.Validate(0)
			if verr != nil {
				t.Fatalf("pages of an invalid header accepted: %v", verr)
			}
			got := uint64(0)
			for _, r := range sink.Dst {
				for i := range r {
					r[i] = byte(i)
				}
				got += uint64(len(r))
			}
			if got != total {
				t.Fatalf("sink of %d bytes for a payload of %d", got, total)
			}
			var failed error
			if c&64 != 0 {
				failed = errors.New("cut short")
			}
			if sink.Done != nil {
				_ = sink.Done(failed)
			}
			if sink.After != nil {
				sink.After(failed)
			}
		}
		if early {
			_, _ = j.submit([]proto.Instr{alloc, wait}, 0)
		}
		waitNotRunning(t, j, []any{h, wait})
		n.closeJob(j, errJobClosed)
		j.mu.Lock()
		bytes := j.bytes
		j.mu.Unlock()
		if bytes != 0 || n.allocated.Load() != 0 {
			t.Fatalf("after close: job holds %d bytes, node %d; want 0", bytes, n.allocated.Load())
		}
	})
}
