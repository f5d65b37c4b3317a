package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// Software is what the node announces in handshakes.
const Software = "acpp-node"

// Node is a running agent. Start it with Start, stop it with Drain and
// Close (or use Run, which does all three).
type Node struct {
	cfg  Config
	log  *slog.Logger
	devs *devices
	tr   *transport.Transport
	cl   *cluster.Cluster
	sub  *cluster.Subscription
	met  *metrics
	http *http.Server
	hln  net.Listener

	// ctx is cancelled by Close; every goroutine the node starts derives
	// from it and is counted in wg.
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	wgMu   sync.Mutex // guards stopping and wg.Add
	// stopping is set when Close starts waiting for wg.
	stopping bool

	// clp is cl, for the transport's callbacks, which may run before the
	// cluster has started.
	clp atomic.Pointer[cluster.Cluster]

	refs pageRefs // pages by reference between GPUs of this host (pageref.go)
	runs runSet   // the runs (boot IDs) of each peer seen in membership

	allocated atomic.Uint64 // bytes held by all jobs (allocations and staging)
	draining  atomic.Bool
	// ready is set once Start has joined the cluster: /healthz answers 503
	// "starting" until then, and the live view shows nothing (what it reads
	// is written by Start before ready, and read only after).
	ready atomic.Bool
	// stopped is set when Close begins (/healthz: 503 "stopped").
	stopped atomic.Bool

	mu     sync.Mutex // guards jobs and closed
	jobs   map[uint64]*job
	closed bool

	drainReq  drainRequest // an operator asked for a drain (drain.go)
	closeOnce sync.Once
	closeErr  error
}

// Run starts a node, serves until ctx is done, then drains (finishing or
// failing running instructions within Config.DrainTimeout), leaves the
// cluster and closes. It returns nil after a clean drain.
//
// A ctx that ends while Start still runs (a SIGTERM while the node waits
// for its --join addresses) is a clean stop too: Run logs "stopped before
// joining" and returns nil.
func Run(ctx context.Context, cfg Config) error {
	n, err := Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			log := cfg.Logger
			if log == nil {
				log = slog.New(slog.DiscardHandler)
			}
			log.Info("stopped before joining", "node", cfg.Name, "cause", context.Cause(ctx), "error", err)
			return nil
		}
		return err
	}
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case <-n.drainReq.ch:
			waiting = false
		case <-cfg.ReloadKeys:
			if err := n.ReloadGossipKeys(); err != nil {
				n.log.Error("gossip keys not reloaded", "error", err)
			}
		}
	}
	cause := context.Cause(ctx)
	if cause == nil {
		cause = errors.New("an operator asked for it (acpp-node drain)")
	}
	n.log.Info("draining", "cause", cause)
	dctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainTimeout+5*time.Second)
	defer cancel()
	derr := n.Drain(dctx)
	cerr := n.Close()
	return errors.Join(derr, cerr)
}

// Start opens the HTTP endpoint (first, so that a busy port is found at
// once and /healthz answers 503 "starting" meanwhile), the devices, the
// QUIC listener, and joins the cluster. ctx bounds the start only.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), jobs: map[uint64]*job{}, refs: pageRefs{host: hostID()}}
	n.drainReq.init()
	n.ctx, n.cancel = context.WithCancelCause(context.Background())
	ok := false
	defer func() {
		if !ok {
			n.Close()
		}
	}()
	n.met = newMetrics(n.clp.Load)
	if cfg.HTTPAddr != "" {
		if err := n.startHTTP(); err != nil {
			return nil, err
		}
	}
	creds, keys, err := loadSecrets(cfg)
	if err != nil {
		return nil, err
	}
	n.logCertificate(creds)
	if n.devs, err = openDevices(ctx, cfg); err != nil {
		return nil, err
	}
	n.met.addDevicesLost(func() int { return len(n.devs.lost()) })
	for _, m := range n.devs.mems {
		n.met.addMemory(m)
		if m.host {
			n.log.Info("memory budget", "memory", m.id, "device", m.dev.Info().ID, "host", true, "size", device.FormatBytes(m.bytes), "size_from", n.devs.hostSize, "budget", budgetStr(m.budget), "how", m.budget.How(), "max_bytes", cfg.memoryLimit())
			continue
		}
		n.log.Info("memory budget", "memory", m.id, "device", m.dev.Info().ID, "size", device.FormatBytes(m.bytes), "budget", budgetStr(m.budget), "how", m.budget.How(), "max_bytes", cfg.memoryLimit())
	}
	if cfg.NoMemoryBudget {
		n.log.Warn("memory budgets are off (--max-bytes 0): a buffer larger than this machine's memory crashes the node")
	}
	n.tr, err = transport.Start(transport.Config{
		Credentials: creds,
		ListenAddr:  cfg.QUICAddr,
		Resolve:     n.resolve,
		Authorize:   n.authorize,
		Software:    Software,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.registerHandlers()
	n.met.addHandlerPanics(n.tr.Panics)

	cc := cfg.Cluster
	cc.Name = cfg.Name
	if creds.Identity.Cluster != "" {
		cc.ClusterName = creds.Identity.Cluster
	}
	cc.GossipKeys = keys
	cc.QUICAddr = advertised(n.tr.Addr(), cfg)
	cc.ProtocolVersion = proto.Version
	// One number names this run in membership and in QUIC handshakes, so
	// that peers close the connections of exactly the run that is gone.
	cc.BootID = n.tr.Identity().Instance
	cc.Devices = n.devs.summary()
	cc.Join = cfg.Join
	cc.Logger = cfg.Logger
	if cfg.GossipAddr != "" {
		host, port, _ := net.SplitHostPort(cfg.GossipAddr)
		cc.BindAddr = host
		if _, err := fmt.Sscan(port, &cc.BindPort); err != nil {
			return nil, fmt.Errorf("%w: GossipAddr port %q: %v", ErrInvalidConfig, port, err)
		}
	}
	if cfg.AdvertiseAddr != "" {
		cc.AdvertiseAddr = cfg.AdvertiseAddr
	}
	if n.cl, err = cluster.Start(ctx, cc); err != nil {
		return nil, clusterStartError(err, cfg, cc)
	}
	n.clp.Store(n.cl)
	n.sub = n.cl.Subscribe()
	n.met.members.Set(float64(len(n.sub.Snapshot().Alive())))
	n.wg.Add(2)
	go n.watchMembers()
	go n.reapLeases()
	if n.devs.canLose() {
		n.wg.Add(1)
		go n.watchDevices()
	}
	n.ready.Store(true)
	http := n.HTTPAddr() // the port chosen, with --http-addr HOST:0
	if http == "" {
		http = "off"
	}
	n.log.Info("node started", "quic", cc.QUICAddr, "gossip", n.cl.Addr().String(), "http", http, "devices", len(n.devs.list), "memories", len(n.devs.mems))
	ok = true
	return n, nil
}

func loadSecrets(cfg Config) (*credentials.Credentials, [][]byte, error) {
	creds, keys := cfg.Credentials, cfg.GossipKeys
	var err error
	if creds == nil {
		if creds, err = credentials.LoadNode(cfg.CredentialsDir, cfg.Name); err != nil {
			hint := fmt.Sprintf(" (issue them with `acpp-node credentials node %s`)", cfg.Name)
			if errors.Is(err, credentials.ErrInsecureKey) {
				hint = "" // the error says what to do: chmod the key
			}
			return nil, nil, fmt.Errorf("node: load credentials of node %q from %s: %w%s", cfg.Name, cfg.CredentialsDir, err, hint)
		}
	}
	if len(keys) == 0 {
		if keys, err = loadGossipKeys(filepath.Join(cfg.CredentialsDir, credentials.GossipKeyFile)); err != nil {
			return nil, nil, fmt.Errorf("node: %w", err)
		}
	}
	if creds.Identity.Name != cfg.Name {
		return nil, nil, fmt.Errorf("%w: the certificate is that of %s, the node is named %q", ErrInvalidConfig, creds.Identity, cfg.Name)
	}
	return creds, keys, nil
}

// certWarnBefore is how long before its certificate expires a node warns
// at start.
const certWarnBefore = 30 * 24 * time.Hour

// logCertificate logs when the node's certificate expires (a warning when
// less than certWarnBefore is left, an error once it has) and exports the
// time left as a metric.
func (n *Node) logCertificate(creds *credentials.Credentials) {
	if creds.NotAfter.IsZero() {
		return
	}
	n.met.addCertificate(creds.NotAfter)
	left := time.Until(creds.NotAfter)
	args := []any{"identity", creds.Identity.String(), "not_after", creds.NotAfter.UTC().Format(time.RFC3339), "left", left.Round(time.Hour).String()}
	hint := fmt.Sprintf("re-issue it (acpp-node credentials node %s) and restart the node: docs/OPERATIONS.md, \"Renewing certificates\"", n.cfg.Name)
	switch {
	case left <= 0:
		n.log.Error("node certificate has expired: peers and clients refuse it; "+hint, args...)
	case left < certWarnBefore:
		n.log.Warn("node certificate expires soon: "+hint, args...)
	default:
		n.log.Info("node certificate", args...)
	}
}

// clusterStartError words cluster.Start's failures in acpp-node's terms:
// the flag to change rather than the cluster.Config field.
func clusterStartError(err error, cfg Config, cc cluster.Config) error {
	var le *cluster.ListenError
	var te *cluster.JoinTimeoutError
	switch {
	case errors.As(err, &le) && le.Advertise:
		return fmt.Errorf("node: start gossip on %s: %v; no address to advertise to peers was found: set --advertise-addr", le.Addr, le.Err)
	case errors.As(err, &le):
		return fmt.Errorf("node: gossip address %s: %v; another process (another acpp-node?) may have the port: pick a free one with --gossip-addr", le.Addr, le.Err)
	case errors.Is(err, cluster.ErrGossipKey):
		key := "Config.GossipKeys"
		if cfg.CredentialsDir != "" && len(cfg.GossipKeys) == 0 {
			key = filepath.Join(cfg.CredentialsDir, credentials.GossipKeyFile)
		}
		return fmt.Errorf("node: the cluster refuses this node's gossip key (%s is not the cluster's): %w", key, err)
	case errors.As(err, &te):
		return fmt.Errorf("node: joined no member of --join within --join-retry %v: %w", cc.JoinRetry, te.Err)
	}
	return fmt.Errorf("node: %w", err)
}

// advertised is the QUIC address peers dial: the bound one, with an
// unspecified host replaced by something routable.
func advertised(a net.Addr, cfg Config) string {
	ua, ok := a.(*net.UDPAddr)
	if !ok {
		return a.String()
	}
	port := fmt.Sprint(ua.Port)
	if !ua.IP.IsUnspecified() {
		return net.JoinHostPort(ua.IP.String(), port)
	}
	if cfg.AdvertiseAddr != "" {
		return net.JoinHostPort(cfg.AdvertiseAddr, port)
	}
	if h, _, err := net.SplitHostPort(cfg.GossipAddr); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() {
		return net.JoinHostPort(h, port)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsPrivate() {
				return net.JoinHostPort(ipn.IP.String(), port)
			}
		}
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// QUICAddr is the address clients dial.
func (n *Node) QUICAddr() string { return n.cl.LocalMeta().QUICAddr }

// GossipAddr is the address other nodes join.
func (n *Node) GossipAddr() string { return n.cl.Addr().String() }

// HTTPAddr is the bound address of the metrics and health endpoint ("" if
// none).
func (n *Node) HTTPAddr() string {
	if n.hln == nil {
		return ""
	}
	return n.hln.Addr().String()
}

// Cluster is the node's membership.
func (n *Node) Cluster() *cluster.Cluster { return n.cl }

// Jobs is the number of open jobs.
func (n *Node) Jobs() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.jobs)
}

// Allocated is the number of bytes jobs hold on this node.
func (n *Node) Allocated() uint64 { return n.allocated.Load() }

func (n *Node) resolve(_ context.Context, name string) (string, error) {
	cl := n.clp.Load()
	if cl == nil {
		return "", fmt.Errorf("node %s: membership not started yet", n.cfg.Name)
	}
	m, ok := cl.Member(name)
	if !ok || !m.Usable() || m.Meta.QUICAddr == "" {
		return "", fmt.Errorf("node %s is not a live member of the cluster", name)
	}
	return m.Meta.QUICAddr, nil
}

// authorize admits clients and operators holding a certificate of the
// cluster CA and nodes that are live members (C6). A node that has just
// joined may not have reached this member's view yet: wait for it a little.
func (n *Node) authorize(ctx context.Context, peer credentials.Identity) error {
	if peer.IsClient() {
		return nil
	}
	if peer.Role != proto.RoleNode {
		return fmt.Errorf("unknown role %q", peer.Role)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		if cl := n.clp.Load(); cl != nil {
			if m, ok := cl.Member(peer.Name); ok && m.State == cluster.StateAlive {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("node %s is not a member of this cluster (join it with the cluster's gossip key first)", peer.Name)
		}
		select {
		case <-ctx.Done():
		case <-n.ctx.Done():
			return ErrClosed
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// peerGone reports whether run boot of peer (any run: 0) is known to
// have failed or left, and how. unseen is set instead when membership has
// not shown run boot yet while it shows another run of peer, or none: a
// run newer than any this node has seen (the coordinator learnt its boot
// ID from the run itself), whose news has not come. Such a run is not
// gone; a Send to it waits for the news (awaitRun), a Recv for its pages.
func (n *Node) peerGone(name string, boot uint64) (how string, gone, unseen bool) {
	cl := n.clp.Load()
	if cl == nil {
		return "is unknown: this node has no membership", true, false
	}
	m, ok := cl.Member(name)
	if !ok {
		if boot != 0 && !n.runs.seen(name, boot) {
			return "", false, true
		}
		return "is not a member of the cluster", true, false
	}
	var cur uint64 // the boot ID of the run membership shows (0: unreadable)
	if m.MetaErr == nil {
		cur = m.Meta.BootID
		n.runs.note(name, cur)
	}
	if boot != 0 && cur != 0 && cur != boot {
		if n.runs.seen(name, boot) {
			return "restarted", true, false // run boot was seen, and another run came after it
		}
		return "", false, true
	}
	switch m.State {
	case cluster.StateFailed:
		return "failed", true, false
	case cluster.StateLeft:
		return "left", true, false
	}
	return "", false, false
}

// awaitRun waits until membership shows run boot of peer name, which
// peerGone found unseen, and reports whether that run is gone by then. It
// returns ctx's cause if ctx ends first (the job closed, or the run was
// reported lost meanwhile).
func (n *Node) awaitRun(ctx context.Context, name string, boot uint64) (string, bool, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		how, gone, unseen := n.peerGone(name, boot)
		if !unseen {
			return how, gone, nil
		}
		select {
		case <-ctx.Done():
			return "", false, context.Cause(ctx)
		case <-n.ctx.Done():
			return "", false, ErrClosed
		case <-t.C:
		}
	}
}

// maxRuns bounds the boot IDs runSet keeps per member.
const maxRuns = 16

// runSet records the boot IDs of the runs of each member this node has
// seen in membership, the newest last.
type runSet struct {
	mu sync.Mutex
	m  map[string][]uint64
}

func (r *runSet) note(name string, boot uint64) {
	if boot == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string][]uint64{}
	}
	l := r.m[name]
	if len(l) > 0 && l[len(l)-1] == boot {
		return
	}
	l = append(slices.DeleteFunc(l, func(b uint64) bool { return b == boot }), boot)
	if len(l) > maxRuns {
		l = l[len(l)-maxRuns:]
	}
	r.m[name] = l
}

func (r *runSet) seen(name string, boot uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.m[name], boot)
}

func (n *Node) watchMembers() {
	defer n.wg.Done()
	// boots is the boot ID each member had when last seen alive: a member
	// that comes back under the same name with another boot ID restarted,
	// and the pages its previous run was to send will never come. (cluster/
	// reports such a restart as a failure and a join already; this catches
	// it after a resync too.)
	boots := map[string]uint64{}
	addrs := map[string]string{} // QUIC address of each member's run
	alive := func(m cluster.Member) {
		if m.MetaErr != nil || m.Meta.BootID == 0 {
			return
		}
		n.runs.note(m.Name, m.Meta.BootID)
		if old, ok := boots[m.Name]; ok && old != m.Meta.BootID {
			n.peerLost(m.Name, old, "restarted")
			n.closeConns(m.Name, old, "restarted")
		} else if ok && addrs[m.Name] != m.Meta.QUICAddr {
			n.closeConns(m.Name, old, "moved to "+m.Meta.QUICAddr)
		}
		boots[m.Name], addrs[m.Name] = m.Meta.BootID, m.Meta.QUICAddr
	}
	gone := func(m cluster.Member, how string) {
		delete(boots, m.Name)
		delete(addrs, m.Name)
		var boot uint64 // 0: every run, when the metadata is unreadable
		if m.MetaErr == nil {
			boot = m.Meta.BootID
			n.runs.note(m.Name, boot)
		}
		n.peerLost(m.Name, boot, how)
		n.closeConns(m.Name, boot, how)
	}
	for _, m := range n.sub.Snapshot().Alive() {
		alive(m)
	}
	for {
		select {
		case <-n.ctx.Done():
			return
		case ev, ok := <-n.sub.Events():
			if !ok {
				return
			}
			switch ev.Type {
			case cluster.EventJoin, cluster.EventUpdate:
				alive(ev.Member)
			case cluster.EventFail:
				gone(ev.Member, "failed")
			case cluster.EventLeave:
				gone(ev.Member, "left")
			case cluster.EventResync:
				for _, m := range ev.Snapshot.Members {
					switch m.State {
					case cluster.StateFailed:
						gone(m, "failed")
					case cluster.StateLeft:
						gone(m, "left")
					case cluster.StateAlive:
						alive(m)
					}
				}
			}
			n.met.members.Set(float64(len(n.cl.Members().Alive())))
		}
	}
}

// peerLost fails the instructions of every job that wait on run boot of
// peer name (on any run of it: boot 0).
func (n *Node) peerLost(name string, boot uint64, how string) {
	if name == n.cfg.Name {
		return
	}
	n.log.Warn("peer lost: failing instructions that wait on it", "peer", name, "boot", fmt.Sprintf("%x", boot), "how", how)
	for _, j := range n.jobList() {
		j.peerLost(name, boot, how)
	}
}

// closeConns closes the QUIC connections to run boot of peer name (every
// run if boot is 0), which membership says is gone: a connection to a dead
// process fails the next calls and page transfers with silence or
// stateless resets until it idles out (15 s), and a node restarted at once
// under the same name would be unusable for the first jobs. The next call
// dials the member's current run.
func (n *Node) closeConns(name string, boot uint64, how string) {
	if name == n.cfg.Name {
		return
	}
	id := credentials.Node(name)
	id.Instance = boot
	if k := n.tr.ClosePeer(id, fmt.Sprintf("node %s %s (seen by %s)", name, how, n.cfg.Name)); k > 0 {
		n.log.Info("closed connections to a peer's previous run", "peer", name, "how", how, "connections", k)
	}
}

func (n *Node) jobList() []*job {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*job, 0, len(n.jobs))
	for _, j := range n.jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

func (n *Node) reapLeases() {
	defer n.wg.Done()
	tick := min(n.cfg.JobLease/4, time.Second)
	t := time.NewTicker(max(tick, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			for _, j := range n.jobList() {
				if lease, silent := j.expired(now); silent {
					n.log.Warn("job lease expired: freeing what it held", "job", jobID(j.id), "client", j.owner.Name, "lease", lease.String())
					n.closeJob(j, fmt.Errorf("node %s: lease of job %d expired: its client %s was silent for %v", n.cfg.Name, j.id, j.owner.Name, lease))
				}
			}
		}
	}
}

// deviceWatch is how often watchDevices looks for lost devices.
var deviceWatch = 500 * time.Millisecond

// watchDevices notices a device lost while the node runs (a GPU whose
// CUDA context a job's faulting kernel made unusable: nothing can run
// there until the process restarts). It logs each loss once and gossips
// the devices left, so that jobs opened from then on place nothing there;
// /healthz and /metrics report the loss (they ask the devices themselves).
func (n *Node) watchDevices() {
	defer n.wg.Done()
	t := time.NewTicker(deviceWatch)
	defer t.Stop()
	seen := map[string]bool{}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		fresh := false
		for _, l := range n.devs.lost() {
			if !seen[l.id] {
				seen[l.id], fresh = true, true
				n.log.Error("device lost: it runs nothing more until acpp-node restarts; jobs using it fail, new jobs do not see it", "device", l.id, "error", l.err)
			}
		}
		if fresh {
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			if err := n.cl.UpdateDevices(ctx, n.devs.summary()); err != nil {
				n.log.Warn("gossiping the devices left after a loss", "error", err)
			}
			cancel()
		}
	}
}

// goFunc runs f on a goroutine owned by the node; once Close waits for
// the node's goroutines, it runs f on the caller's instead (a late device
// callback), so that Close never races with a new goroutine.
func (n *Node) goFunc(f func()) {
	n.wgMu.Lock()
	if n.stopping {
		n.wgMu.Unlock()
		f()
		return
	}
	n.wg.Add(1)
	n.wgMu.Unlock()
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// reserve admits bytes in memory m against m's budget and the node's
// total (MaxBytes); what names the allocation in the error.
func (n *Node) reserve(m *memory, bytes uint64, what string) error {
	if err := m.budget.Reserve(bytes, what, m.name()); err != nil {
		var be *device.BudgetError
		if errors.As(err, &be) {
			be.Hint = fmt.Sprintf("the node refused it and serves other jobs; use smaller buffers or more nodes, free buffers, or raise acpp-node --max-bytes (now %s)", n.cfg.memoryLimit())
		}
		return fmt.Errorf("%w: node %s: %w", ErrMemoryLimit, n.cfg.Name, err)
	}
	for {
		cur := n.allocated.Load()
		if n.cfg.MaxBytes != 0 && cur+bytes > n.cfg.MaxBytes {
			m.budget.Release(bytes)
			return fmt.Errorf("%w: %s: %d more bytes would make %d of the node's %d (--max-bytes)", ErrMemoryLimit, what, bytes, cur+bytes, n.cfg.MaxBytes)
		}
		if n.allocated.CompareAndSwap(cur, cur+bytes) {
			n.met.allocBytes.Set(float64(cur + bytes))
			return nil
		}
	}
}

func (n *Node) release(m *memory, bytes uint64) {
	m.budget.Release(bytes)
	v := n.allocated.Add(-bytes)
	n.met.allocBytes.Set(float64(v))
}

// Drain stops taking jobs, advertises that the node leaves (members see
// it Leaving), and gives the jobs' clients until ctx ends or
// Config.DrainTimeout passes to move the pages only this node holds and
// close their jobs here; it still runs their instructions meanwhile.
// Then it waits for running instructions, closes the jobs left (failing
// what is pending) and leaves the cluster.
func (n *Node) Drain(ctx context.Context) error {
	if n.draining.Swap(true) {
		return nil
	}
	n.met.drains.Inc()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.DrainTimeout)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	if len(n.jobList()) > 0 {
		uctx, ucancel := context.WithTimeout(ctx, 2*time.Second)
		if err := n.cl.UpdateNode(uctx, func(m *cluster.Meta) { m.Leaving = true }); err != nil {
			n.log.Warn("drain: leaving flag not gossiped yet", "error", err)
		}
		ucancel()
		open := len(n.jobList())
		n.log.Info("drain: waiting for clients to hand over their pages", "jobs", open, "timeout", n.cfg.DrainTimeout.String())
	handover:
		for {
			left := len(n.jobList())
			if left == 0 {
				break
			}
			select {
			case <-ctx.Done():
				n.log.Warn("drain: clients did not release their jobs in time", "jobs", left)
				break handover
			case <-t.C:
			}
		}
		n.met.handedOver.Add(float64(open - len(n.jobList())))
	}
wait:
	for {
		busy := 0
		for _, j := range n.jobList() {
			busy += j.busy()
		}
		if busy == 0 {
			break
		}
		select {
		case <-ctx.Done():
			n.log.Warn("drain deadline passed: failing running instructions", "running", busy)
			break wait
		case <-t.C:
		}
	}
	for _, j := range n.jobList() {
		n.closeJob(j, fmt.Errorf("node %s is shutting down", n.cfg.Name))
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer lcancel()
	alone := len(n.cl.Members().Alive()) <= 1
	if err := n.cl.Leave(lctx); err != nil {
		if alone {
			n.log.Info("left the cluster as its last member")
		} else {
			n.log.Warn("leave not confirmed", "error", err)
		}
	}
	return nil
}

// Close stops everything the node runs, without draining: jobs are closed,
// the cluster is left abruptly (peers see a failure), devices are closed.
// Calling it twice is safe.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.stopped.Store(true)
		n.ready.Store(false)
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		for _, j := range n.jobList() {
			n.closeJob(j, ErrClosed)
		}
		n.cancel(ErrClosed)
		var errs []error
		if n.http != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			errs = append(errs, n.http.Shutdown(sctx))
			cancel()
		}
		if n.sub != nil {
			n.sub.Close()
		}
		if n.tr != nil {
			errs = append(errs, n.tr.Close())
		}
		n.wgMu.Lock()
		n.stopping = true
		n.wgMu.Unlock()
		n.wg.Wait()
		if n.cl != nil {
			errs = append(errs, n.cl.Close())
		}
		if n.devs != nil {
			errs = append(errs, n.devs.close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// Inventory is the node's inventory as MsgInventory returns it.
func (n *Node) Inventory() *proto.Inventory {
	devs, mems, lost := n.devs.inventory()
	n.mu.Lock()
	jobs := make([]*job, 0, len(n.jobs))
	for _, j := range n.jobs {
		jobs = append(jobs, j)
	}
	n.mu.Unlock()
	list := make([]proto.JobInv, 0, len(jobs))
	for _, j := range jobs {
		j.mu.Lock()
		list = append(list, proto.JobInv{ID: j.id, Client: j.owner.Name, Bytes: j.bytes, Allocs: len(j.allocs), Pending: j.pending, Running: j.running, Known: len(j.instrs)})
		j.mu.Unlock()
	}
	sort.Slice(list, func(a, b int) bool { return list[a].ID < list[b].ID })
	return &proto.Inventory{
		Node: n.cfg.Name, Devices: devs, Memories: mems, Jobs: len(jobs), Allocated: n.allocated.Load(),
		MaxBytes: n.cfg.MaxBytes, MaxJobBytes: n.cfg.MaxJobBytes, Kernels: device.Kernels.Names(), Draining: n.draining.Load(),
		KernelDecls: kernelDecls(device.Kernels), JobList: list, Lost: lost,
	}
}

// kernelDecls declares the kernels of r for the inventory: parameters and
// forms ("go", "ptx" for PTX or CUDA C).
func kernelDecls(r *device.Registry) []proto.KernelDecl {
	var out []proto.KernelDecl
	for _, name := range r.Names() {
		k, err := r.Lookup(name)
		if err != nil {
			continue
		}
		out = append(out, proto.KernelDecl{Name: name, Params: proto.ParamsOf(k.Params), Forms: formsOf(k)})
	}
	return out
}

// formsOf names the forms k has, as device kinds' forms are named.
func formsOf(k *device.Kernel) []string {
	var f []string
	if k.Has(device.FormGo) {
		f = append(f, device.FormGo.String())
	}
	if k.Has(device.FormPTX) {
		f = append(f, device.FormPTX.String())
	}
	return f
}
