package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// PageSink is where the bytes of one incoming page transfer go.
type PageSink struct {
	// Dst is the destination memory: byte runs in payload order (box after
	// box, each box row-major) whose lengths add up to the payload size.
	// proto.AppendBoxRuns cuts them out of an allocation box by box; for a
	// GPU they are runs of pinned host memory. The transport reads the
	// stream straight into them.
	Dst [][]byte
	// Done, if not nil, is called exactly once after the handler returned
	// this sink: with nil once every byte has landed in Dst, or with the
	// error that ended the transfer (Dst may then be partly written). No
	// goroutine of the transport touches Dst after Done is called. An error
	// Done returns is sent to the sender (use a *proto.ErrorReply to choose
	// its code).
	//
	// For pages by reference (PageHeader.Ref) Dst is empty and Done is
	// where the receiver copies them from the sender's memory: the sender's
	// acknowledgement waits until Done returns, so Done may block until the
	// copy is finished.
	Done func(err error) error
	// After, if not nil, is called once, after Done and with the same
	// error, when the sender has been answered (the acknowledgement or the
	// error is on its way) or nobody is left to answer. It is where the
	// receiver starts the work that waits for the pages: work started in
	// Done would hold back the acknowledgement, and with it the sender's
	// next use of its memory (measured: a dependent kernel's dispatch on
	// the receiving node delayed every acknowledgement of a chain of
	// transfers between two nodes; docs/TRANSPORT.md).
	After func(err error)

	// log is the transport's logger, set once the handler returned the
	// sink: a Done or After that panics is logged there and counted in
	// panics (Transport.Panics).
	log    *slog.Logger
	panics *atomic.Int64
}

// finish calls Done (if set) and returns its error. A Done that panics
// fails the transfer (the sender is refused) instead of the process, as
// a panicking handler does.
func (s PageSink) finish(err error) (derr error) {
	if s.Done == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			s.logPanic("Done", p)
			derr = sinkPanic{&proto.ErrorReply{Code: proto.CodeRefused, Message: fmt.Sprintf("the receiver's page sink panicked: %v (a bug: please report it with the receiver's log)", p)}}
		}
	}()
	return s.Done(err)
}

// sinkPanic is finish's error when Done panicked: After gets it too, so
// that the receiver does not go on with pages Done may have left half
// applied while the sender is told the transfer failed.
type sinkPanic struct{ *proto.ErrorReply }

func (e sinkPanic) Unwrap() error { return e.ErrorReply }

// afterErr is what After is given: what Done was given, or the panic of
// a Done that panicked.
func afterErr(doneErr, derr error) error {
	var sp sinkPanic
	if doneErr == nil && errors.As(derr, &sp) {
		return derr
	}
	return doneErr
}

// after calls After (if set); a panic in it is logged, not fatal.
func (s PageSink) after(err error) {
	if s.After == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			s.logPanic("After", p)
		}
	}()
	s.After(err)
}

func (s PageSink) logPanic(what string, p any) {
	if s.panics != nil {
		s.panics.Add(1)
	}
	log := s.log
	if log == nil {
		log = slog.Default()
	}
	log.Error("page sink panicked", "callback", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
}

// PageHandler is asked where an incoming transfer's bytes go, once per
// transfer, before any payload byte is read, on the goroutine of the
// transfer's first stream; it must not block for long. A multi-stream
// transfer that the sender abandoned (refused, cancelled) may still reach
// it with the segments already on the wire; such a transfer ends with
// Done(err). An error refuses the
// transfer: the sender gets a *RemoteError with code CodeRefused (or the
// code of a returned *proto.ErrorReply); so does a panic, which is logged
// with its stack.
type PageHandler func(ctx context.Context, from credentials.Identity, h *proto.PageHeader) (PageSink, error)

// HandlePages registers the handler for incoming page transfers. Without
// one, transfers are refused.
func (t *Transport) HandlePages(h PageHandler) {
	t.hmu.Lock()
	defer t.hmu.Unlock()
	t.pages = h
}

func (t *Transport) pageHandler() PageHandler {
	t.hmu.RLock()
	defer t.hmu.RUnlock()
	return t.pages
}

func runsLen(runs [][]byte) uint64 {
	var n uint64
	for _, r := range runs {
		n += uint64(len(r))
	}
	return n
}

// SendPages sends the boxes that h describes to peer, reading their bytes
// from src (runs in payload order: proto.AppendBoxRuns over the source
// allocation), and returns once the peer has them in its destination
// memory, or with the error that stopped the transfer. The bytes are
// written from src without copying; src must not change until SendPages
// returns. A large transfer is spread over Config.PageStreams streams of
// one connection.
func (t *Transport) SendPages(ctx context.Context, peer credentials.Identity, h *proto.PageHeader, src [][]byte) error {
	total, err := t.sendPages(ctx, peer, h, src)
	if restartedErr(ctx, peer, err) { // as Call: the new run has not seen them
		t.log.Info("peer restarted: sending the pages to its new run", "peer", peer.String(), "job", strconv.FormatUint(h.Job, 10))
		total, err = t.sendPages(ctx, peer, h, src)
	}
	if peer.Role == "" {
		peer.Role = proto.RoleNode
	}
	c := t.counters(peer)
	if err != nil {
		c.failures.Add(1)
		return err
	}
	c.transfersSent.Add(1)
	c.boxesSent.Add(uint64(len(h.Boxes)))
	c.bytesSent.Add(total)
	return nil
}

func (t *Transport) sendPages(ctx context.Context, peer credentials.Identity, h *proto.PageHeader, src [][]byte) (uint64, error) {
	const op = "send pages to"
	total, err := h.Validate(0)
	if err != nil {
		return 0, &PeerError{Peer: peer, Op: op, Err: err}
	}
	payload := h.Payload(total) // 0 for pages by reference (h.Ref)
	if got := runsLen(src); got != payload {
		return 0, &PeerError{Peer: peer, Op: op, Err: fmt.Errorf("%w: source runs hold %d bytes, the payload %d", ErrMalformed, got, payload)}
	}
	timeout, err := timeoutOf(ctx)
	if err != nil {
		return 0, &PeerError{Peer: peer, Op: op, Err: err}
	}
	c, err := t.conn(ctx, peer)
	if err != nil {
		return 0, err
	}
	n := uint64(t.cfg.PageStreams)
	if per := payload / uint64(t.cfg.MinSegmentBytes); per < n {
		n = max(per, 1)
	}
	id := t.nextTransfer.Add(1)
	seg := func(i uint64) proto.PageSegment {
		lo, hi := payload*i/n, payload*(i+1)/n
		return proto.PageSegment{Transfer: id, Index: uint32(i), Count: uint32(n), Offset: lo, Length: hi - lo, Header: *h}
	}
	if n == 1 {
		s := seg(0)
		return total, t.sendOne(ctx, c, &s, timeout, src)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s := seg(i)
			if errs[i] = t.sendSegment(ctx, c, &s, timeout, src); errs[i] != nil {
				cancel(errs[i])
			}
		})
	}
	wg.Wait()
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		t.abortTransfer(c, id, context.Cause(ctx))
	}
	// Prefer the peer's word, then the first failure, over the
	// cancellations that failure caused.
	var first error
	for _, err := range errs {
		var re *RemoteError
		if errors.As(err, &re) {
			return 0, err
		}
		if first == nil && err != nil {
			first = err
		}
	}
	if cause := context.Cause(ctx); first != nil && cause != nil && cause != context.Canceled {
		return 0, cause
	}
	return total, first
}

// abortTransfer tells the receiver, best effort and briefly, that transfer
// id will not be completed, so that it ends the transfer at once instead of
// waiting IdleTimeout for segments that were never sent.
func (t *Transport) abortTransfer(c *conn, id uint64, cause error) {
	ctx, cancel := context.WithTimeout(t.ctx, time.Second)
	defer cancel()
	s, err := c.qc.OpenUniStreamSync(ctx)
	if err != nil {
		return
	}
	reason := "sender gave up"
	if cause != nil {
		reason += ": " + cause.Error()
	}
	if writeFrame(s, proto.Envelope{Type: proto.MsgPagesAbort}, &proto.PageAbort{Transfer: id, Reason: reason}, c.maxFrame(t.cfg.MaxFrameSize)) != nil {
		s.CancelWrite(quicCodeCanceled)
		return
	}
	s.Close()
}

// receiveAbort ends transfer id of c's peer, and refuses segments of it
// that arrive later.
func (c *conn) receiveAbort(body []byte) error {
	var ab proto.PageAbort
	if err := decodeBody(body, &ab); err != nil {
		return err
	}
	c.mu.Lock()
	a := c.assemblies[ab.Transfer]
	c.tombstoneLocked(ab.Transfer)
	c.mu.Unlock()
	if a != nil {
		select {
		case <-a.ready:
			if a.err == nil {
				a.abort(c, fmt.Errorf("%w: %s abandoned page transfer %d: %s", errCanceled, c.peer, ab.Transfer, ab.Reason))
			}
		default: // its first segment is still asking the handler; it will see the tombstone
		}
	}
	return nil
}

// maxTombstones bounds the remembered abandoned transfers per connection.
const maxTombstones = 64

// tombstoneLocked remembers that transfer id was abandoned. c.mu is held.
func (c *conn) tombstoneLocked(id uint64) {
	if c.tombstones == nil {
		c.tombstones = map[uint64]struct{}{}
	}
	if len(c.tombstones) >= maxTombstones {
		for k := range c.tombstones { // drop any one: they only save a handler call
			delete(c.tombstones, k)
			break
		}
	}
	c.tombstones[id] = struct{}{}
}

// sendSegment moves one segment on its own stream and waits for the ack.
func (t *Transport) sendSegment(ctx context.Context, c *conn, seg *proto.PageSegment, timeout int64, src [][]byte) error {
	const op = "send pages to"
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		return t.streamErr(ctx, c, op, err)
	}
	stop := context.AfterFunc(ctx, func() {
		s.CancelWrite(quicCodeCanceled)
		s.CancelRead(quicCodeCanceled)
	})
	defer stop()
	err = writeSegment(s, proto.Envelope{Type: proto.MsgPages, Timeout: timeout}, seg, c.maxFrame(t.cfg.MaxFrameSize), src)
	if err != nil {
		var se *quic.StreamError
		if errors.As(err, &se) && se.Remote && se.ErrorCode == quicCodeRefused {
			// The receiver refused; its reply says why.
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return t.readReply(rctx, c, s, op, proto.MsgPages, nil)
		}
		s.CancelWrite(quicCodeCanceled)
		s.CancelRead(quicCodeCanceled)
		if errors.Is(err, ErrFrameTooLarge) {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("page header: %w; send fewer boxes per transfer", err)}
		}
		return t.streamErr(ctx, c, op, err)
	}
	s.Close()
	return t.readReply(ctx, c, s, op, proto.MsgPages, nil)
}

// Page sessions. A one-segment transfer (every small one) goes over a page
// stream that an earlier transfer to the same connection left open, or
// over a new one that stays open after it: its frame says so
// (Envelope.Session), and the receiver acknowledges without ending the
// stream and waits for the next segment on it. Opening, accepting and
// closing a stream, and the goroutine the receiver starts for each, were
// about an eighth of the CPU of a hop between two nodes (a 4-byte page and
// a kernel on each side: docs/PERFORMANCE.md). A stream is kept only
// after a clean acknowledgement; anything else (a refusal, an error, a
// cancelled context) ends it. The receiver ends a stream that carried
// nothing for its idle timeout with quicCodeIdle, having read nothing of
// what may follow: a transfer that meets that on a kept stream is sent
// again on a new one. Kept streams older than half the idle timeout are
// not used.

// idleStream is a page stream kept open, and since when.
type idleStream struct {
	s     *quic.Stream
	since time.Time
}

// maxIdlePageStreams bounds the page streams kept open per connection.
const maxIdlePageStreams = 8

// takePageStream takes the newest kept page stream of c that has been idle
// for less than maxIdle; the older ones are closed.
func (c *conn) takePageStream(maxIdle time.Duration) *quic.Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pageIdle) > 0 {
		last := c.pageIdle[len(c.pageIdle)-1]
		c.pageIdle = c.pageIdle[:len(c.pageIdle)-1]
		if time.Since(last.since) < maxIdle {
			return last.s
		}
		closeKept(last.s)
		for _, o := range c.pageIdle {
			closeKept(o.s)
		}
		c.pageIdle = c.pageIdle[:0]
	}
	return nil
}

// keepPageStream keeps s open for the next transfer, or closes it when c
// keeps enough.
func (c *conn) keepPageStream(s *quic.Stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pageIdle) >= maxIdlePageStreams {
		closeKept(s)
		return
	}
	c.pageIdle = append(c.pageIdle, idleStream{s, time.Now()})
}

// closeKept ends a kept page stream that carries no further transfer: its
// end tells the receiver so, and its read side is given up too (no reply
// is awaited), or quic-go would keep the stream until the connection
// closes.
func closeKept(s *quic.Stream) {
	s.CancelRead(quicCodeNone)
	s.Close()
}

// sendOne moves a one-segment transfer over a kept page stream of c, or a
// new one, and keeps the stream after a clean acknowledgement.
func (t *Transport) sendOne(ctx context.Context, c *conn, seg *proto.PageSegment, timeout int64, src [][]byte) error {
	for {
		s := c.takePageStream(t.cfg.IdleTimeout / 2)
		kept := s != nil
		if s == nil {
			var err error
			if s, err = c.qc.OpenStreamSync(ctx); err != nil {
				return t.streamErr(ctx, c, "send pages to", err)
			}
		}
		err, keep := t.sendOnStream(ctx, c, s, seg, timeout, src)
		if keep {
			c.keepPageStream(s)
		}
		var se *quic.StreamError
		if err != nil && kept && ctx.Err() == nil && errors.As(err, &se) && se.Remote && se.ErrorCode == quicCodeIdle {
			continue // the receiver had dropped it unread: on a new stream
		}
		return err
	}
}

// sendOnStream writes one segment of a page session on s and reads the
// acknowledgement; keep says s may carry the next.
func (t *Transport) sendOnStream(ctx context.Context, c *conn, s *quic.Stream, seg *proto.PageSegment, timeout int64, src [][]byte) (err error, keep bool) {
	const op = "send pages to"
	stop := context.AfterFunc(ctx, func() {
		s.CancelWrite(quicCodeCanceled)
		s.CancelRead(quicCodeCanceled)
	})
	defer func() {
		if !stop() || err != nil {
			keep = false // cancelled meanwhile, or failed
		}
		if !keep {
			s.CancelWrite(quicCodeCanceled)
			s.CancelRead(quicCodeCanceled)
		}
	}()
	err = writeSegment(s, proto.Envelope{Type: proto.MsgPages, Timeout: timeout, Session: true}, seg, c.maxFrame(t.cfg.MaxFrameSize), src)
	if err != nil {
		var se *quic.StreamError
		if errors.As(err, &se) && se.Remote && se.ErrorCode == quicCodeRefused {
			// The receiver refused; its reply says why.
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return t.readReply(rctx, c, s, op, proto.MsgPages, nil), false
		}
		if errors.Is(err, ErrFrameTooLarge) {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("page header: %w; send fewer boxes per transfer", err)}, false
		}
		return t.streamErr(ctx, c, op, err), false
	}
	env, body, err := readFrame(s, t.cfg.MaxFrameSize)
	if err != nil {
		if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed) {
			return &PeerError{Peer: c.peer, Addr: c.addr, Op: op, Err: fmt.Errorf("reply: %w", err)}, false
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return t.streamErr(ctx, c, op, err), false
	}
	if err := decodeReply(c, op, proto.MsgPages, env, body, nil); err != nil {
		return err, false
	}
	return nil, true
}

// inlineMax is the largest segment payload written in one piece with its
// header frame: one stream write, so that header and bytes (and, with the
// Close that follows, the end of the stream) leave in one packet rather
// than in as many as the connection's send loop happens to wake up for.
// Larger payloads are written from the source runs without a copy.
const inlineMax = 16 << 10

// writeSegment writes seg's frame and its bytes of src.
func writeSegment(w io.Writer, env proto.Envelope, seg *proto.PageSegment, max int, src [][]byte) error {
	if seg.Length > inlineMax {
		if err := writeFrame(w, env, seg, max); err != nil {
			return err
		}
		return writeRuns(w, src, seg.Offset, seg.Length)
	}
	f, err := encodeFrame(env, seg, max)
	if err != nil {
		return err
	}
	defer framePool.Put(f)
	if err := writeRuns(&f.buf, src, seg.Offset, seg.Length); err != nil {
		return err
	}
	_, err = w.Write(f.buf.Bytes())
	return err
}

// writeRuns writes bytes [off, off+n) of the concatenation of runs.
func writeRuns(w io.Writer, runs [][]byte, off, n uint64) error {
	for _, r := range runs {
		if n == 0 {
			break
		}
		if off >= uint64(len(r)) {
			off -= uint64(len(r))
			continue
		}
		part := r[off:min(uint64(len(r)), off+n)]
		off = 0
		if _, err := w.Write(part); err != nil {
			return err
		}
		n -= uint64(len(part))
	}
	return nil
}

// progressChunk is how much payload a receiver reads between extensions
// of its read deadline: a sender that stalls for IdleTimeout in the middle
// of a transfer fails it instead of holding the stream forever.
const progressChunk = 4 << 20

// deadlineReader extends the read deadline of a stream before each chunk.
type deadlineReader struct {
	s    *quic.Stream
	idle time.Duration
}

func (d deadlineReader) Read(p []byte) (int, error) {
	d.s.SetReadDeadline(time.Now().Add(d.idle))
	return d.s.Read(p[:min(len(p), progressChunk)])
}

// readRuns fills bytes [off, off+n) of the concatenation of runs from r.
func readRuns(r io.Reader, runs [][]byte, off, n uint64) error {
	for _, run := range runs {
		if n == 0 {
			break
		}
		if off >= uint64(len(run)) {
			off -= uint64(len(run))
			continue
		}
		part := run[off:min(uint64(len(run)), off+n)]
		off = 0
		if _, err := io.ReadFull(r, part); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		n -= uint64(len(part))
	}
	return nil
}

// assembly gathers the segments of one multi-stream transfer on a
// connection. The first segment to arrive asks the PageHandler for the
// sink; the others wait for it. Done is called when every segment that
// started has finished and either all have arrived or one failed, so no
// stream is still writing into Dst.
type assembly struct {
	id     uint64
	header proto.PageHeader
	ready  chan struct{} // closed once sink or err is set
	sink   PageSink
	err    error // the handler's refusal

	mu       sync.Mutex // guards the fields below
	seen     []bool     // segments started, by index
	started  int
	finished int
	failed   error
	done     bool  // Done was called (or, after a refusal, there is none)
	doneErr  error // what Done was given, for After
	timer    *time.Timer
}

// receivePages serves a MsgPages stream: one segment, or the segments of
// a page session one after another.
func (t *Transport) receivePages(c *conn, s *quic.Stream, env proto.Envelope, body []byte) {
	for t.receiveSegment(c, s, env, body) {
		var ok bool
		var release func()
		if env, body, release, ok = t.nextSessionFrame(c, s, proto.MsgPages); !ok {
			return
		}
		release() // a page header; the pages go straight into allocations
	}
}

// receiveSegment serves one segment; it reports whether the stream is a
// page session's that may carry the next.
func (t *Transport) receiveSegment(c *conn, s *quic.Stream, env proto.Envelope, body []byte) bool {
	refuse := func(er *proto.ErrorReply) {
		t.reply(c, s, proto.MsgError, er)
		s.CancelRead(quicCodeRefused)
	}
	var seg proto.PageSegment
	if err := decodeBody(body, &seg); err != nil {
		refuse(errorReply(err))
		return false
	}
	total, err := seg.Validate(t.cfg.MaxPageBytes) // the payload: 0 for pages by reference
	if err != nil {
		er := errorReply(err)
		if total, _ := seg.Validate(0); total > t.cfg.MaxPageBytes {
			er.Code = proto.CodeTooLarge
		}
		refuse(er)
		return false
	}
	s.SetReadDeadline(time.Time{})
	ctx, cancel := t.handlerContext(s.Context(), env.Timeout)
	defer cancel()
	h := t.pageHandler()
	if h == nil {
		refuse(&proto.ErrorReply{Code: proto.CodeRefused, Message: t.self.String() + " accepts no page transfers"})
		return false
	}
	ask := func() (sink PageSink, err error) {
		defer func() { // as runHandler: a panicking handler refuses the transfer
			if p := recover(); p != nil {
				t.panics.Add(1)
				t.log.Error("page handler panicked", "peer", c.peer.String(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				sink, err = PageSink{}, &proto.ErrorReply{Code: proto.CodeRefused, Message: fmt.Sprintf(
					"%s: the page handler panicked: %v (a bug: please report it with %s's log)", t.self, p, t.self)}
			}
		}()
		sink, err = h(ctx, c.peer, &seg.Header)
		if err != nil {
			return sink, err
		}
		sink.log, sink.panics = t.log, &t.panics
		if got := runsLen(sink.Dst); got != total {
			err := &proto.ErrorReply{Code: proto.CodeRefused, Message: fmt.Sprintf("%s: destination holds %d bytes, the transfer %d", t.self, got, total)}
			sink.finish(err)
			sink.after(err)
			return PageSink{}, err
		}
		return sink, nil
	}
	refusal := func(err error) *proto.ErrorReply {
		er := errorReply(err)
		if er.Code == proto.CodeInternal {
			er.Code = proto.CodeRefused
		}
		return er
	}

	if env.Session && seg.Count != 1 {
		refuse(errorReply(fmt.Errorf("%w: a page session carries one-segment transfers; segment %d of %d", ErrMalformed, seg.Index, seg.Count)))
		return false
	}
	if seg.Count == 1 {
		sink, err := ask()
		if err != nil {
			refuse(refusal(err))
			return false
		}
		err = readRuns(deadlineReader{s, t.cfg.IdleTimeout}, sink.Dst, 0, total)
		if err == nil && !env.Session {
			err = expectEOF(s)
		}
		doneErr := err
		derr := sink.finish(err)
		if err == nil {
			err = derr
		}
		doneErr = afterErr(doneErr, derr)
		if err == nil { // counted before the ack, so a sender sees it counted
			moved, _ := seg.Header.Validate(0) // the boxes' bytes, also by reference
			t.countReceived(c.peer, &seg.Header, moved)
		}
		more := t.finishSegment(c, s, err, env.Session)
		sink.after(doneErr)
		return more
	}

	a, err := c.assemblyFor(t, &seg, ask)
	if err != nil {
		refuse(refusal(err))
		return false
	}
	err = readRuns(deadlineReader{s, t.cfg.IdleTimeout}, a.sink.Dst, seg.Offset, seg.Length)
	if err == nil {
		err = expectEOF(s)
	}
	last, err := a.finish(c, err)
	if err == nil && last {
		t.countReceived(c.peer, &seg.Header, total)
	}
	t.finishSegment(c, s, err, false)
	if last {
		a.sink.after(a.doneErr) // set by this goroutine's finish
	}
	return false
}

func (t *Transport) countReceived(peer credentials.Identity, h *proto.PageHeader, total uint64) {
	pc := t.counters(peer)
	pc.transfersRecv.Add(1)
	pc.boxesRecv.Add(uint64(len(h.Boxes)))
	pc.bytesRecv.Add(total)
}

// ackFrame is the frame that acknowledges a segment: a MsgReply with no
// body, the same for every transfer.
var ackFrame = func() []byte {
	f, err := encodeFrame(proto.Envelope{Type: proto.MsgReply}, nil, 1<<10)
	if err != nil {
		panic(err)
	}
	return bytes.Clone(f.buf.Bytes())
}()

// finishSegment acks a segment, or reports why it failed. A page
// session's stream stays open after the ack (more reports that).
func (t *Transport) finishSegment(c *conn, s *quic.Stream, err error, session bool) (more bool) {
	if err == nil {
		if _, err := s.Write(ackFrame); err != nil {
			s.CancelWrite(quicCodeCanceled)
			return false
		}
		if session {
			return true
		}
		s.Close()
		return false
	}
	var se *quic.StreamError
	if errors.As(err, &se) || c.qc.Context().Err() != nil || t.ctx.Err() != nil {
		// The sender gave up or the connection is gone: no one to tell.
		s.CancelRead(quicCodeCanceled)
		s.CancelWrite(quicCodeCanceled)
		return false
	}
	t.reply(c, s, proto.MsgError, errorReply(err))
	s.CancelRead(quicCodeRefused)
	return false
}

// assemblyFor finds or creates the assembly of seg's transfer and
// registers seg as started in it.
func (c *conn) assemblyFor(t *Transport, seg *proto.PageSegment, ask func() (PageSink, error)) (*assembly, error) {
	c.mu.Lock()
	if c.assemblies == nil {
		c.assemblies = map[uint64]*assembly{}
	}
	if _, dead := c.tombstones[seg.Transfer]; dead {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: page transfer %d was abandoned by the sender", errCanceled, seg.Transfer)
	}
	a := c.assemblies[seg.Transfer]
	creator := a == nil
	if creator {
		a = &assembly{id: seg.Transfer, header: seg.Header, ready: make(chan struct{}), seen: make([]bool, seg.Count)}
		c.assemblies[seg.Transfer] = a
	}
	c.mu.Unlock()
	if creator {
		a.sink, a.err = ask()
		c.mu.Lock()
		_, dead := c.tombstones[a.id]
		c.mu.Unlock()
		if a.err == nil && dead {
			// Abandoned while the handler was being asked.
			abandoned := fmt.Errorf("%w: page transfer %d was abandoned by the sender", errCanceled, a.id)
			a.sink.finish(abandoned)
			a.sink.after(abandoned)
			a.sink, a.err = PageSink{}, abandoned
		}
		if a.err != nil {
			c.mu.Lock()
			delete(c.assemblies, a.id)
			c.mu.Unlock()
		} else {
			a.timer = time.AfterFunc(t.cfg.IdleTimeout, func() {
				a.abort(c, fmt.Errorf("%w: page transfer %d from %s incomplete after %v", errDeadline, a.id, c.peer, t.cfg.IdleTimeout))
			})
		}
		close(a.ready)
	} else {
		<-a.ready // the creator's handler call is bounded by its context
	}
	if a.err != nil {
		return nil, a.err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.failed != nil:
		return nil, fmt.Errorf("%w: page transfer %d already failed: %v", errCanceled, a.id, a.failed)
	case int(seg.Index) >= len(a.seen) || int(seg.Count) != len(a.seen) || !sameHeader(&a.header, &seg.Header):
		return nil, fmt.Errorf("%w: segment %d/%d of page transfer %d disagrees with the first segment", ErrMalformed, seg.Index, seg.Count, a.id)
	case a.seen[seg.Index]:
		return nil, fmt.Errorf("%w: segment %d of page transfer %d sent twice", ErrMalformed, seg.Index, a.id)
	}
	a.seen[seg.Index] = true
	a.started++
	a.timer.Reset(t.cfg.IdleTimeout)
	return a, nil
}

func sameHeader(a, b *proto.PageHeader) bool {
	return a.Job == b.Job && a.Buffer == b.Buffer && a.Mem == b.Mem && a.ElemSize == b.ElemSize && slices.Equal(a.Boxes, b.Boxes)
}

// finish records the end of one started segment and returns the error to
// report for it (its own, or Done's if it completed the transfer) and
// whether it was the segment that completed the transfer.
func (a *assembly) finish(c *conn, err error) (last bool, _ error) {
	a.mu.Lock()
	a.finished++
	if err != nil && a.failed == nil {
		a.failed = err
	}
	complete := !a.done && ((a.failed == nil && a.finished == len(a.seen)) || (a.failed != nil && a.finished == a.started))
	if complete {
		a.done = true
		a.doneErr = a.failed
	}
	failed := a.failed
	a.mu.Unlock()
	if !complete {
		return false, err
	}
	derr := a.complete(c, failed)
	if err == nil {
		err = derr
	}
	return true, err
}

// abort fails the transfer (timeout, connection lost): Done runs as soon
// as the segments that started have finished.
func (a *assembly) abort(c *conn, cause error) {
	a.mu.Lock()
	if a.failed == nil {
		a.failed = cause
	}
	complete := !a.done && a.finished == a.started
	if complete {
		a.done = true
	}
	a.mu.Unlock()
	if complete {
		a.complete(c, cause)
		a.sink.after(cause) // no segment is left to answer the sender
	}
}

func (a *assembly) complete(c *conn, failed error) error {
	a.timer.Stop()
	c.mu.Lock()
	if c.assemblies[a.id] == a {
		delete(c.assemblies, a.id)
	}
	if failed != nil {
		// Segments of a failed transfer may still arrive (they were on
		// the wire when it failed): refuse them, rather than start the
		// transfer again and ask the handler (and call Done) once more.
		// Transfer IDs are never reused on a connection.
		c.tombstoneLocked(a.id)
	}
	c.mu.Unlock()
	derr := a.sink.finish(failed)
	a.doneErr = afterErr(a.doneErr, derr) // read by the goroutine that completed it, after this
	return derr
}

// abortAssemblies fails every unfinished transfer of a closed connection.
func (c *conn) abortAssemblies(cause error) {
	c.mu.Lock()
	var as []*assembly
	for _, a := range c.assemblies {
		as = append(as, a)
	}
	c.mu.Unlock()
	for _, a := range as {
		select {
		case <-a.ready:
			if a.err == nil {
				a.abort(c, cause)
			}
		default: // still asking its handler; its segment's own read will fail
		}
	}
}
