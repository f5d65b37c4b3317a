package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// ErrCluster marks a failure to reach or use the cluster (no member
// answers, bad credentials): the message says what to check.
var ErrCluster = errors.New("cluster unreachable")

// ClusterConfig says which cluster a job runs on and as whom.
type ClusterConfig struct {
	// Addrs are QUIC addresses (host:port) of acpp-node agents. One
	// address is expanded to every alive member of its cluster that is not
	// draining (the node's member list; the given node too is left out
	// while it drains); several are used as given.
	Addrs []string
	// CredentialsDir holds ca.crt and clients/<Client>.crt/.key (made by
	// acpp-node credentials … client NAME).
	CredentialsDir string
	// Client is the client name of the credentials (required).
	Client string
	// Nodes and Kinds restrict the devices used (node names, device
	// kinds); empty means all.
	Nodes, Kinds []string
	// Placement is the coordinator's placement policy (zero: auto).
	Placement coordinator.Placement
	// OnNodeLoss ("recover", "fail") and Checkpoint ("auto", "off", N)
	// say how the run survives losing a node; empty: the job file's
	// recovery section, else recover and auto.
	OnNodeLoss, Checkpoint string
	// fromJob: OnNodeLoss, Checkpoint came from the job file (for errors).
	lossFromJob, checkpointFromJob bool
	// client, when set (tests), is used instead of starting one.
	client *nodeclient.Client
}

// ClusterStats are what a cluster run adds to the summary.
type ClusterStats struct {
	// Nodes are the names of the nodes of the job's devices, in job order.
	Nodes []string
	// Bytes are the bytes moved per link "src->dst" (node names, "client"),
	// as the nodes reported them (the queue's Stats().Links): pages travel
	// only where the coordinator's plan sends them (C3).
	Bytes map[string]int64
	// KernelTime is the kernel time per device, from the groups' traces
	// (the node's times of each kernel, from no earlier than the end of the
	// device's previous one).
	KernelTime map[string]time.Duration
	// Groups is the number of coordinator command groups submitted (a
	// split step counts one per chunk; host reads and writes count too);
	// Gated those whose launch was held back for ordering (D3).
	Groups, Gated int
	// HostOps counts the fills and copies the cluster queue did through
	// the client (their events' Device() is "client": element sizes other
	// than 4 bytes, which the nodes' fill_f32 and copy_f32 do not move).
	HostOps int
	// OnNodeLoss and Checkpoint are the run's recovery settings;
	// Recoveries the recoveries it went through, Checkpoints the
	// checkpoints it took, NodeEvents the joins and drains.
	OnNodeLoss, Checkpoint string
	Recoveries             []coordinator.RecoveryReport
	Checkpoints            []coordinator.CheckpointReport
	NodeEvents             []coordinator.NodeEvent
}

func (c *ClusterStats) summary(b *strings.Builder) {
	links := slices.Sorted(maps.Keys(c.Bytes))
	var between, up, down int64
	var parts []string
	for _, l := range links {
		n := c.Bytes[l]
		src, dst, _ := strings.Cut(l, "->")
		switch {
		case src == "client":
			up += n
		case dst == "client":
			down += n
		default:
			between += n
		}
		parts = append(parts, fmt.Sprintf("%s %s", strings.Replace(l, "->", "→", 1), bytesStr(n)))
	}
	fmt.Fprintf(b, "  data moved: between nodes %s, client→nodes %s, nodes→client %s; %d coordinator groups, %d gated\n",
		bytesStr(between), bytesStr(up), bytesStr(down), c.Groups, c.Gated)
	if len(parts) > 0 {
		fmt.Fprintf(b, "  per link: %s\n", strings.Join(parts, ", "))
	}
	if c.HostOps > 0 {
		what := fmt.Sprintf("%d fills or copies", c.HostOps)
		if c.HostOps == 1 {
			what = "1 fill or copy"
		}
		fmt.Fprintf(b, "  note: %s ran through the client (no node-side kernel for their element type)\n", what)
	}
	var ckBytes int64
	var ckTime time.Duration
	for _, ck := range c.Checkpoints {
		ckBytes += ck.Bytes
		ckTime += ck.Took
	}
	fmt.Fprintf(b, "  node loss: %s; checkpoints: %s, %d taken (%s to the client, %s)\n", c.OnNodeLoss, c.Checkpoint, len(c.Checkpoints), bytesStr(ckBytes), round(ckTime))
	for _, r := range c.Recoveries {
		fmt.Fprintf(b, "  %s\n", r)
	}
	for _, ev := range c.NodeEvents {
		switch ev.Kind {
		case "joined":
			fmt.Fprintf(b, "  node %s joined the job (%s)\n", ev.Node, strings.Join(ev.Devices, ", "))
		case "drained":
			fmt.Fprintf(b, "  node %s drained out of the job: %s handed over, nothing re-run\n", ev.Node, bytesStr(ev.Bytes))
		}
	}
}

var errNoAddrs = usageError{errors.New("--cluster needs at least one address (host:port) of an acpp-node's QUIC listener")}

// clusterCredentials checks cfg's addresses and client name and loads
// the client's credentials.
func clusterCredentials(cfg *ClusterConfig) (*credentials.Credentials, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errNoAddrs
	}
	if cfg.Client == "" {
		return nil, usageError{errors.New("--client NAME (or ACPP_CLIENT) is required with --cluster: the client name issued by acpp-node credentials --dir DIR client NAME")}
	}
	dir := cfg.CredentialsDir
	if dir == "" {
		dir = "/etc/acpp"
	}
	creds, err := credentials.LoadClient(dir, cfg.Client)
	if err != nil {
		return nil, fmt.Errorf("load client credentials %q from %s: %w (make them with acpp-node credentials --dir %s client %s, or pass --credentials DIR)", cfg.Client, dir, err, dir, cfg.Client)
	}
	return creds, nil
}

// Dial starts a node client with the credentials of cfg and connects to
// its addresses; with one address it asks that node for the members and
// returns the QUIC address of every alive member that is not draining (the
// given one first where it serves; none when no member serves), else the
// addresses as given. The caller closes the client.
func Dial(ctx context.Context, cfg *ClusterConfig, log *slog.Logger) (*nodeclient.Client, []string, *proto.Members, error) {
	var creds *credentials.Credentials
	if cfg.client == nil {
		var err error
		if creds, err = clusterCredentials(cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	return dial(ctx, cfg, creds, log)
}

// dial is Dial with the credentials loaded (nil with cfg.client).
func dial(ctx context.Context, cfg *ClusterConfig, creds *credentials.Credentials, log *slog.Logger) (*nodeclient.Client, []string, *proto.Members, error) {
	if len(cfg.Addrs) == 0 {
		return nil, nil, nil, errNoAddrs
	}
	cl := cfg.client
	if cl == nil {
		var err error
		if cl, err = nodeclient.Start(nodeclient.Config{Credentials: creds, Logger: log, DialTimeout: 5 * time.Second}); err != nil {
			return nil, nil, nil, err
		}
	}
	fail := func(err error) (*nodeclient.Client, []string, *proto.Members, error) {
		if cfg.client == nil {
			cl.Close()
		}
		return nil, nil, nil, err
	}
	name, err := cl.Connect(ctx, cfg.Addrs[0])
	if err != nil {
		return fail(fmt.Errorf("%w: connect to %s: %w; is acpp-node running there (its --quic-addr), and are these credentials of its cluster?", ErrCluster, cfg.Addrs[0], err))
	}
	ms, err := cl.Members(ctx, name)
	if err != nil {
		return fail(fmt.Errorf("%w: ask node %s (%s) for the members: %w", ErrCluster, name, cfg.Addrs[0], err))
	}
	if len(cfg.Addrs) > 1 {
		return cl, cfg.Addrs, ms, nil
	}
	var addrs []string
	for _, m := range ms.Members {
		if m.State == "alive" && !m.Leaving && m.QUICAddr != "" {
			addrs = append(addrs, m.QUICAddr)
		}
	}
	// The address given first, so that its node is node 1, unless that
	// node drains: it takes no new jobs, and the job runs on the others.
	first, firstServes := cfg.Addrs[0], true
	for _, m := range ms.Members {
		if m.Name == name && m.QUICAddr != "" {
			first, firstServes = m.QUICAddr, m.State == "alive" && !m.Leaving
		}
	}
	addrs = slices.DeleteFunc(addrs, func(a string) bool { return a == first })
	if firstServes {
		addrs = append([]string{cfg.Addrs[0]}, addrs...)
	}
	return cl, addrs, ms, nil
}

// recoveryPolicy parses the run's --on-node-loss and --checkpoint (or the
// job file's recovery section, once merged into cc) and refuses a
// checkpoint interval with fail: usage errors, which Run also checks
// before it asks the cluster for anything.
func recoveryPolicy(cc *ClusterConfig) (policy acpp.NodeLossPolicy, every int, err error) {
	policy, err = coordinator.ParseNodeLossPolicy(cc.OnNodeLoss)
	if err != nil {
		return 0, 0, usageError{err}
	}
	every, err = coordinator.ParseCheckpoint(cc.Checkpoint)
	if err != nil {
		return 0, 0, usageError{err}
	}
	if policy == coordinator.FailOnLoss && every > 0 {
		loss, cp := "--on-node-loss fail", fmt.Sprintf("--checkpoint %d", every)
		if cc.lossFromJob {
			loss = "on_node_loss: fail (the job file's recovery)"
		}
		if cc.checkpointFromJob {
			cp = fmt.Sprintf("checkpoint: %d (the job file's recovery)", every)
		}
		return 0, 0, usageError{fmt.Errorf("%s has no effect with %s: checkpoints are for recovery; drop the checkpoint (or give --checkpoint off), or recover (--on-node-loss recover)", cp, loss)}
	}
	return policy, every, nil
}

// checkRecovery refuses a job file whose recovery section asks for
// checkpoints with on_node_loss: fail, as a cluster run of it refuses
// (recoveryPolicy) unless flags override one of them.
func checkRecovery(job *jobfile.Job) error {
	r := job.Recovery
	if r.OnNodeLoss == "" || r.Checkpoint == "" {
		return nil
	}
	_, _, err := recoveryPolicy(&ClusterConfig{OnNodeLoss: r.OnNodeLoss, Checkpoint: r.Checkpoint, lossFromJob: true, checkpointFromJob: true})
	var ue usageError
	if errors.As(err, &ue) {
		return job.At(r.Line, "recovery", ue.error)
	}
	return err
}

// openCluster opens the engine over a cluster queue: acpp.Connect to the
// members Dial finds, through Dial's node client (one client per identity
// in a process), with the run's device selection and placement, and with
// the coordinator's group traces going to a clusterRun.
func openCluster(ctx context.Context, cfg Config, log *slog.Logger) (*engine, error) {
	cc := cfg.Cluster
	policy, every, err := recoveryPolicy(cc)
	if err != nil {
		return nil, err
	}
	creds, err := clusterCredentials(cc) // Connect wants them, with a client given too
	if err != nil {
		return nil, err
	}
	cl, addrs, ms, err := dial(ctx, cc, creds, log)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 { // one address given, of a draining node, and no other member serves
		if cc.client == nil {
			cl.Close()
		}
		var draining []string
		for _, m := range ms.Members {
			if m.State == "alive" && m.Leaving {
				draining = append(draining, m.Name)
			}
		}
		return nil, fmt.Errorf("%w: no member takes jobs: %s sees no alive member that is not draining (draining: %s); start a node, or give the address of one that serves",
			ErrCluster, cc.Addrs[0], strings.Join(draining, ", "))
	}
	run := &clusterRun{cl: cl, ownCl: cc.client == nil, keep: cfg.Record, notify: cfg.Notify,
		byID: map[coordinator.GroupID]traced{}, lastDone: map[string]time.Time{}, kernelTime: map[string]time.Duration{}}
	run.stats.OnNodeLoss, run.stats.Checkpoint = policy.String(), coordinator.CheckpointString(every)
	opts := []acpp.Option{acpp.WithClientCredentials(creds), acpp.WithLogger(log),
		acpp.WithNodeLoss(policy), acpp.WithCheckpoints(every),
		acpp.WithCoordinator(func(c *coordinator.Config) {
			c.Client, c.Placement, c.OnGroupDone = cl, cc.Placement, run.groupDone
			c.OnRecovery, c.OnCheckpoint, c.OnNodeEvent = run.recovery, run.checkpoint, run.nodeEvent
			c.Snapshots = cfg.snapshots // the live view's (--ui); nil without
		})}
	if len(cc.Nodes) > 0 {
		opts = append(opts, acpp.WithNodes(cc.Nodes...))
	}
	for _, k := range cc.Kinds {
		kind, err := device.ParseKind(k)
		if err != nil {
			run.closeClient()
			return nil, usageError{fmt.Errorf("--kinds: %w", err)}
		}
		opts = append(opts, acpp.WithKind(kind))
	}
	if len(cc.Addrs) == 1 {
		// One address given: Connect gets the first member that serves
		// alone and lists the others itself, leaving out one it cannot
		// reach (dead since it was listed, not yet detected) where as
		// given it would fail the run; the job's membership watch offers
		// it again if it comes back.
		addrs = addrs[:1]
	}
	q, err := acpp.Connect(ctx, addrs, opts...)
	if err != nil {
		run.closeClient()
		if errors.Is(err, coordinator.ErrNoDevice) {
			// Say it in the flags the user gave, not in the Go API's
			// options the coordinator's error names.
			var sel, have []string
			if len(cc.Nodes) > 0 {
				sel = append(sel, "--nodes "+strings.Join(cc.Nodes, ","))
			}
			if len(cc.Kinds) > 0 {
				sel = append(sel, "--kinds "+strings.Join(cc.Kinds, ","))
			}
			for _, m := range ms.Members {
				if m.State == "alive" && !m.Leaving {
					have = append(have, m.Name+" "+deviceSummary(m.Devices))
				}
			}
			what := "the job's device selection"
			if len(sel) > 0 {
				what = strings.Join(sel, " with ")
			}
			return nil, fmt.Errorf("%w: %s selects none of the cluster's devices (%s); widen it (acpp-submit nodes lists the members and their devices)",
				acpp.ErrNoDevice, what, strings.Join(have, "; "))
		}
		if errors.Is(err, coordinator.ErrInvalidConfig) && len(cc.Addrs) > 1 {
			// Two of the addresses given reach one node (localhost and
			// 127.0.0.1): the flag's mistake, not an unreachable cluster.
			return nil, fmt.Errorf("--cluster %s: %w; give each node's address once", strings.Join(cc.Addrs, ","), err)
		}
		return nil, fmt.Errorf("%w: %w", ErrCluster, err)
	}
	for _, d := range q.ClusterDevices() {
		if n, _, _ := strings.Cut(d, "/"); !slices.Contains(run.stats.Nodes, n) {
			run.stats.Nodes = append(run.stats.Nodes, n)
		}
	}
	return &engine{q: q, cluster: run}, nil
}

// clusterRun is what a cluster run collects beside its queue: the
// coordinator's trace of each finished group (WithCoordinator's
// OnGroupDone), which times the group by its node's clock and gives the
// summary's per-device kernel time, group counts and, for the trace,
// each group's transfers.
type clusterRun struct {
	cl     *nodeclient.Client
	ownCl  bool
	notify func(string)
	keep   bool // keep the instructions of each group (Config.Record: transfers for the trace)
	stats  ClusterStats

	mu sync.Mutex // guards what follows
	// byID are the traces of finished groups not recorded yet.
	byID map[coordinator.GroupID]traced
	// lastDone is, per device, the end of the last group traced there:
	// groups are issued ahead, so a group's busy time starts at the later
	// of its start and its predecessor's end on the device (the same
	// correction the coordinator's duration estimates make).
	lastDone   map[string]time.Time
	kernelTime map[string]time.Duration
	gated      int
}

// traced is a finished coordinator group and its timing.
type traced struct {
	tr     coordinator.GroupTrace
	timing acpp.Timing
}

// groupDone takes a finished group's trace (coordinator.Config.OnGroupDone).
func (c *clusterRun) groupDone(tr coordinator.GroupTrace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tr.Gated {
		c.gated++
	}
	if tr.Device == "" { // host reads and writes, releases: no group of the run
		return
	}
	t := traced{tr: tr, timing: c.timingLocked(tr)}
	c.kernelTime[tr.Device] += t.timing.Duration()
	if !c.keep {
		t.tr.Instrs = nil
	}
	c.byID[tr.ID] = t
}

// timingLocked is a group's timing: its kernel's times on the node, where
// the node sent them, else from its issue to its completion reaching the
// client; either way from no earlier than the end of the previous group
// on the device (it queued behind it).
func (c *clusterRun) timingLocked(tr coordinator.GroupTrace) acpp.Timing {
	for _, in := range tr.Instrs {
		// The node's own times of the kernel, where it sent them.
		if in.Kind == "kernel" && !in.Start.IsZero() {
			start := in.Start
			if last := c.lastDone[tr.Device]; last.After(start) && last.Before(in.End) {
				start = last // it queued behind the previous kernel
			}
			c.lastDone[tr.Device] = in.End
			return acpp.Timing{Submitted: tr.Submitted, Started: start, Ended: in.End}
		}
	}
	start := tr.Issued
	if start.IsZero() {
		start = tr.Submitted
	}
	if last := c.lastDone[tr.Device]; last.After(start) && last.Before(tr.Done) {
		start = last
	}
	if tr.Done.After(c.lastDone[tr.Device]) {
		c.lastDone[tr.Device] = tr.Done
	}
	return acpp.Timing{Submitted: tr.Submitted, Started: start, Ended: tr.Done}
}

// take removes and returns the traces of ev's coordinator groups (one, or
// one per chunk of a split group: Chunks consecutive IDs from ev.ID()), in
// ID order. The queue completes an event after OnGroupDone had the traces
// of all its groups, so a finished event's traces are all here (a failed
// one's may be fewer).
func (c *clusterRun) take(ev *acpp.Event) []traced {
	first := coordinator.GroupID(ev.ID())
	if first == 0 { // done by the client: no coordinator group
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 1
	if t, ok := c.byID[first]; ok {
		n = max(t.tr.Chunks, 1)
	}
	var out []traced
	for id := first; id < first+coordinator.GroupID(n); id++ {
		if t, ok := c.byID[id]; ok {
			out = append(out, t)
			delete(c.byID, id)
		}
	}
	return out
}

// record completes a finished group's record from its traces: its device
// and timing by the node's clock, a split group's chunks, and with
// Config.Record the bytes per link so far and its transfers. A fill or
// copy the client did itself (Device "client") counts as a host op.
func (c *clusterRun) record(g *Group, ev *acpp.Event) {
	if g.Device == "client" {
		c.stats.HostOps++
		return
	}
	trs := c.take(ev)
	if len(trs) == 1 && trs[0].tr.Chunks <= 1 {
		g.Device, g.Timing = trs[0].tr.Device, trs[0].timing
	} else if len(trs) > 0 {
		var devs []string
		for _, t := range trs {
			g.Chunks = append(g.Chunks, Chunk{ID: uint64(t.tr.ID), Device: t.tr.Device, Timing: t.timing})
			if !slices.Contains(devs, t.tr.Device) {
				devs = append(devs, t.tr.Device)
			}
		}
		g.Device = strings.Join(devs, ",")
		g.Timing = g.Chunks[0].Timing
		for _, ch := range g.Chunks {
			if ch.Timing.Started.Before(g.Timing.Started) {
				g.Timing.Started = ch.Timing.Started
			}
			if ch.Timing.Ended.After(g.Timing.Ended) {
				g.Timing.Ended = ch.Timing.Ended
			}
		}
	}
	if c.keep {
		g.Links = linkBytes(g.StatsAfter)
		for _, t := range trs {
			g.Transfers = append(g.Transfers, transfersOf(t.tr.Instrs)...)
		}
	}
}

// linkBytes are a cluster queue's bytes per link "src->dst" (node names,
// "client").
func linkBytes(s acpp.Stats) map[string]int64 {
	out := make(map[string]int64, len(s.Links))
	for _, l := range s.Links {
		out[l.From+"->"+l.To] += l.Bytes
	}
	return out
}

// close records the run's cluster figures in res — the coordinator groups
// submitted, the closed queue's final counters st — and closes the node
// client if the run started it.
func (c *clusterRun) close(res *Result, groups int, st acpp.Stats) error {
	c.mu.Lock()
	c.stats.Bytes, c.stats.KernelTime = linkBytes(st), maps.Clone(c.kernelTime)
	c.stats.Groups, c.stats.Gated = groups, c.gated
	c.mu.Unlock()
	s := c.stats
	res.Cluster = &s
	return c.closeClient()
}

// recovery takes a recovery's start and end (coordinator.Config.OnRecovery).
func (c *clusterRun) recovery(r coordinator.RecoveryReport) {
	if c.notify != nil {
		c.notify(r.String())
	}
	if !r.Done {
		return
	}
	c.mu.Lock()
	c.stats.Recoveries = append(c.stats.Recoveries, r)
	c.mu.Unlock()
}

// checkpoint takes a completed checkpoint (coordinator.Config.OnCheckpoint).
func (c *clusterRun) checkpoint(r coordinator.CheckpointReport) {
	c.mu.Lock()
	c.stats.Checkpoints = append(c.stats.Checkpoints, r)
	c.mu.Unlock()
}

// nodeEvent takes a join, drain or loss (coordinator.Config.OnNodeEvent).
func (c *clusterRun) nodeEvent(ev coordinator.NodeEvent) {
	var line string
	switch ev.Kind {
	case "joined":
		line = fmt.Sprintf("node %s joined the job: %s", ev.Node, strings.Join(ev.Devices, ", "))
	case "draining":
		line = fmt.Sprintf("node %s drains: handing over the pages only it holds", ev.Node)
	case "drained":
		line = fmt.Sprintf("node %s drained: %s handed over, it left the job (nothing re-run)", ev.Node, bytesStr(ev.Bytes))
	default:
		return // losses are told by recovery
	}
	if c.notify != nil {
		c.notify(line)
	}
	c.mu.Lock()
	c.stats.NodeEvents = append(c.stats.NodeEvents, ev)
	c.mu.Unlock()
}

func (c *clusterRun) closeClient() error {
	if c.ownCl {
		return c.cl.Close()
	}
	return nil
}

// transfersOf pairs a group's sends with their recvs on the peer (the
// same bytes, in order) into moves from the sender's start to the
// receiver's end, and adds uploads, readbacks and copies within a node.
func transfersOf(instrs []coordinator.InstrTrace) []Transfer {
	var out []Transfer
	used := make([]bool, len(instrs))
	for _, in := range instrs {
		switch in.Kind {
		case "send":
			tr := Transfer{Kind: "send", From: in.Node, To: in.Peer, Bytes: in.Bytes, Start: in.Start, End: in.End}
			for k, r := range instrs {
				if !used[k] && r.Kind == "recv" && r.Node == in.Peer && r.Peer == in.Node && r.Bytes == in.Bytes {
					used[k] = true
					tr.End = maxTime(tr.End, r.End)
					break
				}
			}
			out = append(out, tr)
		case "upload":
			out = append(out, Transfer{Kind: "upload", From: "client", To: in.Node, Bytes: in.Bytes, Start: in.Start, End: in.End})
		case "readback":
			out = append(out, Transfer{Kind: "readback", From: in.Node, To: "client", Bytes: in.Bytes, Start: in.Start, End: in.End})
		case "copy":
			out = append(out, Transfer{Kind: "copy", From: in.Node, To: in.Node, Bytes: in.Bytes, Start: in.Start, End: in.End})
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
