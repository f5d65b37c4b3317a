package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/acpp/acpp/proto"
)

// A frame is a 4-byte big-endian length N followed by N bytes: the msgpack
// encoding of a proto.Envelope and then the msgpack encoding of the body.
// The length is checked against the receiver's limit before anything is
// allocated, and the N bytes are checked by scanMsgpack before the codec
// sees them, so that no declared length can make the decoder allocate more
// than the frame holds or recurse deeper than maxDepth.

const frameHeaderLen = 4

// maxDepth bounds the nesting of msgpack containers in a frame.
const maxDepth = 32

// helloMax bounds the Hello frame each side reads before the other is
// authenticated (or MaxFrameSize, when that is lower).
const helloMax = 64 << 10

var (
	// ErrFrameTooLarge is returned when a frame exceeds the receiver's
	// MaxFrameSize (or, when sending, this end's or the peer's limit). Split
	// the message, or raise Config.MaxFrameSize on both ends.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrMalformed is returned for a frame that cannot be decoded; it wraps
	// proto.ErrMalformed.
	ErrMalformed = fmt.Errorf("transport: %w", proto.ErrMalformed)
)

type frameBuf struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var framePool = sync.Pool{New: func() any {
	f := &frameBuf{}
	f.enc = msgpack.NewEncoder(&f.buf)
	f.enc.UseCompactInts(true)
	return f
}}

// encodeFrame returns a pooled buffer holding the frame for env and body;
// release it with framePool.Put after writing. body nil encodes msgpack nil.
func encodeFrame(env proto.Envelope, body any, max int) (*frameBuf, error) {
	f := framePool.Get().(*frameBuf)
	f.buf.Reset()
	var hdr [frameHeaderLen]byte
	f.buf.Write(hdr[:])
	if err := f.enc.Encode(&env); err != nil {
		framePool.Put(f)
		return nil, fmt.Errorf("transport: encode envelope: %w", err)
	}
	if err := f.enc.Encode(body); err != nil {
		framePool.Put(f)
		return nil, fmt.Errorf("transport: encode %v body: %w", env.Type, err)
	}
	n := f.buf.Len() - frameHeaderLen
	if n > max {
		framePool.Put(f)
		return nil, fmt.Errorf("%w: %v message is %d bytes, the limit is %d; split it or raise MaxFrameSize on both ends", ErrFrameTooLarge, env.Type, n, max)
	}
	binary.BigEndian.PutUint32(f.buf.Bytes(), uint32(n))
	return f, nil
}

// writeFrame encodes and writes one frame.
func writeFrame(w io.Writer, env proto.Envelope, body any, max int) error {
	f, err := encodeFrame(env, body, max)
	if err != nil {
		return err
	}
	_, err = w.Write(f.buf.Bytes())
	if f.buf.Cap() <= 64<<10 {
		framePool.Put(f)
	}
	return err
}

// readFrame reads one frame from r and splits it into its envelope and the
// raw bytes of its body. A frame longer than max is refused after reading
// only its length.
func readFrame(r io.Reader, max int) (proto.Envelope, []byte, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return proto.Envelope{}, nil, err
	}
	return readFrameBody(r, hdr, max)
}

// readFrameBody reads the rest of a frame whose length prefix is hdr.
func readFrameBody(r io.Reader, hdr [frameHeaderLen]byte, max int) (proto.Envelope, []byte, error) {
	n, err := frameLen(hdr, max)
	if err != nil {
		return proto.Envelope{}, nil, err
	}
	return readBody(r, n)
}

// frameLen is the body length a frame's prefix hdr announces, refused
// above max before anything is allocated.
func frameLen(hdr [frameHeaderLen]byte, max int) (int, error) {
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return 0, fmt.Errorf("%w: peer sent a frame of %d bytes, the limit is %d", ErrFrameTooLarge, n, max)
	}
	return int(n), nil
}

// readBody reads a frame's body of n bytes and splits it (decodeFrame).
func readBody(r io.Reader, n int) (proto.Envelope, []byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return proto.Envelope{}, nil, fmt.Errorf("%w: frame cut short: %v", ErrMalformed, err)
	}
	return decodeFrame(b)
}

// decodeFrame decodes the content of a frame (without its length prefix).
func decodeFrame(b []byte) (proto.Envelope, []byte, error) {
	var env proto.Envelope
	n, err := scanMsgpack(b)
	if err != nil {
		return env, nil, fmt.Errorf("envelope: %w", err)
	}
	if err := unmarshalExact(b[:n], &env); err != nil {
		return env, nil, fmt.Errorf("envelope: %w", err)
	}
	if env.Type == proto.MsgInvalid {
		return env, nil, fmt.Errorf("%w: frame has no message type", ErrMalformed)
	}
	body := b[n:]
	m, err := scanMsgpack(body)
	if err != nil {
		return env, nil, fmt.Errorf("%v body: %w", env.Type, err)
	}
	if m != len(body) {
		return env, nil, fmt.Errorf("%w: %v frame has %d bytes after its body", ErrMalformed, env.Type, len(body)-m)
	}
	return env, body, nil
}

// decodeBody decodes a body that decodeFrame accepted (so scanned) into v,
// unless it could make the decoder allocate more than MaxDecodedBytes.
func decodeBody(body []byte, v any) error {
	if v == nil {
		return nil
	}
	if err := checkDecodedSize(body, v); err != nil {
		return err
	}
	return unmarshalExact(body, v)
}

type frameDecoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decoderPool = sync.Pool{New: func() any {
	d := &frameDecoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

func unmarshalExact(b []byte, v any) error {
	d := decoderPool.Get().(*frameDecoder)
	defer decoderPool.Put(d)
	d.r.Reset(b)
	d.dec.Reset(&d.r)
	err := d.dec.Decode(v)
	left := d.r.Len()
	d.r.Reset(nil) // do not keep the frame alive in the pool
	// A hand decoder's budget (codec.go) ran out: keep its error as is.
	if errors.Is(err, ErrFrameTooLarge) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if left != 0 {
		return fmt.Errorf("%w: %d bytes after the value", ErrMalformed, left)
	}
	return nil
}

// scanMsgpack walks one msgpack value at the start of b without decoding
// it and returns its length. It fails on truncation, on the unused type
// byte 0xc1, on nesting deeper than maxDepth, and on any declared length
// (string, binary, extension, array or map) longer than what is left of b,
// the last being what makes decoding safe: the codec preallocates slices
// by their declared length.
func scanMsgpack(b []byte) (int, error) {
	var stack [maxDepth + 1]uint64 // values still to read at each level
	depth := 0
	stack[0] = 1
	pos := 0
	need := func(k uint64) error {
		if k > uint64(len(b)-pos) {
			return fmt.Errorf("%w: value at byte %d needs %d more bytes, %d left", ErrMalformed, pos, k, len(b)-pos)
		}
		return nil
	}
	readN := func(size int) (uint64, error) {
		if err := need(uint64(size)); err != nil {
			return 0, err
		}
		var v uint64
		for i := range size {
			v = v<<8 | uint64(b[pos+i])
		}
		pos += size
		return v, nil
	}
	for {
		for stack[depth] == 0 {
			if depth == 0 {
				return pos, nil
			}
			depth--
		}
		stack[depth]--
		if pos >= len(b) {
			return 0, fmt.Errorf("%w: truncated at byte %d", ErrMalformed, pos)
		}
		c := b[pos]
		pos++
		var skip, elems uint64 // bytes to skip; values contained
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			elems = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			elems = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			skip, err = readN(1)
		case c == 0xc5 || c == 0xda:
			skip, err = readN(2)
		case c == 0xc6 || c == 0xdb:
			skip, err = readN(4)
		case c == 0xc7, c == 0xc8, c == 0xc9:
			skip, err = readN(1 << (c - 0xc7))
			skip++ // the extension type byte
		case c == 0xca:
			skip = 4
		case c == 0xcb:
			skip = 8
		case c >= 0xcc && c <= 0xcf:
			skip = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			skip = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			elems, err = readN(2)
		case c == 0xdd:
			elems, err = readN(4)
		case c == 0xde:
			elems, err = readN(2)
			elems *= 2
		case c == 0xdf:
			elems, err = readN(4)
			elems *= 2
		default: // 0xc1
			return 0, fmt.Errorf("%w: byte 0x%02x at %d is no msgpack type", ErrMalformed, c, pos-1)
		}
		if err != nil {
			return 0, err
		}
		if err := need(skip); err != nil {
			return 0, err
		}
		pos += int(skip)
		if elems > 0 {
			// Every value takes at least one byte.
			if err := need(elems); err != nil {
				return 0, err
			}
			if depth == maxDepth {
				return 0, fmt.Errorf("%w: containers nested deeper than %d", ErrMalformed, maxDepth)
			}
			depth++
			stack[depth] = elems
		}
	}
}
