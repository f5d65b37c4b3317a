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
// small command groups between two nodes was a tenth of each hop's CPU.
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

	calls sync.Mutex // one call at a time

	mu     sync.Mutex // guards the fields below; never held across I/O
	c      *conn
	s      *quic.Stream // nil until a call opens one, or after it broke
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
	ss.calls.Lock()
	defer ss.calls.Unlock()
	ss.mu.Lock()
	reused := ss.s != nil
	ss.mu.Unlock()
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

func (ss *Session) call(ctx context.Context, req, resp any) (err error) {
	op := "session " + ss.typ.String()
	timeout, err := timeoutOf(ctx)
	if err != nil {
		return &PeerError{Peer: ss.peer, Op: op, Err: err}
	}
	ss.mu.Lock()
	closed, c, s := ss.closed, ss.c, ss.s
	ss.mu.Unlock()
	if closed {
		return &PeerError{Peer: ss.peer, Op: op, Err: ErrSessionClosed}
	}
	if s == nil {
		if c, s, err = ss.t.openStream(ctx, ss.peer, op); err != nil {
			return err
		}
		ss.mu.Lock()
		closed = ss.closed
		if !closed {
			ss.c, ss.s = c, s
		}
		ss.mu.Unlock()
		if closed { // Close came meanwhile
			cancelStream(s, quicCodeCanceled)
			return &PeerError{Peer: ss.peer, Op: op, Err: ErrSessionClosed}
		}
	}
	stop := context.AfterFunc(ctx, func() { cancelStream(s, quicCodeCanceled) })
	defer func() {
		// A stream the context's cancellation may reach (its function
		// started), or that failed, carries no further call; one that
		// brought the peer's error reply does.
		var re *RemoteError
		if !stop() || (err != nil && !errors.As(err, &re)) {
			ss.drop(s)
		}
	}()
	if err := writeFrame(s, proto.Envelope{Type: ss.typ, Timeout: timeout, Session: true}, req, c.maxFrame(ss.t.cfg.MaxFrameSize)); err != nil {
		if errors.Is(err, ErrFrameTooLarge) {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: err}
		}
		return ss.t.streamErr(ctx, c, op, err)
	}
	env, body, err := readFrame(s, ss.t.cfg.MaxFrameSize)
	if err != nil {
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

// cancelStream ends both directions of s at once.
func cancelStream(s *quic.Stream, code quic.StreamErrorCode) {
	s.CancelWrite(code)
	s.CancelRead(code)
}

// drop abandons stream s of the session (if it is still the session's);
// the next Call opens another.
func (ss *Session) drop(s *quic.Stream) {
	ss.mu.Lock()
	if ss.s == s {
		ss.c, ss.s = nil, nil
	}
	ss.mu.Unlock()
	cancelStream(s, quicCodeCanceled)
}

// Close ends the session: its stream is closed, a Call in flight fails
// (it does not wait for one), and later Calls fail with ErrSessionClosed.
func (ss *Session) Close() error {
	ss.mu.Lock()
	ss.closed = true
	s := ss.s
	ss.c, ss.s = nil, nil
	ss.mu.Unlock()
	if s == nil {
		return nil
	}
	s.CancelRead(quicCodeNone) // no reply is awaited: a call in flight ends
	return s.Close()
}

// serveSession serves the requests of a session stream (Envelope.Session)
// one after another, each with its type's handler, until the caller closes
// its side, breaks the stream, or sends nothing for the idle timeout. Every
// request of a session has the type of its first.
func (t *Transport) serveSession(c *conn, s *quic.Stream, env proto.Envelope, body []byte, release func()) {
	for {
		s.SetReadDeadline(time.Time{})
		ok := t.serveRequest(c, s, env, body, false)
		release()
		if !ok {
			s.CancelRead(quicCodeCanceled)
			return
		}
		if env, body, release, ok = t.nextSessionFrame(c, s, env.Type); !ok {
			return
		}
	}
}

// nextSessionFrame reads the next request of a session of type typ. When
// there is none (the caller closed its side, the stream broke, nothing came
// for the idle timeout, or a frame that is not the session's) it ends the
// stream and reports false. An idle stream ends with quicCodeIdle: nothing
// after it was read.
func (t *Transport) nextSessionFrame(c *conn, s *quic.Stream, typ proto.MsgType) (proto.Envelope, []byte, func(), bool) {
	s.SetReadDeadline(time.Now().Add(t.cfg.IdleTimeout))
	var hdr [frameHeaderLen]byte
	var env proto.Envelope
	var body []byte
	release := func() {}
	_, err := io.ReadFull(s, hdr[:])
	if err == nil {
		// The frame has begun: its rest gets an idle timeout of its own,
		// so that one that straddles the first deadline is read whole
		// (quic-go checks the deadline before buffered data).
		s.SetReadDeadline(time.Now().Add(t.cfg.IdleTimeout))
		var rel func()
		if env, body, rel, err = t.readRequestBody(s, hdr); err == nil {
			release = rel
		}
	}
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
		return env, body, release, true
	}
	release()
	return env, body, release, false
}
