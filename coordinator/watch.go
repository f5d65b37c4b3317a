package coordinator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// The membership watch (issue 15, items 4 and 5): every
// Config.MembershipInterval the job asks one of its nodes for the
// cluster's members. A member that joined since the job opened is offered
// to it; a job node that drains (Leaving) first hands over the pages only
// it holds, then leaves the job; a job node the members see failed (a
// kill, a hang: gossip probes it directly and through peers) is lost at
// once. The job's own pings were tried and dropped: on a loaded host they
// declared live nodes lost; gossip's indirect probes and Lifeguard do not.

// NodeEvent is a change of the job's nodes, for progress output.
type NodeEvent struct {
	Node string
	// Kind is "joined", "draining", "drained" (its pages handed over, it
	// left the job) or "lost".
	Kind string
	// Bytes are the bytes a drain handed over; Devices the devices a join
	// added; How, for a loss, how the job learnt of it (the membership's
	// "failed" record, a call that failed, a peer's report).
	Bytes   int64
	Devices []string
	How     string
	Time    time.Time
}

// nodeEvents hands the job's NodeEvents to Config.OnNodeEvent in the
// order they happened, from one goroutine: a loss is found under j.mu, by
// whichever part of the job saw it first (the membership watch, a failed
// call, a peer's report), and the callback must not run under the lock.
type nodeEvents struct {
	mu      sync.Mutex
	queue   []NodeEvent
	kick    chan struct{} // has room for one: a send never blocks
	stopped bool          // the deliverer ended with the job: later events are dropped
}

// nodeEvent queues ev for OnNodeEvent; callable with or without j.mu.
func (j *Job) nodeEvent(ev NodeEvent) {
	if j.cfg.OnNodeEvent == nil {
		return
	}
	ev.Time = time.Now()
	e := &j.events
	e.mu.Lock()
	if !e.stopped {
		e.queue = append(e.queue, ev)
	}
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// startEvents starts the goroutine that delivers node events; it ends
// with the job, after delivering what was queued by then.
func (j *Job) startEvents() {
	if j.cfg.OnNodeEvent == nil {
		return
	}
	j.events.kick = make(chan struct{}, 1)
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		e := &j.events
		deliver := func() {
			for {
				e.mu.Lock()
				q := e.queue
				e.queue = nil
				e.mu.Unlock()
				if len(q) == 0 {
					return
				}
				for _, ev := range q {
					j.cfg.OnNodeEvent(ev)
				}
			}
		}
		for {
			select {
			case <-e.kick:
				deliver()
			case <-j.ctx.Done():
				deliver()
				e.mu.Lock()
				e.stopped = true
				e.queue = nil
				e.mu.Unlock()
				return
			}
		}
	}()
}

func (j *Job) startWatch() {
	now := time.Now()
	for _, ns := range j.nodes {
		ns.lastSeen = now
	}
	if j.cfg.MembershipInterval < 0 {
		return
	}
	j.wg.Add(1)
	go j.watch()
}

func (j *Job) watch() {
	defer j.wg.Done()
	t := time.NewTicker(j.cfg.MembershipInterval)
	defer t.Stop()
	for {
		select {
		case <-j.ctx.Done():
			return
		case <-t.C:
		}
		j.checkMembers()
	}
}

// checkMembers asks a node of the job for the members and acts on joins,
// drains and failures.
func (j *Job) checkMembers() {
	j.mu.Lock()
	var ask []string
	for _, ns := range j.nodes {
		if !ns.lost && !j.res.leaving[ns.name] {
			ask = append(ask, ns.name)
		}
	}
	j.mu.Unlock()
	if len(ask) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(j.ctx, 2*time.Second)
	defer cancel()
	ms, err := j.askMembers(ctx, ask)
	if err != nil {
		return
	}
	j.applyMembers(ctx, ms)
}

// applyMembers acts on a member list a node of the job gave: members of
// the job that failed are lost, those that drain are evacuated, new ones
// join (unless the job is Static).
func (j *Job) applyMembers(ctx context.Context, ms *proto.Members) {
	for _, m := range ms.Members {
		j.mu.Lock()
		ns := j.byName[m.Name]
		inJob := ns != nil && !ns.lost
		seen := j.res.seen[m.Name]
		recovering := j.res.recovering != nil
		var boot uint64 // the run of the node the job was opened on
		if inJob {
			boot = ns.boot()
		}
		j.mu.Unlock()
		otherRun := boot != 0 && m.Boot != 0 && m.Boot != boot
		switch {
		case inJob && m.State == "failed" && otherRun:
			// Another run's record: most likely the run before the one
			// the job was opened on, whose news the member asked has while
			// it has not seen the new run yet (a node restarted at once).
			// Boot IDs do not tell which run is older; if the job's run
			// is gone too, its instructions fail and say so.
		case inJob && m.State == "failed":
			j.mu.Lock()
			j.nodeLostLocked(ns, "membership: failed") // tells OnNodeEvent
			j.mu.Unlock()
		case inJob && m.State == "alive" && m.Leaving:
			j.mu.Lock()
			start := !j.res.leaving[m.Name]
			if start {
				j.res.leaving[m.Name] = true
				for _, d := range j.devices {
					if d.node == ns {
						d.leaving = true
					}
				}
				j.wg.Add(1)
				go j.evacuate(ns)
			}
			j.mu.Unlock()
			if start {
				j.nodeEvent(NodeEvent{Node: m.Name, Kind: "draining"})
			}
		case !inJob && m.State == "alive" && !m.Leaving && m.QUICAddr != "" && !j.cfg.Static && !recovering && (!seen || ns != nil):
			j.join(ctx, m)
		}
	}
}

// membersHedge is how long checkMembers waits for a node's answer before
// it asks the next one as well.
const membersHedge = 250 * time.Millisecond

// askMembers asks nodes for the members, the first one first, the next
// whenever membersHedge passes without an answer, and returns the first
// answer. A node that was killed or hangs answers nothing until ctx ends;
// it is the one whose failure the others report, so asking only it would
// hide every failure, its own and any at the same time.
func (j *Job) askMembers(ctx context.Context, nodes []string) (*proto.Members, error) {
	var asks sync.WaitGroup
	defer asks.Wait() // the calls still out end at once with ctx (below)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		ms  *proto.Members
		err error
	}
	answers := make(chan answer, len(nodes))
	hedge := time.NewTimer(0)
	defer hedge.Stop()
	var err error
	next, waiting := 0, 0
	for {
		select {
		case <-hedge.C:
			if next < len(nodes) {
				name := nodes[next]
				next++
				waiting++
				asks.Add(1)
				go func() {
					defer asks.Done()
					ms, err := j.cl.Members(ctx, name)
					answers <- answer{ms, err}
				}()
				hedge.Reset(membersHedge)
			}
		case a := <-answers:
			waiting--
			if a.err == nil {
				return a.ms, nil
			}
			err = a.err
			if waiting == 0 && next == len(nodes) {
				return nil, err
			}
			if waiting == 0 { // failed fast: the next one now
				hedge.Reset(0)
			}
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// join offers a member that joined the cluster to the job: its devices
// that pass Config.Devices are added, and placement and splits use them.
func (j *Job) join(ctx context.Context, m proto.Member) {
	name, err := j.cl.Connect(ctx, m.QUICAddr)
	if err != nil || name != m.Name {
		return
	}
	inv, err := j.cl.Inventory(ctx, name)
	if err != nil || inv.Draining {
		return
	}
	var devs []*Device
	for _, d := range inv.Devices {
		dev := &Device{Node: name, ID: d.ID, Kind: kindOf(d.ID), Mem: d.Mem, Forms: d.Forms, HostUnified: d.HostUnified, MemBytes: d.MemBytes}
		if j.cfg.Devices.match(*dev) {
			devs = append(devs, dev)
		}
	}
	j.mu.Lock()
	if len(devs) == 0 || len(j.nodes) >= maxJobNodes {
		j.res.seen[name] = true // filtered out: not asked again
		if old := j.byName[name]; old != nil && old.lost {
			j.byName[name] = nil
			delete(j.byName, name)
		}
		j.mu.Unlock()
		return
	}
	ep := j.ep
	j.mu.Unlock()
	nj, err := j.cl.Open(ctx, name, ep.jobID, nodeclient.JobOptions{Lease: j.cfg.Lease, MaxBytes: j.cfg.MaxBytes})
	if err != nil {
		return
	}
	j.mu.Lock()
	if ep != j.ep || j.err != nil || j.res.recovering != nil {
		j.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		nj.Close(cctx)
		cancel()
		return
	}
	ns := &nodeState{id: coherence.NodeID(len(j.nodes) + 1), name: name, addr: m.QUICAddr, inv: inv, nj: nj, wake: make(chan struct{}, 1),
		instrs: map[uint64]instrRef{}, lastDone: map[int]time.Time{}, lastEnd: map[int]int64{}, lastSeen: time.Now()}
	j.nodes = append(j.nodes, ns)
	j.byName[name] = ns
	j.res.seen[name] = true
	var names []string
	for _, d := range devs {
		d.node = ns
		j.devByID[d.String()] = len(j.devices)
		j.devices = append(j.devices, d)
		j.queued = append(j.queued, 0)
		j.pending = append(j.pending, 0)
		names = append(names, d.String())
	}
	j.res.stats.Joins++
	j.startNodeLocked(ep, ns)
	j.signalLocked()
	j.mu.Unlock()
	j.log.Info("node joined the job", "node", name, "devices", names)
	j.nodeEvent(NodeEvent{Node: name, Kind: "joined", Devices: names})
}

// maxJobNodes bounds the nodes joins add to one job: the page directory
// holds at most 255 allocations per buffer (the client's among them;
// coherence refuses more with ErrTooManyAllocations).
const maxJobNodes = 254

// evacuate drains ns out of the job: it waits for what is queued there to
// finish, moves the pages whose only copy ns holds to another node, then
// drops ns from the job (nothing lost, nothing re-run) and closes the job
// on it, which lets the node leave.
func (j *Job) evacuate(ns *nodeState) {
	defer j.wg.Done()
	var moved int64
	for {
		if err := j.waitRecovered(j.ctx); err != nil {
			return
		}
		j.mu.Lock()
		ep := j.ep
		j.mu.Unlock()
		n, err := j.evacuateOnce(ep, ns)
		moved += n
		if err == errEpochChanged {
			continue
		}
		if err != nil {
			j.log.Warn("drain: pages not handed over", "node", ns.name, "error", err)
			return
		}
		// Groups planned meanwhile may have picked ns as the source of a
		// copy: leave only when nothing is queued there and it holds no
		// only copy, checked and done under one lock.
		j.mu.Lock()
		if ep != j.ep || (!ns.lost && (len(ns.instrs) > 0 || len(ns.outbox) > 0 || j.holdsOnlyCopiesLocked(ns))) {
			j.mu.Unlock()
			continue
		}
		break
	}
	if ns.lost {
		// Lost while it drained (killed, or its drain ran out): told and
		// recovered as a loss (nodeLostLocked), not a drain.
		j.mu.Unlock()
		j.log.Info("a draining node was lost before it had drained", "node", ns.name, "moved_bytes", moved)
		return
	}
	ns.drained = true
	j.nodeLostLocked(ns, "drained")
	j.res.stats.Drains++
	nj := ns.nj
	j.mu.Unlock()
	cctx, cancel := context.WithTimeout(j.ctx, 5*time.Second)
	nj.Close(cctx)
	cancel()
	j.log.Info("node drained out of the job", "node", ns.name, "moved_bytes", moved)
	j.nodeEvent(NodeEvent{Node: ns.name, Kind: "drained", Bytes: moved})
}

func (j *Job) evacuateOnce(ep *epoch, ns *nodeState) (int64, error) {
	// Let what is queued on ns finish there: nothing is re-run.
	for {
		j.mu.Lock()
		err, ch, cur := j.err, j.changed, j.ep
		busy := len(ns.instrs) > 0 || len(ns.outbox) > 0
		j.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if cur != ep {
			return 0, errEpochChanged
		}
		if !busy {
			break
		}
		select {
		case <-ch:
		case <-j.ctx.Done():
			return 0, context.Cause(j.ctx)
		}
	}
	j.mu.Lock()
	if ep != j.ep {
		j.mu.Unlock()
		return 0, errEpochChanged
	}
	target := -1
	for i, d := range j.devices {
		if !d.lost && !d.leaving && (target < 0 || j.pending[i] < j.pending[target]) {
			target = i
		}
	}
	if target < 0 {
		j.mu.Unlock()
		return 0, fmt.Errorf("no other node to hand the pages to")
	}
	td := j.devices[target]
	dst := coherence.AllocID{Node: td.node.id, Mem: coherence.MemID(td.Mem)}
	var ids []GroupID
	var moved int64
	for _, bid := range slices.Sorted(maps.Keys(j.bufs)) {
		b := j.bufs[bid]
		sole := j.soleCopiesLocked(b, ns.id)
		if len(sole) == 0 {
			continue
		}
		cg := coherence.CommandGroup{ID: j.nextCG}
		for _, pb := range sole {
			cg.Accesses = append(cg.Accesses, coherence.Access{Buffer: b.id, Pages: pb, Mode: Read, Target: dst})
			moved += int64(elemBytes(b, []coherence.Box{pb}))
		}
		step, err := j.core.Submit(cg)
		if err != nil {
			j.mu.Unlock()
			return moved, fmt.Errorf("hand over %s: %w", b, err)
		}
		j.nextCG++
		gs := &groupState{id: cg.ID, kernel: "drain " + ns.name, dev: -1, submitted: time.Now(), internal: true}
		j.live[gs.id] = gs
		j.issueLocked(gs, step, td.node, nil)
		ids = append(ids, gs.id)
	}
	j.mu.Unlock()
	return moved, j.waitGroups(j.ctx, ep, ids)
}

// holdsOnlyCopiesLocked: some page of some buffer has its only copies on ns.
func (j *Job) holdsOnlyCopiesLocked(ns *nodeState) bool {
	for _, b := range j.bufs {
		if len(j.soleCopiesLocked(b, ns.id)) > 0 {
			return true
		}
	}
	return false
}

// soleCopiesLocked are the pages of b whose only valid copies are in
// allocations of node n.
func (j *Job) soleCopiesLocked(b *Buffer, n coherence.NodeID) []coherence.Box {
	all := b.geo.All()
	var sole []coherence.Box
	allocs := j.core.Allocations(b.id)
	for _, a := range allocs {
		if a.Node != n {
			continue
		}
		out, err := j.core.Outdated(b.id, a, all)
		if err != nil {
			continue
		}
		sole = append(sole, subtractBoxes(all, out)...)
	}
	sole = j.heldNowhereLocked(b.id, sole, func(a coherence.AllocID) bool { return a.Node != n })
	return mergeBoxes(sole)
}
