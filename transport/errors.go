package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

var (
	// ErrClosed is returned by calls on a closed Transport.
	ErrClosed = errors.New("transport: closed")
	// ErrPeerLost marks a failure because the connection to the peer broke
	// (the peer died, restarted, left, or the network failed). The error's
	// text names the peer; a later call dials again.
	ErrPeerLost = errors.New("transport: connection to peer lost")
	// ErrNoRoute is returned when a peer cannot be reached: no address
	// (Resolve is nil or failed), or a client with no open connection.
	ErrNoRoute = errors.New("transport: no route to peer")
	// ErrVersionMismatch: the peer speaks another protocol version. Run the
	// same acpp release on every node and client.
	ErrVersionMismatch = errors.New("transport: protocol version mismatch")
	// ErrClusterMismatch: the peer belongs to another cluster.
	ErrClusterMismatch = errors.New("transport: cluster name mismatch")
	// ErrUnauthorized: a peer's identity was refused (by the Authorize
	// func, or its Hello disagrees with its certificate), or the peer
	// refused ours.
	ErrUnauthorized = errors.New("transport: not authorized")
	// ErrTLS: the TLS handshake failed: a certificate missing, expired, or
	// not issued by the cluster CA, on one side or the other.
	ErrTLS = errors.New("transport: TLS handshake failed")
	// ErrUnknownType: the peer has no handler for the message type.
	ErrUnknownType = errors.New("transport: unknown message type")
)

// PeerError is a failure of an operation with one peer; it names the peer
// and wraps the cause (ErrPeerLost, ErrTLS, a context error, ...).
type PeerError struct {
	Peer credentials.Identity
	Addr string // the peer's address, when known
	Op   string // "dial", "call MsgPing", "send pages", ...
	Err  error
}

func (e *PeerError) Error() string {
	s := "transport: " + e.Op + " " + e.Peer.String()
	if e.Peer.Name == "" {
		s = "transport: " + e.Op + " " + e.Addr
	} else if e.Addr != "" {
		s += " (" + e.Addr + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *PeerError) Unwrap() error { return e.Err }

// RemoteError is an error reply from the peer: its handler failed, or it
// refused the request. Is matches the sentinel of the code's class
// (ErrVersionMismatch, ErrClusterMismatch, ErrUnauthorized,
// ErrFrameTooLarge, ErrUnknownType, ErrMalformed, and
// context.DeadlineExceeded when the handler ran out of the caller's
// deadline).
type RemoteError struct {
	Peer    credentials.Identity
	Type    proto.MsgType
	Code    proto.ErrorCode
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("transport: %s answered %v with %v: %s", e.Peer, e.Type, e.Code, e.Message)
}

func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case proto.CodeVersion:
		return target == ErrVersionMismatch
	case proto.CodeCluster:
		return target == ErrClusterMismatch
	case proto.CodeUnauthorized:
		return target == ErrUnauthorized
	case proto.CodeTooLarge:
		return target == ErrFrameTooLarge
	case proto.CodeUnknownType:
		return target == ErrUnknownType
	case proto.CodeMalformed:
		return target == ErrMalformed || target == proto.ErrMalformed
	case proto.CodeDeadline:
		// The handler ran out of the caller's own deadline.
		return target == context.DeadlineExceeded
	}
	return false
}

// errorReply turns a handler's error into the reply the peer sees. A
// handler chooses the code by returning a *proto.ErrorReply.
func errorReply(err error) *proto.ErrorReply {
	var er *proto.ErrorReply
	if errors.As(err, &er) {
		return er
	}
	code := proto.CodeInternal
	switch {
	case errors.Is(err, ErrMalformed), errors.Is(err, proto.ErrMalformed):
		code = proto.CodeMalformed
	case errors.Is(err, ErrFrameTooLarge):
		code = proto.CodeTooLarge
	case errors.Is(err, ErrUnauthorized):
		code = proto.CodeUnauthorized
	case errors.Is(err, errDeadline):
		code = proto.CodeDeadline
	case errors.Is(err, ErrClosed), errors.Is(err, errCanceled):
		code = proto.CodeCanceled
	}
	return &proto.ErrorReply{Code: code, Message: err.Error()}
}

var (
	errDeadline = errors.New("deadline exceeded")
	errCanceled = errors.New("canceled")
)

// Application error codes on QUIC streams and connections (not acpp error
// codes: these travel in QUIC RESET_STREAM, STOP_SENDING and
// CONNECTION_CLOSE frames).
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	quicCodeNone      = 0 // a normal close
	quicCodeCanceled  = 1 // the caller gave up on the stream
	quicCodeShutdown  = 2 // the transport is closing
	quicCodeHandshake = 3 // the Hello exchange failed; the reason is in the message
	quicCodeTooLarge  = 4 // the stream carried a frame over the limit
	quicCodeRefused   = 5 // the receiver refused the stream's content
	quicCodeDuplicate = 6 // a second connection to a peer that already had one
	quicCodePeerGone  = 7 // the peer's run this connection leads to is gone (failed, left, restarted); the reason is in the message
	quicCodeIdle      = 8 // a session's stream carried no request for the idle timeout; the receiver read none of what follows
)
