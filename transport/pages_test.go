package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// testBuffer is a buffer allocation on one node.
type testBuffer struct {
	rng  [3]uint64
	elem uint32
	data []byte
}

// pageStore serves incoming transfers into its buffers and records Done.
type pageStore struct {
	mu      sync.Mutex
	bufs    map[uint64]*testBuffer
	done    []error
	refuse  error
	doneErr error
}

func (p *pageStore) handler(_ context.Context, _ credentials.Identity, h *proto.PageHeader) (PageSink, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse != nil {
		return PageSink{}, p.refuse
	}
	b := p.bufs[h.Buffer]
	if b == nil {
		return PageSink{}, fmt.Errorf("no buffer %d", h.Buffer)
	}
	var runs [][]byte
	for _, box := range h.Boxes {
		var err error
		if runs, err = proto.AppendBoxRuns(runs, b.data, b.rng, h.ElemSize, box); err != nil {
			return PageSink{}, err
		}
	}
	return PageSink{Dst: runs, Done: func(err error) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.done = append(p.done, err)
		return p.doneErr
	}}, nil
}

func (p *pageStore) dones() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.done...)
}

func randomBox(r *rand.Rand, rng [3]uint64) proto.Box {
	var b proto.Box
	for d := range 3 {
		lo := r.Uint64N(rng[d])
		hi := lo + 1 + r.Uint64N(rng[d]-lo)
		b.Lo[d], b.Hi[d] = lo, hi
	}
	return b
}

// TestPagesRandomBoxes_C3 moves random boxes of random 1D, 2D and 3D
// buffers from one node's allocation into another's, over one stream and
// spread over several, and checks the destination bytewise: the boxes
// hold the source's bytes, everything else is untouched.
func TestPagesRandomBoxes_C3(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	for _, streams := range []int{1, 4} {
		t.Run(fmt.Sprintf("streams=%d", streams), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(streams)))
			var d directory
			n1 := startNode(t, &d, "n1", func(c *Config) { c.PageStreams = streams; c.MinSegmentBytes = 1000 })
			n2 := startNode(t, &d, "n2", nil)
			store := &pageStore{bufs: map[uint64]*testBuffer{}}
			n2.HandlePages(store.handler)
			ctx := testCtx(t)
			for i := range 30 {
				dims := 1 + i%3
				rng := [3]uint64{1, 1, 1}
				for d := 3 - dims; d < 3; d++ {
					rng[d] = 1 + r.Uint64N(map[int]uint64{1: 20000, 2: 150, 3: 30}[dims])
				}
				elem := []uint32{1, 4, 8, 12}[r.IntN(4)]
				size := int(rng[0] * rng[1] * rng[2] * uint64(elem))
				src := make([]byte, size)
				for j := range src {
					src[j] = byte(r.Uint32())
				}
				dst := &testBuffer{rng: rng, elem: elem, data: make([]byte, size)}
				store.mu.Lock()
				store.bufs[uint64(i)] = dst
				store.mu.Unlock()
				h := proto.PageHeader{Job: 7, Buffer: uint64(i), ElemSize: elem}
				want := make([]byte, size)
				var runs [][]byte
				for range 1 + r.IntN(4) {
					box := randomBox(r, rng)
					if slices.ContainsFunc(h.Boxes, box.Overlaps) {
						continue // one transfer carries each element once
					}
					h.Boxes = append(h.Boxes, box)
					var err error
					if runs, err = proto.AppendBoxRuns(runs, src, rng, elem, box); err != nil {
						t.Fatal(err)
					}
					wr, _ := proto.BoxRuns(want, rng, elem, box)
					sr, _ := proto.BoxRuns(src, rng, elem, box)
					for k := range wr {
						copy(wr[k], sr[k])
					}
				}
				if err := n1.SendPages(ctx, credentials.Node("n2"), &h, runs); err != nil {
					t.Fatalf("transfer %d (%dD %v, boxes %v): %v", i, dims, rng, h.Boxes, err)
				}
				// Done ran before the ack (under store.mu), so the bytes are in.
				store.mu.Lock()
				same, ndone := bytes.Equal(dst.data, want), len(store.done)
				store.mu.Unlock()
				if ndone != i+1 {
					t.Fatalf("transfer %d acknowledged before Done was called (%d Done calls)", i, ndone)
				}
				if !same {
					t.Fatalf("transfer %d (%dD %v, elem %d, boxes %v): destination differs from the source boxes", i, dims, rng, elem, h.Boxes)
				}
			}
			dones := store.dones()
			if len(dones) != 30 {
				t.Errorf("Done called %d times for 30 transfers", len(dones))
			}
			for _, err := range dones {
				if err != nil {
					t.Errorf("Done(%v) for a successful transfer", err)
				}
			}
		})
	}
}

func TestPagesRefused(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", func(c *Config) { c.PageStreams = 3; c.MinSegmentBytes = 100 })
	n2 := startNode(t, &d, "n2", func(c *Config) { c.MaxPageBytes = 1 << 20 })
	ctx := testCtx(t)
	h := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 1000}}}}
	src := [][]byte{make([]byte, 1000)}

	err := n1.SendPages(ctx, credentials.Node("n2"), &h, src)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != proto.CodeRefused || !strings.Contains(err.Error(), "accepts no page transfers") {
		t.Errorf("transfer to a node without a page handler: %v, want CodeRefused", err)
	}

	store := &pageStore{bufs: map[uint64]*testBuffer{1: {rng: [3]uint64{1, 1, 1000}, elem: 1, data: make([]byte, 1000)}}}
	n2.HandlePages(store.handler)
	h2 := h
	h2.Buffer = 9
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h2, src); !errors.As(err, &re) || re.Code != proto.CodeRefused || !strings.Contains(err.Error(), "no buffer 9") {
		t.Errorf("transfer into an unknown buffer: %v, want CodeRefused saying why", err)
	}
	big := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 2, 1 << 20}}}}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &big, [][]byte{make([]byte, 2<<20)}); !errors.As(err, &re) || re.Code != proto.CodeTooLarge {
		t.Errorf("transfer over MaxPageBytes: %v, want CodeTooLarge", err)
	}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{make([]byte, 999)}); !errors.Is(err, ErrMalformed) {
		t.Errorf("source shorter than the boxes: %v, want ErrMalformed", err)
	}
	store.mu.Lock()
	store.doneErr = &proto.ErrorReply{Code: proto.CodeFirstApp, Message: "allocation freed meanwhile"}
	store.mu.Unlock()
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h, src); !errors.As(err, &re) || re.Code != proto.CodeFirstApp {
		t.Errorf("transfer whose Done fails: %v, want the Done error", err)
	}
	// Only the last transfer reached a sink and completed. (Segments of the
	// first, refused transfer that were already on the wire may reach the
	// handler registered since; they fail, with Done(err).)
	completed := 0
	for _, err := range store.dones() {
		if err == nil {
			completed++
		}
	}
	if completed != 1 {
		t.Errorf("Done(nil) called %d times (all: %v), want once", completed, store.dones())
	}
}

// TestPagesCancelledTransferCallsDoneOnce: a sender that gives up in the
// middle of a multi-stream transfer leaves the receiver with exactly one
// Done and no transfer state.
func TestPagesCancelledTransferCallsDoneOnce(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", func(c *Config) { c.PageStreams = 4; c.MinSegmentBytes = 1 << 20 })
	n2 := startNode(t, &d, "n2", nil)
	const size = 64 << 20
	store := &pageStore{bufs: map[uint64]*testBuffer{1: {rng: [3]uint64{1, 1, size}, elem: 1, data: make([]byte, size)}}}
	n2.HandlePages(store.handler)
	h := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, size}}}}
	ctx, cancel := context.WithCancel(testCtx(t))
	var started atomic.Bool
	n2.HandlePages(func(ctx context.Context, from credentials.Identity, h *proto.PageHeader) (PageSink, error) {
		started.Store(true)
		cancel()
		return store.handler(ctx, from, h)
	})
	err := n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{make([]byte, size)})
	if !started.Load() {
		t.Fatal("transfer never reached the receiver")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled transfer: %v, want context.Canceled", err)
	}
	c2, _ := n2.conn(testCtx(t), credentials.Node("n1"))
	for deadline := time.Now().Add(5 * time.Second); len(store.dones()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			c2.mu.Lock()
			for id, a := range c2.assemblies {
				a.mu.Lock()
				t.Logf("assembly %d: seen %v started %d finished %d failed %v done %v", id, a.seen, a.started, a.finished, a.failed, a.done)
				a.mu.Unlock()
			}
			t.Logf("tombstones %v", c2.tombstones)
			c2.mu.Unlock()
			t.Fatalf("Done not called within 5 s of the cancellation (SendPages: %v)", err)
		}
	}
	if err := store.dones()[0]; err == nil {
		t.Error("Done(nil) for a cancelled transfer")
	}
	eventually(t, "the transfer state is dropped", func() bool {
		c2.mu.Lock()
		defer c2.mu.Unlock()
		return len(c2.assemblies) == 0
	})
	if n := len(store.dones()); n != 1 {
		t.Errorf("Done called %d times, want 1", n)
	}
}

// TestPagesStalledSenderFails: a sender that stops in the middle of a
// payload, with its connection alive, fails the transfer after the idle
// timeout instead of holding the receiver.
func TestPagesStalledSenderFails(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.IdleTimeout = 500 * time.Millisecond })
	store := &pageStore{bufs: map[uint64]*testBuffer{1: {rng: [3]uint64{1, 1, 1000}, elem: 1, data: make([]byte, 1000)}}}
	n2.HandlePages(store.handler)
	ctx := testCtx(t)
	c, err := n1.conn(ctx, credentials.Node("n2"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.CancelWrite(0)
	seg := proto.PageSegment{Count: 1, Length: 1000, Header: proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 1000}}}}}
	if err := writeFrame(s, proto.Envelope{Type: proto.MsgPages}, &seg, 1<<20); err != nil {
		t.Fatal(err)
	}
	s.Write(make([]byte, 10))
	eventually(t, "the stalled transfer fails", func() bool { return len(store.dones()) == 1 })
	if err := store.dones()[0]; err == nil {
		t.Error("Done(nil) for a transfer that stalled after 10 of 1000 bytes")
	}
}

// TestPagesAckDoesNotWaitForAfter_C3: the sender is answered when the
// pages have landed and Done returned, not when the receiver's follow-up
// work (After: starting what waits for the pages) is finished; After runs
// exactly once, after Done, with Done's error. Over one stream and over
// several (segments assembled).
func TestPagesAckDoesNotWaitForAfter_C3(t *testing.T) {
	for _, streams := range []int{1, 3} {
		t.Run(fmt.Sprintf("streams=%d", streams), func(t *testing.T) {
			var d directory
			n1 := startNode(t, &d, "n1", func(c *Config) { c.PageStreams = streams; c.MinSegmentBytes = 100 })
			n2 := startNode(t, &d, "n2", nil)
			dst := make([]byte, 1000)
			release := make(chan struct{})
			var order []string
			var mu sync.Mutex
			afterDone := make(chan error, 2)
			n2.HandlePages(func(context.Context, credentials.Identity, *proto.PageHeader) (PageSink, error) {
				return PageSink{Dst: [][]byte{dst}, Done: func(err error) error {
					mu.Lock()
					order = append(order, "done")
					mu.Unlock()
					return nil
				}, After: func(err error) {
					mu.Lock()
					order = append(order, "after")
					mu.Unlock()
					<-release // the receiver's follow-up work, still running
					afterDone <- err
				}}, nil
			})
			src := make([]byte, 1000)
			for i := range src {
				src[i] = byte(i)
			}
			h := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 1000}}}}
			sent := make(chan error, 1)
			go func() { sent <- n1.SendPages(testCtx(t), credentials.Node("n2"), &h, [][]byte{src}) }()
			select {
			case err := <-sent:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				close(release)
				t.Fatal("the sender was answered only after the receiver's After returned")
			}
			// Done ran before the answer (and took mu after the bytes
			// landed), so reading dst under mu is ordered after the writes.
			mu.Lock()
			landed := slices.Contains(order, "done") && bytes.Equal(dst, src)
			mu.Unlock()
			if !landed {
				t.Error("the pages had not landed (or Done had not run) when the sender was answered")
			}
			close(release)
			if err := <-afterDone; err != nil {
				t.Errorf("After(%v) for a successful transfer", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(order, []string{"done", "after"}) {
				t.Errorf("calls %v, want Done then After, once each", order)
			}
		})
	}
}
