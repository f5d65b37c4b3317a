package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// Session makes calls of one message type to one peer over one stream,
// one call at a time: a request frame, then its reply, and the stream stays
// open for the next. It is for a request made over and over, such as a
// job's completion feed (a long poll): a Call opens, accepts and closes a
// stream and starts a goroutine on the peer each time, which on a chain of
// small command groups cost about as much CPU as the rest of a hop.
//
// The peer serves each request with the handler of its type, as for a
// Call (same context, deadline and errors). A request must be safe to make
// twice: when the stream turns out to be broken (the peer restarted, the
// connection was lost or replaced), Call makes it once more on a new
// stream, and the peer may have seen the first. Close ends the session.
type Session struct {
	t    *Transport
	peer credentials.Identity
	typ  proto.MsgType

	mu     sync.Mutex // one call at a time; guards the fields below
	c      *conn
	s      *quic.Stream
	closed bool
}

// Session returns a session of calls of type typ to peer. It opens its
// stream at the first Call.
func (t *Transport) Session(peer credentials.Identity, typ proto.MsgType) *Session {
	return &Session{t: t, peer: peer, typ: typ}
}

// ErrSessionClosed: Call on a Session after Close.
var ErrSessionClosed = errors.New("transport: session closed")

// Call sends req (nil allowed) and decodes the reply into resp (a pointer,
// or nil to drop it), as Transport.Call does, on the session's stream.
// ctx bounds the call; cancelling it abandons the stream (the next Call
// opens another).
func (ss *Session) Call(ctx context.Context, req, resp any) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return &PeerError{Peer: ss.peer, Op: "session " + ss.typ.String(), Err: ErrSessionClosed}
	}
	reused := ss.s != nil
	err := ss.call(ctx, req, resp)
	if err != nil && reused && ctx.Err() == nil && ss.t.ctx.Err() == nil && brokenStream(err) {
		// The stream died while it waited for this call (the peer restarted,
		// the connection idled out or was replaced): once more, on a new one.
		err = ss.call(ctx, req, resp)
	}
	ss.t.count(ss.peer, err)
	return err
}

// brokenStream: err says the stream or its connection is gone, not that
// the peer answered.
func brokenStream(err error) bool {
	var re *RemoteError
	if errors.As(err, &re) {
		return false
	}
	var se *quic.StreamError
	return errors.Is(err, ErrPeerLost) || errors.As(err, &se) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

func (ss *Session) call(ctx context.Context, req, resp any) error {
	op := "session " + ss.typ.String()
	timeout, err := timeoutOf(ctx)
	if err != nil {
		return &PeerError{Peer: ss.peer, Op: op, Err: err}
	}
	if ss.s == nil {
		c, s, err := ss.t.openStream(ctx, ss.peer, op)
		if err != nil {
			return err
		}
		ss.c, ss.s = c, s
	}
	c, s := ss.c, ss.s
	stop := context.AfterFunc(ctx, func() {
		s.CancelWrite(quicCodeCanceled)
		s.CancelRead(quicCodeCanceled)
	})
	defer stop()
	if err := writeFrame(s, proto.Envelope{Type: ss.typ, Timeout: timeout, Session: true}, req, c.maxFrame(ss.t.cfg.MaxFrameSize)); err != nil {
		ss.drop()
		if errors.Is(err, ErrFrameTooLarge) {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: err}
		}
		return ss.t.streamErr(ctx, c, op, err)
	}
	env, body, err := readFrame(s, ss.t.cfg.MaxFrameSize)
	if err != nil {
		ss.drop()
		if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed) {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("reply: %w", err)}
		}
		if err == io.EOF {
			// The peer ended the session (an older peer, or it closed the
			// stream after an idle while): not a reply.
			err = io.ErrUnexpectedEOF
		}
		return ss.t.streamErr(ctx, c, op, err)
	}
	return decodeReply(c, op, ss.typ, env, body, resp)
}

// drop abandons the session's stream; the next Call opens another.
func (ss *Session) drop() {
	if ss.s != nil {
		ss.s.CancelWrite(quicCodeCanceled)
		ss.s.CancelRead(quicCodeCanceled)
	}
	ss.c, ss.s = nil, nil
}

// Close ends the session: its stream is closed, and later Calls fail with
// ErrSessionClosed. It waits for a Call in flight.
func (ss *Session) Close() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	if ss.s == nil {
		return nil
	}
	s := ss.s
	ss.c, ss.s = nil, nil
	s.CancelRead(quicCodeNone) // no reply is awaited
	return s.Close()
}

// serveSession serves the requests of a session stream (Envelope.Session)
// one after another, each with its type's handler, until the caller closes
// its side, breaks the stream, or sends nothing for the idle timeout. Every
// request of a session has the type of its first.
func (t *Transport) serveSession(c *conn, s *quic.Stream, env proto.Envelope, body []byte) {
	for {
		s.SetReadDeadline(time.Time{})
		if !t.serveRequest(c, s, env, body, false) {
			s.CancelRead(quicCodeCanceled)
			return
		}
		var ok bool
		if env, body, ok = t.nextSessionFrame(c, s, env.Type); !ok {
			return
		}
	}
}

// nextSessionFrame reads the next request of a session of type typ. When
// there is none (the caller closed its side, the stream broke, nothing came
// for the idle timeout, or a frame that is not the session's) it ends the
// stream and reports false. An idle stream ends with quicCodeIdle: nothing
// after it was read.
func (t *Transport) nextSessionFrame(c *conn, s *quic.Stream, typ proto.MsgType) (proto.Envelope, []byte, bool) {
	s.SetReadDeadline(time.Now().Add(t.cfg.IdleTimeout))
	env, body, err := readFrame(s, t.cfg.MaxFrameSize)
	var ne net.Error
	switch {
	case err == io.EOF: // the caller ended the session
		s.Close()
	case errors.As(err, &ne) && ne.Timeout():
		s.CancelRead(quicCodeIdle)
		s.CancelWrite(quicCodeIdle)
	case errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed):
		t.log.Warn("bad session frame", "peer", c.peer.String(), "type", typ.String(), "error", err)
		t.reply(c, s, proto.MsgError, errorReply(err))
		s.CancelRead(quicCodeTooLarge)
	case err != nil:
		s.CancelRead(quicCodeCanceled)
		s.CancelWrite(quicCodeCanceled)
	case env.Type != typ || !env.Session:
		t.reply(c, s, proto.MsgError, errorReply(fmt.Errorf("%w: a session of %v got a %v request", ErrMalformed, typ, env.Type)))
		s.CancelRead(quicCodeRefused)
	default:
		s.SetReadDeadline(time.Time{})
		return env, body, true
	}
	return env, body, false
}
