package transport

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sync/semaphore"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// Transport is one process's QUIC endpoint: an optional listener, a cache
// of connections by peer identity, and the registry of handlers for
// incoming messages. Start it with Start and stop it with Close. All
// methods are safe for concurrent use.
type Transport struct {
	cfg Config
	// panics counts the handler, page handler and page sink panics the
	// transport recovered (Panics).
	panics atomic.Int64
	creds  *credentials.Credentials
	self   credentials.Identity
	log    *slog.Logger
	qconf  *quic.Config
	udp    *net.UDPConn
	qt     *quic.Transport
	ln     *quic.Listener

	// ctx is cancelled by Close (cause ErrClosed); every goroutine the
	// transport starts derives from it and is counted in wg.
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	nextTransfer atomic.Uint64
	reqRoom      *semaphore.Weighted // Config.MaxRequestBytes (takeRequestRoom)
	streamsIn    atomic.Int64        // request streams accepted (tests: a session's calls share one)
	stats        sync.Map            // peer identity string → *peerCounters

	hmu      sync.RWMutex // guards handlers and pages
	handlers map[proto.MsgType]Handler
	pages    PageHandler

	mu     sync.Mutex // guards the fields below; never held across I/O
	closed bool
	conns  map[string]*conn     // by connKey of the peer: the connection calls use
	dials  map[string]*dialCall // dials in flight, by connKey of the peer
	all    map[*conn]struct{}   // every connection, for Close
	// reached is the address DialAddr last reached each node at, by name:
	// where a transport without Resolve (a client) dials it again.
	reached map[string]string
}

// conn is one QUIC connection to an authenticated peer. Either side may
// open streams on it, whoever dialed.
type conn struct {
	qc       *quic.Conn
	peer     credentials.Identity // with the Instance its Hello announced
	addr     string
	outbound bool
	// peerMaxFrame is the peer's announced frame limit (0: unknown).
	peerMaxFrame int

	mu         sync.Mutex // guards assemblies, tombstones and pageIdle
	assemblies map[uint64]*assembly
	tombstones map[uint64]struct{} // transfers the peer abandoned (at most maxTombstones)
	// pageIdle are page streams kept open after a one-segment transfer
	// for the next (pages.go, "page sessions"), newest last.
	pageIdle []idleStream
}

type dialCall struct {
	done chan struct{} // closed when c and err are set
	c    *conn
	err  error
}

// Start opens the UDP socket, and the listener if cfg.ListenAddr is set,
// and starts accepting connections. Close releases everything.
func Start(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Transport{
		cfg:      cfg,
		creds:    cfg.Credentials,
		self:     cfg.Credentials.Identity,
		log:      cfg.Logger,
		handlers: map[proto.MsgType]Handler{},
		conns:    map[string]*conn{},
		dials:    map[string]*dialCall{},
		all:      map[*conn]struct{}{},
		reached:  map[string]string{},
		reqRoom:  semaphore.NewWeighted(cfg.MaxRequestBytes),
	}
	t.self.Instance = cfg.Instance
	t.ctx, t.cancel = context.WithCancelCause(context.Background())
	t.qconf = &quic.Config{
		HandshakeIdleTimeout:           cfg.DialTimeout,
		MaxIdleTimeout:                 cfg.IdleTimeout,
		KeepAlivePeriod:                cfg.IdleTimeout / 3,
		InitialStreamReceiveWindow:     min(cfg.StreamWindow, 4<<20),
		MaxStreamReceiveWindow:         cfg.StreamWindow,
		InitialConnectionReceiveWindow: min(cfg.ConnWindow, 8<<20),
		MaxConnectionReceiveWindow:     cfg.ConnWindow,
		MaxIncomingStreams:             cfg.MaxIncomingStreams,
		MaxIncomingUniStreams:          cfg.MaxIncomingStreams,
	}
	addr := cfg.ListenAddr
	if addr == "" {
		addr = ":0"
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen address %q: %w", cfg.ListenAddr, err)
	}
	t.udp, err = net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on %q: %w (is another acpp-node using the port?)", addr, err)
	}
	// Derived from the node's key, so that after a restart the node resets
	// the connections its previous run held and peers notice at once.
	key := quic.StatelessResetKey(t.creds.DeriveSecret("quic stateless reset"))
	t.qt = &quic.Transport{Conn: t.udp, StatelessResetKey: &key}
	if cfg.ListenAddr != "" {
		t.ln, err = t.qt.Listen(t.creds.ServerTLS(), t.qconf)
		if err != nil {
			t.qt.Close()
			t.udp.Close()
			return nil, fmt.Errorf("transport: listen on %q: %w", addr, err)
		}
		t.wg.Add(1)
		go t.acceptLoop()
	}
	t.log.Debug("transport started", "node", t.self.Name, "role", t.self.Role, "addr", t.udp.LocalAddr().String())
	return t, nil
}

// Addr is the local UDP address: the listener's when listening.
func (t *Transport) Addr() net.Addr { return t.udp.LocalAddr() }

// Identity is this process's identity, from its credentials, with the
// Instance it announces.
func (t *Transport) Identity() credentials.Identity { return t.self }

// Close closes every connection (peers see "shutting down"), the listener
// and the socket, and waits for every goroutine of the transport,
// including running handlers, whose contexts it cancels. Calling it again
// is safe and waits likewise.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	conns := make([]*conn, 0, len(t.all))
	for c := range t.all {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	t.cancel(ErrClosed)
	for _, c := range conns {
		c.qc.CloseWithError(quicCodeShutdown, t.self.String()+" is shutting down")
	}
	if t.ln != nil {
		t.ln.Close()
	}
	t.wg.Wait()
	t.qt.Close()
	t.udp.Close()
	return nil
}

func (t *Transport) hello() *proto.Hello {
	h := &proto.Hello{
		Version:  proto.Version,
		Cluster:  t.self.Cluster,
		Name:     t.self.Name,
		Role:     t.self.Role,
		Software: t.cfg.Software,
		MaxFrame: uint32(t.cfg.MaxFrameSize),
		Instance: t.self.Instance,
	}
	if t.cfg.helloHook != nil {
		t.cfg.helloHook(h)
	}
	return h
}

// checkHello compares a peer's Hello with this end and with the peer's
// verified certificate.
func (t *Transport) checkHello(peer credentials.Identity, h *proto.Hello) *proto.ErrorReply {
	if h.Version != proto.Version {
		return &proto.ErrorReply{Code: proto.CodeVersion, Message: fmt.Sprintf(
			"%s speaks acpp protocol version %d and %s version %d: run the same acpp release on every node and client",
			peer, h.Version, t.self, proto.Version)}
	}
	if h.Cluster != t.self.Cluster {
		return &proto.ErrorReply{Code: proto.CodeCluster, Message: fmt.Sprintf(
			"%s is in cluster %q and %s in cluster %q: check the cluster setting and that both use credentials of the same cluster CA",
			peer, h.Cluster, t.self, t.self.Cluster)}
	}
	if h.Name != peer.Name || h.Role != peer.Role {
		return &proto.ErrorReply{Code: proto.CodeUnauthorized, Message: fmt.Sprintf(
			"handshake claims to be %s/%s but the certificate is that of %s", h.Role, h.Name, peer)}
	}
	return nil
}

func (t *Transport) authorize(ctx context.Context, peer credentials.Identity) *proto.ErrorReply {
	if t.cfg.Authorize == nil {
		return nil
	}
	if err := t.cfg.Authorize(ctx, peer); err != nil {
		return &proto.ErrorReply{Code: proto.CodeUnauthorized, Message: fmt.Sprintf("%s refused %s: %v", t.self, peer, err)}
	}
	return nil
}

// ---- inbound ----

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		qc, err := t.ln.Accept(t.ctx)
		if err != nil {
			if t.ctx.Err() == nil {
				t.log.Error("transport stopped accepting connections", "error", err)
			}
			return
		}
		t.wg.Add(1)
		go t.serveInbound(qc)
	}
}

// serveInbound runs the listener's side of the Hello exchange on a new
// connection, then serves it.
func (t *Transport) serveInbound(qc *quic.Conn) {
	defer t.wg.Done()
	addr := qc.RemoteAddr().String()
	peer, maxFrame, err := t.acceptHello(qc)
	if err != nil {
		t.log.Warn("refused connection", "addr", addr, "error", err)
		return
	}
	c := &conn{qc: qc, peer: peer, addr: addr, peerMaxFrame: maxFrame}
	if !t.adopt(c) {
		return
	}
	t.log.Debug("peer connected", "peer", peer.String(), "addr", addr)
	t.serve(c)
}

func (t *Transport) acceptHello(qc *quic.Conn) (credentials.Identity, int, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
	defer cancel()
	peer, err := t.creds.PeerIdentity(qc.ConnectionState().TLS)
	if err != nil { // the TLS stack checked this already; belt and braces
		qc.CloseWithError(quicCodeHandshake, err.Error())
		return peer, 0, err
	}
	s, err := qc.AcceptStream(ctx)
	if err != nil {
		qc.CloseWithError(quicCodeHandshake, "no hello")
		return peer, 0, fmt.Errorf("%s sent no hello: %w", peer, err)
	}
	stop := context.AfterFunc(ctx, func() { s.CancelRead(quicCodeCanceled); s.CancelWrite(quicCodeCanceled) })
	defer stop()
	env, body, err := readFrame(s, min(t.cfg.MaxFrameSize, helloMax))
	var h proto.Hello
	if err == nil && env.Type != proto.MsgHello {
		err = fmt.Errorf("%w: first message is %v, want MsgHello", ErrMalformed, env.Type)
	}
	if err == nil {
		err = decodeBody(body, &h)
	}
	var refusal *proto.ErrorReply
	if err != nil {
		refusal = &proto.ErrorReply{Code: proto.CodeMalformed, Message: "bad hello: " + err.Error()}
	} else if refusal = t.checkHello(peer, &h); refusal == nil {
		refusal = t.authorize(ctx, peer)
	}
	if refusal != nil {
		// Tell the peer why, give it a moment to read the reply and close
		// itself, then close with the reason in case it did not.
		if writeFrame(s, proto.Envelope{Type: proto.MsgError}, refusal, t.cfg.MaxFrameSize) == nil {
			s.Close()
			select {
			case <-qc.Context().Done():
			case <-time.After(time.Second):
			case <-t.ctx.Done():
			}
		}
		qc.CloseWithError(quicCodeHandshake, refusal.Message)
		return peer, 0, refusal
	}
	// Nothing follows an accepted hello: give up the read side so that
	// quic-go frees the stream once answered, as the dialer does. (Not
	// for a refused one: the refusal must reach a dialer still writing.)
	s.CancelRead(quicCodeNone)
	if err := writeFrame(s, proto.Envelope{Type: proto.MsgHello}, t.hello(), t.cfg.MaxFrameSize); err != nil {
		qc.CloseWithError(quicCodeHandshake, "hello reply failed")
		return peer, 0, err
	}
	s.Close()
	peer.Instance = h.Instance
	return peer, int(h.MaxFrame), nil
}

// connKey is the key the connection calls to peer use is cached under.
// A node runs as one process at a time: "node/<name>", whichever run
// (adopt replaces a previous run's connection by a new run's). Any number
// of processes may hold one client identity at once, each reached only
// over the connections it opened: "<role>/<name>#<instance>".
func connKey(peer credentials.Identity) string {
	if peer.Role == proto.RoleNode || peer.Role == "" {
		return string(proto.RoleNode) + "/" + peer.Name
	}
	return fmt.Sprintf("%s#%x", peer, peer.Instance)
}

// adopt registers a connection that passed its handshake, caching it for
// calls if no live connection to the peer is cached. A connection from
// another run of a cached node (another Instance) replaces the cached one,
// and the connections to the old run are closed: a node name is one
// process at a time, this handshake shows the new run alive, so the old
// run is dead (killed and restarted), and calls on its connections would
// meet only silence or stateless resets until they idled out. It returns
// false (and closes c) if the transport is closed.
func (t *Transport) adopt(c *conn) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		c.qc.CloseWithError(quicCodeShutdown, t.self.String()+" is shutting down")
		return false
	}
	t.all[c] = struct{}{}
	key := connKey(c.peer)
	var stale []*conn
	switch old := t.conns[key]; {
	case old == nil || old.qc.Context().Err() != nil:
		t.conns[key] = c
	case c.peer.Role == proto.RoleNode && c.peer.Instance != 0 && old.peer.Instance != 0 && old.peer.Instance != c.peer.Instance:
		t.conns[key] = c
		for o := range t.all {
			if connKey(o.peer) == key && o.peer.Instance != c.peer.Instance {
				stale = append(stale, o)
			}
		}
	}
	t.mu.Unlock()
	for _, o := range stale {
		t.log.Info("closing connection to a previous run of a peer", "peer", o.peer.String(), "addr", o.addr)
		o.qc.CloseWithError(quicCodePeerGone, fmt.Sprintf("%s restarted: a new run of it connected", o.peer))
	}
	if t.cfg.OnConnection != nil {
		t.cfg.OnConnection(ConnEvent{Peer: c.peer, Addr: c.addr, Up: true})
	}
	return true
}

// forget drops a closed connection.
func (t *Transport) forget(c *conn) {
	t.mu.Lock()
	delete(t.all, c)
	t.uncacheLocked(c)
	t.mu.Unlock()
}

// uncacheLocked stops calls from using c; another live connection to the
// same process (both ends dialed at once) takes over. t.mu is held.
func (t *Transport) uncacheLocked(c *conn) {
	key := connKey(c.peer)
	if t.conns[key] != c {
		return
	}
	delete(t.conns, key)
	for o := range t.all {
		if o != c && o.peer == c.peer && o.qc.Context().Err() == nil {
			t.conns[key] = o
			break
		}
	}
}

// ClosePeer closes the connections to peer: those to the process that
// peer.Instance names, or, when it is 0, those to every process of peer's
// identity (a zero Role means a node). Calls and transfers in flight on
// them fail with ErrPeerLost and reason in the text; the next call dials
// the peer again. A node calls it when membership says that a peer failed,
// left or restarted: a connection to a dead process otherwise fails calls
// with silence or stateless resets until it idles out (Config.IdleTimeout).
// It returns how many connections it closed.
func (t *Transport) ClosePeer(peer credentials.Identity, reason string) int {
	if peer.Role == "" {
		peer.Role = proto.RoleNode
	}
	t.mu.Lock()
	var gone []*conn
	for c := range t.all {
		if c.peer.Role == peer.Role && c.peer.Name == peer.Name && (peer.Instance == 0 || c.peer.Instance == peer.Instance) {
			gone = append(gone, c)
		}
	}
	for _, c := range gone {
		delete(t.all, c)
	}
	for _, c := range gone {
		t.uncacheLocked(c)
	}
	t.mu.Unlock()
	for _, c := range gone {
		c.qc.CloseWithError(quicCodePeerGone, reason)
	}
	return len(gone)
}

// serve accepts the peer's streams on c until the connection closes. It
// runs on a goroutine counted in t.wg (the caller's).
func (t *Transport) serve(c *conn) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			s, err := c.qc.AcceptUniStream(t.ctx)
			if err != nil {
				return
			}
			t.wg.Add(1)
			go t.handleOneWay(c, s)
		}
	}()
	for {
		s, err := c.qc.AcceptStream(t.ctx)
		if err != nil {
			break
		}
		t.streamsIn.Add(1)
		t.wg.Add(1)
		go t.handleStream(c, s)
	}
	<-c.qc.Context().Done() // AcceptStream also fails when the transport closes
	cause := context.Cause(c.qc.Context())
	t.forget(c)
	if t.cfg.OnConnection != nil {
		t.cfg.OnConnection(ConnEvent{Peer: c.peer, Addr: c.addr, Err: cause})
	}
	c.abortAssemblies(&PeerError{Peer: c.peer, Addr: c.addr, Op: "receive pages from", Err: fmt.Errorf("%w: %v", ErrPeerLost, cause)})
	if t.ctx.Err() == nil {
		t.log.Info("connection closed", "peer", c.peer.String(), "error", cause)
	}
}

// ---- outbound ----

// conn returns a live connection to peer, dialing it if needed. Dials to
// the same peer are shared: concurrent callers wait for one dial, each
// within its own ctx.
func (t *Transport) conn(ctx context.Context, peer credentials.Identity) (*conn, error) {
	if peer.Role == "" {
		peer.Role = proto.RoleNode
	}
	key := connKey(peer)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	if c := t.conns[key]; c != nil && c.qc.Context().Err() == nil {
		t.mu.Unlock()
		return c, nil
	}
	if peer.Role != proto.RoleNode {
		t.mu.Unlock()
		return nil, &PeerError{Peer: peer, Op: "reach", Err: fmt.Errorf("%w: process %x of %s has no open connection to this node (it ended, or lost its connection): clients listen on no address, and a node reaches a client process only over a connection that process opened", ErrNoRoute, peer.Instance, peer)}
	}
	d := t.dials[key]
	if d == nil {
		d = &dialCall{done: make(chan struct{})}
		t.dials[key] = d
		t.wg.Add(1)
		go t.dialFor(peer, d)
	}
	t.mu.Unlock()
	select {
	case <-d.done:
		return d.c, d.err
	case <-ctx.Done():
		return nil, &PeerError{Peer: peer, Op: "dial", Err: context.Cause(ctx)}
	}
}

// dialFor runs one shared dial on the transport's context, so that a
// caller giving up does not fail the others waiting for the same peer.
func (t *Transport) dialFor(peer credentials.Identity, d *dialCall) {
	defer t.wg.Done()
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
	defer cancel()
	d.c, d.err = t.connect(ctx, peer, "")
	t.mu.Lock()
	delete(t.dials, connKey(peer))
	t.mu.Unlock()
	close(d.done)
	if d.c != nil {
		t.serve(d.c)
	}
}

// DialAddr connects to the node listening at addr, whatever its name, and
// returns its identity; later calls can address it by that identity. A
// client uses it to reach its first node. If a connection to that run of
// the node (same Instance) is open already, the new one is dropped and the
// old one kept; a new run replaces the old run's connections (see adopt).
func (t *Transport) DialAddr(ctx context.Context, addr string) (credentials.Identity, error) {
	t.mu.Lock()
	closed := t.closed
	if !closed {
		t.wg.Add(1)
	}
	t.mu.Unlock()
	if closed {
		return credentials.Identity{}, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	stop := context.AfterFunc(t.ctx, cancel)
	c, err := t.connect(ctx, credentials.Identity{}, addr)
	stop()
	cancel()
	if err != nil {
		t.wg.Done()
		return credentials.Identity{}, err
	}
	t.mu.Lock()
	if c.peer.Role == proto.RoleNode {
		t.reached[c.peer.Name] = addr
	}
	if old := t.conns[connKey(c.peer)]; old != nil && old != c && old.qc.Context().Err() == nil && old.peer.Instance == c.peer.Instance {
		t.mu.Unlock()
		c.qc.CloseWithError(quicCodeDuplicate, "duplicate connection")
		t.wg.Done()
		return c.peer, nil
	}
	t.mu.Unlock()
	if !t.adopt(c) {
		t.wg.Done()
		return credentials.Identity{}, ErrClosed
	}
	go func() {
		defer t.wg.Done()
		t.serve(c)
	}()
	return c.peer, nil
}

// connect dials a node (by name through Resolve, or at addr), runs the
// Hello exchange and, for a dial by name, registers the connection.
func (t *Transport) connect(ctx context.Context, want credentials.Identity, addr string) (*conn, error) {
	fail := func(err error) (*conn, error) {
		return nil, &PeerError{Peer: want, Addr: addr, Op: "dial", Err: err}
	}
	if addr == "" && t.cfg.Resolve == nil {
		t.mu.Lock()
		addr = t.reached[want.Name]
		t.mu.Unlock()
		if addr == "" {
			return fail(fmt.Errorf("%w: no address known (the transport has no Resolve func, and DialAddr never reached the node)", ErrNoRoute))
		}
	} else if addr == "" {
		var err error
		if addr, err = t.cfg.Resolve(ctx, want.Name); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrNoRoute, err))
		}
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrNoRoute, err))
	}
	tlsConf := t.creds.ClientTLS(func(id credentials.Identity) error {
		if want.Name != "" && id.Name != want.Name {
			return fmt.Errorf("%w: %s answered at %s where node %s was expected; membership may be stale", credentials.ErrUntrusted, id, addr, want.Name)
		}
		return nil
	})
	qc, err := t.qt.Dial(ctx, ua, tlsConf, t.qconf)
	if err != nil {
		return fail(classifyDialErr(ctx, err))
	}
	peer, maxFrame, err := t.offerHello(ctx, qc)
	if err != nil {
		code, msg := quic.ApplicationErrorCode(quicCodeHandshake), "handshake failed"
		var re *RemoteError
		if errors.As(err, &re) {
			code = quicCodeNone // the peer said why and waits for our close
		}
		qc.CloseWithError(code, msg)
		if peer.Name != "" {
			want = peer
		}
		return fail(err)
	}
	c := &conn{qc: qc, peer: peer, addr: addr, outbound: true, peerMaxFrame: maxFrame}
	if want.Name != "" && !t.adopt(c) {
		return nil, ErrClosed
	}
	t.log.Debug("connected to peer", "peer", peer.String(), "addr", addr)
	return c, nil
}

func classifyDialErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	var te *quic.TransportError
	if errors.As(err, &te) && te.ErrorCode.IsCryptoError() {
		return fmt.Errorf("%w: %v: check that both ends hold certificates issued by the same cluster CA", ErrTLS, err)
	}
	if errors.As(err, &te) && te.Remote && te.ErrorCode == quic.ConnectionRefused {
		return fmt.Errorf("%w: the peer refused the connection (shutting down?): %v", ErrNoRoute, err)
	}
	var he *quic.HandshakeTimeoutError
	var ie *quic.IdleTimeoutError
	if errors.As(err, &he) || errors.As(err, &ie) {
		return fmt.Errorf("%w: no answer (%v): is acpp-node running there, and is the UDP port open?", ErrNoRoute, err)
	}
	return err
}

// offerHello runs the dialer's side of the Hello exchange.
func (t *Transport) offerHello(ctx context.Context, qc *quic.Conn) (credentials.Identity, int, error) {
	peer, err := t.creds.PeerIdentity(qc.ConnectionState().TLS)
	if err != nil {
		return peer, 0, err
	}
	s, err := qc.OpenStreamSync(ctx)
	if err != nil {
		return peer, 0, classifyHelloErr(ctx, qc, err)
	}
	stop := context.AfterFunc(ctx, func() { s.CancelRead(quicCodeCanceled); s.CancelWrite(quicCodeCanceled) })
	defer stop()
	if err := writeFrame(s, proto.Envelope{Type: proto.MsgHello}, t.hello(), t.cfg.MaxFrameSize); err != nil {
		return peer, 0, classifyHelloErr(ctx, qc, err)
	}
	s.Close()
	env, body, err := readFrame(s, min(t.cfg.MaxFrameSize, helloMax))
	// Nothing follows the reply: giving up the read side lets quic-go free
	// the stream once the reply's end arrives. Read up to the reply only,
	// it kept the stream for the connection's life, one stream more than
	// the connection's calls and page streams account for.
	s.CancelRead(quicCodeNone)
	if err != nil {
		return peer, 0, classifyHelloErr(ctx, qc, err)
	}
	switch env.Type {
	case proto.MsgError:
		var er proto.ErrorReply
		if err := decodeBody(body, &er); err != nil {
			return peer, 0, err
		}
		return peer, 0, &RemoteError{Peer: peer, Type: proto.MsgHello, Code: er.Code, Message: er.Message}
	case proto.MsgHello:
	default:
		return peer, 0, fmt.Errorf("%w: hello answered with %v", ErrMalformed, env.Type)
	}
	var h proto.Hello
	if err := decodeBody(body, &h); err != nil {
		return peer, 0, err
	}
	if r := t.checkHello(peer, &h); r != nil {
		return peer, 0, &RemoteError{Peer: peer, Type: proto.MsgHello, Code: r.Code, Message: r.Message}
	}
	if r := t.authorize(ctx, peer); r != nil {
		return peer, 0, fmt.Errorf("%w: %s", ErrUnauthorized, r.Message)
	}
	peer.Instance = h.Instance
	return peer, int(h.MaxFrame), nil
}

// classifyHelloErr explains a failure during the Hello exchange. With TLS
// 1.3 the dialer finishes its handshake before the listener has checked
// the dialer's certificate, so a refused certificate shows up here.
func classifyHelloErr(ctx context.Context, qc *quic.Conn, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("hello: %w (%v)", context.Cause(ctx), err)
	}
	cause := err
	if qc.Context().Err() != nil {
		cause = context.Cause(qc.Context())
	}
	var te *quic.TransportError
	if errors.As(cause, &te) && te.ErrorCode.IsCryptoError() {
		return fmt.Errorf("%w: the peer refused this process's certificate (%v): use one issued by the cluster CA", ErrTLS, cause)
	}
	if errors.As(cause, &te) && te.Remote && te.ErrorCode == quic.ConnectionRefused {
		return fmt.Errorf("%w: the peer refused the connection (shutting down?): %v", ErrNoRoute, cause)
	}
	var ae0 *quic.ApplicationError
	if errors.As(cause, &ae0) && ae0.Remote && ae0.ErrorCode == quicCodeShutdown {
		return fmt.Errorf("%w: %s", ErrNoRoute, ae0.ErrorMessage)
	}
	var ae *quic.ApplicationError
	if errors.As(cause, &ae) && ae.Remote && ae.ErrorCode == quicCodeHandshake {
		return fmt.Errorf("%w: peer refused the connection: %s", ErrUnauthorized, ae.ErrorMessage)
	}
	return fmt.Errorf("hello: %w", cause)
}

// ---- stream helpers ----

// expectEOF reads the end of a stream whose content has been read, so that
// quic-go can retire it (a stream whose FIN was never read counts against
// the peer's stream limit).
func expectEOF(r io.Reader) error {
	var b [1]byte
	n, err := r.Read(b[:])
	if n > 0 {
		return fmt.Errorf("%w: data after the message", ErrMalformed)
	}
	if err == io.EOF {
		return nil
	}
	if err == nil {
		return expectEOF(r)
	}
	return err
}

// streamErr explains a failed stream operation with c's peer.
func (t *Transport) streamErr(ctx context.Context, c *conn, op string, err error) error {
	pe := &PeerError{Peer: c.peer, Addr: c.addr, Op: op}
	switch {
	case ctx.Err() != nil:
		pe.Err = context.Cause(ctx)
	case t.ctx.Err() != nil:
		pe.Err = ErrClosed
	case c.qc.Context().Err() != nil:
		pe.Err = fmt.Errorf("%w: %w", ErrPeerLost, context.Cause(c.qc.Context()))
	case isConnErr(err):
		pe.Err = fmt.Errorf("%w: %w", ErrPeerLost, err)
		// quic-go may fail the stream before it marks the connection
		// closed: keep the next call (Call's retry after a stateless
		// reset) from picking it again.
		t.mu.Lock()
		t.uncacheLocked(c)
		t.mu.Unlock()
	default:
		var se *quic.StreamError
		if errors.As(err, &se) && se.Remote && se.ErrorCode == quicCodeShutdown {
			pe.Err = fmt.Errorf("%w: %s is shutting down", ErrPeerLost, c.peer)
			// Its CONNECTION_CLOSE may still be on the way: stop using the
			// connection now, so that the next call dials again (a
			// restarted peer) instead of failing on this one.
			t.forget(c)
			c.qc.CloseWithError(quicCodeNone, "peer is shutting down")
		} else {
			pe.Err = err
		}
	}
	return pe
}

// isConnErr reports whether err ends the whole connection (as opposed to
// one stream); quic-go may fail a stream with it before the connection's
// context is cancelled.
func isConnErr(err error) bool {
	var (
		ae *quic.ApplicationError
		te *quic.TransportError
		ie *quic.IdleTimeoutError
		re *quic.StatelessResetError
		he *quic.HandshakeTimeoutError
	)
	return errors.As(err, &ae) || errors.As(err, &te) || errors.As(err, &ie) || errors.As(err, &re) || errors.As(err, &he)
}
