package transport

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// Request is an incoming message as its handler sees it.
type Request struct {
	Type proto.MsgType
	body []byte
}

// Decode decodes the message body into v (a pointer). Unknown fields are
// skipped, so newer peers may add fields.
func (r Request) Decode(v any) error {
	if err := decodeBody(r.body, v); err != nil {
		return fmt.Errorf("%v: %w", r.Type, err)
	}
	return nil
}

// Handler serves one message type. It runs on its own goroutine, one per
// incoming message, and must return when ctx is done: ctx ends when the
// caller gives up or its deadline passes, the connection is lost, or the
// transport closes. For a request, resp (nil allowed) is encoded as the
// reply, or err is returned to the caller as a *RemoteError (return a
// *proto.ErrorReply to choose the code). For a one-way message resp is
// dropped and err is logged. A handler that panics does not take the
// process down: the panic is logged with its stack and the caller gets
// CodeInternal.
type Handler func(ctx context.Context, from credentials.Identity, req Request) (resp any, err error)

// Handle registers h for messages of type typ (at least
// proto.MsgFirstApp), replacing any earlier handler. Register handlers
// before peers learn this node's address; a message without a handler is
// answered with ErrUnknownType.
func (t *Transport) Handle(typ proto.MsgType, h Handler) {
	if typ.IsTransport() {
		panic(fmt.Sprintf("transport: Handle(%v): types below MsgFirstApp belong to the transport", typ))
	}
	t.hmu.Lock()
	defer t.hmu.Unlock()
	if h == nil {
		delete(t.handlers, typ)
		return
	}
	t.handlers[typ] = h
}

// HandleFunc registers a typed handler: the body is decoded into a Req and
// the returned *Resp encoded as the reply.
func HandleFunc[Req, Resp any](t *Transport, typ proto.MsgType, f func(ctx context.Context, from credentials.Identity, req *Req) (*Resp, error)) {
	t.Handle(typ, func(ctx context.Context, from credentials.Identity, r Request) (any, error) {
		req := new(Req)
		if err := r.Decode(req); err != nil {
			return nil, err
		}
		resp, err := f(ctx, from, req)
		if err != nil || resp == nil {
			return nil, err
		}
		return resp, nil
	})
}

func (t *Transport) handler(typ proto.MsgType) Handler {
	t.hmu.RLock()
	defer t.hmu.RUnlock()
	return t.handlers[typ]
}

// timeoutOf is the Envelope.Timeout for ctx, or an error if ctx's deadline
// has passed.
func timeoutOf(ctx context.Context) (int64, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return 0, context.DeadlineExceeded
	}
	return int64(d), nil
}

func (c *conn) maxFrame(own int) int {
	if c.peerMaxFrame > 0 && c.peerMaxFrame < own {
		return c.peerMaxFrame
	}
	return own
}

// openStream opens a bidirectional stream to peer, redialing once if the
// cached connection turns out to be dead before anything was sent.
func (t *Transport) openStream(ctx context.Context, peer credentials.Identity, op string) (*conn, *quic.Stream, error) {
	for attempt := 0; ; attempt++ {
		c, err := t.conn(ctx, peer)
		if err != nil {
			return nil, nil, err
		}
		s, err := c.qc.OpenStreamSync(ctx)
		if err == nil {
			return c, s, nil
		}
		if attempt > 0 || ctx.Err() != nil || (c.qc.Context().Err() == nil && !isConnErr(err)) {
			return nil, nil, t.streamErr(ctx, c, op, err)
		}
		t.forget(c)
	}
}

// Call sends req (nil allowed) as a message of type typ to peer and
// decodes the reply into resp (a pointer, or nil to drop it). It dials the
// peer if no connection is open. ctx bounds the whole exchange and its
// deadline travels with the request, bounding the handler too; cancelling
// ctx abandons the stream and the handler's context is cancelled.
//
// A node peer that answers with a QUIC stateless reset has restarted (see
// restartedErr): the call is made once more, to its new run.
//
// Errors: *RemoteError for an error reply; *PeerError naming the peer for
// everything else, wrapping ErrPeerLost when the connection broke, the
// context's error, ErrNoRoute, ErrTLS, ErrUnauthorized, ...
func (t *Transport) Call(ctx context.Context, peer credentials.Identity, typ proto.MsgType, req, resp any) error {
	err := t.call(ctx, peer, typ, req, resp)
	if restartedErr(ctx, peer, err) {
		t.log.Info("peer restarted: calling its new run", "peer", peer.String(), "type", typ.String())
		err = t.call(ctx, peer, typ, req, resp)
	}
	t.count(peer, err)
	return err
}

// restartedErr reports whether err says that node peer answered on its
// cached connection with a stateless reset: the process at the peer's
// address holds no state for the connection. It is a new run of the node
// (the reset key derives from the node's key, so only the node can send
// one), which has not seen the message, and the run that may have seen it
// is gone with all it held; or the node had closed the connection already,
// before the message came. Either way sending the message again, on a new
// connection, cannot do anything twice. Membership usually closes such
// connections first (ClosePeer); this covers the moments before the news
// arrives, and clients, which follow no membership.
func restartedErr(ctx context.Context, peer credentials.Identity, err error) bool {
	var re *quic.StatelessResetError
	return err != nil && ctx.Err() == nil && (peer.Role == proto.RoleNode || peer.Role == "") && errors.As(err, &re)
}

// count records a call or one-way message sent to peer.
func (t *Transport) count(peer credentials.Identity, err error) {
	if peer.Role == "" {
		peer.Role = proto.RoleNode
	}
	c := t.counters(peer)
	c.callsSent.Add(1)
	if err != nil {
		c.failures.Add(1)
	}
}

func (t *Transport) call(ctx context.Context, peer credentials.Identity, typ proto.MsgType, req, resp any) error {
	op := "call " + typ.String()
	timeout, err := timeoutOf(ctx)
	if err != nil {
		return &PeerError{Peer: peer, Op: op, Err: err}
	}
	c, s, err := t.openStream(ctx, peer, op)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		s.CancelWrite(quicCodeCanceled)
		s.CancelRead(quicCodeCanceled)
	})
	defer stop()
	if err := writeFrame(s, proto.Envelope{Type: typ, Timeout: timeout}, req, c.maxFrame(t.cfg.MaxFrameSize)); err != nil {
		s.CancelWrite(quicCodeCanceled)
		s.CancelRead(quicCodeCanceled)
		if errors.Is(err, ErrFrameTooLarge) {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: err}
		}
		return t.streamErr(ctx, c, op, err)
	}
	s.Close()
	return t.readReply(ctx, c, s, op, typ, resp)
}

func (t *Transport) readReply(ctx context.Context, c *conn, s *quic.Stream, op string, typ proto.MsgType, resp any) error {
	env, body, err := readFrame(s, t.cfg.MaxFrameSize)
	if err != nil {
		if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed) {
			s.CancelRead(quicCodeTooLarge)
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("reply: %w", err)}
		}
		return t.streamErr(ctx, c, op, err)
	}
	if err := expectEOF(s); err != nil {
		return t.streamErr(ctx, c, op, err)
	}
	return decodeReply(c, op, typ, env, body, resp)
}

// decodeReply decodes a reply frame into resp, or the error it carries.
func decodeReply(c *conn, op string, typ proto.MsgType, env proto.Envelope, body []byte, resp any) error {
	switch env.Type {
	case proto.MsgReply:
		if err := decodeBody(body, resp); err != nil {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("reply: %w", err)}
		}
		return nil
	case proto.MsgError:
		var er proto.ErrorReply
		if err := decodeBody(body, &er); err != nil {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("error reply: %w", err)}
		}
		return &RemoteError{Peer: c.peer, Type: typ, Code: er.Code, Message: er.Message}
	}
	return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("%w: reply has type %v", ErrMalformed, env.Type)}
}

// Send sends msg as a one-way message of type typ to peer, on a stream of
// its own: it returns once the message is handed to QUIC, which delivers
// it reliably unless the connection breaks, and gives no word from the
// handler. One-way messages are not ordered with respect to each other;
// use Call where order or an answer matters.
func (t *Transport) Send(ctx context.Context, peer credentials.Identity, typ proto.MsgType, msg any) error {
	err := t.send(ctx, peer, typ, msg)
	t.count(peer, err)
	return err
}

func (t *Transport) send(ctx context.Context, peer credentials.Identity, typ proto.MsgType, msg any) error {
	op := "send " + typ.String()
	timeout, err := timeoutOf(ctx)
	if err != nil {
		return &PeerError{Peer: peer, Op: op, Err: err}
	}
	for attempt := 0; ; attempt++ {
		c, err := t.conn(ctx, peer)
		if err != nil {
			return err
		}
		s, err := c.qc.OpenUniStreamSync(ctx)
		if err != nil {
			if attempt == 0 && ctx.Err() == nil && (c.qc.Context().Err() != nil || isConnErr(err)) {
				t.forget(c)
				continue
			}
			return t.streamErr(ctx, c, op, err)
		}
		stop := context.AfterFunc(ctx, func() { s.CancelWrite(quicCodeCanceled) })
		defer stop()
		if err := writeFrame(s, proto.Envelope{Type: typ, Timeout: timeout}, msg, c.maxFrame(t.cfg.MaxFrameSize)); err != nil {
			s.CancelWrite(quicCodeCanceled)
			if errors.Is(err, ErrFrameTooLarge) {
				return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: err}
			}
			return t.streamErr(ctx, c, op, err)
		}
		return s.Close()
	}
}

// Ping measures a round trip to peer (a MsgPing request, served by every
// transport).
func (t *Transport) Ping(ctx context.Context, peer credentials.Identity) (time.Duration, error) {
	start := time.Now()
	err := t.Call(ctx, peer, proto.MsgPing, nil, nil)
	return time.Since(start), err
}

// handlerContext derives a handler's context: cancelled when the stream
// (or connection) is, when the transport closes, and at the caller's
// deadline.
func (t *Transport) handlerContext(parent context.Context, timeout int64) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(t.ctx, func() { cancel(ErrClosed) })
	var cancelT context.CancelFunc = func() {}
	if timeout > 0 {
		ctx, cancelT = context.WithTimeoutCause(ctx, time.Duration(timeout), errDeadline)
	}
	return ctx, func() { cancelT(); stop(); cancel(nil) }
}

// handleStream serves one request stream from c's peer.
func (t *Transport) handleStream(c *conn, s *quic.Stream) {
	defer t.wg.Done()
	s.SetReadDeadline(time.Now().Add(t.cfg.IdleTimeout))
	env, body, release, err := t.readRequest(s)
	if err != nil {
		if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed) {
			t.log.Warn("bad request frame", "peer", c.peer.String(), "error", err)
			t.reply(c, s, proto.MsgError, errorReply(err))
			s.CancelRead(quicCodeTooLarge)
			return
		}
		s.CancelRead(quicCodeCanceled)
		s.CancelWrite(quicCodeCanceled)
		return
	}
	if env.Type == proto.MsgPages {
		release() // a page header; the pages go straight into allocations
		t.receivePages(c, s, env, body)
		return
	}
	if env.Session {
		t.serveSession(c, s, env, body, release)
		return
	}
	defer release()
	if err := expectEOF(s); err != nil {
		s.CancelRead(quicCodeCanceled)
		s.CancelWrite(quicCodeCanceled)
		return
	}
	s.SetReadDeadline(time.Time{})
	t.serveRequest(c, s, env, body, true)
}

// serveRequest runs the handler of one request and writes its reply,
// closing the stream after it when last (otherwise the stream is a
// session's). It reports whether the stream may carry the next request.
func (t *Transport) serveRequest(c *conn, s *quic.Stream, env proto.Envelope, body []byte, last bool) bool {
	var h Handler
	switch env.Type {
	case proto.MsgPing:
		h = func(context.Context, credentials.Identity, Request) (any, error) { return nil, nil }
	default:
		if h = t.handler(env.Type); h == nil || env.Type.IsTransport() {
			t.replyFrame(c, s, proto.MsgError, &proto.ErrorReply{Code: proto.CodeUnknownType, Message: fmt.Sprintf(
				"%s has no handler for %v: is it running an older acpp release?", t.self, env.Type)}, true)
			return false
		}
	}
	ctx, cancel := t.handlerContext(s.Context(), env.Timeout)
	defer cancel()
	t.counters(c.peer).callsRecv.Add(1)
	resp, err := t.runHandler(ctx, h, c.peer, Request{Type: env.Type, body: body})
	if err == nil {
		err = t.replyFrame(c, s, proto.MsgReply, resp, last)
		if errors.Is(err, ErrFrameTooLarge) {
			t.log.Error("reply too large", "peer", c.peer.String(), "type", env.Type.String(), "error", err)
			err = t.replyFrame(c, s, proto.MsgError, errorReply(err), last)
		}
		return err == nil
	}
	if t.ctx.Err() != nil {
		// Shutting down: the handler was cancelled for that; the caller
		// learns it from the stream reset (ErrPeerLost), not as a handler
		// failure.
		s.CancelWrite(quicCodeShutdown)
		return false
	}
	if cause := context.Cause(ctx); cause == errDeadline && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %v", errDeadline, err)
	}
	return t.replyFrame(c, s, proto.MsgError, errorReply(err), last) == nil
}

// reply writes the one reply frame of a request stream and closes it.
func (t *Transport) reply(c *conn, s *quic.Stream, typ proto.MsgType, body any) error {
	return t.replyFrame(c, s, typ, body, true)
}

// replyFrame writes a reply frame, and closes the stream after it when
// last.
func (t *Transport) replyFrame(c *conn, s *quic.Stream, typ proto.MsgType, body any, last bool) error {
	f, err := encodeFrame(proto.Envelope{Type: typ}, body, c.maxFrame(t.cfg.MaxFrameSize))
	if err != nil {
		return err
	}
	defer framePool.Put(f)
	if _, err := s.Write(f.buf.Bytes()); err != nil {
		s.CancelWrite(quicCodeCanceled)
		return err
	}
	if !last {
		return nil
	}
	return s.Close()
}

// handleOneWay serves one one-way message from c's peer.
func (t *Transport) handleOneWay(c *conn, s *quic.ReceiveStream) {
	defer t.wg.Done()
	s.SetReadDeadline(time.Now().Add(t.cfg.IdleTimeout))
	env, body, err := readFrame(s, t.cfg.MaxFrameSize)
	if err == nil {
		err = expectEOF(s)
	}
	if err != nil {
		s.CancelRead(quicCodeTooLarge)
		if !errors.Is(err, ErrClosed) && t.ctx.Err() == nil {
			t.log.Warn("bad one-way message", "peer", c.peer.String(), "error", err)
		}
		return
	}
	if env.Type == proto.MsgPagesAbort {
		if err := c.receiveAbort(body); err != nil {
			t.log.Warn("bad page abort", "peer", c.peer.String(), "error", err)
		}
		return
	}
	h := t.handler(env.Type)
	if h == nil || env.Type.IsTransport() {
		t.log.Warn("one-way message without a handler", "peer", c.peer.String(), "type", env.Type.String())
		return
	}
	ctx, cancel := t.handlerContext(c.qc.Context(), env.Timeout)
	defer cancel()
	t.counters(c.peer).callsRecv.Add(1)
	if _, err := t.runHandler(ctx, h, c.peer, Request{Type: env.Type, body: body}); err != nil {
		t.log.Warn("one-way handler failed", "peer", c.peer.String(), "type", env.Type.String(), "error", err)
	}
}

// Panics is how many panics of handlers, page handlers and page sinks
// (Done, After) the transport recovered. Each is a bug, and what the
// panicking code held (a lock, a half-made change) stays as it was: a
// node reports a count above 0 as degraded, so that it is restarted.
func (t *Transport) Panics() int64 { return t.panics.Load() }

// runHandler calls h. A handler that panics does not take the process
// down with it (no message may take a node down): the panic and its stack
// are logged as an error, and the caller gets CodeInternal saying so. As
// with net/http, what the handler held when it panicked is its own to
// clean up (deferred unlocks run); a panic is a bug to report.
func (t *Transport) runHandler(ctx context.Context, h Handler, from credentials.Identity, req Request) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			t.panics.Add(1)
			t.log.Error("handler panicked", "peer", from.String(), "type", req.Type.String(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp, err = nil, &proto.ErrorReply{Code: proto.CodeInternal, Message: fmt.Sprintf(
				"%s: the handler of %v panicked: %v (a bug: please report it with %s's log)", t.self, req.Type, p, t.self)}
		}
	}()
	return h(ctx, from, req)
}
