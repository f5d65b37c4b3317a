package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// TestDocumentedLimits: the limits and defaults docs/TRANSPORT.md states
// ("Limits", "Frames", "Page sessions", "Connections") are the code's.
// A change to one of them must change the doc too.
func TestDocumentedLimits(t *testing.T) {
	var cfg Config
	d := cfg.withDefaults()
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"MaxFrameSize (16 MiB)", int64(d.MaxFrameSize), 16 << 20},
		{"MaxPageBytes (64 GiB)", int64(d.MaxPageBytes), 64 << 30},
		{"StreamWindow (32 MiB)", int64(d.StreamWindow), 32 << 20},
		{"ConnWindow (128 MiB)", int64(d.ConnWindow), 128 << 20},
		{"MaxIncomingStreams (1024)", d.MaxIncomingStreams, 1024},
		{"MaxRequestBytes (512 MiB)", d.MaxRequestBytes, 512 << 20},
		{"PageStreams (1)", int64(d.PageStreams), 1},
		{"MinSegmentBytes (16 MiB)", int64(d.MinSegmentBytes), 16 << 20},
		{"DialTimeout (10 s)", int64(d.DialTimeout), int64(10 * time.Second)},
		{"IdleTimeout (15 s)", int64(d.IdleTimeout), int64(15 * time.Second)},
		{"MaxDecodedBytes (32 MiB)", MaxDecodedBytes, 32 << 20},
		{"msgpack nesting (32)", maxDepth, 32},
		{"Hello frame (64 KiB)", helloMax, 64 << 10},
		{"idle page streams per connection (8)", maxIdlePageStreams, 8},
		{"inline segment (16 KiB)", inlineMax, 16 << 10},
		{"abandoned transfers remembered (64)", maxTombstones, 64},
		{"page payload progress chunk (4 MiB)", progressChunk, 4 << 20},
		{"proto.Version (2)", int64(proto.Version), 2},
		{"proto.MaxBoxes (1024)", proto.MaxBoxes, 1024},
		{"proto.MaxSegments (256)", proto.MaxSegments, 256},
		{"proto.MaxBatch (4096)", proto.MaxBatch, 4096},
		{"proto.MsgFirstApp (64)", int64(proto.MsgFirstApp), 64},
		{"proto.CodeFirstApp (1000)", int64(proto.CodeFirstApp), 1000},
	} {
		if c.got != c.want {
			t.Errorf("%s: the code has %d, the doc says %d", c.what, c.got, c.want)
		}
	}
	// requestCost: the frame plus min(32 MiB, 64 × frame).
	for _, c := range []struct{ frame, want int64 }{
		{1000, 1000 + 64000},
		{512 << 10, 512<<10 + 32<<20}, // 64 × 512 KiB is exactly 32 MiB
		{16 << 20, 16<<20 + 32<<20},
	} {
		if got := requestCost(int(c.frame)); got != c.want {
			t.Errorf("requestCost(%d) = %d, want %d", c.frame, got, c.want)
		}
	}
}

// echoFrameLen is the length N a call's frame announces for echoReq{Pad:
// pad} sent without a deadline.
func echoFrameLen(t *testing.T, pad int) int {
	t.Helper()
	f, err := encodeFrame(proto.Envelope{Type: msgEcho}, &echoReq{Pad: make([]byte, pad)}, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer framePool.Put(f)
	return f.buf.Len() - frameHeaderLen
}

// TestFrameSizeEdge: a control frame of exactly MaxFrameSize bytes is
// served; one byte more is refused by the sender with ErrFrameTooLarge
// naming the limit the receiver announced, and the receiver keeps
// serving. On the receiving side a length prefix of MaxFrameSize is read,
// one of MaxFrameSize+1 refused before anything is allocated.
func TestFrameSizeEdge(t *testing.T) {
	const limit = 4096
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.MaxFrameSize = limit })
	registerEcho(n2)
	pad := 0
	for echoFrameLen(t, pad) < limit {
		pad++
	}
	if got := echoFrameLen(t, pad); got != limit {
		t.Fatalf("no padding makes a frame of exactly %d bytes (got %d)", limit, got)
	}
	// Without a deadline the envelope has no timeout, so the frame on the
	// wire is the one measured above.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.AfterFunc(20*time.Second, cancel)
	defer stop.Stop()
	var resp echoResp
	if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "", Pad: make([]byte, pad)}, &resp); err != nil {
		t.Fatalf("a frame of exactly MaxFrameSize (%d bytes): %v, want it served", limit, err)
	}
	err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Pad: make([]byte, pad+1)}, nil)
	if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "is 4097 bytes, the limit is 4096") {
		t.Errorf("a frame of MaxFrameSize+1 bytes: %v, want ErrFrameTooLarge naming 4097 bytes and the limit 4096", err)
	}
	if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "still"}, &resp); err != nil || resp.Text != "still" {
		t.Errorf("call after the refused frame: %+v, %v", resp, err)
	}

	// The receiver's check of the length prefix, at and past the limit.
	for _, c := range []struct {
		n    uint32
		want error
	}{{limit, nil}, {limit + 1, ErrFrameTooLarge}} {
		hdr := [frameHeaderLen]byte{byte(c.n >> 24), byte(c.n >> 16), byte(c.n >> 8), byte(c.n)}
		n, err := frameLen(hdr, limit)
		if c.want == nil && (err != nil || n != int(c.n)) || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("frameLen(%d, limit %d) = %d, %v; want error %v", c.n, limit, n, err, c.want)
		}
	}
}

// TestPagePayloadEdge: a page transfer of exactly MaxPageBytes is
// received; one element more is refused with CodeTooLarge, and the
// receiver takes the next transfer. 1024 boxes (proto.MaxBoxes) in one
// transfer arrive; 1025 are refused before anything is sent.
func TestPagePayloadEdge(t *testing.T) {
	const limit = 64 << 10
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.MaxPageBytes = limit })
	store := &pageStore{bufs: map[uint64]*testBuffer{1: {rng: [3]uint64{1, 1, 2 * limit}, elem: 1, data: make([]byte, 2*limit)}}}
	n2.HandlePages(store.handler)
	ctx := testCtx(t)
	src := make([]byte, limit+1)
	for i := range src {
		src[i] = byte(i%251 + 1)
	}
	at := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, limit}}}}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &at, [][]byte{src[:limit]}); err != nil {
		t.Fatalf("a transfer of exactly MaxPageBytes (%d bytes): %v", limit, err)
	}
	past := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, limit + 1}}}}
	var re *RemoteError
	if err := n1.SendPages(ctx, credentials.Node("n2"), &past, [][]byte{src}); !errors.As(err, &re) || re.Code != proto.CodeTooLarge || !strings.Contains(re.Message, "65537 bytes exceeds the limit of 65536") {
		t.Errorf("a transfer of MaxPageBytes+1 bytes: %v, want CodeTooLarge naming the size and the limit", err)
	}

	// Boxes: one element each, every other element of the buffer.
	boxes := func(n int) []proto.Box {
		out := make([]proto.Box, n)
		for i := range out {
			out[i] = proto.Box{Lo: [3]uint64{0, 0, uint64(2 * i)}, Hi: [3]uint64{1, 1, uint64(2*i + 1)}}
		}
		return out
	}
	many := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: boxes(proto.MaxBoxes)}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &many, [][]byte{src[:proto.MaxBoxes]}); err != nil {
		t.Fatalf("a transfer of %d boxes: %v", proto.MaxBoxes, err)
	}
	store.mu.Lock()
	for i := range proto.MaxBoxes {
		if got := store.bufs[1].data[2*i]; got != src[i] {
			store.mu.Unlock()
			t.Fatalf("box %d of %d: byte %d, want %d", i, proto.MaxBoxes, got, src[i])
		}
	}
	store.mu.Unlock()
	tooMany := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: boxes(proto.MaxBoxes + 1)}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &tooMany, [][]byte{src[:proto.MaxBoxes+1]}); !errors.Is(err, proto.ErrMalformed) || !strings.Contains(err.Error(), "1025 boxes, at most 1024") {
		t.Errorf("a transfer of %d boxes: %v, want ErrMalformed naming the bound", proto.MaxBoxes+1, err)
	}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &at, [][]byte{src[:limit]}); err != nil {
		t.Errorf("a transfer after the refused ones: %v", err)
	}
}

// TestHelloFrameEdge: a Hello of exactly 64 KiB is read by both sides; one
// byte more is refused, and the refusing node serves the next peer.
func TestHelloFrameEdge(t *testing.T) {
	// pad returns a hook that grows the Hello's Software until its frame
	// is size bytes long.
	pad := func(size int) func(*proto.Hello) {
		return func(h *proto.Hello) {
			h.Software = ""
			for {
				f, err := encodeFrame(proto.Envelope{Type: proto.MsgHello}, h, 1<<30)
				if err != nil {
					panic(err)
				}
				n := f.buf.Len() - frameHeaderLen
				framePool.Put(f)
				if n >= size {
					if n != size {
						panic(fmt.Sprintf("no Software makes a Hello of %d bytes (got %d)", size, n))
					}
					return
				}
				h.Software += strings.Repeat("x", max(1, (size-n)/2))
			}
		}
	}
	for _, side := range []string{"dialer", "listener"} {
		t.Run(side, func(t *testing.T) {
			for _, c := range []struct {
				size int
				ok   bool
			}{{helloMax, true}, {helloMax + 1, false}} {
				var d directory
				hook := func(who string) func(*Config) {
					return func(cfg *Config) {
						if who == side {
							cfg.helloHook = pad(c.size)
						}
					}
				}
				n1 := startNode(t, &d, "n1", hook("dialer"))
				n2 := startNode(t, &d, "n2", hook("listener"))
				registerEcho(n2)
				err := n1.Call(testCtx(t), credentials.Node("n2"), msgEcho, &echoReq{Text: "hi"}, nil)
				if c.ok && err != nil {
					t.Errorf("a Hello of %d bytes from the %s: %v, want served", c.size, side, err)
				}
				if !c.ok && err == nil {
					t.Errorf("a Hello of %d bytes from the %s was accepted", c.size, side)
				}
				// The side that read the Hello serves the next peer.
				n3 := startNode(t, &d, "n3", nil)
				registerEcho(n3)
				from, to, reader := n3, "n2", "n2"
				if side == "listener" {
					from, to, reader = n1, "n3", "n1"
				}
				if err := from.Call(testCtx(t), credentials.Node(to), msgEcho, &echoReq{Text: "next"}, nil); err != nil {
					t.Errorf("%s after a Hello of %d bytes from the %s: %v", reader, c.size, side, err)
				}
			}
		})
	}
}
