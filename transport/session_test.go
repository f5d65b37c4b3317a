package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

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

// A request whose frame is only partly there when the receiver's idle
// deadline passes is read whole and served: the rest of a frame that has
// begun gets a timeout of its own.
func TestSessionFrameStraddlingIdleDeadline(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.IdleTimeout = 500 * time.Millisecond })
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
	if env, _, err := readFrame(s, max); err != nil || env.Type != proto.MsgReply {
		t.Fatalf("first reply: %v, %v", env.Type, err)
	}
	f, err := encodeFrame(proto.Envelope{Type: msgEcho, Session: true}, &echoReq{Text: "two"}, max)
	if err != nil {
		t.Fatal(err)
	}
	full := bytes.Clone(f.buf.Bytes())
	time.Sleep(400 * time.Millisecond)
	s.Write(full[:6]) // the length and part of the envelope, before the deadline
	time.Sleep(300 * time.Millisecond)
	s.Write(full[6:]) // the rest after it
	env, body, err := readFrame(s, max)
	if err != nil || env.Type != proto.MsgReply {
		t.Fatalf("reply to a frame that straddled the idle deadline: %v, %v; want MsgReply", env.Type, err)
	}
	var resp echoResp
	if err := decodeBody(body, &resp); err != nil || resp.Text != "two" {
		t.Errorf("reply %+v (%v), want the echo of two", resp, err)
	}
	s.Close()
}

// Session.Close does not wait for a call in flight (a long poll): the
// call ends with an error at once, and later calls fail with
// ErrSessionClosed.
func TestSessionCloseEndsCallInFlight(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	entered := make(chan struct{}, 1)
	n2.Handle(msgBlock, func(ctx context.Context, _ credentials.Identity, _ Request) (any, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ss := n1.Session(credentials.Node("n2"), msgBlock)
	res := make(chan error, 1)
	go func() { res <- ss.Call(testCtx(t), nil, nil) }()
	<-entered
	start := time.Now()
	if err := ss.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v with a call in flight", took)
	}
	select {
	case err := <-res:
		if err == nil {
			t.Error("the call in flight returned nil after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not end after Close")
	}
	if err := ss.Call(testCtx(t), nil, nil); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Call after Close: %v, want ErrSessionClosed", err)
	}
}

// quicStreams counts tr's open outgoing bidirectional streams in quic-go's
// stream maps (unexported fields, read by reflection under the map's own
// lock); ok is false when this quic-go keeps them elsewhere.
func quicStreams(tr *Transport) (n int, ok bool) { return quicStreamCount(tr, "outgoingBidiStreams") }

// quicStreamCount is quicStreams for one of quic-go's stream maps
// ("outgoingBidiStreams", "incomingBidiStreams").
func quicStreamCount(tr *Transport, which string) (n int, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for c := range tr.all {
		sm := reflect.ValueOf(c.qc).Elem().FieldByName("streamsMap")
		if !sm.IsValid() {
			return 0, false
		}
		m := sm.Elem().FieldByName(which).Elem()
		out, mu := m.FieldByName("streams"), m.FieldByName("mutex")
		if !out.IsValid() || mu.Type() != reflect.TypeOf(sync.RWMutex{}) {
			return 0, false
		}
		lock := (*sync.RWMutex)(unsafe.Pointer(mu.UnsafeAddr())) // quic-go's own lock of the map
		lock.RLock()
		n += out.Len()
		lock.RUnlock()
	}
	return n, true
}

// The Hello exchange's stream is freed on both ends once it is answered
// (C3). Each end read the other's Hello and no further: quic-go kept the
// stream for the connection's life, one more stream than the connection's
// calls account for (seen as TestPageSessionStreamsDoNotAccumulate_C3
// failing now and then with 9 streams, 8 kept page streams and the hello).
func TestHelloStreamIsFreed_C3(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	if _, err := n1.Ping(testCtx(t), credentials.Node("n2")); err != nil {
		t.Fatal(err)
	}
	if _, ok := quicStreams(n1); !ok {
		t.Skip("this quic-go keeps its streams where the test cannot count them")
	}
	count := func() (total int, by string) {
		for _, tr := range []*Transport{n1, n2} {
			for _, m := range []string{"outgoingBidiStreams", "incomingBidiStreams"} {
				k, _ := quicStreamCount(tr, m)
				total += k
				by += fmt.Sprintf(" %s %s %d;", tr.Identity().Name, m, k)
			}
		}
		return total, by
	}
	deadline := time.Now().Add(5 * time.Second)
	for n, by := count(); n != 0; n, by = count() {
		if time.Now().After(deadline) {
			t.Fatalf("after a ping, nothing in flight, the connection still holds %d streams:%s", n, by)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Page streams a sender closes (beyond the 8 it keeps) are given up on
// both sides: bursts of 16 concurrent small transfers leave the sender with
// at most the kept streams open, not 8 more after each burst.
func TestPageSessionStreamsDoNotAccumulate_C3(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	const size = 64
	store := &pageStore{bufs: map[uint64]*testBuffer{}}
	for b := uint64(1); b <= 16; b++ {
		store.bufs[b] = &testBuffer{rng: [3]uint64{1, 1, size}, elem: 1, data: make([]byte, size)}
	}
	n2.HandlePages(store.handler)
	ctx := testCtx(t)
	for range 4 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 16 {
			wg.Go(func() {
				<-start
				h := proto.PageHeader{Buffer: uint64(g + 1), ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, size}}}}
				if err := n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{bytes.Repeat([]byte{1}, size)}); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if _, ok := quicStreams(n1); !ok {
		t.Skip("this quic-go keeps its streams where the test cannot count them")
	}
	eventually(t, "the sender holds at most its kept page streams", func() bool {
		n, _ := quicStreams(n1)
		return n <= maxIdlePageStreams
	})
}
