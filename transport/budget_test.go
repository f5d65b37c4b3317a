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

// TestRequestsWaitForRoom: the requests a transport reads and serves at
// once are bounded in bytes (MaxRequestBytes): while one large request is
// being served, another waits for room, and after IdleTimeout without
// room it is refused ("busy") instead of adding its frame to memory; once
// the first is served, the next gets in. Without the bound, 1024 streams
// of 16 MiB frames were read into memory at once.
func TestRequestsWaitForRoom(t *testing.T) {
	var d directory
	const frame = 64 << 10
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) {
		c.MaxFrameSize = frame
		c.MaxRequestBytes = requestCost(frame) // room for one request of a full frame
		c.IdleTimeout = 600 * time.Millisecond
	})
	unblock := make(chan struct{})
	entered := make(chan struct{}, 4)
	HandleFunc(n2, msgBlock, func(ctx context.Context, _ credentials.Identity, req *echoReq) (*echoResp, error) {
		entered <- struct{}{}
		select {
		case <-unblock:
		case <-ctx.Done():
		}
		return &echoResp{Text: req.Text}, nil
	})
	ctx := testCtx(t)
	big := &echoReq{Text: "big", Pad: make([]byte, frame-1024)}
	first := make(chan error, 1)
	go func() { first <- n1.Call(ctx, credentials.Node("n2"), msgBlock, big, nil) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first request never reached its handler")
	}
	err := n1.Call(ctx, credentials.Node("n2"), msgBlock, big, nil)
	var er *RemoteError
	if !errors.As(err, &er) || er.Code != proto.CodeTooLarge || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("a second large request while the first holds the room = %v; want a busy refusal (CodeTooLarge)", err)
	}
	close(unblock)
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	if err := n1.Call(ctx, credentials.Node("n2"), msgBlock, big, nil); err != nil {
		t.Fatalf("a large request once the room is free: %v", err)
	}
}

// TestRequestBytesConfig: MaxRequestBytes must hold one request of a full
// frame.
func TestRequestBytesConfig(t *testing.T) {
	c := Config{MaxFrameSize: 1 << 20, MaxRequestBytes: 1 << 20}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "MaxRequestBytes") {
		t.Errorf("Validate with room for less than one frame = %v, want an error naming MaxRequestBytes", err)
	}
}

// TestMaxIncomingStreamsTakesEffect: a node with MaxIncomingStreams 2
// serves at most two requests of one connection at once; the third waits
// for a stream (docs/TRANSPORT.md, Limits) and is served once one ends.
func TestMaxIncomingStreamsTakesEffect(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.MaxIncomingStreams = 2 })
	unblock := make(chan struct{})
	entered := make(chan struct{}, 4)
	HandleFunc(n2, msgBlock, func(ctx context.Context, _ credentials.Identity, req *echoReq) (*echoResp, error) {
		entered <- struct{}{}
		select {
		case <-unblock:
		case <-ctx.Done():
		}
		return &echoResp{Text: req.Text}, nil
	})
	ctx := testCtx(t)
	done := make(chan error, 3)
	for range 3 {
		go func() { done <- n1.Call(ctx, credentials.Node("n2"), msgBlock, &echoReq{Text: "x"}, nil) }()
	}
	for range 2 {
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("two requests never reached their handlers")
		}
	}
	select {
	case <-entered:
		t.Fatal("a third request is served while two hold the connection's MaxIncomingStreams 2")
	case <-time.After(300 * time.Millisecond):
	}
	close(unblock)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("call: %v", err)
		}
	}
	if len(entered) != 1 {
		t.Errorf("%d more requests served after the first two, want 1", len(entered))
	}
}
