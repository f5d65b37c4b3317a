package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Cluster is this process's membership in a cluster: a running memberlist
// member with its metadata, the member table and event subscriptions.
// Start one with [Start]; all methods are safe for concurrent use.
type Cluster struct {
	cfg     Config // with defaults applied; read-only after Start
	log     *slog.Logger
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring // nil when encryption is off
	bootID  uint64

	ctx    context.Context
	cancel context.CancelCauseFunc

	// life orders lifecycle: Join, Leave and UpdateNode hold it shared for
	// their duration (each bounded by a timeout), Close exclusively, so
	// memberlist is never called after Shutdown (its Leave panics then).
	life   sync.RWMutex
	left   atomic.Bool
	closed atomic.Bool
	// joins tracks join attempts that outlive a Join call whose context
	// ended; Close waits for them before shutting memberlist down.
	joins sync.WaitGroup

	// metaMu serialises UpdateNode; metaBytes is what NodeMeta returns.
	metaMu    sync.Mutex
	meta      Meta
	metaBytes atomic.Pointer[[]byte]

	// mu guards the member table and the subscriptions. memberlist calls
	// the delegates with its own node lock held: nothing under mu calls
	// memberlist, blocks, or does I/O.
	mu struct {
		sync.Mutex
		closed   bool
		seq      uint64
		members  map[string]Member
		departed []string // names of departed members, oldest first
		subs     map[*Subscription]struct{}
		resyncs  uint64 // over all subscriptions, for Stats
	}

	logSub  *Subscription
	logDone chan struct{}

	// maintainStop and maintainDone own the maintenance loop (reconnect,
	// announce); conflict (capacity 1) wakes it when a peer knows this
	// member's name at another address.
	maintainStop chan struct{}
	maintainDone chan struct{}
	conflict     chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, starts a memberlist member that listens on
// cfg.BindAddr:cfg.BindPort, and joins cfg.Join if given (failing if none
// of those addresses can be joined). The returned Cluster runs until Close;
// call Leave first for a graceful departure. ctx bounds the start and the
// initial join only.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Cluster{
		cfg:    cfg,
		log:    cfg.Logger,
		bootID: cfg.BootID,
	}
	for c.bootID == 0 {
		c.bootID = rand.Uint64()
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("node", cfg.Name)
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.mu.members = map[string]Member{}
	c.mu.subs = map[*Subscription]struct{}{}
	c.conflict = make(chan struct{}, 1)

	c.meta = cfg.meta(c.bootID)
	b, err := c.meta.Encode()
	if err != nil { // Validate checked it; keep the error path anyway
		return nil, fmt.Errorf("%w: metadata: %v", ErrInvalidConfig, err)
	}
	c.metaBytes.Store(&b)

	mlc, err := c.memberlistConfig()
	if err != nil {
		return nil, err
	}
	// The logging subscription exists before memberlist so that our own
	// join is logged too.
	c.logSub = c.subscribe()
	c.logDone = make(chan struct{})
	go c.logEvents()

	fail := func(err error) (*Cluster, error) {
		c.logSub.Close()
		<-c.logDone
		c.cancel(ErrClosed)
		return nil, err
	}
	// We make the transport ourselves: memberlist leaks the one it makes
	// when Create fails after binding (e.g. no private IP to advertise).
	nt, err := listen(cfg.BindAddr, cfg.BindPort, mlc.Logger)
	if err != nil {
		return fail(&ListenError{Addr: net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), Err: err})
	}
	mlc.Transport = nt
	mlc.BindPort = nt.GetAutoBindPort()
	if cfg.AdvertisePort == 0 {
		mlc.AdvertisePort = mlc.BindPort
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		nt.Shutdown()
		return fail(&ListenError{Addr: net.JoinHostPort(cfg.BindAddr, strconv.Itoa(mlc.BindPort)), Advertise: true, Err: err})
	}
	c.ml = ml
	ln := ml.LocalNode()
	c.log.Info("gossip started", "addr", joinAddr(ln.Addr, ln.Port), "cluster", cfg.ClusterName,
		"encrypted", c.keyring != nil)

	if len(cfg.Join) > 0 {
		if err := c.joinAtStart(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.maintainStop = make(chan struct{})
	c.maintainDone = make(chan struct{})
	go c.maintain(c.maintainStop)
	return c, nil
}

// joinAtStart joins cfg.Join, retrying for cfg.JoinRetry while nobody can
// be joined. Its own address may be in the list (every node of a cluster
// may get the same list): when only that one answers, this member is the
// first of a new cluster, Start returns, and the maintenance loop keeps
// joining the other addresses every second (rejoinFast). A member that
// refuses this one's gossip key ends the retries at once (ErrGossipKey):
// waiting does not change keys.
func (c *Cluster) joinAtStart(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.JoinRetry)
	backoff := 100 * time.Millisecond
	for {
		n, err := c.join(ctx, false, c.cfg.Join...)
		if n > 0 && len(c.Members().Alive()) > 1 {
			if err != nil {
				c.log.Info("joined the cluster; some join addresses did not answer", "error", err)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrGossipKey) {
			return err
		}
		if n > 0 { // only our own address answered
			if err != nil {
				c.log.Info("no other member answers yet: starting a new cluster, and joining the others as they come up", "error", err)
			} else {
				c.log.Info("the join list holds only this member's own address: starting a new cluster")
			}
			return nil
		}
		if time.Now().Add(backoff).After(deadline) {
			if c.cfg.JoinRetry > 0 {
				return &JoinTimeoutError{Retry: c.cfg.JoinRetry, Err: err}
			}
			return err
		}
		c.log.Info("join failed, retrying", "in", backoff.String(), "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// meta builds the metadata the config describes.
func (c Config) meta(bootID uint64) Meta {
	c = c.withDefaults()
	return Meta{
		NodeID:          c.Name,
		BootID:          bootID,
		QUICAddr:        c.QUICAddr,
		ProtocolVersion: c.ProtocolVersion,
		Devices:         slices.Clone(c.Devices),
	}
}

func (c *Cluster) memberlistConfig() (*memberlist.Config, error) {
	cfg := c.cfg
	t := cfg.Timing
	mlc := memberlist.DefaultLANConfig()
	mlc.Name = cfg.Name
	mlc.Label = cfg.ClusterName
	mlc.BindAddr = cfg.BindAddr
	mlc.BindPort = cfg.BindPort
	mlc.AdvertiseAddr = cfg.AdvertiseAddr
	mlc.AdvertisePort = cfg.AdvertisePort // 0: the bound port, set in Start
	mlc.ProbeInterval = t.ProbeInterval
	mlc.ProbeTimeout = t.ProbeTimeout
	mlc.IndirectChecks = t.IndirectChecks
	mlc.SuspicionMult = t.SuspicionMult
	mlc.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	mlc.GossipInterval = t.GossipInterval
	mlc.GossipNodes = t.GossipNodes
	mlc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mlc.RetransmitMult = t.RetransmitMult
	mlc.PushPullInterval = t.PushPullInterval
	mlc.TCPTimeout = t.TCPTimeout
	// A member that restarts at another address (new port, rescheduled
	// container) may take its name back as soon as the old incarnation is
	// declared failed, as memberlist always allows after a leave. With
	// memberlist's default (never), the new address is refused until the
	// old entry is reaped and a push/pull happens to carry it: up to a
	// minute on a LAN. Names are also bound to node certificates (C6), so a
	// duplicate cannot use this to impersonate a node's QUIC endpoint.
	mlc.DeadNodeReclaimTime = time.Nanosecond
	if !cfg.InsecureNoEncryption {
		kr, err := memberlist.NewKeyring(cloneKeys(cfg.GossipKeys), bytes.Clone(cfg.GossipKeys[0]))
		if err != nil {
			return nil, fmt.Errorf("%w: GossipKeys: %v", ErrInvalidConfig, err)
		}
		c.keyring = kr
		mlc.Keyring = kr
		mlc.GossipVerifyIncoming = true
		mlc.GossipVerifyOutgoing = true
	}
	d := &delegate{c: c}
	mlc.Delegate = d
	mlc.Events = d
	mlc.Conflict = d
	mlc.Logger = log.New(&logWriter{log: c.log}, "", 0)
	return mlc, nil
}

// listen binds the gossip listeners (TCP and UDP on one port). With port 0
// the kernel picks the TCP port and UDP may find it taken: retry a few
// times, as memberlist does.
func listen(addr string, port int, logger *log.Logger) (*memberlist.NetTransport, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{addr},
			BindPort:  port,
			Logger:    logger,
		})
		if err == nil {
			return nt, nil
		}
	}
	return nil, err
}

func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}

// Name returns this member's name.
func (c *Cluster) Name() string { return c.cfg.Name }

// Addr returns this member's advertised gossip address: what other members
// pass to Join. With BindPort 0 it carries the port that was picked.
func (c *Cluster) Addr() netip.AddrPort {
	n := c.ml.LocalNode()
	return addrPort(n.Addr, n.Port)
}

// Config returns the configuration in use, with defaults applied.
func (c *Cluster) Config() Config { return c.cfg }

// Context returns a context that is cancelled when the Cluster is closed;
// context.Cause says why (ErrClosed).
func (c *Cluster) Context() context.Context { return c.ctx }

// LocalMeta returns the metadata this member advertises now.
func (c *Cluster) LocalMeta() Meta {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	return c.meta.Clone()
}

// Join joins the cluster through the given members ("host:port", or "host"
// for this member's gossip port), contacting them all at once. It returns
// how many could be joined; joining one is enough to learn every member.
// The error is a *JoinError (matching ErrJoin) listing each address that
// failed with its cause, even when others succeeded. Each address is tried
// for at most Timing.TCPTimeout; when ctx ends first, Join returns
// ctx.Err() and the attempts finish in the background (Close waits for
// them). Join can be called again at any time, e.g. to merge a partition.
func (c *Cluster) Join(ctx context.Context, addrs ...string) (int, error) {
	return c.join(ctx, true, addrs...)
}

// join is Join; warn logs each failed address as a warning (the
// maintenance loop and Start's retries log their own summary instead).
func (c *Cluster) join(ctx context.Context, warn bool, addrs ...string) (int, error) {
	if len(addrs) == 0 {
		return 0, fmt.Errorf("%w: Join needs at least one address (host:port of a running member)", ErrJoin)
	}
	if err := c.enter(); err != nil {
		return 0, err
	}
	defer c.life.RUnlock()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		c.joins.Add(1)
		wg.Add(1)
		go func() {
			defer c.joins.Done()
			defer wg.Done()
			errs[i] = c.joinOne(a)
		}()
	}
	all := make(chan struct{})
	c.joins.Add(1)
	go func() { // ends with the attempts, each bounded by TCPTimeout
		defer c.joins.Done()
		wg.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	je := &JoinError{Encrypted: c.keyring != nil}
	for i, err := range errs {
		if err != nil {
			je.Failed = append(je.Failed, AddrError{Addr: addrs[i], Err: err})
			if warn {
				c.log.Warn("join failed", "addr", addrs[i], "error", err)
			}
		} else {
			je.Joined++
		}
	}
	if len(je.Failed) > 0 {
		return je.Joined, je
	}
	return je.Joined, nil
}

func (c *Cluster) joinOne(addr string) error {
	if strings.TrimSpace(addr) == "" {
		return errors.New("empty address")
	}
	_, err := c.ml.Join([]string{addr})
	if err == nil {
		return nil
	}
	// memberlist returns a multierror of one; unwrap it for a one-line
	// message.
	var me interface{ WrappedErrors() []error }
	if errors.As(err, &me) && len(me.WrappedErrors()) == 1 {
		err = me.WrappedErrors()[0]
	}
	return markKeyMismatch(err)
}

// enter takes the lifecycle lock shared, failing if the member is closed or
// has left.
func (c *Cluster) enter() error {
	c.life.RLock()
	if c.closed.Load() {
		c.life.RUnlock()
		return ErrClosed
	}
	if c.left.Load() {
		c.life.RUnlock()
		return ErrLeft
	}
	return nil
}

// timeout turns ctx's deadline into a memberlist timeout, at most
// Timing.TCPTimeout.
func (c *Cluster) timeout(ctx context.Context) time.Duration {
	t := c.cfg.Timing.TCPTimeout
	if dl, ok := ctx.Deadline(); ok {
		t = min(t, max(time.Until(dl), time.Millisecond))
	}
	return t
}

// Leave departs gracefully. It first advertises Meta.Leaving and waits
// until that has been gossiped, so that peers classify the departure as
// StateLeft rather than StateFailed (and stop scheduling work here), then
// announces the leave and waits until the announcement has been gossiped.
// Both waits together take at most ctx's deadline, or Timing.TCPTimeout.
// The member keeps gossiping until Close, which should follow. Leaving twice
// is a no-op.
func (c *Cluster) Leave(ctx context.Context) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.left.Swap(true) {
		return nil
	}
	t := c.timeout(ctx)
	deadline := time.Now().Add(t)
	c.metaMu.Lock()
	m := c.meta.Clone()
	m.Leaving = true
	b, err := m.Encode() // one flag more than valid metadata: cannot fail
	if err == nil {
		c.meta = m
		c.metaBytes.Store(&b)
	}
	c.metaMu.Unlock()
	if err := c.ml.UpdateNode(t); err != nil {
		c.log.Debug("leaving flag not confirmed before the leave", "error", err)
	}
	rest := max(time.Until(deadline), 10*time.Millisecond)
	if err := c.ml.Leave(rest); err != nil {
		return fmt.Errorf("cluster: leave not confirmed by any member within %v (peers that missed it will see this node as failed instead of left): %w", t, err)
	}
	c.log.Info("left the cluster")
	return nil
}

// UpdateNode changes this member's metadata (devices, QUIC address,
// protocol version) and gossips it. update receives a copy of the current
// metadata to modify; NodeID and BootID cannot change. If the new metadata
// is invalid or larger than MetaMaxSize the error wraps ErrBadMeta or
// ErrMetaTooLarge and nothing changes. Otherwise the change applies locally
// at once and UpdateNode waits until it has been gossiped, or ctx's
// deadline (at most Timing.TCPTimeout) passes; the change spreads anyway.
func (c *Cluster) UpdateNode(ctx context.Context, update func(*Meta)) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.life.RUnlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	m := c.meta.Clone()
	update(&m)
	if m.NodeID != c.meta.NodeID || m.BootID != c.meta.BootID {
		return fmt.Errorf("%w: UpdateNode may not change NodeID or BootID (restart the node under a new name instead)", ErrBadMeta)
	}
	b, err := m.Encode()
	if err != nil {
		return err
	}
	c.meta = m
	c.metaBytes.Store(&b)
	t := c.timeout(ctx)
	if err := c.ml.UpdateNode(t); err != nil {
		return fmt.Errorf("cluster: metadata update applied but not confirmed by any member within %v; it will still spread: %w", t, err)
	}
	return nil
}

// UpdateDevices replaces the advertised device summary; see UpdateNode.
func (c *Cluster) UpdateDevices(ctx context.Context, devices []DeviceSummary) error {
	return c.UpdateNode(ctx, func(m *Meta) { m.Devices = slices.Clone(devices) })
}

// Members returns a consistent snapshot of the membership, this member
// included, sorted by name.
func (c *Cluster) Members() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshotLocked()
}

// Member looks one member up by name.
func (c *Cluster) Member(name string) (Member, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.mu.members[name]
	if !ok {
		return Member{}, false
	}
	return m.clone(), true
}

func (c *Cluster) snapshotLocked() Snapshot {
	s := Snapshot{Seq: c.mu.seq, Members: make([]Member, 0, len(c.mu.members))}
	for _, m := range c.mu.members {
		s.Members = append(s.Members, m.clone())
	}
	slices.SortFunc(s.Members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// Subscribe starts a subscription to membership events. Its Snapshot is
// the membership at this moment, and its events are exactly those after
// it. Close it when done; Close of the Cluster closes it too.
func (c *Cluster) Subscribe() *Subscription {
	return c.subscribe()
}

func (c *Cluster) subscribe() *Subscription {
	s := &Subscription{
		c:       c,
		ch:      make(chan Event),
		limit:   c.cfg.EventBuffer,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	c.mu.Lock()
	s.initial = c.snapshotLocked()
	if c.mu.closed {
		c.mu.Unlock()
		// A closed cluster gives a closed subscription.
		close(s.done)
		close(s.ch)
		close(s.stopped)
		s.closeOnce.Do(func() {})
		return s
	}
	c.mu.subs[s] = struct{}{}
	c.mu.Unlock()
	go s.run()
	return s
}

func (c *Cluster) unsubscribe(s *Subscription) {
	c.mu.Lock()
	delete(c.mu.subs, s)
	c.mu.Unlock()
}

// Close stops gossiping without a leave message (call Leave first for a
// graceful departure: otherwise peers detect this member as failed), closes
// every subscription and waits for this package's goroutines. It waits for
// in-flight Join, Leave and UpdateNode calls, each bounded by
// Timing.TCPTimeout. memberlist's own connection handlers end on their own
// within Timing.TCPTimeout after Close returns. Calling Close twice is safe.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.maintainStop != nil {
			// Before taking life: the loop may be inside Join, which holds
			// it shared until its context (cancelled by stop) ends.
			close(c.maintainStop)
			<-c.maintainDone
		}
		c.life.Lock()
		defer c.life.Unlock()
		c.joins.Wait()
		c.mu.Lock()
		c.mu.closed = true
		subs := make([]*Subscription, 0, len(c.mu.subs))
		for s := range c.mu.subs {
			subs = append(subs, s)
		}
		c.mu.Unlock()
		if err := c.ml.Shutdown(); err != nil {
			c.closeErr = fmt.Errorf("cluster: shut down gossip: %w", err)
		}
		for _, s := range subs {
			s.Close()
		}
		<-c.logDone
		c.cancel(ErrClosed)
	})
	return c.closeErr
}

// logEvents logs membership changes at info level, off memberlist's
// goroutines.
func (c *Cluster) logEvents() {
	defer close(c.logDone)
	for ev := range c.logSub.Events() {
		m := ev.Member
		switch ev.Type {
		case EventJoin, EventUpdate:
			args := []any{"member", m.Name, "addr", m.Addr.String()}
			if m.MetaErr != nil {
				c.log.Warn("member "+ev.Type.String()+" with unusable metadata", append(args, "error", m.MetaErr)...)
				continue
			}
			args = append(args, "quic", m.Meta.QUICAddr, "devices", formatDevices(m.Meta.Devices))
			if ev.Type == EventJoin {
				c.log.Info("member joined", args...)
			} else {
				c.log.Debug("member updated", args...)
			}
		case EventLeave:
			c.log.Info("member left", "member", m.Name, "addr", m.Addr.String())
		case EventFail:
			c.log.Warn("member failed", "member", m.Name, "addr", m.Addr.String())
		case EventResync:
			c.log.Debug("event log fell behind", "members", len(ev.Snapshot.Members))
		}
	}
}

func formatDevices(ds []DeviceSummary) string {
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(d.String())
	}
	return b.String()
}

// Gossip keys (C6). Each method acts on this member's keyring only: rotate
// a cluster's key by calling it on every member, in the order
// docs/CLUSTER.md gives (install everywhere, then use everywhere, then
// remove everywhere), or use SetKeys with the same list on every member at
// each step.

// InstallKey adds key to the keyring: this member then decrypts gossip
// encrypted with it, but still encrypts with the primary key.
func (c *Cluster) InstallKey(key []byte) error {
	if err := c.keyOp(key); err != nil {
		return err
	}
	if err := c.keyring.AddKey(bytes.Clone(key)); err != nil {
		return fmt.Errorf("%w: install: %v", ErrKey, err)
	}
	c.log.Info("gossip key installed", "key", KeyFingerprint(key))
	return nil
}

// UseKey makes an installed key the primary key, used to encrypt. Every
// member must have installed it first, or they cannot read this member.
func (c *Cluster) UseKey(key []byte) error {
	if err := c.keyOp(key); err != nil {
		return err
	}
	if err := c.keyring.UseKey(key); err != nil {
		return fmt.Errorf("%w: use key %s: %v; install it first", ErrKey, KeyFingerprint(key), err)
	}
	c.log.Info("gossip primary key changed", "key", KeyFingerprint(key))
	return nil
}

// RemoveKey drops a key that is not the primary key. Removing a key that
// is not installed is a no-op.
func (c *Cluster) RemoveKey(key []byte) error {
	if err := c.keyOp(key); err != nil {
		return err
	}
	if err := c.keyring.RemoveKey(key); err != nil {
		return fmt.Errorf("%w: remove key %s: %v; make another key primary first", ErrKey, KeyFingerprint(key), err)
	}
	c.log.Info("gossip key removed", "key", KeyFingerprint(key))
	return nil
}

// Keys returns copies of the installed keys, the primary key first.
func (c *Cluster) Keys() ([][]byte, error) {
	if c.keyring == nil {
		return nil, ErrEncryptionDisabled
	}
	return cloneKeys(c.keyring.GetKeys()), nil
}

// SetKeys makes the keyring hold exactly keys, with keys[0] primary: it
// installs the new ones, switches the primary key and removes the rest, in
// that order. It suits a key file that an operator edits and reloads on
// every member (see docs/CLUSTER.md for the three steps of a rotation).
func (c *Cluster) SetKeys(keys [][]byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: SetKeys needs at least one key", ErrKey)
	}
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("%w: keys[%d]: %v", ErrKey, i, err)
		}
	}
	for _, k := range keys {
		if err := c.InstallKey(k); err != nil {
			return err
		}
	}
	if err := c.UseKey(keys[0]); err != nil {
		return err
	}
	for _, k := range cloneKeys(c.keyring.GetKeys()) { // RemoveKey reuses the ring's array
		if !slices.ContainsFunc(keys, func(w []byte) bool { return bytes.Equal(w, k) }) {
			if err := c.RemoveKey(k); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cluster) keyOp(key []byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("%w: %v", ErrKey, err)
	}
	return nil
}

// Stats are counters for monitoring (acpp-node exports them as metrics).
type Stats struct {
	// Alive, Left and Failed count the members in the snapshot by state,
	// this member included.
	Alive, Left, Failed int
	// Events is the number of membership events so far (the last Seq).
	Events uint64
	// Resyncs counts subscription overflows (EventResync deliveries) over
	// all subscriptions so far: a reader that does not keep up.
	Resyncs uint64
	// HealthScore is memberlist's view of this member's own health: 0 is
	// healthy; higher means it is missing its probe deadlines (overloaded
	// or on a lossy network) and has slowed its probing.
	HealthScore int
}

// Stats returns the current counters.
func (c *Cluster) Stats() Stats {
	var s Stats
	c.mu.Lock()
	for _, m := range c.mu.members {
		switch m.State {
		case StateAlive:
			s.Alive++
		case StateLeft:
			s.Left++
		case StateFailed:
			s.Failed++
		}
	}
	s.Events = c.mu.seq
	s.Resyncs = c.mu.resyncs
	c.mu.Unlock()
	if c.ml != nil { // nil only in this package's table tests
		s.HealthScore = c.ml.GetHealthScore()
	}
	return s
}

// WaitFor blocks until cond holds for the membership, and returns the
// snapshot for which it held. cond is called with the current snapshot and
// again after every membership event, on the caller's goroutine. It returns
// ctx.Err() when ctx ends first, and ErrClosed when the Cluster is closed.
//
//	// wait until two nodes with GPUs are up
//	snap, err := c.WaitFor(ctx, func(s cluster.Snapshot) bool {
//		n := 0
//		for _, m := range s.Alive() {
//			if _, ok := m.Meta.Device(cluster.DeviceCUDA); ok { n++ }
//		}
//		return n >= 2
//	})
func (c *Cluster) WaitFor(ctx context.Context, cond func(Snapshot) bool) (Snapshot, error) {
	sub := c.Subscribe()
	defer sub.Close()
	snap := sub.Snapshot()
	for !cond(snap) {
		select {
		case _, ok := <-sub.Events():
			if !ok {
				return Snapshot{}, ErrClosed
			}
			snap = c.Members()
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		}
	}
	return snap, nil
}
