package transport

import (
	"context"
	"fmt"
	"io"

	"github.com/acpp/acpp/proto"
)

// requestCost is what a request of a frame of n bytes may hold while it is
// read and served: the frame, and what decoding it may make beyond it
// (checkDecodedSize bounds that by MaxDecodedBytes; a body declares at
// most one element per byte, and an element costs at most a few dozen
// bytes in every message type but the ones refused above the bound).
func requestCost(n int) int64 {
	return int64(n) + min(MaxDecodedBytes, 64*int64(n))
}

// takeRequestRoom reserves room in Config.MaxRequestBytes for a request
// frame of n bytes, waiting for it for up to IdleTimeout; the returned
// func gives it back (call it once).
func (t *Transport) takeRequestRoom(n int) (func(), error) {
	cost := requestCost(n)
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.IdleTimeout)
	defer cancel()
	if err := t.reqRoom.Acquire(ctx, cost); err != nil {
		return nil, fmt.Errorf("%w: busy: no room within %v for a %d-byte request (this node serves at most %d bytes of requests at once: MaxRequestBytes); try again", ErrFrameTooLarge, t.cfg.IdleTimeout, n, t.cfg.MaxRequestBytes)
	}
	return func() { t.reqRoom.Release(cost) }, nil
}

// readRequestBody is readFrameBody for a request this transport serves:
// the frame waits for room in MaxRequestBytes before its body is read.
// release gives the room back once the request is served (nil on error).
func (t *Transport) readRequestBody(r io.Reader, hdr [frameHeaderLen]byte) (env proto.Envelope, body []byte, release func(), err error) {
	n, err := frameLen(hdr, t.cfg.MaxFrameSize)
	if err != nil {
		return env, nil, nil, err
	}
	if release, err = t.takeRequestRoom(n); err != nil {
		return env, nil, nil, err
	}
	env, body, err = readBody(r, n)
	if err != nil {
		release()
		return env, nil, nil, err
	}
	return env, body, release, nil
}

// readRequest is readFrame for a request this transport serves
// (readRequestBody).
func (t *Transport) readRequest(r io.Reader) (proto.Envelope, []byte, func(), error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return proto.Envelope{}, nil, nil, err
	}
	return t.readRequestBody(r, hdr)
}
