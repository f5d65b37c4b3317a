package transport

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// A session's calls go over one stream, in order, each answered by the
// handler of its type; an error reply leaves the session usable; Close
// ends it on both sides.
func TestSessionCallsShareOneStream(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	registerEcho(n2)
	ctx := testCtx(t)
	ss := n1.Session(credentials.Node("n2"), msgEcho)
	before := n2.streamsIn.Load()
	for i := range 20 {
		text := strings.Repeat("x", i)
		var resp echoResp
		if err := ss.Call(ctx, &echoReq{Text: text}, &resp); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp != (echoResp{Text: text, From: "node/n1"}) {
			t.Fatalf("call %d: reply %+v", i, resp)
		}
	}
	var re *RemoteError
	if err := ss.Call(ctx, &echoReq{Text: "fail"}, nil); !errors.As(err, &re) || re.Code != proto.CodeFirstApp+7 {
		t.Fatalf("a failing handler over a session: %v, want its RemoteError", err)
	}
	var resp echoResp
	if err := ss.Call(ctx, &echoReq{Text: "after"}, &resp); err != nil || resp.Text != "after" {
		t.Fatalf("a call after an error reply: %+v, %v", resp, err)
	}
	if got := n2.streamsIn.Load() - before; got != 1 {
		t.Errorf("22 calls of a session took %d streams, want 1", got)
	}
	if err := ss.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := ss.Call(ctx, &echoReq{Text: "late"}, nil); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Call after Close: %v, want ErrSessionClosed", err)
	}
	// The peer's side ends too (goleak checks its goroutine at exit).
}

// A session whose stream broke while it waited (the peer dropped it after
// its idle timeout, or restarted) makes the next call on a new stream; a
// call cancelled by its context fails with the context's error and the
// next one works.
func TestSessionReopensBrokenStream_C5(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.IdleTimeout = 600 * time.Millisecond })
	registerEcho(n2)
	n2.Handle(msgBlock, func(ctx context.Context, _ credentials.Identity, _ Request) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx := testCtx(t)
	ss := n1.Session(credentials.Node("n2"), msgEcho)
	defer ss.Close()
	call := func(what string) {
		t.Helper()
		var resp echoResp
		if err := ss.Call(ctx, &echoReq{Text: what}, &resp); err != nil || resp.Text != what {
			t.Fatalf("%s: %+v, %v", what, resp, err)
		}
	}
	call("first")
	before := n2.streamsIn.Load()
	time.Sleep(time.Second) // past n2's read deadline for the next request
	call("after the peer dropped the stream")
	if got := n2.streamsIn.Load() - before; got != 1 {
		t.Errorf("the call after the drop took %d new streams, want 1", got)
	}

	blocked := n1.Session(credentials.Node("n2"), msgBlock)
	defer blocked.Close()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := blocked.Call(cctx, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call past its deadline: %v, want DeadlineExceeded", err)
	}

	n2.Close()
	n2b := startNode(t, &d, "n2", nil)
	registerEcho(n2b)
	eventually(t, "n1 notices n2 closed", func() bool { return !n1.Connected(credentials.Node("n2")) })
	call("to the restarted peer")
}

// A session carries one message type: a request of another type on its
// stream is refused with an error reply, and the stream ends.
func TestSessionRefusesAnotherType(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	registerEcho(n2)
	ctx := testCtx(t)
	c, s, err := n1.openStream(ctx, credentials.Node("n2"), "test")
	if err != nil {
		t.Fatal(err)
	}
	max := c.maxFrame(n1.cfg.MaxFrameSize)
	if err := writeFrame(s, proto.Envelope{Type: msgEcho, Session: true}, &echoReq{Text: "one"}, max); err != nil {
		t.Fatal(err)
	}
	env, _, err := readFrame(s, max)
	if err != nil || env.Type != proto.MsgReply {
		t.Fatalf("first reply: %v, %v", env.Type, err)
	}
	if err := writeFrame(s, proto.Envelope{Type: msgBlock, Session: true}, nil, max); err != nil {
		t.Fatal(err)
	}
	env, body, err := readFrame(s, max)
	if err != nil || env.Type != proto.MsgError {
		t.Fatalf("reply to another type: %v, %v; want an error reply", env.Type, err)
	}
	var er proto.ErrorReply
	if err := decodeBody(body, &er); err != nil || !strings.Contains(er.Message, "session") {
		t.Errorf("error reply %+v (%v), want one about the session", er, err)
	}
	if err := expectEOF(s); err != nil {
		t.Errorf("the stream goes on after the refusal: %v", err)
	}
}

// Small transfers to one peer go over one page stream kept open between
// them; each lands once, with the right bytes. A refused transfer ends its
// stream and the next transfer opens another; concurrent transfers each
// get a stream of their own (at most as many as run at once).
func TestPageSessionKeepsOneStream_C3(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	const size = 64
	store := &pageStore{bufs: map[uint64]*testBuffer{}}
	for b := uint64(1); b <= 8; b++ { // 1 for the sequence, 1..8 for the concurrent senders
		store.bufs[b] = &testBuffer{rng: [3]uint64{1, 1, size}, elem: 1, data: make([]byte, size)}
	}
	n2.HandlePages(store.handler)
	ctx := testCtx(t)
	send := func(buf uint64, fill byte) error {
		src := bytes.Repeat([]byte{fill}, size)
		h := proto.PageHeader{Buffer: buf, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, size}}}}
		return n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{src})
	}
	before := n2.streamsIn.Load()
	for i := range 30 {
		if err := send(1, byte(i)); err != nil {
			t.Fatalf("transfer %d: %v", i, err)
		}
		store.mu.Lock()
		got := store.bufs[1].data[0]
		store.mu.Unlock()
		if got != byte(i) {
			t.Fatalf("after transfer %d the buffer holds %d", i, got)
		}
	}
	if got := n2.streamsIn.Load() - before; got != 1 {
		t.Errorf("30 small transfers took %d streams, want 1", got)
	}
	if n := len(store.dones()); n != 30 {
		t.Errorf("Done called %d times for 30 transfers", n)
	}
	var re *RemoteError
	if err := send(9, 0); !errors.As(err, &re) || re.Code != proto.CodeRefused {
		t.Fatalf("transfer into an unknown buffer: %v, want CodeRefused", err)
	}
	before = n2.streamsIn.Load()
	if err := send(1, 77); err != nil {
		t.Fatalf("transfer after a refusal: %v", err)
	}
	if got := n2.streamsIn.Load() - before; got != 1 {
		t.Errorf("the transfer after a refusal took %d new streams, want 1 (the refused one's ended)", got)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	before = n2.streamsIn.Load()
	for g := range 8 {
		wg.Go(func() {
			for range 10 {
				if err := send(uint64(g+1), byte(g)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent transfer: %v", err)
	}
	if got := n2.streamsIn.Load() - before; got > 8 {
		t.Errorf("80 transfers, 8 at a time, took %d streams, want at most 8", got)
	}
}

// A kept page stream that the receiver dropped after its idle timeout
// (quicCodeIdle: it read nothing more) is not a failed transfer: the
// sender sends on a new stream, and the pages land once.
func TestPageSessionAfterReceiverIdleTimeout_C3(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil) // keeps streams for half of its own (long) idle timeout
	n2 := startNode(t, &d, "n2", func(c *Config) { c.IdleTimeout = 600 * time.Millisecond })
	const size = 16
	store := &pageStore{bufs: map[uint64]*testBuffer{1: {rng: [3]uint64{1, 1, size}, elem: 1, data: make([]byte, size)}}}
	n2.HandlePages(store.handler)
	ctx := testCtx(t)
	h := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, size}}}}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{bytes.Repeat([]byte{1}, size)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // n2 drops the kept stream
	before := n2.streamsIn.Load()
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{bytes.Repeat([]byte{2}, size)}); err != nil {
		t.Fatalf("transfer on a stream the receiver dropped: %v", err)
	}
	if got := n2.streamsIn.Load() - before; got != 1 {
		t.Errorf("took %d new streams, want 1", got)
	}
	if dones := store.dones(); len(dones) != 2 || dones[0] != nil || dones[1] != nil {
		t.Errorf("Done calls %v, want two successes", dones)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if got := store.bufs[1].data[size-1]; got != 2 {
		t.Errorf("buffer holds %d, want the second transfer's 2", got)
	}
}
