package transport

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// Pages by reference (PageHeader.Ref) carry no payload: the receiver's
// Done does the copy, the sender's acknowledgement waits for it, a refusal
// reaches the sender with its code (so it can send the bytes instead), and
// the counters count the boxes' bytes as moved (C3).
func TestPagesByReference_C3(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.MaxPageBytes = 1 << 10 })
	ctx := testCtx(t)
	ref := &proto.PageRef{Host: "boot-1", PID: 42, Handle: make([]byte, 64), Bytes: 1 << 20}
	h := proto.PageHeader{Buffer: 1, ElemSize: 4, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 4096}}}, Ref: ref}

	var mu sync.Mutex
	var seen []*proto.PageRef
	copying := make(chan struct{})
	release := make(chan error, 1)
	n2.HandlePages(func(_ context.Context, _ credentials.Identity, h *proto.PageHeader) (PageSink, error) {
		mu.Lock()
		seen = append(seen, h.Ref)
		mu.Unlock()
		return PageSink{Done: func(err error) error {
			if err != nil {
				return err
			}
			close(copying)
			return <-release // the copy from the sender's memory
		}}, nil
	})
	sent := make(chan error, 1)
	go func() { sent <- n1.SendPages(ctx, credentials.Node("n2"), &h, nil) }()
	<-copying
	select {
	case err := <-sent:
		t.Fatalf("the sender finished (%v) before the receiver copied the pages", err)
	case <-time.After(50 * time.Millisecond):
	}
	release <- nil
	if err := <-sent; err != nil {
		t.Fatalf("send by reference (16 KiB, over the receiver's 1 KiB payload limit): %v", err)
	}
	if len(seen) != 1 || seen[0] == nil || seen[0].Host != "boot-1" || seen[0].PID != 42 || len(seen[0].Handle) != 64 {
		t.Fatalf("handler saw references %+v", seen)
	}
	for _, ps := range n1.Stats() {
		if ps.Peer.Name == "n2" && ps.BytesSent != 16<<10 {
			t.Errorf("bytes counted as sent = %d, want the boxes' 16 KiB", ps.BytesSent)
		}
	}
	for _, ps := range n2.Stats() {
		if ps.Peer.Name == "n1" && ps.BytesRecv != 16<<10 {
			t.Errorf("bytes counted as received = %d, want the boxes' 16 KiB", ps.BytesRecv)
		}
	}

	// A receiver that cannot map the memory refuses with CodeNoPageRef.
	n2.HandlePages(func(context.Context, credentials.Identity, *proto.PageHeader) (PageSink, error) {
		return PageSink{}, &proto.ErrorReply{Code: proto.CodeNoPageRef, Message: "another host"}
	})
	var re *RemoteError
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h, nil); !errors.As(err, &re) || re.Code != proto.CodeNoPageRef {
		t.Errorf("refused reference: %v, want CodeNoPageRef", err)
	}
	// Bytes along with a reference are malformed; so is a bad reference.
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{make([]byte, 16<<10)}); !errors.Is(err, ErrMalformed) {
		t.Errorf("reference with a payload: %v, want ErrMalformed", err)
	}
	bad := h
	bad.Ref = &proto.PageRef{Host: "boot-1", PID: 42, Bytes: 1}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &bad, nil); !errors.Is(err, proto.ErrMalformed) {
		t.Errorf("reference without a handle: %v, want ErrMalformed", err)
	}
}
