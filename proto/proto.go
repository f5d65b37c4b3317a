package proto

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Version is the protocol version this build speaks. Both ends announce it in
// [Hello]; connections between different versions are refused.
//
// 2: a request may open a session (Envelope.Session): the stream stays
// open for the next request of its type.
const Version uint16 = 2

// ALPN is the TLS application protocol of acpp's QUIC connections. It carries
// no version on purpose: a version mismatch must reach the [Hello] exchange,
// which can say what is wrong, instead of failing as a bare TLS alert.
const ALPN = "acpp"

// MsgType says what a frame's body is.
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself. Transport messages take values below MsgFirstApp;
// application (node, coordinator) messages take MsgFirstApp and up.
type MsgType uint16

const (
	// MsgInvalid is the zero value; a frame carrying it is malformed.
	MsgInvalid MsgType = 0
	// MsgHello opens every connection: body [Hello], sent by the dialer on
	// the connection's first stream and answered with MsgHello (the
	// listener's own Hello) or MsgError.
	MsgHello MsgType = 1
	// MsgReply carries a handler's successful response on a request stream.
	MsgReply MsgType = 2
	// MsgError carries an [ErrorReply] instead of a response.
	MsgError MsgType = 3
	// MsgPages opens a page-transfer stream: body [PageSegment], followed on
	// the same stream by the segment's raw bytes, answered by MsgReply
	// (empty body) once the bytes have landed, or MsgError.
	MsgPages MsgType = 4
	// MsgPing is a request with an empty body answered by an empty MsgReply;
	// every transport serves it (liveness, round-trip measurements).
	MsgPing MsgType = 5
	// MsgPagesAbort is a one-way message: body [PageAbort]. A sender that
	// gives up on a multi-stream transfer sends it so that the receiver
	// ends the transfer (Done with an error) at once instead of waiting
	// for segments that will not come.
	MsgPagesAbort MsgType = 6

	// MsgFirstApp is the first value for application messages; values
	// below it are reserved for the transport.
	MsgFirstApp MsgType = 64
)

var transportNames = [...]string{
	MsgInvalid:    "MsgInvalid",
	MsgHello:      "MsgHello",
	MsgReply:      "MsgReply",
	MsgError:      "MsgError",
	MsgPages:      "MsgPages",
	MsgPing:       "MsgPing",
	MsgPagesAbort: "MsgPagesAbort",
}

// appNames names application message types for logs; files that add
// messages from MsgFirstApp up register their names here in an init func
// (or extend this table in place).
var appNames = map[MsgType]string{}

func (t MsgType) String() string {
	if int(t) < len(transportNames) && transportNames[t] != "" {
		return transportNames[t]
	}
	if n, ok := appNames[t]; ok {
		return n
	}
	return fmt.Sprintf("MsgType(%d)", uint16(t))
}

// IsTransport reports whether t is reserved for the transport itself.
func (t MsgType) IsTransport() bool { return t < MsgFirstApp }

// Envelope is the first msgpack value of every frame; the body follows it
// in the same frame.
type Envelope struct {
	Type MsgType `msgpack:"t"`
	// Timeout is the time the sender still waits for the reply, in
	// nanoseconds (0: no deadline). The receiver bounds the handler's
	// context with it. A duration, not a time, so clocks need not agree.
	Timeout int64 `msgpack:"d,omitempty"`
	// Session marks a request of a session: the stream stays open after
	// the reply, for the next request of the same type (a poll made over
	// and over without a stream each time; transport.Session).
	Session bool `msgpack:"s,omitempty"`
}

// Role says what a process is in the cluster; it is carried in certificates
// and in [Hello].
//
// WARNING: ONLY APPEND TO THIS LIST! The values are part of the protocol
// and of issued certificates.
type Role string

const (
	// RoleNode is an acpp-node agent: it serves pages and instructions.
	RoleNode Role = "node"
	// RoleClient is a job's client (a program using the library, or
	// acpp-submit): it connects to nodes and listens on no address.
	RoleClient Role = "client"
	// RoleOperator is a client with the operator's view: it runs jobs as
	// a client does, and a node's status (MsgInventory) lists every
	// client's jobs to it, where a client sees only its own. The value is
	// part of the wire format and of certificates: never change it.
	RoleOperator Role = "operator"
)

// Hello is the handshake, sent by both sides at the start of a connection.
type Hello struct {
	Version uint16 `msgpack:"v"`
	Cluster string `msgpack:"c"`
	// Name and Role are what the sender's certificate says it is; the
	// receiver checks that they agree with the verified certificate.
	Name string `msgpack:"n"`
	Role Role   `msgpack:"r"`
	// Software is a free-form build description for logs ("acpp v0.3").
	Software string `msgpack:"s,omitempty"`
	// MaxFrame is the largest frame the sender accepts, in bytes; the peer
	// refuses to send larger ones with a clear error (0: unknown).
	MaxFrame uint32 `msgpack:"mf,omitempty"`
	// Instance is random per process (a node's boot ID): it tells apart
	// processes that hold the same certificate, so that what a node sends
	// a client (read-backs) reaches the process that asked for it, and a
	// restarted node's new connections replace its old run's (0: unknown).
	Instance uint64 `msgpack:"i,omitempty"`
}

// ErrorCode classifies an [ErrorReply].
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself. Application codes start at CodeFirstApp.
type ErrorCode uint16

const (
	CodeUnknown ErrorCode = 0
	// CodeInternal: the handler failed; the message says how.
	CodeInternal ErrorCode = 1
	// CodeUnknownType: no handler for the frame's MsgType on the receiver.
	CodeUnknownType ErrorCode = 2
	// CodeMalformed: the frame or body could not be decoded or failed
	// validation.
	CodeMalformed ErrorCode = 3
	// CodeTooLarge: a frame or a page payload exceeded the receiver's limit.
	CodeTooLarge ErrorCode = 4
	// CodeVersion: the protocol versions differ.
	CodeVersion ErrorCode = 5
	// CodeCluster: the cluster names differ.
	CodeCluster ErrorCode = 6
	// CodeUnauthorized: the peer's identity was refused (not a member, wrong
	// role, name does not match its certificate).
	CodeUnauthorized ErrorCode = 7
	// CodeDeadline: the handler's deadline passed.
	CodeDeadline ErrorCode = 8
	// CodeCanceled: the receiver gave up (shutting down, request canceled).
	CodeCanceled ErrorCode = 9
	// CodeRefused: the receiver refused a page transfer (no destination for
	// it: unknown job, buffer or allocation, or wrong sizes).
	CodeRefused ErrorCode = 10

	// CodeFirstApp is the first application-defined code.
	CodeFirstApp ErrorCode = 1000
)

var codeNames = [...]string{
	CodeUnknown:      "unknown",
	CodeInternal:     "internal",
	CodeUnknownType:  "unknown message type",
	CodeMalformed:    "malformed",
	CodeTooLarge:     "too large",
	CodeVersion:      "version mismatch",
	CodeCluster:      "cluster mismatch",
	CodeUnauthorized: "unauthorized",
	CodeDeadline:     "deadline exceeded",
	CodeCanceled:     "canceled",
	CodeRefused:      "refused",
}

func (c ErrorCode) String() string {
	if int(c) < len(codeNames) && codeNames[c] != "" {
		return codeNames[c]
	}
	return fmt.Sprintf("code %d", uint16(c))
}

// ErrorReply is the body of a MsgError frame. It is an error, so a handler
// may return one to choose the code its caller sees.
type ErrorReply struct {
	Code    ErrorCode `msgpack:"c"`
	Message string    `msgpack:"m"`
}

func (e *ErrorReply) Error() string { return e.Code.String() + ": " + e.Message }

// Box is a half-open box of elements, Lo inclusive, Hi exclusive, in a
// buffer's 3D index space. Dimension 2 varies fastest (row-major, as in
// SYCL); unused dimensions of 1D and 2D buffers have Lo 0, Hi 1.
type Box struct {
	Lo [3]uint64 `msgpack:"l"`
	Hi [3]uint64 `msgpack:"h"`
}

// Elems is the number of elements in b, and false if it overflows uint64 or
// b is inverted.
func (b Box) Elems() (uint64, bool) {
	n := uint64(1)
	for d := range 3 {
		if b.Hi[d] < b.Lo[d] {
			return 0, false
		}
		hi, lo := bits.Mul64(n, b.Hi[d]-b.Lo[d])
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// PageHeader describes a page transfer: which boxes of which allocation the
// raw bytes that follow it fill. The bytes of the boxes follow one another
// in the order of Boxes, each box's bytes in row-major order.
type PageHeader struct {
	Job    uint64 `msgpack:"j"`
	Buffer uint64 `msgpack:"b"`
	// Mem is the destination memory on the receiving node (coherence.MemID);
	// the receiver maps it to the allocation, or to its pinned staging
	// memory for a GPU.
	Mem uint32 `msgpack:"m"`
	// ElemSize is the size of one element in bytes (≥ 1).
	ElemSize uint32 `msgpack:"e"`
	// Boxes are the boxes carried, at most MaxBoxes, none overlapping
	// another.
	Boxes []Box `msgpack:"x"`
	// Ref, when set, says the boxes' bytes do not follow: they stay in the
	// sender's device memory, which the receiver maps and copies from
	// itself (GPUs of one host; see PageRef). The transfer's payload is
	// then empty.
	Ref *PageRef `msgpack:"r,omitempty"`
}

// ErrMalformed marks a header or frame that fails validation. Errors that
// wrap it say which field is wrong.
var ErrMalformed = errors.New("proto: malformed message")

// MaxBoxes bounds the boxes of one PageHeader; a transfer of more boxes is
// split by the sender into several transfers. (Validate checks the boxes
// pairwise for overlap, so this also bounds its cost.)
const MaxBoxes = 1024

// Overlaps reports whether b and o share an element.
func (b Box) Overlaps(o Box) bool {
	for d := range 3 {
		if b.Hi[d] <= o.Lo[d] || o.Hi[d] <= b.Lo[d] {
			return false
		}
	}
	return true
}

// Validate checks h and returns the total payload size in bytes. It fails
// (wrapping ErrMalformed) on a zero element size, an empty box list, too
// many boxes, an inverted or empty box, overlapping boxes (the receiver
// may fill boxes from several streams at once), or a total that overflows
// or exceeds maxBytes (0: no limit besides overflow).
func (h *PageHeader) Validate(maxBytes uint64) (uint64, error) {
	if h.ElemSize == 0 {
		return 0, fmt.Errorf("%w: page header has element size 0", ErrMalformed)
	}
	if len(h.Boxes) == 0 {
		return 0, fmt.Errorf("%w: page header has no boxes", ErrMalformed)
	}
	if len(h.Boxes) > MaxBoxes {
		return 0, fmt.Errorf("%w: page header has %d boxes, at most %d allowed; split the transfer", ErrMalformed, len(h.Boxes), MaxBoxes)
	}
	var total uint64
	for i, b := range h.Boxes {
		n, ok := b.Elems()
		if !ok {
			return 0, fmt.Errorf("%w: box %d %v..%v is inverted or overflows", ErrMalformed, i, b.Lo, b.Hi)
		}
		if n == 0 {
			return 0, fmt.Errorf("%w: box %d %v..%v is empty", ErrMalformed, i, b.Lo, b.Hi)
		}
		hi, by := bits.Mul64(n, uint64(h.ElemSize))
		if hi != 0 || by > math.MaxInt64-total {
			return 0, fmt.Errorf("%w: page payload size overflows", ErrMalformed)
		}
		total += by
		for j := range i {
			if b.Overlaps(h.Boxes[j]) {
				return 0, fmt.Errorf("%w: boxes %d and %d overlap; send each element once", ErrMalformed, j, i)
			}
		}
	}
	if h.Ref != nil {
		if err := h.Ref.Validate(); err != nil {
			return 0, err
		}
		return total, nil // nothing on the wire: maxBytes bounds payloads
	}
	if maxBytes > 0 && total > maxBytes {
		return 0, fmt.Errorf("%w: page payload of %d bytes exceeds the limit of %d bytes", ErrMalformed, total, maxBytes)
	}
	return total, nil
}

// Payload is the size of the bytes that follow the header on the wire,
// for a header that passed Validate: its boxes' bytes, or none when they
// go by reference.
func (h *PageHeader) Payload(total uint64) uint64 {
	if h.Ref != nil {
		return 0
	}
	return total
}

// BoxBytes is the payload size of box i, for a header that passed Validate.
func (h *PageHeader) BoxBytes(i int) uint64 {
	n, _ := h.Boxes[i].Elems()
	return n * uint64(h.ElemSize)
}

// PageSegment is the body of a MsgPages frame: one contiguous byte range of
// a transfer's payload, carried on its own stream so that several streams
// can move one transfer in parallel. The Length raw bytes follow the frame.
type PageSegment struct {
	// Transfer identifies the transfer among the sender's transfers on this
	// connection; all segments of a transfer carry the same Header.
	Transfer uint64 `msgpack:"id"`
	// Index and Count: this is segment Index of Count (Index < Count).
	Index uint32 `msgpack:"i"`
	Count uint32 `msgpack:"n"`
	// Offset and Length place the bytes within the payload (the boxes'
	// bytes one after another).
	Offset uint64     `msgpack:"o"`
	Length uint64     `msgpack:"len"`
	Header PageHeader `msgpack:"h"`
}

// PageAbort is the body of MsgPagesAbort.
type PageAbort struct {
	Transfer uint64 `msgpack:"id"`
	// Reason says why the sender gave up, for the receiver's Done error.
	Reason string `msgpack:"r,omitempty"`
}

// MaxSegments bounds PageSegment.Count.
const MaxSegments = 256

// Validate checks s against its header and returns the size of the
// transfer's payload on the wire (0 for pages by reference).
func (s *PageSegment) Validate(maxBytes uint64) (uint64, error) {
	total, err := s.Header.Validate(maxBytes)
	if err != nil {
		return 0, err
	}
	total = s.Header.Payload(total)
	if s.Count == 0 || s.Count > MaxSegments || s.Index >= s.Count {
		return 0, fmt.Errorf("%w: page segment %d of %d (at most %d segments)", ErrMalformed, s.Index, s.Count, MaxSegments)
	}
	if s.Offset > total || s.Length > total-s.Offset {
		return 0, fmt.Errorf("%w: page segment bytes %d+%d lie outside the payload of %d bytes", ErrMalformed, s.Offset, s.Length, total)
	}
	if s.Count == 1 && (s.Offset != 0 || s.Length != total) {
		return 0, fmt.Errorf("%w: a single segment must carry the whole payload (%d bytes), has %d+%d", ErrMalformed, total, s.Offset, s.Length)
	}
	if s.Header.Ref != nil && s.Count != 1 {
		return 0, fmt.Errorf("%w: pages by reference travel in one segment, not %d", ErrMalformed, s.Count)
	}
	// Segment i of n carries bytes [total·i/n, total·(i+1)/n): so the
	// segments of a transfer cover its payload exactly once.
	// (total·i can exceed 64 bits when maxBytes allows more than 2^56
	// bytes: the products are taken in 128.)
	if lo, hi := mulDiv(total, uint64(s.Index), uint64(s.Count)), mulDiv(total, uint64(s.Index)+1, uint64(s.Count)); s.Offset != lo || s.Offset+s.Length != hi {
		return 0, fmt.Errorf("%w: page segment %d of %d has bytes %d+%d; it must carry bytes %d to %d of %d", ErrMalformed, s.Index, s.Count, s.Offset, s.Length, lo, hi, total)
	}
	return total, nil
}

// mulDiv is a·b/c for b <= c, without overflow.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c) // hi < c since b <= c
	return q
}
