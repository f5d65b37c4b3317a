package transport

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// TestPanickingHandlerDoesNotTakeTheNodeDown: no message can take a node
// down, not even one that makes a handler panic. A request is answered
// with CodeInternal naming the panic, a one-way message and a page
// transfer are refused, and the node goes on serving the next ones.
func TestPanickingHandlerDoesNotTakeTheNodeDown(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	notes := make(chan string, 4)
	HandleFunc(n2, msgEcho, func(_ context.Context, _ credentials.Identity, req *echoReq) (*echoResp, error) {
		if req.Text == "boom" {
			var m map[string]int
			m["x"] = 1 // a nil map: the handler's bug
		}
		return &echoResp{Text: req.Text}, nil
	})
	HandleFunc(n2, msgNote, func(_ context.Context, _ credentials.Identity, req *echoReq) (*struct{}, error) {
		if req.Text == "boom" {
			panic("one-way handler bug")
		}
		notes <- req.Text
		return nil, nil
	})
	afterOf667 := make(chan error, 1)
	store := &pageStore{bufs: map[uint64]*testBuffer{1: {rng: [3]uint64{1, 1, 100}, elem: 1, data: make([]byte, 100)}}}
	n2.HandlePages(func(ctx context.Context, from credentials.Identity, h *proto.PageHeader) (PageSink, error) {
		if h.Job == 666 {
			panic("page handler bug")
		}
		sink, err := store.handler(ctx, from, &proto.PageHeader{Job: 1, Buffer: h.Buffer, ElemSize: h.ElemSize, Boxes: h.Boxes})
		switch h.Job {
		case 667:
			sink.Done = func(error) error { panic("Done bug") }
			sink.After = func(err error) { afterOf667 <- err }
		case 668:
			sink.After = func(error) { panic("After bug") }
		}
		return sink, err
	})
	ctx := testCtx(t)
	peer := credentials.Node("n2")

	err := n1.Call(ctx, peer, msgEcho, &echoReq{Text: "boom"}, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != proto.CodeInternal || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("call whose handler panics: %v, want CodeInternal saying it panicked", err)
	}
	var resp echoResp
	if err := n1.Call(ctx, peer, msgEcho, &echoReq{Text: "after"}, &resp); err != nil || resp.Text != "after" {
		t.Fatalf("call after the panic: %q, %v", resp.Text, err)
	}

	if err := n1.Send(ctx, peer, msgNote, &echoReq{Text: "boom"}); err != nil {
		t.Fatal(err)
	}
	if err := n1.Send(ctx, peer, msgNote, &echoReq{Text: "next"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-notes:
		if got != "next" {
			t.Errorf("one-way message %q, want next", got)
		}
	case <-ctx.Done():
		t.Fatal("the one-way message after the panic did not arrive")
	}

	bad := proto.PageHeader{Job: 666, Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 100}}}}
	src := [][]byte{make([]byte, 100)}
	if err := n1.SendPages(ctx, peer, &bad, src); !errors.As(err, &re) || re.Code != proto.CodeRefused || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("transfer whose page handler panics: %v, want CodeRefused saying it panicked", err)
	}
	// The sink's Done and After are the receiver's code too: a panic in
	// Done refuses the transfer, one in After is logged; the node goes on.
	done := bad
	done.Job = 667
	if err := n1.SendPages(ctx, peer, &done, src); !errors.As(err, &re) || re.Code != proto.CodeRefused || !strings.Contains(err.Error(), "page sink panicked") {
		t.Fatalf("transfer whose sink's Done panics: %v, want CodeRefused saying it panicked", err)
	}
	select { // After learns the transfer failed: the sender was told so
	case err := <-afterOf667:
		if err == nil || !strings.Contains(err.Error(), "page sink panicked") {
			t.Errorf("After after a panicking Done got %v, want the panic's error", err)
		}
	case <-ctx.Done():
		t.Fatal("After was not called after a panicking Done")
	}
	after := bad
	after.Job = 668
	if err := n1.SendPages(ctx, peer, &after, src); err != nil {
		t.Fatalf("transfer whose sink's After panics: %v (the pages landed; After runs once the sender is answered)", err)
	}
	good := bad
	good.Job = 1
	if err := n1.SendPages(ctx, peer, &good, src); err != nil {
		t.Fatalf("transfer after the panic: %v", err)
	}
	// Every recovered panic is counted (a node reports itself degraded):
	// the call's, the one-way message's, the page handler's, Done's and
	// After's.
	eventually(t, "five panics counted", func() bool { return n2.Panics() == 5 })
	if n1.Panics() != 0 {
		t.Errorf("the sender counted %d panics", n1.Panics())
	}
}
