package transport

import (
	"context"
	"errors"
	"strings"
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
