package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

const (
	msgEcho  = proto.MsgFirstApp
	msgBlock = proto.MsgFirstApp + 1
	msgNote  = proto.MsgFirstApp + 2
)

type echoReq struct {
	Text string `msgpack:"t"`
	Pad  []byte `msgpack:"p,omitempty"`
}

type echoResp struct {
	Text string `msgpack:"t"`
	From string `msgpack:"f"`
}

func registerEcho(tr *Transport) {
	HandleFunc(tr, msgEcho, func(ctx context.Context, from credentials.Identity, req *echoReq) (*echoResp, error) {
		if req.Text == "fail" {
			return nil, &proto.ErrorReply{Code: proto.CodeFirstApp + 7, Message: "asked to fail"}
		}
		return &echoResp{Text: req.Text, From: from.String()}, nil
	})
}

// TestCallMutualTLS_C6: a node calls another with certificates of the
// cluster CA; the handler sees the caller's verified identity.
func TestCallMutualTLS_C6(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	registerEcho(n2)
	ctx := testCtx(t)
	var resp echoResp
	if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "hi"}, &resp); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if resp != (echoResp{Text: "hi", From: "node/n1"}) {
		t.Errorf("Call reply = %+v, want hi from node/n1", resp)
	}
	// A second call reuses the connection.
	if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "again"}, &resp); err != nil {
		t.Fatal(err)
	}
	if got := n1.connCount(); got != 1 {
		t.Errorf("n1 holds %d connections after two calls, want 1", got)
	}
	// An error reply carries the handler's code.
	err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "fail"}, &resp)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != proto.CodeFirstApp+7 || re.Peer.Name != "n2" || !strings.Contains(err.Error(), "asked to fail") {
		t.Errorf("Call of a failing handler: error %v, want a RemoteError from n2 with code 1007", err)
	}
	// n2 can call n1 back over the same connection.
	registerEcho(n1)
	if err := n2.Call(ctx, credentials.Node("n1"), msgEcho, &echoReq{Text: "back"}, &resp); err != nil || resp.From != "node/n2" {
		t.Errorf("call back = %+v, %v", resp, err)
	}
	if got := n2.connCount(); got != 1 {
		t.Errorf("n2 holds %d connections, want 1 (the inbound one, reused)", got)
	}
	if rtt, err := n1.Ping(ctx, credentials.Node("n2")); err != nil || rtt <= 0 {
		t.Errorf("Ping = %v, %v", rtt, err)
	}
}

// TestClientDialsNodeAndNodeCallsBack_C6: a client with a client
// certificate reaches a node by address; the node reaches the client over
// that connection, and cannot reach a client that has none.
func TestClientDialsNodeAndNodeCallsBack_C6(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	registerEcho(n1)
	alice := startClient(t, credDir, "alice")
	registerEcho(alice)
	ctx := testCtx(t)
	id, err := alice.DialAddr(ctx, n1.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if id.Instance == 0 || id != (credentials.Identity{Cluster: "lab", Name: "n1", Role: proto.RoleNode, Instance: n1.Identity().Instance}) {
		t.Errorf("DialAddr identity = %+v, want node n1 of lab with its instance %x", id, n1.Identity().Instance)
	}
	var resp echoResp
	if err := alice.Call(ctx, id, msgEcho, &echoReq{Text: "job"}, &resp); err != nil || resp.From != "client/alice" {
		t.Fatalf("client call = %+v, %v", resp, err)
	}
	if err := n1.Call(ctx, alice.Identity(), msgEcho, &echoReq{Text: "result"}, &resp); err != nil || resp.From != "node/n1" {
		t.Errorf("node calls client back = %+v, %v", resp, err)
	}
	err = n1.Call(ctx, credentials.Client("bob"), msgEcho, &echoReq{}, &resp)
	if !errors.Is(err, ErrNoRoute) || !strings.Contains(err.Error(), "client/bob") {
		t.Errorf("call to an unconnected client: error %v, want ErrNoRoute naming client/bob", err)
	}
	if _, err := Start(Config{Credentials: mustClient(t, credDir, "alice"), ListenAddr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "only nodes listen") {
		t.Errorf("Start of a listening client: error %v, want a config error", err)
	}
}

func mustClient(t *testing.T, dir, name string) *credentials.Credentials {
	c, err := credentials.LoadClient(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRefusedWithoutClusterCertificate_C6: a process without a
// certificate, or with one from another CA, can neither call a node nor
// pose as one.
func TestRefusedWithoutClusterCertificate_C6(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	var handled atomic.Int32
	HandleFunc(n1, msgEcho, func(context.Context, credentials.Identity, *echoReq) (*echoResp, error) {
		handled.Add(1)
		return &echoResp{}, nil
	})
	ctx := testCtx(t)

	t.Run("no certificate", func(t *testing.T) {
		qc, err := quic.DialAddr(ctx, n1.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto.ALPN}}, nil)
		if err == nil {
			// TLS 1.3: the refusal arrives after the client's handshake.
			s, err2 := qc.OpenStreamSync(ctx)
			if err2 == nil {
				writeFrame(s, proto.Envelope{Type: msgEcho}, &echoReq{}, 1<<20)
				_, _, err2 = readFrame(s, 1<<20)
			}
			err = err2
			qc.CloseWithError(0, "")
		}
		if err == nil {
			t.Fatal("a client without a certificate got an answer")
		}
	})

	stranger, err := Start(Config{Credentials: loadNode(t, otherDir, "n2"), ListenAddr: "127.0.0.1:0", Resolve: d.resolve})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()

	t.Run("certificate of another CA calls", func(t *testing.T) {
		err := stranger.Call(ctx, credentials.Node("n1"), msgEcho, &echoReq{}, nil)
		if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "node/n1") {
			t.Errorf("call with a foreign certificate: error %v, want ErrTLS naming node/n1", err)
		}
	})
	t.Run("certificate of another CA serves", func(t *testing.T) {
		d.set("n2", stranger.Addr().String())
		err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{}, nil)
		if !errors.Is(err, ErrTLS) {
			t.Errorf("call to a node with a foreign certificate: error %v, want ErrTLS", err)
		}
	})
	t.Run("node answering under another name", func(t *testing.T) {
		n3 := startNode(t, &directory{}, "n3", nil)
		d.set("n4", n3.Addr().String())
		err := n1.Call(ctx, credentials.Node("n4"), msgEcho, &echoReq{}, nil)
		if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "expected") {
			t.Errorf("call to n4 answered by n3: error %v, want ErrTLS saying n4 was expected", err)
		}
	})
	if n := handled.Load(); n != 0 {
		t.Errorf("handler ran %d times for refused peers", n)
	}
}

// TestHandshakeMismatchRefused_C6 checks the Hello exchange in both
// directions: the listener refuses a dialer and the dialer refuses a
// listener whose version or cluster differs, with an error that says what.
func TestHandshakeMismatchRefused_C6(t *testing.T) {
	tests := []struct {
		name    string
		forge   func(*proto.Hello)
		want    error
		wantMsg string
	}{
		{"version", func(h *proto.Hello) { h.Version = proto.Version + 1 }, ErrVersionMismatch, "protocol version"},
		{"cluster", func(h *proto.Hello) { h.Cluster = "prod" }, ErrClusterMismatch, `cluster "prod"`},
		{"name", func(h *proto.Hello) { h.Name = "n3" }, ErrUnauthorized, "certificate is that of"},
	}
	for _, tt := range tests {
		for _, side := range []string{"dialer", "listener"} {
			t.Run(tt.name+" forged by "+side, func(t *testing.T) {
				var d directory
				forge := func(who string) func(*Config) {
					return func(c *Config) {
						if who == side {
							c.helloHook = tt.forge
						}
					}
				}
				n1 := startNode(t, &d, "n1", forge("dialer"))
				n2 := startNode(t, &d, "n2", forge("listener"))
				registerEcho(n2)
				err := n1.Call(testCtx(t), credentials.Node("n2"), msgEcho, &echoReq{}, nil)
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("Call with a forged %s: error %v, want %v saying %q", tt.name, err, tt.want, tt.wantMsg)
				}
				eventually(t, "n2 drops the refused connection", func() bool { return n2.connCount() == 0 })
			})
		}
	}
}

// TestAuthorizeRefusesNonMembers_C6: the node's authoriser (membership)
// refuses a peer with a valid certificate, on either side.
func TestAuthorizeRefusesNonMembers_C6(t *testing.T) {
	var d directory
	onlyN3 := func(_ context.Context, p credentials.Identity) error {
		if p.Name != "n3" {
			return errors.New("not a member of the cluster")
		}
		return nil
	}
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.Authorize = onlyN3 })
	registerEcho(n2)
	registerEcho(n1)
	ctx := testCtx(t)
	err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{}, nil)
	if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "not a member") {
		t.Errorf("call to a node that refuses us: error %v, want ErrUnauthorized with the reason", err)
	}
	err = n2.Call(ctx, credentials.Node("n1"), msgEcho, &echoReq{}, nil)
	if !errors.Is(err, ErrUnauthorized) {
		t.Errorf("call to a node we refuse: error %v, want ErrUnauthorized", err)
	}
	n3 := startNode(t, &d, "n3", nil)
	if err := n3.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{}, nil); err != nil {
		t.Errorf("authorised call: %v", err)
	}
}

func TestOneWayMessages(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	got := make(chan string, 10)
	HandleFunc(n2, msgNote, func(_ context.Context, from credentials.Identity, req *echoReq) (*struct{}, error) {
		got <- from.Name + ":" + req.Text
		return nil, nil
	})
	ctx := testCtx(t)
	for i := range 3 {
		if err := n1.Send(ctx, credentials.Node("n2"), msgNote, &echoReq{Text: string(rune('a' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for range 3 {
		select {
		case s := <-got:
			seen[s] = true
		case <-ctx.Done():
			t.Fatal("one-way messages did not arrive")
		}
	}
	if !seen["n1:a"] || !seen["n1:b"] || !seen["n1:c"] {
		t.Errorf("received %v, want a, b and c from n1", seen)
	}
}

func TestUnknownMessageType(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	startNode(t, &d, "n2", nil)
	err := n1.Call(testCtx(t), credentials.Node("n2"), proto.MsgFirstApp+40, &echoReq{}, nil)
	if !errors.Is(err, ErrUnknownType) || !strings.Contains(err.Error(), "MsgType(104)") {
		t.Errorf("call of an unhandled type: error %v, want ErrUnknownType naming it", err)
	}
}

// TestOversizedFramesRefused: a message over the peer's announced limit is
// refused before sending; a raw frame header over the limit is refused by
// the receiver before it allocates.
func TestOversizedFramesRefused(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) { c.MaxFrameSize = 4096 })
	registerEcho(n2)
	ctx := testCtx(t)
	err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Pad: make([]byte, 8192)}, nil)
	if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "limit is 4096") {
		t.Errorf("oversized call: error %v, want ErrFrameTooLarge naming the limit", err)
	}
	// A raw stream announcing a 1 GiB frame.
	c, err := n1.conn(ctx, credentials.Node("n2"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{0x40, 0, 0, 0})
	err = n1.readReply(ctx, c, s, "raw", msgEcho, nil)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("raw 1 GiB frame: reply %v, want a CodeTooLarge refusal", err)
	}
	s.CancelWrite(0)
	// The connection still serves.
	if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "small"}, nil); err != nil {
		t.Errorf("call after a refused frame: %v", err)
	}
}

// TestContextCancelsBlockedCall: cancelling the caller's context returns
// at once and cancels the handler's context; a deadline travels with the
// request.
func TestContextCancelsBlockedCall(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	handlerDone := make(chan error, 1)
	hasDeadline := make(chan bool, 1)
	n2.Handle(msgBlock, func(ctx context.Context, _ credentials.Identity, _ Request) (any, error) {
		_, ok := ctx.Deadline()
		hasDeadline <- ok
		<-ctx.Done()
		handlerDone <- ctx.Err()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- n1.Call(ctx, credentials.Node("n2"), msgBlock, nil, nil) }()
	if <-hasDeadline {
		t.Error("handler has a deadline though the caller set none")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "node/n2") {
			t.Errorf("cancelled call: error %v, want context.Canceled naming node/n2", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled call did not return")
	}
	select {
	case <-handlerDone:
	case <-time.After(5 * time.Second):
		t.Fatal("handler's context was not cancelled")
	}

	dctx, dcancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer dcancel()
	err := n1.Call(dctx, credentials.Node("n2"), msgBlock, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call past its deadline: error %v, want DeadlineExceeded", err)
	}
	if !<-hasDeadline {
		t.Error("handler did not get the caller's deadline")
	}
	<-handlerDone
}

// TestConnectionLossNamesPeer_C5: a peer that shuts down or dies fails the
// calls waiting on it with an error naming it, within the idle timeout at
// worst, and a restarted peer is dialed again.
func TestConnectionLossNamesPeer_C5(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", func(c *Config) { c.IdleTimeout = 1500 * time.Millisecond })
	entered := make(chan struct{}, 1)
	block := func(ctx context.Context, _ credentials.Identity, _ Request) (any, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	ctx := testCtx(t)
	for _, how := range []string{"close", "crash"} {
		t.Run(how, func(t *testing.T) {
			n2 := startNode(t, &d, "n2", nil)
			n2.Handle(msgBlock, block)
			errc := make(chan error, 1)
			go func() { errc <- n1.Call(ctx, credentials.Node("n2"), msgBlock, nil, nil) }()
			select {
			case <-entered: // the call reached the handler
			case err := <-errc:
				t.Fatalf("call failed before reaching the handler: %v", err)
			}
			start := time.Now()
			if how == "close" {
				n2.Close()
			} else {
				n2.udp.Close() // no CONNECTION_CLOSE: only silence
			}
			select {
			case err := <-errc:
				if !errors.Is(err, ErrPeerLost) || !strings.Contains(err.Error(), "node/n2") {
					t.Errorf("call to a lost peer: error %v, want ErrPeerLost naming node/n2", err)
				}
				t.Logf("%s noticed after %v", how, time.Since(start))
			case <-time.After(10 * time.Second):
				t.Fatal("call to a lost peer hangs")
			}
			n2.Close()
			// A new n2 at a new address: the next call dials it.
			n2b := startNode(t, &d, "n2", nil)
			registerEcho(n2b)
			if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "x"}, nil); err != nil {
				t.Errorf("call to the restarted peer: %v", err)
			}
			n2b.Close()
			// n1 learns of the close asynchronously; a call racing it fails
			// with ErrPeerLost, which is right but not what the next
			// subtest is about.
			eventually(t, "n1 notices n2 closed", func() bool { return !n1.Connected(credentials.Node("n2")) })
		})
	}
}

// TestConcurrentDialsShared: many callers at once share one dial.
func TestConcurrentDialsShared(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", nil)
	registerEcho(n2)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() { errs <- n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "x"}, nil) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if a, b := n1.connCount(), n2.connCount(); a != 1 || b != 1 {
		t.Errorf("connections after 32 concurrent calls: n1 %d, n2 %d; want 1 each", a, b)
	}
}

func TestClosedTransport(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	startNode(t, &d, "n2", nil)
	n1.Close()
	n1.Close()
	if err := n1.Call(testCtx(t), credentials.Node("n2"), msgEcho, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call on a closed transport: %v, want ErrClosed", err)
	}
	if _, err := n1.DialAddr(testCtx(t), "127.0.0.1:1"); !errors.Is(err, ErrClosed) {
		t.Errorf("DialAddr on a closed transport: %v, want ErrClosed", err)
	}
}

func TestConfigValidate(t *testing.T) {
	err := (&Config{MaxFrameSize: 10, PageStreams: 100, DialTimeout: -1}).Validate()
	for _, want := range []string{"Credentials is required", "MaxFrameSize (10)", "PageStreams (100)", "DialTimeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

// TestStatsAndConnectionEvents: counters per peer and connection events
// for the node's metrics and job leases.
func TestStatsAndConnectionEvents(t *testing.T) {
	var d directory
	events := make(chan ConnEvent, 10)
	var n2ref atomic.Pointer[Transport]
	n1 := startNode(t, &d, "n1", nil)
	n2 := startNode(t, &d, "n2", func(c *Config) {
		c.OnConnection = func(e ConnEvent) {
			if tr := n2ref.Load(); tr != nil {
				tr.Connected(e.Peer) // the callback may call into the transport: no lock is held
			}
			events <- e
		}
	})
	n2ref.Store(n2)
	registerEcho(n2)
	store := &pageStore{bufs: map[uint64]*testBuffer{1: {rng: [3]uint64{1, 1, 100}, elem: 1, data: make([]byte, 100)}}}
	n2.HandlePages(store.handler)
	ctx := testCtx(t)
	for range 2 {
		if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "fail"}, nil)
	h := proto.PageHeader{Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 60}}, {Lo: [3]uint64{0, 0, 60}, Hi: [3]uint64{1, 1, 100}}}}
	if err := n1.SendPages(ctx, credentials.Node("n2"), &h, [][]byte{make([]byte, 100)}); err != nil {
		t.Fatal(err)
	}
	got := n1.Stats()
	want := []PeerStats{{Peer: credentials.Node("n2"), Connected: true, CallsSent: 3, Failures: 1, TransfersSent: 1, BoxesSent: 2, BytesSent: 100}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("n1.Stats() = %+v, want %+v", got, want)
	}
	s2 := n2.Stats()
	if len(s2) != 1 || s2[0].CallsReceived != 3 || s2[0].TransfersRecv != 1 || s2[0].BytesRecv != 100 || s2[0].BoxesRecv != 2 {
		t.Errorf("n2.Stats() = %+v, want 3 calls and one 100-byte transfer of 2 boxes received", s2)
	}
	if e := <-events; !e.Up || e.Peer.Name != "n1" {
		t.Errorf("first event %+v, want n1 up", e)
	}
	n1.Close()
	select {
	case e := <-events:
		if e.Up || e.Peer.Name != "n1" || e.Err == nil {
			t.Errorf("event after n1 closed: %+v, want n1 down with a cause", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event after the peer closed")
	}
	if n2.Connected(credentials.Node("n1")) {
		t.Error("n2 still reports n1 connected")
	}
}

// TestDialNobodyFailsInTime: a node address where nothing listens fails
// the call with ErrNoRoute within the dial timeout, naming the node.
func TestDialNobodyFailsInTime(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", func(c *Config) { c.DialTimeout = 700 * time.Millisecond })
	d.set("n2", "127.0.0.1:9") // discard port: nothing answers QUIC there
	start := time.Now()
	err := n1.Call(testCtx(t), credentials.Node("n2"), msgEcho, &echoReq{}, nil)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("dial to nobody took %v, want about the dial timeout", el)
	}
	if err == nil || !strings.Contains(err.Error(), "node/n2") {
		t.Fatalf("call to nobody: %v, want an error naming node/n2", err)
	}
	if !errors.Is(err, ErrNoRoute) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call to nobody: %v, want ErrNoRoute or a deadline", err)
	}
	d.set("n3", "not an address")
	if err := n1.Call(testCtx(t), credentials.Node("n3"), msgEcho, &echoReq{}, nil); !errors.Is(err, ErrNoRoute) {
		t.Errorf("call to a bad address: %v, want ErrNoRoute", err)
	}
	if err := n1.Call(testCtx(t), credentials.Node("n9"), msgEcho, &echoReq{}, nil); !errors.Is(err, ErrNoRoute) || !strings.Contains(err.Error(), "not a member") {
		t.Errorf("call to a node Resolve does not know: %v, want ErrNoRoute with Resolve's reason", err)
	}
}

// TestOversizedHelloRefused: a Hello frame is read with a limit of 64 KiB
// (docs/TRANSPORT.md, Limits), whichever side sends it; the connection is
// refused, and the other side stays up and serves the next honest peer.
func TestOversizedHelloRefused(t *testing.T) {
	big := func(h *proto.Hello) { h.Software = strings.Repeat("x", 70<<10) }
	for _, side := range []string{"dialer", "listener"} {
		t.Run("forged by "+side, func(t *testing.T) {
			var d directory
			forge := func(who string) func(*Config) {
				return func(c *Config) {
					if who == side {
						c.helloHook = big
					}
				}
			}
			n1 := startNode(t, &d, "n1", forge("dialer"))
			n2 := startNode(t, &d, "n2", forge("listener"))
			registerEcho(n2)
			err := n1.Call(testCtx(t), credentials.Node("n2"), msgEcho, &echoReq{}, nil)
			if err == nil || !(errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed)) {
				t.Fatalf("Call with a 70 KiB Hello from the %s: error %v, want the Hello refused as too large", side, err)
			}
			eventually(t, "n2 drops the refused connection", func() bool { return n2.connCount() == 0 })
			n3 := startNode(t, &d, "n3", nil)
			if err := n3.Call(testCtx(t), credentials.Node("n2"), msgEcho, &echoReq{Text: "hi"}, nil); side == "dialer" && err != nil {
				t.Errorf("n2 after refusing n1's Hello: %v", err)
			}
		})
	}
}
