package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// Benchmarks of issue 5's performance targets. Sizes are small by default
// so that CI-time runs stay short; the figures in docs/TRANSPORT.md use
//
//	ACPP_BENCH_PAGE_BYTES=268435456 go test -run='^$' -bench=. -benchtime=5x ./transport

func benchPageBytes(b *testing.B) int {
	if s := os.Getenv("ACPP_BENCH_PAGE_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("ACPP_BENCH_PAGE_BYTES=%q: want a positive byte count", s)
		}
		return n
	}
	return 4 << 20
}

// rawServer is the baseline: quic-go with the same credentials and flow
// control windows as the transport, no framing, no handshake of ours.
// Each stream carries an 8-byte length and that many bytes, read into one
// destination buffer, and is answered with a 1-byte ack; a stream whose
// length is 0 is a round trip (16 bytes in, 16 bytes back).
type rawServer struct {
	ln  *quic.Listener
	wg  sync.WaitGroup
	dst []byte
}

func benchQUICConfig() *quic.Config {
	c := (&Config{}).withDefaults()
	return &quic.Config{
		MaxStreamReceiveWindow: c.StreamWindow, MaxConnectionReceiveWindow: c.ConnWindow,
		InitialStreamReceiveWindow: 4 << 20, InitialConnectionReceiveWindow: 8 << 20,
		MaxIncomingStreams: 1024,
	}
}

func startRawServer(b *testing.B, creds *credentials.Credentials, size int) *rawServer {
	ln, err := quic.ListenAddr("127.0.0.1:0", creds.ServerTLS(), benchQUICConfig())
	if err != nil {
		b.Fatal(err)
	}
	r := &rawServer{ln: ln, dst: make([]byte, size)}
	r.wg.Go(func() {
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			r.wg.Go(func() {
				for {
					s, err := qc.AcceptStream(context.Background())
					if err != nil {
						return
					}
					r.wg.Go(func() { r.serve(s) })
				}
			})
		}
	})
	b.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *rawServer) serve(s *quic.Stream) {
	var hdr [8]byte
	if _, err := io.ReadFull(s, hdr[:]); err != nil {
		s.CancelRead(1)
		return
	}
	n := binary.BigEndian.Uint64(hdr[:])
	if n == 0 {
		var msg [16]byte
		io.ReadFull(s, msg[:])
		s.Write(msg[:])
		s.Close()
		return
	}
	io.ReadFull(s, r.dst[:n])
	s.Write([]byte{1})
	s.Close()
}

func dialRaw(b *testing.B, creds *credentials.Credentials, addr string) *quic.Conn {
	qc, err := quic.DialAddr(context.Background(), addr, creds.ClientTLS(nil), benchQUICConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc
}

func rawTransfer(qc *quic.Conn, src []byte) error {
	s, err := qc.OpenStreamSync(context.Background())
	if err != nil {
		return err
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(len(src)))
	s.Write(hdr[:])
	if _, err := s.Write(src); err != nil {
		return err
	}
	s.Close()
	_, err = io.ReadAll(s)
	return err
}

func rawRoundTrip(qc *quic.Conn) error {
	s, err := qc.OpenStreamSync(context.Background())
	if err != nil {
		return err
	}
	var msg [24]byte // 8-byte zero length, 16-byte message
	s.Write(msg[:])
	s.Close()
	_, err = io.ReadAll(s)
	return err
}

// tlsPair is TLS 1.3 over loopback TCP with the same certificates, for
// reference: one connection; each transfer is an 8-byte length, the
// bytes, and a 1-byte ack.
type tlsPair struct {
	cli net.Conn
	wg  sync.WaitGroup
}

func startTLSPair(b *testing.B, srv, cli *credentials.Credentials, size int) *tlsPair {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv.ServerTLS())
	if err != nil {
		b.Fatal(err)
	}
	p := &tlsPair{}
	p.wg.Go(func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		dst := make([]byte, size)
		var hdr [8]byte
		for {
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			if _, err := io.ReadFull(c, dst[:binary.BigEndian.Uint64(hdr[:])]); err != nil {
				return
			}
			c.Write([]byte{1})
		}
	})
	p.cli, err = tls.Dial("tcp", ln.Addr().String(), cli.ClientTLS(nil))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.cli.Close(); p.wg.Wait() })
	return p
}

func (p *tlsPair) transfer(src []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(len(src)))
	p.cli.Write(hdr[:])
	if _, err := p.cli.Write(src); err != nil {
		return err
	}
	_, err := io.ReadFull(p.cli, hdr[:1])
	return err
}

// pagePair is two transports, n1 sending one box of size bytes to n2.
type pagePair struct {
	n1  *Transport
	hdr proto.PageHeader
	src [][]byte
}

func startPagePair(b *testing.B, size, streams int, mods ...func(*Config)) *pagePair {
	var d directory
	mod := func(c *Config) {
		c.Logger = nil
		for _, m := range mods {
			m(c)
		}
	}
	n1 := startNode(b, &d, "n1", func(c *Config) { c.PageStreams = streams; c.MinSegmentBytes = 1 << 20; mod(c) })
	n2 := startNode(b, &d, "n2", mod)
	dst := make([]byte, size)
	n2.HandlePages(func(context.Context, credentials.Identity, *proto.PageHeader) (PageSink, error) {
		return PageSink{Dst: [][]byte{dst}}, nil
	})
	p := &pagePair{n1: n1, hdr: proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, uint64(size)}}}}, src: [][]byte{make([]byte, size)}}
	if err := p.send(); err != nil { // dial outside the timing
		b.Fatal(err)
	}
	return p
}

func (p *pagePair) send() error {
	return p.n1.SendPages(context.Background(), credentials.Node("n2"), &p.hdr, p.src)
}

func reportRate(b *testing.B, size int) {
	b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// BenchmarkPageTransfer moves one box of ACPP_BENCH_PAGE_BYTES node to node
// on loopback, each variant on its own: raw quic-go, TLS over TCP, and the
// transport over 1, 2 and 4 streams.
func BenchmarkPageTransfer(b *testing.B) {
	size := benchPageBytes(b)
	n1 := loadNode(b, credDir, "n1")
	n2 := loadNode(b, credDir, "n2")
	b.Run("raw-quic", func(b *testing.B) {
		srv := startRawServer(b, n2, size)
		qc := dialRaw(b, n1, srv.ln.Addr().String())
		src := make([]byte, size)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			if err := rawTransfer(qc, src); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, size)
	})
	b.Run("tls-tcp", func(b *testing.B) {
		p := startTLSPair(b, n2, n1, size)
		src := make([]byte, size)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			if err := p.transfer(src); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, size)
	})
	b.Run("raw-quic/conns=2", func(b *testing.B) {
		// Two connections, half the bytes each: does a second connection
		// (a second quic-go run loop) move bytes faster?
		srv := startRawServer(b, n2, size)
		qcs := []*quic.Conn{dialRaw(b, n1, srv.ln.Addr().String()), dialRaw(b, n1, srv.ln.Addr().String())}
		src := make([]byte, size)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, qc := range qcs {
				wg.Go(func() { errs[i] = rawTransfer(qc, src[i*size/2:(i+1)*size/2]) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, size)
	})
	windows := []struct {
		name         string
		stream, conn uint64
	}{
		{"", 0, 0},                             // the defaults: 32 MiB / 128 MiB
		{"/window=quic-go", 6 << 20, 15 << 20}, // quic-go's own defaults
		{"/window=large", 128 << 20, 512 << 20},
	}
	for _, streams := range []int{1, 2, 4} {
		for _, w := range windows {
			if w.name != "" && streams != 1 {
				continue
			}
			b.Run(fmt.Sprintf("transport/streams=%d%s", streams, w.name), func(b *testing.B) {
				p := startPagePair(b, size, streams, func(c *Config) {
					if w.stream != 0 {
						c.StreamWindow, c.ConnWindow = w.stream, w.conn
					}
				})
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := p.send(); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, size)
			})
		}
	}
}

// BenchmarkPageTransferRatio alternates a raw quic-go transfer and a
// transport transfer of the same bytes in every iteration, so both see the
// same machine state, and reports transport throughput as a multiple of
// raw ("x-raw"; issue 5 asks for at least 0.9).
func BenchmarkPageTransferRatio(b *testing.B) {
	size := benchPageBytes(b)
	n1 := loadNode(b, credDir, "n1")
	n2 := loadNode(b, credDir, "n2")
	for _, streams := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			srv := startRawServer(b, n2, size)
			qc := dialRaw(b, n1, srv.ln.Addr().String())
			p := startPagePair(b, size, streams)
			src := make([]byte, size)
			var raw, ours, rawCPU, oursCPU time.Duration
			timed := func(f func() error, wall, cpu *time.Duration) {
				t0, c0 := time.Now(), cpuTime()
				if err := f(); err != nil {
					b.Fatal(err)
				}
				*wall += time.Since(t0)
				*cpu += cpuTime() - c0
			}
			rawOnce := func() error { return rawTransfer(qc, src) }
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first, so neither always follows the
				// other's garbage or warm caches.
				if i%2 == 0 {
					timed(rawOnce, &raw, &rawCPU)
					timed(p.send, &ours, &oursCPU)
				} else {
					timed(p.send, &ours, &oursCPU)
					timed(rawOnce, &raw, &rawCPU)
				}
			}
			gb := float64(size) * float64(b.N) / 1e9
			b.ReportMetric(raw.Seconds()/ours.Seconds(), "x-raw")
			b.ReportMetric(gb/raw.Seconds(), "GB/s-raw")
			b.ReportMetric(gb/ours.Seconds(), "GB/s")
			if rawCPU > 0 && oursCPU > 0 {
				// CPU seconds per GB, sender and receiver together: the
				// steadier measure of cost on a shared machine.
				b.ReportMetric(rawCPU.Seconds()/oursCPU.Seconds(), "x-raw-cpu")
				b.ReportMetric(oursCPU.Seconds()/gb, "cpu-s/GB")
				b.ReportMetric(rawCPU.Seconds()/gb, "cpu-s/GB-raw")
			}
		})
	}
}

// BenchmarkRoundTrip is a small control request and its reply between two
// nodes: raw quic-go (16 bytes each way on a fresh stream) against
// transport.Call of a small msgpack message with an echo handler,
// alternated per iteration; "x-raw" is the transport's round-trip time as
// a multiple of raw (issue 5 asks for at most 2).
func BenchmarkRoundTrip(b *testing.B) {
	n1 := loadNode(b, credDir, "n1")
	n2 := loadNode(b, credDir, "n2")
	srv := startRawServer(b, n2, 0)
	qc := dialRaw(b, n1, srv.ln.Addr().String())
	var d directory
	t1 := startNode(b, &d, "n1", func(c *Config) { c.Logger = nil })
	t2 := startNode(b, &d, "n2", func(c *Config) { c.Logger = nil })
	registerEcho(t2)
	ctx := context.Background()
	req := &echoReq{Text: "status"}
	var resp echoResp
	if err := t1.Call(ctx, credentials.Node("n2"), msgEcho, req, &resp); err != nil {
		b.Fatal(err)
	}
	var raw, ours, rawCPU, oursCPU time.Duration
	timed := func(f func() error, wall, cpu *time.Duration) {
		t0, c0 := time.Now(), cpuTime()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*wall += time.Since(t0)
		*cpu += cpuTime() - c0
	}
	rawOnce := func() error { return rawRoundTrip(qc) }
	call := func() error { return t1.Call(ctx, credentials.Node("n2"), msgEcho, req, &resp) }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			timed(rawOnce, &raw, &rawCPU)
			timed(call, &ours, &oursCPU)
		} else {
			timed(call, &ours, &oursCPU)
			timed(rawOnce, &raw, &rawCPU)
		}
	}
	b.ReportMetric(float64(raw.Microseconds())/float64(b.N), "µs-raw/op")
	b.ReportMetric(float64(ours.Microseconds())/float64(b.N), "µs-call/op")
	b.ReportMetric(ours.Seconds()/raw.Seconds(), "x-raw")
	if rawCPU > 0 && oursCPU > 0 {
		b.ReportMetric(oursCPU.Seconds()/rawCPU.Seconds(), "x-raw-cpu")
	}
}

// BenchmarkFrameCodec is the cost of encoding and decoding one control
// frame, the hot path of every call.
func BenchmarkFrameCodec(b *testing.B) {
	seg := &proto.PageSegment{Count: 1, Length: 4096, Header: proto.PageHeader{Job: 1, Buffer: 2, ElemSize: 4, Boxes: []proto.Box{{Hi: [3]uint64{1, 32, 32}}}}}
	b.ReportAllocs()
	for b.Loop() {
		f, err := encodeFrame(proto.Envelope{Type: proto.MsgPages}, seg, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		_, body, err := decodeFrame(f.buf.Bytes()[frameHeaderLen:])
		if err != nil {
			b.Fatal(err)
		}
		var s proto.PageSegment
		if err := decodeBody(body, &s); err != nil {
			b.Fatal(err)
		}
		framePool.Put(f)
	}
}

// BenchmarkRawConnections alternates raw quic-go transfers over one
// connection and over two (half the bytes each), to see whether a second
// connection per peer, a second quic-go run loop, would move pages faster
// ("x-one" is two connections' throughput as a multiple of one's).
func BenchmarkRawConnections(b *testing.B) {
	size := benchPageBytes(b)
	n1 := loadNode(b, credDir, "n1")
	n2 := loadNode(b, credDir, "n2")
	srv := startRawServer(b, n2, size)
	one := dialRaw(b, n1, srv.ln.Addr().String())
	two := []*quic.Conn{dialRaw(b, n1, srv.ln.Addr().String()), dialRaw(b, n1, srv.ln.Addr().String())}
	src := make([]byte, size)
	sendOne := func() error { return rawTransfer(one, src) }
	sendTwo := func() error {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, qc := range two {
			wg.Go(func() { errs[i] = rawTransfer(qc, src[i*size/2:(i+1)*size/2]) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	var w1, w2, c1, c2 time.Duration
	timed := func(f func() error, wall, cpu *time.Duration) {
		t0, c0 := time.Now(), cpuTime()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*wall += time.Since(t0)
		*cpu += cpuTime() - c0
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			timed(sendOne, &w1, &c1)
			timed(sendTwo, &w2, &c2)
		} else {
			timed(sendTwo, &w2, &c2)
			timed(sendOne, &w1, &c1)
		}
	}
	gb := float64(size) * float64(b.N) / 1e9
	b.ReportMetric(gb/w1.Seconds(), "GB/s-one")
	b.ReportMetric(gb/w2.Seconds(), "GB/s-two")
	b.ReportMetric(w1.Seconds()/w2.Seconds(), "x-one")
	if c1 > 0 && c2 > 0 {
		b.ReportMetric(c1.Seconds()/c2.Seconds(), "x-one-cpu")
	}
}

// BenchmarkSmallPages is the latency of one small page transfer (a 4-byte
// box, the cluster hop's page) from SendPages to the receiver's
// acknowledgement, alternated per iteration with a raw quic-go round trip
// (16 bytes each way on a fresh stream); "x-raw" is the transfer's time as
// a multiple of raw. A transfer is a round trip too: the pages one way,
// the acknowledgement back.
func BenchmarkSmallPages(b *testing.B) {
	n1 := loadNode(b, credDir, "n1")
	n2 := loadNode(b, credDir, "n2")
	srv := startRawServer(b, n2, 0)
	qc := dialRaw(b, n1, srv.ln.Addr().String())
	p := startPagePair(b, 4, 1)
	var raw, ours time.Duration
	timed := func(f func() error, wall *time.Duration) {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*wall += time.Since(t0)
	}
	rawOnce := func() error { return rawRoundTrip(qc) }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			timed(rawOnce, &raw)
			timed(p.send, &ours)
		} else {
			timed(p.send, &ours)
			timed(rawOnce, &raw)
		}
	}
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "ns-raw/op")
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ns-pages/op")
	b.ReportMetric(ours.Seconds()/raw.Seconds(), "x-raw")
}
