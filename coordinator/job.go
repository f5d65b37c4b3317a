package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// ClientNode is the page directory's node ID of the client itself: the
// host data a buffer was created with, and the pages host reads bring
// back, are the allocation AllocID{Node: ClientNode, Mem: HostMem}. Copies
// from it become InstrUpload (+ nodeclient.Job.Upload); copies to it become
// InstrReadBack. Nodes are 1…N in Config.Nodes order.
const ClientNode coherence.NodeID = 0

var clientAlloc = coherence.AllocID{Node: ClientNode, Mem: coherence.HostMem}

// GroupID names a command group of a job (coherence.CGID): IDs grow in
// submission order.
type GroupID = coherence.CGID

// Device is one device of one node that a job may use.
type Device struct {
	Node string // node name
	ID   string // "kind:index" on that node ("cpu:0", "cuda:1")
	Kind string // "cpu", "cuda"
	// Mem is the node-local memory its kernels use (0: host memory).
	Mem         uint32
	Forms       []string // kernel forms it runs ("go", "ptx")
	HostUnified bool
	MemBytes    uint64

	node    *nodeState
	lost    bool // guarded by Job.mu
	leaving bool // its node drains: no new work (guarded by Job.mu)
}

// String is "node/kind:index".
func (d Device) String() string { return d.Node + "/" + d.ID }

// Job is a job open on a set of nodes. Create it with Open, end it with
// Close. Its methods are safe for concurrent use.
type Job struct {
	cfg       Config
	log       *slog.Logger
	cl        *nodeclient.Client
	ownClient bool         // cl was started by Open, and Close closes it
	nodes     []*nodeState // index = NodeID-1
	byName    map[string]*nodeState
	devices   []*Device
	devByID   map[string]int
	start     time.Time

	ctx    context.Context // the job's life: Close cancels it
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // long-lived goroutines: membership watch, recovery, checkpoints
	closed sync.Once
	events nodeEvents // to Config.OnNodeEvent

	// ep is the current epoch (guarded by mu): the node jobs, goroutines
	// and page directory since the job opened or last recovered.
	ep *epoch

	mu      sync.Mutex // guards everything below, and the guarded fields of nodeState, groupState and Device
	core    *coherence.Core
	nextCG  GroupID
	nextBuf coherence.BufferID
	bufs    map[coherence.BufferID]*Buffer
	live    map[GroupID]*groupState
	err     error         // the job's failure; set once
	changed chan struct{} // closed and replaced when groups complete, batches go out, or the job fails
	// notifying counts completed groups whose traces OnGroupDone has not
	// had yet: Wait waits for them too, so that a caller that completes
	// its own events there sees them done when Wait returns.
	notifying int
	gated     int // entries in outboxes waiting for a gate
	est       estimator
	queued    []float64 // per device: estimated seconds of work placed and not finished
	pending   []int     // per device: groups placed and not finished
	rr        int
	stats     Stats
	lineage   map[coherence.BufferID][]writeRec
	shipped   map[string]*device.Kernel // kernels RegisterKernels shipped to the nodes, by name
	res       resilience                // recovery, checkpoints, the op log (recover.go)
}

// nodeState is one node of a job.
type nodeState struct {
	id   coherence.NodeID
	name string
	addr string
	inv  *proto.Inventory
	nj   *nodeclient.Job
	wake chan struct{} // capacity 1: something was queued or a gate may have opened

	// Guarded by Job.mu.
	nextInstr uint64
	// low: every instruction below it finished (seen on the feed);
	// forgot: the last mark set for Submit.Forget (forgetLocked);
	// forgetMark: that mark, until the sender sends it.
	low, forgot, forgetMark uint64
	outbox                  []*entry
	enqSeq                  uint64 // seq of the last entry queued
	subSeq                  uint64 // seq of the last entry submitted
	instrs                  map[uint64]instrRef
	// catchingUp: a catchUp of this node's instructions is in flight.
	catchingUp atomic.Bool
	lost       bool
	lastDone   map[int]time.Time // per device: when its last kernel finished
	lastEnd    map[int]int64     // per device: when its last kernel finished, node clock (Unix ns)
	lastSeen   time.Time         // the node's last answer on its completion feed
	// drained: the node left after a drain; every send from it had
	// finished, so nothing is in transit from it.
	drained bool
}

// boot is the boot ID of the node's run that holds the job (0: unknown),
// which Send and Recv instructions for it name (proto.Instr.PeerBoot).
func (ns *nodeState) boot() uint64 {
	if ns.nj == nil {
		return 0
	}
	return ns.nj.Boot()
}

type instrRef struct {
	g      *groupState
	launch bool
	kind   proto.InstrKind
	peer   string // Send: the destination node; Recv: the source
	bytes  int64  // the bytes a transfer or copy moves
}

// entry is one group's instructions for one node, in the node's FIFO.
type entry struct {
	seq     uint64
	instrs  []proto.Instr
	gate    []*groupState // groups that must complete before this goes out
	uploads []upload
	launch  *groupState // the group whose launch is in instrs
}

type upload struct {
	buf   *Buffer
	host  []byte // the client's copy (Buffer.host when the upload was planned)
	mem   uint32
	boxes []proto.Box
}

// groupState is a command group from submission to completion.
type groupState struct {
	id      GroupID
	kernel  string
	dev     int // index into Job.devices; -1 for host reads
	items   int
	pending int // instructions not finished (plus holds)
	// finished: every instruction finished; completed: finished and every
	// dependency completed (so completion is transitive), the core told.
	finished, completed bool
	waitFor             int           // dependencies not completed yet
	dependents          []*groupState // groups waiting for this one's completion
	host                bool          // a host access: later launches wait for it in the coordinator
	// waitsOn are the dependencies that had not completed when it was
	// planned; launchID is its launch instruction on its device's node
	// (0: none). issueLocked reads both to decide which later launches
	// need a gate.
	waitsOn  []*groupState
	launchID uint64
	// uses are the launch's accessors, from submitLocked to issueLocked.
	uses      []pageUse
	submitted time.Time // when Submit planned it
	issued    time.Time // when its launch went out
	estimate  float64
	instrs    []InstrTrace // finished instructions, kept for OnGroupDone
	// chunks is the number of groups its Submit made (GroupTrace.Chunks);
	// gated: its launch waited for a gate (GroupTrace.Gated).
	chunks int
	gated  bool
	// recvs are the pages this group brings from other nodes: if the
	// source is lost before the group finishes, they never arrive.
	recvs []recvRec
	// user: a group the program submitted (its ID is the program's);
	// rep: the replay a recovery runs this group for (its trace goes out
	// under the program's IDs once every group of the replay is done).
	user bool
	rep  *replaySet
	// internal: the job's own group (a checkpoint's read, a drain's
	// move): no trace goes to OnGroupDone.
	internal bool
}

type recvRec struct {
	buf   coherence.BufferID
	src   coherence.NodeID
	dst   coherence.AllocID
	pages []coherence.Box
}

type writeRec struct {
	g     GroupID
	pages coherence.Box
}

// Stats are a job's counters so far.
type Stats struct {
	// Groups counts the command groups submitted (chunks of split
	// groups count one each; host reads and writes and releases count
	// too), Completed those of them completed. The job's own groups (a
	// checkpoint's reads, a drain's hand-over) are not counted here but in
	// Recovery.
	Groups    int
	Completed int
	// Gated counts groups whose launch the coordinator held back until an
	// earlier group on another node finished (an ordering with no data
	// path between them, D3).
	Gated int
	// PlannedBytes are the bytes the plans move, per link "src->dst"
	// (node names; "client" for the client).
	PlannedBytes map[string]int64
	// KernelTime is the observed kernel time per device (from completion
	// events, so it includes queueing on the node while the device was busy).
	KernelTime map[string]time.Duration
	// Placed counts groups per device.
	Placed map[string]int
	// Recovery counts recoveries, checkpoints, drains and joins.
	Recovery RecoveryStats
	// Live is the number of groups not completed; CoreRegions and
	// CoreLive are the coherence core's history size and live groups
	// (they stay bounded because completed groups are Completed there).
	Live, CoreRegions, CoreLive int
}

// Open connects to the nodes, reads their inventories, selects the devices
// and opens the job on every node.
func Open(ctx context.Context, cfg Config) (*Job, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.populate()
	cl, ownClient := cfg.Client, false
	if cl == nil {
		var err error
		if cl, err = nodeclient.Start(nodeclient.Config{Credentials: cfg.Credentials, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
		ownClient = true
	}
	j := &Job{
		cfg: cfg, log: cfg.Logger.With("job", cfg.JobID), cl: cl, ownClient: ownClient, byName: map[string]*nodeState{}, devByID: map[string]int{},
		core: coherence.New(coherence.Config{}), nextCG: 1, nextBuf: 1, bufs: map[coherence.BufferID]*Buffer{},
		live: map[GroupID]*groupState{}, changed: make(chan struct{}), lineage: map[coherence.BufferID][]writeRec{},
		stats: Stats{PlannedBytes: map[string]int64{}, KernelTime: map[string]time.Duration{}, Placed: map[string]int{}},
	}
	j.ctx, j.cancel = context.WithCancelCause(context.Background())
	j.ep = j.newEpoch(0)
	fail := func(err error) (*Job, error) {
		for _, ns := range j.nodes {
			if ns.nj != nil {
				cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				ns.nj.Close(cctx)
				cancel()
			}
		}
		if ownClient {
			cl.Close()
		}
		return nil, err
	}
	var all []string
	discovered := map[*nodeState]bool{} // members Open may leave out: those discover found, and the seed
	addrs := cfg.Nodes
	var names []string // the seed's name (the node discover asked), then the members it found
	if len(addrs) == 1 && !cfg.Static && cfg.MembershipInterval >= 0 {
		addrs, names = j.discover(ctx, addrs[0])
		if testHookDiscovered != nil {
			testHookDiscovered()
		}
	}
	// A member that fails while Open asks it is given up as soon as the
	// membership says so (openGuard).
	guard := j.guardOpen(ctx, names, addrs)
	defer guard.stop()
	// The seed, once it listed other members, is a member like them: lost
	// before the job opens there, it is left out as they are, and Open
	// fails with its error only when no member is left. A refusal it
	// answers is Open's failure.
	seedSpare := len(names) > 1
	var refusal *transport.RemoteError
	var seedErr error
	// Every address is asked at once, a batch at a time in order: a member
	// that hangs costs the dial timeout once, not once per member after it.
	var probes []nodeProbe
	for i, addr := range addrs {
		// A member discover found (i ≥ len(Nodes)) that does not answer
		// or drains is left out: the membership watch offers it again.
		found := i >= len(cfg.Nodes)
		if found && len(j.nodes) >= maxJobNodes {
			break
		}
		spare := found || (i == 0 && seedSpare) // for a loss; a refusal is the seed's answer
		if i%probeBatch == 0 {
			probes = probeNodes(guard.ctxs[i:min(i+probeBatch, len(addrs))], cl, addrs[i:min(i+probeBatch, len(addrs))])
		}
		pr := probes[i%probeBatch]
		name, err := pr.name, pr.connErr
		if err != nil {
			err = fmt.Errorf("coordinator: connect to node %s: %w; is acpp-node running there, and are the credentials of this cluster?", addr, err)
			if found || spare && !errors.As(err, &refusal) {
				j.log.Warn("a member of the cluster is left out of the job: cannot connect", "addr", addr, "error", err)
				if !found {
					seedErr = err
				}
				continue
			}
			return fail(err)
		}
		if j.byName[name] != nil {
			if found {
				continue
			}
			return fail(fmt.Errorf("%w: Nodes[%d] %s is node %s again", ErrInvalidConfig, i, addr, name))
		}
		inv, err := pr.inv, pr.invErr
		if err != nil {
			if found || spare && !errors.As(err, &refusal) {
				j.log.Warn("a member of the cluster is left out of the job: no inventory", "node", name, "error", err)
				if !found {
					seedErr = fmt.Errorf("coordinator: inventory of node %s: %w", name, err)
				}
				continue
			}
			return fail(fmt.Errorf("coordinator: inventory of node %s: %w", name, err))
		}
		if inv.Draining {
			if found {
				continue
			}
			return fail(fmt.Errorf("coordinator: node %s is draining (shutting down); leave it out of Nodes", name))
		}
		ns := &nodeState{id: coherence.NodeID(len(j.nodes) + 1), name: name, addr: addr, inv: inv, wake: make(chan struct{}, 1),
			instrs: map[uint64]instrRef{}, lastDone: map[int]time.Time{}, lastEnd: map[int]int64{}}
		var selected []*Device
		for _, d := range inv.Devices {
			dev := &Device{Node: name, ID: d.ID, Kind: kindOf(d.ID), Mem: d.Mem, Forms: d.Forms, HostUnified: d.HostUnified, MemBytes: d.MemBytes, node: ns}
			all = append(all, dev.String())
			if cfg.Devices.match(*dev) {
				selected = append(selected, dev)
			}
		}
		if found && len(selected) == 0 {
			// A member none of whose devices the selection takes holds
			// no job (as the membership watch does not join it).
			continue
		}
		j.nodes = append(j.nodes, ns)
		j.byName[name] = ns
		if spare {
			discovered[ns] = true
		}
		for _, dev := range selected {
			j.devByID[dev.String()] = len(j.devices)
			j.devices = append(j.devices, dev)
		}
	}
	// Open the job on every node. A member discover found that fails
	// now (it died after it answered above, before membership noticed) is
	// left out, as one that did not answer: the watch offers it again.
	// On every node at once; the errors are taken in the nodes' order.
	openErrs := make([]error, len(j.nodes))
	var opening sync.WaitGroup
	for i, ns := range j.nodes {
		opening.Go(func() {
			ns.nj, openErrs[i] = cl.Open(guard.ctxOf(ns.addr), ns.name, cfg.JobID, nodeclient.JobOptions{Lease: cfg.Lease, MaxBytes: cfg.MaxBytes})
		})
	}
	opening.Wait()
	guard.stop()
	var gone []*nodeState
	for i, ns := range j.nodes {
		err := openErrs[i]
		seedRefused := ns.addr == addrs[0] && errors.As(err, &refusal)
		if err != nil && discovered[ns] && !seedRefused && ctx.Err() == nil {
			j.log.Warn("a member of the cluster is left out of the job: cannot open the job there", "node", ns.name, "error", err)
			gone = append(gone, ns)
			if ns.addr == addrs[0] {
				seedErr = fmt.Errorf("coordinator: open job %d on node %s: %w", cfg.JobID, ns.name, err)
			}
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("coordinator: open job %d on node %s: %w", cfg.JobID, ns.name, err))
		}
	}
	if len(gone) > 0 {
		j.dropUnopenedLocked(gone)
	}
	if len(j.nodes) == 0 && seedErr != nil {
		return fail(seedErr)
	}
	if len(j.devices) == 0 {
		return fail(&NoDeviceError{All: all})
	}
	for _, k := range cfg.Devices.Kinds {
		if !slices.ContainsFunc(j.devices, func(d *Device) bool { return d.Kind == k }) {
			// The selection got the other kinds only: say so, as for a
			// node (one with that kind may join later).
			j.log.Warn("a selected device kind is not in the job: no node reached has a device of it that the other selections allow", "kind", k, "devices", strings.Join(all, ", "))
		}
	}
	for _, name := range cfg.Devices.Devices {
		if _, ok := j.devByID[name]; !ok {
			j.log.Warn("a selected device is not in the job: no node reached has it (check the name: node/kind:index)", "device", name, "devices", strings.Join(all, ", "))
		}
	}
	for _, name := range cfg.Devices.Nodes {
		if j.byName[name] == nil {
			// Maybe a typo, maybe a node not up yet: its devices join
			// the job if it joins the cluster (watch.go), so say it.
			j.log.Warn("a selected node is not in the job: none of the nodes reached has that name; its devices join if such a node joins the cluster (check the name)", "node", name, "nodes", strings.Join(slices.Sorted(maps.Keys(j.byName)), ", "))
		}
	}
	j.queued = make([]float64, len(j.devices))
	j.pending = make([]int, len(j.devices))
	j.start = time.Now()
	j.res.init(j)
	j.startEvents() // before the nodes' feeds: a loss can be seen at once
	for _, ns := range j.nodes {
		j.startNodeLocked(j.ep, ns)
	}
	j.startWatch()
	if cfg.Snapshots != nil {
		cfg.Snapshots.bind(j)
	}
	j.log.Info("job open", "nodes", len(j.nodes), "devices", len(j.devices), "on_node_loss", cfg.OnNodeLoss, "checkpoint", cfg.Checkpoint)
	return j, nil
}

// testHookDiscovered, when set (tests only), runs in Open once discover
// listed the members.
var testHookDiscovered func()

// probeBatch is how many addresses Open asks at once.
const probeBatch = 16

// nodeProbe is what Open learnt of one address: the node's name and
// inventory, or why not.
type nodeProbe struct {
	name            string
	inv             *proto.Inventory
	connErr, invErr error
}

// probeNodes connects to every address and asks each node for its
// inventory, all at once, addrs[i] under ctxs[i]; the answers are in the
// addresses' order.
func probeNodes(ctxs []context.Context, cl *nodeclient.Client, addrs []string) []nodeProbe {
	out := make([]nodeProbe, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			pr := &out[i]
			if pr.name, pr.connErr = cl.Connect(ctxs[i], addr); pr.connErr == nil {
				pr.inv, pr.invErr = cl.Inventory(ctxs[i], pr.name)
			}
		})
	}
	wg.Wait()
	return out
}

// openGuard gives up Open's calls to a member (the seed too) once the
// membership sees it failed. Killed after it answered the dial, a
// member answers no call until the connection idles out (the transport's
// IdleTimeout, 15 s); stopped, or its host gone, it answers no dial for
// DialTimeout (10 s); gossip tells either in about a second (the local
// timing preset) or five (lan).
type openGuard struct {
	ctxs   []context.Context // per address of Open's list
	byAddr map[string]int
	cancel context.CancelFunc
	done   chan struct{}
}

// guardOpen starts the guard of addrs, as discover returned them with
// names (the seed's, then the members'): it asks the seed for the members,
// and the others in turn while the seed does not answer (askMembers).
// Without members found every call runs under ctx alone.
func (j *Job) guardOpen(ctx context.Context, names, addrs []string) *openGuard {
	g := &openGuard{ctxs: make([]context.Context, len(addrs)), byAddr: map[string]int{}, done: make(chan struct{})}
	for i := range addrs {
		g.ctxs[i] = ctx
	}
	if len(names) < 2 {
		g.cancel = func() {}
		close(g.done)
		return g
	}
	gctx, gcancel := context.WithCancel(ctx)
	g.cancel = gcancel
	cancels := make([]context.CancelCauseFunc, len(addrs))
	for i, addr := range addrs {
		g.ctxs[i], cancels[i] = context.WithCancelCause(ctx)
		g.byAddr[addr] = i
	}
	go func() {
		defer close(g.done)
		defer func() {
			for _, c := range cancels {
				c(nil)
			}
		}()
		t := time.NewTicker(j.cfg.MembershipInterval)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(gctx, 2*time.Second)
			ms, err := j.askMembers(cctx, names)
			ccancel()
			if err != nil {
				continue
			}
			for _, m := range ms.Members {
				if i, ok := g.byAddr[m.QUICAddr]; ok && m.State == "failed" {
					cancels[i](fmt.Errorf("%w: node %s failed (the membership)", ErrNodeLost, m.Name))
				}
			}
		}
	}()
	return g
}

// ctxOf is the context of Open's calls to addr.
func (g *openGuard) ctxOf(addr string) context.Context {
	if i, ok := g.byAddr[addr]; ok {
		return g.ctxs[i]
	}
	return g.ctxs[0] // without a guard every one is Open's ctx
}

// stop ends the guard and waits for it; calling it twice is safe. The
// contexts it cancels are only Open's calls': jobs opened live on.
func (g *openGuard) stop() {
	g.cancel()
	<-g.done
}

// dropUnopenedLocked takes nodes that Open could not open the job on out
// of the job before it starts: their devices go, and the nodes left are
// numbered 1… again (nothing refers to the numbers yet).
func (j *Job) dropUnopenedLocked(gone []*nodeState) {
	j.nodes = slices.DeleteFunc(j.nodes, func(ns *nodeState) bool { return slices.Contains(gone, ns) })
	for i, ns := range j.nodes {
		ns.id = coherence.NodeID(i + 1)
	}
	for _, ns := range gone {
		delete(j.byName, ns.name)
	}
	j.devices = slices.DeleteFunc(j.devices, func(d *Device) bool { return slices.Contains(gone, d.node) })
	clear(j.devByID)
	for i, d := range j.devices {
		j.devByID[d.String()] = i
	}
}

// discover returns addr and, after it, the QUIC address of every other
// member that node sees alive and not draining, with the names: that
// node's, then the members'. Only addr and no name when it does not answer
// (Open then says why).
func (j *Job) discover(ctx context.Context, addr string) (addrs, names []string) {
	out := []string{addr}
	name, err := j.cl.Connect(ctx, addr)
	if err != nil {
		return out, nil
	}
	ms, err := j.cl.Members(ctx, name)
	if err != nil {
		j.log.Warn("the job opens on the one node given: it did not list the members", "node", name, "error", err)
		return out, nil
	}
	names = []string{name}
	for _, m := range ms.Members {
		if m.Name != name && m.State == "alive" && !m.Leaving && m.QUICAddr != "" {
			out = append(out, m.QUICAddr)
			names = append(names, m.Name)
		}
	}
	return out, names
}

// epoch is one span of a job between recoveries: the node jobs opened for
// it, the goroutines that drive them, and (in Job) the page directory.
// A recovery cancels the epoch, waits for its goroutines and starts the
// next one (recover.go).
type epoch struct {
	n      int
	jobID  uint64 // the job's ID on the nodes in this epoch
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	// hazards are the pending accesses per allocation (hazard.go; guarded
	// by Job.mu); they name this epoch's instruction IDs.
	hazards map[allocRef]*allocHazards
}

func (j *Job) newEpoch(n int) *epoch {
	ep := &epoch{n: n, jobID: j.cfg.JobID + uint64(n), hazards: map[allocRef]*allocHazards{}}
	ep.ctx, ep.cancel = context.WithCancelCause(j.ctx)
	return ep
}

// startNodeLocked starts ns's sender and completion feed for epoch ep.
func (j *Job) startNodeLocked(ep *epoch, ns *nodeState) {
	ep.wg.Add(2)
	go j.sender(ep, ns, ns.nj)
	go j.feed(ep, ns, ns.nj)
}

func kindOf(id string) string {
	if k, _, ok := strings.Cut(id, ":"); ok {
		return k
	}
	return id
}

// ID is the job's ID on the nodes.
func (j *Job) ID() uint64 { return j.cfg.JobID }

// Devices lists the job's devices, in job order (nodes in Config.Nodes
// order, then each node's inventory order).
func (j *Job) Devices() []Device {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Device, len(j.devices))
	for i, d := range j.devices {
		out[i] = *d
		out[i].node = nil
	}
	return out
}

// NodeStatus is one node of a job.
type NodeStatus struct {
	Name, Addr string
	// ID is the node's ID in the page directory (1…N).
	ID coherence.NodeID
	// Lost: the job lost the node (C5) and goes on without it.
	Lost bool
	// Pending is the number of the job's instructions on the node not yet
	// reported finished.
	Pending int
}

// Nodes lists the job's nodes in Config.Nodes order.
func (j *Job) Nodes() []NodeStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]NodeStatus, len(j.nodes))
	for i, ns := range j.nodes {
		out[i] = NodeStatus{Name: ns.name, Addr: ns.addr, ID: ns.id, Lost: ns.lost, Pending: len(ns.instrs)}
	}
	return out
}

// Err is the job's failure, or nil while it runs.
func (j *Job) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Stats returns a copy of the job's counters.
func (j *Job) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.stats
	s.Recovery = j.res.stats
	cs := j.core.Stats()
	s.Live, s.CoreRegions, s.CoreLive = len(j.live), cs.Regions, cs.Live
	s.PlannedBytes, s.KernelTime, s.Placed = map[string]int64{}, map[string]time.Duration{}, map[string]int{}
	for k, v := range j.stats.PlannedBytes {
		s.PlannedBytes[k] = v
	}
	for k, v := range j.stats.KernelTime {
		s.KernelTime[k] = v
	}
	for k, v := range j.stats.Placed {
		s.Placed[k] = v
	}
	return s
}

// PageStates reports, for each allocation of the buffer (keyed "client"
// or "node/mN", the node's name and memory), the page boxes of the given
// element region that are up to date there (C2). A zero rng means from off
// to the end of the buffer. A buffer that is not this job's, or was
// released, is ErrInvalid.
func (j *Job) PageStates(b *Buffer, off, rng Dims) (map[string][]coherence.Box, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: PageStates of a nil buffer", ErrInvalid)
	}
	pages, err := b.pageRange(off, rng)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.bufs[b.id] != b {
		// Another job's buffer may have the same ID as one of this job's.
		return nil, fmt.Errorf("%w: PageStates: %s is not a buffer of this job (or was released)", ErrInvalid, b)
	}
	out := map[string][]coherence.Box{}
	for _, a := range j.core.Allocations(b.id) {
		outdated, err := j.core.Outdated(b.id, a, pages)
		if err != nil {
			return nil, err
		}
		out[j.allocName(a)] = subtractBoxes(pages, outdated)
	}
	return out, nil
}

// allocName is "client" or "node/mN".
func (j *Job) allocName(a coherence.AllocID) string {
	if a.Node == ClientNode {
		return "client"
	}
	return fmt.Sprintf("%s/m%d", j.nodes[a.Node-1].name, a.Mem)
}

func (j *Job) nodeName(n coherence.NodeID) string {
	if n == ClientNode {
		return "client"
	}
	return j.nodes[n-1].name
}

// signalLocked wakes everyone waiting on j.changed.
func (j *Job) signalLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

func (j *Job) failLocked(err error) {
	if j.err != nil {
		return
	}
	j.err = err
	j.log.Error("job failed", "error", err)
	j.signalLocked()
	j.cancel(err)
}

func (j *Job) fail(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failLocked(err)
}

// Wait waits until every command group submitted so far has finished, and
// returns the job's failure if it failed.
func (j *Job) Wait(ctx context.Context) error {
	for {
		j.mu.Lock()
		err, n, ch := j.err, len(j.live)+j.notifying, j.changed
		if j.res.recovering != nil {
			n++
		}
		j.mu.Unlock()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitGroups waits until every group in ids has completed; it returns
// errEpochChanged when a recovery ends ep meanwhile.
func (j *Job) waitGroups(ctx context.Context, ep *epoch, ids []GroupID) error {
	for {
		j.mu.Lock()
		err, ch, cur := j.err, j.changed, j.ep
		pending := false
		for _, id := range ids {
			if j.live[id] != nil {
				pending = true
				break
			}
		}
		j.mu.Unlock()
		if err != nil {
			return err
		}
		if cur != ep {
			return errEpochChanged
		}
		if !pending {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the job: its goroutines end, the job is closed on every
// node (freeing its allocations there) and the connections are closed.
// Pending command groups are abandoned. Calling it twice is safe.
func (j *Job) Close(ctx context.Context) error {
	var errs []error
	j.closed.Do(func() {
		j.mu.Lock()
		if j.err == nil {
			j.err = ErrClosed
			j.signalLocked()
		}
		j.mu.Unlock()
		j.cancel(ErrClosed)
		j.wg.Wait()
		j.mu.Lock()
		ep := j.ep
		j.mu.Unlock()
		ep.wg.Wait()
		var cwg sync.WaitGroup
		var emu sync.Mutex
		for _, ns := range j.nodes {
			j.mu.Lock()
			lost := ns.lost
			j.mu.Unlock()
			if lost {
				// Not asked (a lost node may never answer), but no longer
				// renewed: a node dropped while alive (a partition, a
				// stale membership record) frees the job within its lease.
				// Renewals went on for as long as the client lived.
				ns.nj.Abandon()
				continue
			}
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if err := ns.nj.Close(cctx); err != nil {
					emu.Lock()
					errs = append(errs, fmt.Errorf("close job on node %s: %w", ns.name, err))
					emu.Unlock()
				}
			}()
		}
		cwg.Wait()
		if j.ownClient {
			if err := j.cl.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		j.log.Info("job closed")
	})
	return errors.Join(errs...)
}

// sender owns ns's FIFO: it submits entries in order, as soon as their
// gates are open, in batches, then starts their uploads.
func (j *Job) sender(ep *epoch, ns *nodeState, nj *nodeclient.Job) {
	defer ep.wg.Done()
	for {
		select {
		case <-ns.wake:
		case <-ep.ctx.Done():
			return
		}
		for {
			var batch []proto.Instr
			var ups []upload
			var launches []*groupState
			var last uint64
			j.mu.Lock()
			for len(ns.outbox) > 0 && len(batch) < proto.MaxBatch {
				e := ns.outbox[0]
				if !gateOpen(e.gate) {
					break
				}
				if len(e.gate) > 0 {
					j.gated--
				}
				batch = append(batch, e.instrs...)
				ups = append(ups, e.uploads...)
				if e.launch != nil {
					launches = append(launches, e.launch)
				}
				last = e.seq
				ns.outbox[0] = nil
				ns.outbox = ns.outbox[1:]
			}
			forget := ns.forgetMark
			ns.forgetMark = 0
			j.mu.Unlock()
			if forget > 0 {
				// After every batch taken before the mark was set: the
				// node has linked their dependencies by now.
				if err := nj.Forget(ep.ctx, forget); err != nil {
					if ep.ctx.Err() == nil {
						j.transportFailure(ep, ns, "submit", err)
					}
					return
				}
			}
			if len(batch) == 0 {
				break
			}
			if j.log.Enabled(ep.ctx, slog.LevelDebug) {
				for _, in := range batch {
					j.log.Debug("submit", "node", ns.name, "id", in.ID, "kind", in.Kind, "deps", in.Deps, "buffer", in.Buffer, "mem", in.Mem, "boxes", len(in.Boxes))
				}
			}
			if _, err := nj.Submit(ep.ctx, batch...); err != nil {
				if ep.ctx.Err() == nil {
					j.transportFailure(ep, ns, "submit", err)
				}
				return
			}
			now := time.Now()
			j.mu.Lock()
			ns.subSeq = last
			for _, g := range launches {
				g.issued = now
			}
			j.signalLocked()
			j.mu.Unlock()
			for _, u := range ups {
				ep.wg.Add(1)
				go j.upload(ep, ns, nj, u)
			}
		}
	}
}

func gateOpen(gate []*groupState) bool {
	for _, g := range gate {
		if !g.completed {
			return false
		}
	}
	return true
}

// transportFailure handles a failed call to a node: a refusal by the node
// fails the job; a connection failure means the node is lost.
// Failures seen by an epoch that has ended are ignored: the recovery
// that ended it replays what they were part of.
func (j *Job) transportFailure(ep *epoch, ns *nodeState, what string, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if ep != j.ep || ep.ctx.Err() != nil {
		return
	}
	var re *transport.RemoteError
	// A node that no longer knows the job (it closed it shutting down, or
	// restarted) or drains is gone for us; other refusals fail the job.
	if errors.As(err, &re) && re.Code != proto.CodeDraining && re.Code != proto.CodeJobClosed && re.Code != proto.CodeNoJob {
		j.failLocked(fmt.Errorf("%w: %s to node %s: %w", ErrJobFailed, what, ns.name, err))
		return
	}
	j.nodeLostLocked(ns, fmt.Sprintf("unreachable: %s failed: %v", what, err))
}

func (j *Job) upload(ep *epoch, ns *nodeState, nj *nodeclient.Job, u upload) {
	defer ep.wg.Done()
	b := u.buf
	err := nj.Upload(ep.ctx, uint64(b.id), u.mem, toU64(b.geo.Range), uint32(b.geo.ElemSize), u.boxes, u.host)
	if err != nil && ep.ctx.Err() == nil {
		j.transportFailure(ep, ns, "upload", err)
	}
}

// feed follows ns's completion feed until the job ends or the node is lost.
func (j *Job) feed(ep *epoch, ns *nodeState, nj *nodeclient.Job) {
	defer ep.wg.Done()
	var after uint64
	var failingSince time.Time
	quiet := time.Now()
	for {
		ctx, cancel := context.WithTimeout(ep.ctx, j.cfg.PollInterval)
		evs, err := nj.Events(ctx, after, 1024)
		cancel()
		if ep.ctx.Err() != nil {
			return
		}
		if err != nil {
			now := time.Now()
			if failingSince.IsZero() {
				failingSince = now
			} else if now.Sub(failingSince) >= j.cfg.LostTimeout {
				j.mu.Lock()
				if ep == j.ep {
					j.nodeLostLocked(ns, fmt.Sprintf("unreachable for %v: %v", now.Sub(failingSince).Round(time.Millisecond), err))
				}
				j.mu.Unlock()
				return
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ep.ctx.Done():
				return
			}
			continue
		}
		failingSince = time.Time{}
		j.mu.Lock()
		ns.lastSeen = time.Now()
		j.mu.Unlock()
		if len(evs) == 0 {
			// Quiet: a node that dropped the last events of a burst
			// shows no gap. Now and then, ask for what is still out.
			if time.Since(quiet) >= catchUpQuiet {
				quiet = time.Now()
				j.catchUp(ep, ns, nj)
			}
			continue
		}
		quiet = time.Now()
		// Events are numbered without gaps; a gap means the node
		// dropped some (its client read too slowly: node.Config.FeedLimit).
		gap := evs[0].Seq != after+1
		for i := 1; i < len(evs) && !gap; i++ {
			gap = evs[i].Seq != evs[i-1].Seq+1
		}
		after = evs[len(evs)-1].Seq
		if !j.onEvents(ep, ns, evs) {
			return
		}
		if gap {
			j.cfg.Logger.Warn("a node's completion feed skipped events (the node dropped what this client did not read in time); asking for the state of its instructions", "node", ns.name)
			j.catchUp(ep, ns, nj)
		}
	}
}

// forgetEvery is how many finished instructions of a node the coordinator
// lets the node remember before it tells it to forget them.
const forgetEvery = 4096

// forgetLocked returns the mark for Submit.Forget, or 0 when it is not yet
// worth a message: every instruction below it has finished (the feed saw
// it) and no instruction built but not yet sent names it (an entry
// waiting at a gate was built while its dependencies were pending; later
// entries are built after now, naming only instructions pending then, all
// at or above the mark). The sender sends it after the batch it may be
// sending now (whose entries left the outbox before the mark was set).
func (ns *nodeState) forgetLocked() uint64 {
	if ns.low == 0 {
		ns.low = 1 // IDs start at 1
	}
	for ns.low <= ns.nextInstr {
		if _, pending := ns.instrs[ns.low]; pending {
			break
		}
		ns.low++
	}
	if ns.low < ns.forgot+forgetEvery {
		return 0
	}
	mark := ns.low
	for _, e := range ns.outbox {
		for _, in := range e.instrs {
			for _, d := range in.Deps {
				mark = min(mark, d)
			}
		}
	}
	if mark <= ns.forgot {
		return 0
	}
	ns.forgot = mark
	return mark
}

// catchUpQuiet is how long a node's feed may stay empty, while it still
// runs instructions of the job, before the feed asks for their state
// (catchUp): a node whose client read too slowly may have dropped the
// last events of a burst.
const catchUpQuiet = 5 * time.Second

// catchUp asks ns, on a goroutine of its own (one at a time per node, so
// the feed goes on), for the state of every instruction of the job it
// still runs there, and records the finished ones as their events would
// have been: after the feed skipped events, or stayed quiet a while.
func (j *Job) catchUp(ep *epoch, ns *nodeState, nj *nodeclient.Job) {
	if !ns.catchingUp.CompareAndSwap(false, true) {
		return
	}
	ep.wg.Add(1) // the calling feed holds the epoch open meanwhile
	go func() {
		defer ep.wg.Done()
		defer ns.catchingUp.Store(false)
		j.mu.Lock()
		ids := slices.Collect(maps.Keys(ns.instrs))
		j.mu.Unlock()
		if len(ids) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(ep.ctx, j.cfg.PollInterval)
		r, err := nj.Poll(ctx, ids...)
		cancel()
		if err != nil {
			return // the feed goes on; the next gap or quiet spell asks again
		}
		evs := make([]proto.Event, 0, len(r.Done)+len(r.Failed))
		for _, id := range r.Done {
			evs = append(evs, proto.Event{ID: id})
		}
		for i := range r.Failed {
			evs = append(evs, proto.Event{ID: r.Failed[i].ID, Err: &r.Failed[i]})
		}
		if len(evs) > 0 {
			j.onEvents(ep, ns, evs)
		}
	}()
}

// onEvents records finished instructions; false when ns is lost.
func (j *Job) onEvents(ep *epoch, ns *nodeState, evs []proto.Event) bool {
	now := time.Now()
	var traces []GroupTrace
	defer func() { j.notify(traces) }()
	j.mu.Lock()
	defer j.mu.Unlock()
	if ns.lost || ep != j.ep || ep.ctx.Err() != nil {
		return false // a recovery ends this epoch: it replays what these were part of
	}
	done := false
	for _, ev := range evs {
		ref, ok := ns.instrs[ev.ID]
		if !ok {
			continue
		}
		delete(ns.instrs, ev.ID)
		if ev.Err != nil {
			if ev.Err.Code == proto.CodeTransfer && ref.peer != "" && j.res.on {
				// A send or receive could not reach its peer: with
				// recovery on, treat the peer as lost (if it was not,
				// the recovery costs time, not data).
				if p := j.byName[ref.peer]; p != nil && !p.lost {
					j.nodeLostLocked(p, "transfer failed: "+ev.Err.Message)
				}
			}
			j.instrFailedLocked(ns, ref.g, ev.Err)
			if j.res.recovering != nil || j.err != nil {
				return false
			}
			continue
		}
		g := ref.g
		if ref.launch && g.dev >= 0 {
			d := j.devices[g.dev]
			if dur, ok := ns.kernelTime(g, ev, now); ok {
				j.est.observe(g.kernel, *d, g.items, dur)
				j.stats.KernelTime[d.String()] += dur
			}
			j.queued[g.dev] = max(0, j.queued[g.dev]-g.estimate)
			j.pending[g.dev]--
		}
		if j.cfg.OnGroupDone != nil && ev.End != 0 {
			g.instrs = append(g.instrs, ref.trace(ns.name, ev))
		}
		g.pending--
		if g.pending == 0 {
			traces = append(traces, j.finishLocked(g, now)...)
			done = true
		}
	}
	if done {
		j.signalLocked()
		if j.gated > 0 {
			j.wakeAllLocked()
		}
	}
	if m := ns.forgetLocked(); m > 0 {
		ns.forgetMark = m // the sender sends it
		select {
		case ns.wake <- struct{}{}:
		default:
		}
	}
	return true
}

func (j *Job) wakeAllLocked() {
	for _, ns := range j.nodes {
		if !ns.lost {
			select {
			case ns.wake <- struct{}{}:
			default:
			}
		}
	}
}

// finishLocked records that every instruction of g finished, and
// completes g and every dependent that only waited for it.
func (j *Job) finishLocked(g *groupState, now time.Time) []GroupTrace {
	g.finished = true
	var out []GroupTrace
	work := []*groupState{g}
	for len(work) > 0 {
		g := work[len(work)-1]
		work = work[:len(work)-1]
		if g.completed || !g.finished || g.waitFor > 0 {
			continue
		}
		before := len(out)
		g.completed = true
		g.waitsOn = nil
		delete(j.live, g.id)
		j.core.Complete(g.id)
		if !g.internal {
			j.stats.Completed++
		}
		tr := GroupTrace{ID: g.id, Kernel: g.kernel, Chunks: g.chunks, Gated: g.gated, Submitted: g.submitted, Issued: g.issued, Done: now, Instrs: g.instrs}
		g.instrs = nil
		if g.dev >= 0 {
			tr.Device = j.devices[g.dev].String()
		}
		switch {
		case g.rep != nil:
			// A replayed group: the program knows it by the IDs of the
			// group it replays, reported once the whole replay is done.
			out = append(out, g.rep.doneLocked(tr)...)
		case !g.internal:
			out = append(out, tr)
		}
		if j.cfg.OnGroupDone != nil {
			j.notifying += len(out) - before // until notify has handed them over
		}
		for _, d := range g.dependents {
			d.waitFor--
			work = append(work, d)
		}
		g.dependents = nil
	}
	return out
}

// GroupTrace is a finished command group, for progress reports and traces
// (acpp-submit's --trace). Times are the client's.
type GroupTrace struct {
	ID     GroupID
	Kernel string // the kernel, or "host read" / "host write"
	Device string // "node/kind:index"; empty for host accesses
	// Chunks is the number of groups the Submit that made this one
	// returned: the chunks of a split group, whose IDs are consecutive
	// from the first; 1 for an unsplit group, 0 for host accesses and
	// releases. With it a caller knows when every chunk has reported.
	Chunks int
	// Gated: the coordinator held the group's launch back until an earlier
	// group on another node finished (an ordering with no data path
	// between them, D3); Stats.Gated counts these.
	Gated bool
	// Submitted is when Submit planned it, Issued when its launch went to
	// the node (zero for host accesses), Done when its last completion
	// event arrived.
	Submitted, Issued, Done time.Time
	// Instrs are the group's instructions as the nodes ran them: its
	// kernel, and the copies and transfers planned for it.
	Instrs []InstrTrace
	// Replayed: a recovery ran the group again (its first run was lost
	// with a node); Device is where the replay ran.
	Replayed bool
}

// InstrTrace is one instruction of a group as a node ran it. Start and End
// are the node's clock (see proto.Event): on one host they compare with
// the client's times; across hosts only as well as the clocks agree.
type InstrTrace struct {
	Node string
	// Kind is "kernel", "send", "recv", "upload", "readback", "copy",
	// "fill", "alloc" or "free".
	Kind string
	// Peer is the other node of a send (its destination) or recv (its
	// source).
	Peer       string
	Bytes      int64
	Start, End time.Time
}

// trace describes the instruction ref names, finished as ev says on node.
func (ref instrRef) trace(node string, ev proto.Event) InstrTrace {
	t := InstrTrace{Node: node, Kind: ref.kind.String(), Peer: ref.peer, Bytes: ref.bytes, End: time.Unix(0, ev.End)}
	if ref.launch {
		t.Kind = "kernel"
	}
	if ev.Start != 0 {
		t.Start = time.Unix(0, ev.Start)
	}
	return t
}

// kernelTime is how long g's kernel ran on its device, from the completion
// event ev that arrived at now: from when the node started it, or when the
// device's previous kernel ended if that was later (it queued behind it),
// to when it ended. Nodes that send no times are timed by the client's
// clock from the launch's issue instead (which includes the trip).
func (ns *nodeState) kernelTime(g *groupState, ev proto.Event, now time.Time) (time.Duration, bool) {
	if ev.Start != 0 && ev.End >= ev.Start {
		begin := max(ev.Start, ns.lastEnd[g.dev])
		ns.lastEnd[g.dev] = max(ns.lastEnd[g.dev], ev.End)
		return time.Duration(max(ev.End-begin, 0)), true
	}
	begin := g.issued
	if t := ns.lastDone[g.dev]; t.After(begin) {
		begin = t
	}
	ns.lastDone[g.dev] = now
	if begin.IsZero() {
		return 0, false
	}
	return now.Sub(begin), true
}

// notify calls Config.OnGroupDone outside the lock.
// notify hands finished groups' traces to OnGroupDone, outside j.mu, and
// then lets Wait return (notifying).
func (j *Job) notify(done []GroupTrace) {
	if j.cfg.OnGroupDone == nil || len(done) == 0 {
		return
	}
	for _, tr := range done {
		j.cfg.OnGroupDone(tr)
	}
	j.mu.Lock()
	j.notifying -= len(done)
	j.signalLocked()
	j.mu.Unlock()
}

func (j *Job) instrFailedLocked(ns *nodeState, g *groupState, ie *proto.InstrError) {
	if j.res.recovering != nil {
		return // the epoch ends: its failures are replayed
	}
	if ie.Code == proto.CodeNodeLost && ie.Node != "" {
		if lost := j.byName[ie.Node]; lost != nil {
			j.nodeLostLocked(lost, "failed, reported by "+ns.name)
			if j.err != nil || j.res.recovering != nil {
				return
			}
		}
	}
	if ie.Code == proto.CodeJobClosed {
		// We did not close it: the node is shutting down (drain, Close)
		// or its lease on the job ran out. Either way it is gone for us.
		j.nodeLostLocked(ns, "closed the job: "+ie.Message)
		if j.err != nil || j.res.recovering != nil {
			return
		}
	}
	j.failLocked(fmt.Errorf("%w: command group %d (%s) failed on node %s: instruction %d: %s (code %d)", ErrJobFailed, g.id, g.kernel, ns.name, ie.ID, ie.Message, ie.Code))
}

// nodeLostLocked drops node ns from the job (C5). Pages with another valid
// copy are taken from it from now on; if pages were lost, or groups were
// running there, the job fails with a *NodeLostError.
func (j *Job) nodeLostLocked(ns *nodeState, how string) {
	if ns.lost || j.err != nil {
		return
	}
	j.markLostLocked(ns)
	if !ns.drained { // a drain is told as "drained" once it has left
		j.nodeEvent(NodeEvent{Node: ns.name, Kind: "lost", How: how})
	}
	j.gated -= countGated(ns.outbox)
	ns.outbox = nil
	if j.res.recovering != nil {
		// The epoch is ending anyway: what ns held is restored with the rest.
		j.startRecoveryLocked(ns, how, &NodeLostError{Node: ns.name, How: how}, 0)
		return
	}
	lost := j.core.LoseNode(ns.id)
	var groups []GroupID
	for _, ref := range ns.instrs {
		if !slices.Contains(groups, ref.g.id) {
			groups = append(groups, ref.g.id)
		}
	}
	slices.Sort(groups)
	ns.instrs = map[uint64]instrRef{}
	if len(lost) == 0 && len(groups) == 0 && (ns.drained || !j.recvsFromLocked(ns)) {
		if ns.drained { // not a loss: watch.go says "node drained out of the job"
			j.log.Debug("drained node dropped from the job; every page it held has another valid copy", "node", ns.name)
		} else {
			j.log.Warn("node lost; every page it held has another valid copy, going on without it", "node", ns.name, "how", how)
		}
		j.signalLocked()
		return
	}
	e := &NodeLostError{Node: ns.name, How: how, Groups: groups}
	byBuf := map[coherence.BufferID][]coherence.Box{}
	var bufIDs []coherence.BufferID
	addLost := func(buf coherence.BufferID, boxes []coherence.Box) {
		if len(boxes) == 0 {
			return
		}
		if _, ok := byBuf[buf]; !ok {
			bufIDs = append(bufIDs, buf)
		}
		byBuf[buf] = append(byBuf[buf], boxes...)
	}
	for _, lp := range lost {
		addLost(lp.Buffer, lp.Boxes)
	}
	// Pages an unfinished group was bringing from the lost node count as
	// valid at their destination in the core, but will never arrive: they
	// are lost unless another allocation holds them.
	var liveIDs []GroupID
	for id := range j.live {
		liveIDs = append(liveIDs, id)
	}
	slices.Sort(liveIDs)
	for _, id := range liveIDs {
		for _, r := range j.live[id].recvs {
			if r.src != ns.id || ns.drained {
				continue
			}
			addLost(r.buf, j.heldNowhereLocked(r.buf, r.pages, func(a coherence.AllocID) bool { return a != r.dst }))
		}
	}
	slices.Sort(bufIDs)
	for _, id := range bufIDs {
		b := j.bufs[id]
		lr := LostRange{Buffer: b.String()}
		for _, pb := range mergeBoxes(byBuf[id]) {
			lr.Boxes = append(lr.Boxes, b.geo.ElementBox(pb))
			for _, w := range j.lineage[id] {
				if w.pages.Overlaps(pb) && !slices.Contains(lr.Producers, w.g) {
					lr.Producers = append(lr.Producers, w.g)
				}
			}
		}
		slices.Sort(lr.Producers)
		e.Lost = append(e.Lost, lr)
	}
	var lostBytes int64
	for _, id := range bufIDs {
		lostBytes += int64(elemBytes(j.bufs[id], mergeBoxes(byBuf[id])))
	}
	if j.startRecoveryLocked(ns, how, e, lostBytes) {
		return
	}
	j.failLocked(e)
}

// recvsFromLocked: a live group brings pages from ns.
func (j *Job) recvsFromLocked(ns *nodeState) bool {
	for _, g := range j.live {
		for _, r := range g.recvs {
			if r.src == ns.id {
				return true
			}
		}
	}
	return false
}

func countGated(es []*entry) int {
	n := 0
	for _, e := range es {
		if len(e.gate) > 0 {
			n++
		}
	}
	return n
}

func toU64(d Dims) [3]uint64 { return [3]uint64{uint64(d[0]), uint64(d[1]), uint64(d[2])} }

func protoBox(b coherence.Box) proto.Box {
	return proto.Box{Lo: toU64(b.Lo), Hi: toU64(b.Hi)}
}

// mergeBoxes removes boxes contained in others and sorts them (reports
// only; overlapping boxes that are not contained stay as they are).
func mergeBoxes(bs []coherence.Box) []coherence.Box {
	var out []coherence.Box
	for i, b := range bs {
		contained := false
		for k, o := range bs {
			if k != i && o.Intersect(b) == b && (o != b || k < i) {
				contained = true
				break
			}
		}
		if !contained {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b coherence.Box) int {
		for d := range 3 {
			if a.Lo[d] != b.Lo[d] {
				return a.Lo[d] - b.Lo[d]
			}
		}
		for d := range 3 {
			if a.Hi[d] != b.Hi[d] {
				return a.Hi[d] - b.Hi[d]
			}
		}
		return 0
	})
	return out
}

// subtractBoxes returns the part of box not covered by the disjoint boxes
// holes, as boxes (slab decomposition, for reports).
func subtractBoxes(box coherence.Box, holes []coherence.Box) []coherence.Box {
	out := []coherence.Box{box}
	for _, h := range holes {
		var next []coherence.Box
		for _, b := range out {
			next = append(next, b.Minus(h)...)
		}
		out = next
	}
	return out
}
