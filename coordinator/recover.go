package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/node/nodeclient"
)

// Recovery (C5, issue 15). A job keeps going when a node is lost:
//
//   - The coordinator logs what the program did (groups, host writes,
//     buffers made and released) since the latest checkpoint.
//   - A checkpoint is a consistent copy of every buffer in the client's
//     host memory: host reads of every buffer planned at one point of the
//     submission order (so the core orders them after the writers before
//     it and before the writers after it). Only pages the client does not
//     hold up to date travel; the rest is already there.
//   - When a node is lost and pages had their only copy there (or groups
//     were running there), the coordinator ends the epoch: it closes the
//     job on the survivors, opens it again, restores every buffer from the
//     checkpoint and replays the log over the devices left (splits
//     re-split), skipping completed groups whose every write is
//     overwritten unread (coherence.PlanRecovery). The program's events
//     complete when their replays do.
//
// Why the client's memory and not a buddy node: the client is the one
// process whose loss ends the job anyway, so a copy there adds no failure
// mode (a buddy can be lost together with the node it covers), and the
// replay needs no extra protocol. The cost is client memory (one copy of
// every buffer, two while the next checkpoint is taken) and the client's
// link.

// NodeLossPolicy is what a job does when it loses a node.
type NodeLossPolicy uint8

const (
	// RecoverOnLoss (the default) rebuilds what only the lost node held,
	// from another copy or from the latest checkpoint and a replay.
	RecoverOnLoss NodeLossPolicy = iota
	// FailOnLoss fails the job with a *NodeLostError when pages had their
	// only copy on the lost node or groups were running there.
	FailOnLoss
)

func (p NodeLossPolicy) String() string {
	switch p {
	case RecoverOnLoss:
		return "recover"
	case FailOnLoss:
		return "fail"
	}
	return fmt.Sprintf("NodeLossPolicy(%d)", p)
}

// ParseNodeLossPolicy reads "recover" or "fail".
func ParseNodeLossPolicy(s string) (NodeLossPolicy, error) {
	switch s {
	case "recover", "":
		return RecoverOnLoss, nil
	case "fail":
		return FailOnLoss, nil
	}
	return 0, fmt.Errorf("on-node-loss %q: want recover or fail", s)
}

// Checkpoint settings (Config.Checkpoint).
const (
	// CheckpointAuto takes checkpoints at the interval Young's formula
	// gives: sqrt(2 × checkpoint time × MTBF of the job's nodes).
	CheckpointAuto = 0
	// CheckpointOff takes none: a recovery replays from the job's start.
	CheckpointOff = -1
)

// ParseCheckpoint reads "auto", "off" or a number of command groups.
func ParseCheckpoint(s string) (int, error) {
	switch s {
	case "auto", "":
		return CheckpointAuto, nil
	case "off":
		return CheckpointOff, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("checkpoint %q: want auto, off or a number of command groups ≥ 1", s)
	}
	return n, nil
}

// CheckpointString is the inverse of ParseCheckpoint.
func CheckpointString(n int) string {
	switch {
	case n == CheckpointAuto:
		return "auto"
	case n < 0:
		return "off"
	}
	return strconv.Itoa(n)
}

// RecoveryStats count a job's recoveries, checkpoints, drains and joins.
type RecoveryStats struct {
	Recoveries  int
	RerunGroups int   // groups run again by replays
	Restored    int64 // bytes restored from checkpoints
	Checkpoints int   // checkpoints completed
	// CheckpointBytes are the bytes checkpoints brought to the client.
	CheckpointBytes int64
	// CheckpointTime is the time checkpoints took, first plan to last page.
	CheckpointTime time.Duration
	Drains, Joins  int
}

// RecoveryReport describes one recovery, for progress output and traces.
// OnRecovery gets it when the recovery starts (Done false) and when it
// ends (Done true).
type RecoveryReport struct {
	Node string // the lost node ("n2, n3" when several were lost during one recovery)
	How  string // how it was lost
	// AtGroup is the last group submitted when the loss was seen.
	AtGroup GroupID
	// Lost are the ranges that had no valid copy left; LostBytes their size.
	Lost      []LostRange
	LostBytes int64
	// Buffers restored from the checkpoint, and their bytes.
	FromCheckpoint int
	RestoredBytes  int64
	// Rerun is the number of command groups run again (chunks count one
	// each as they were submitted; a replayed split counts its chunks).
	Rerun int
	// Checkpoint is the group the restored checkpoint was taken after (0:
	// the job's start).
	Checkpoint GroupID
	// Detection is the time from the node's last sign of life to the loss
	// being declared; Replay from then to the recovery's end.
	Detection, Replay time.Duration
	Started, Ended    time.Time
	Done              bool
	Err               error // set when the recovery failed (the job failed)
}

func (r RecoveryReport) String() string {
	who := "node " + r.Node
	if strings.Contains(r.Node, ", ") {
		who = "nodes " + r.Node
	}
	if !r.Done {
		if r.Checkpoint == 0 {
			return fmt.Sprintf("%s lost at group %d: recovering %s (no checkpoint yet: replaying the groups from the job's start on the nodes left) …", who, r.AtGroup, mib(r.LostBytes))
		}
		return fmt.Sprintf("%s lost at group %d: recovering %s (restoring the checkpoint taken after group %d, replaying the groups since on the nodes left) …", who, r.AtGroup, mib(r.LostBytes), r.Checkpoint)
	}
	if r.Err != nil {
		return fmt.Sprintf("%s lost at group %d: recovery failed: %v", who, r.AtGroup, r.Err)
	}
	bufs := fmt.Sprintf("%d buffers", r.FromCheckpoint)
	if r.FromCheckpoint == 1 {
		bufs = "1 buffer"
	}
	from := fmt.Sprintf("%s, %s from the checkpoint after group %d", bufs, mib(r.RestoredBytes), r.Checkpoint)
	if r.Checkpoint == 0 {
		from = "from the job's start: no checkpoint yet"
	}
	rerun := fmt.Sprintf("%d groups re-run", r.Rerun)
	if r.Rerun == 1 {
		rerun = "1 group re-run"
	}
	return fmt.Sprintf("%s lost at group %d: recovered %s (%s; %s) in %v (detection %v)",
		who, r.AtGroup, mib(r.LostBytes), from, rerun, r.Replay.Round(time.Millisecond), r.Detection.Round(time.Millisecond))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// opKind is what a logged operation did.
type opKind uint8

const (
	opGroup opKind = iota
	opWrite
	opNewBuffer
	opRelease
)

// logOp is one operation of the program since the latest checkpoint.
type logOp struct {
	kind opKind
	g    Group     // opGroup
	ids  []GroupID // opGroup: the IDs Submit returned
	buf  *Buffer
	off  Dims   // opWrite
	rng  Dims   // opWrite
	data []byte // opWrite: the data; opNewBuffer: Init (nil: none)
}

// checkpoint is a consistent copy of every buffer at one point of the log.
type checkpoint struct {
	at    int                // log position: ops before it are in the copy
	after GroupID            // the last group submitted before it
	data  map[*Buffer][]byte // nil data: the buffer had no contents yet
	bytes int64              // the copies' size
}

// replaySet is one logged group being replayed: its chunks, and the
// program's IDs to report once they are all done.
type replaySet struct {
	orig   []GroupID // the program's IDs still waiting for their trace
	chunks int       // GroupTrace.Chunks of the original submission
	left   int       // replayed chunks not done yet
	last   GroupTrace
}

// doneLocked records a finished chunk; when it is the last, it returns
// the traces of the program's groups.
func (r *replaySet) doneLocked(tr GroupTrace) []GroupTrace {
	r.left--
	if tr.Done.After(r.last.Done) || r.last.Device == "" {
		r.last = tr
	}
	if r.left > 0 {
		return nil
	}
	var out []GroupTrace
	for _, id := range r.orig {
		t := r.last
		t.ID, t.Chunks, t.Replayed = id, r.chunks, true
		out = append(out, t)
	}
	r.orig = nil
	return out
}

// recovery is one recovery in progress.
type recovery struct {
	report RecoveryReport
	nodes  []string
	again  bool // another node was lost meanwhile: start over
	// reopening cancels a survivor's close and reopen in restart, for a
	// survivor lost meanwhile (a killed node answers nothing until the
	// calls time out).
	reopening map[*nodeState]context.CancelFunc
	// unassigned are program IDs owed a trace whose replay an
	// interrupted restart had not submitted yet.
	unassigned map[GroupID]bool
}

// resilience is a job's recovery state; guarded by Job.mu.
type resilience struct {
	on         bool // Config.OnNodeLoss == RecoverOnLoss
	log        []logOp
	base       int // log position of log[0]
	ckpt       *checkpoint
	taking     bool      // a checkpoint is being taken
	since      int       // groups submitted since the latest checkpoint began
	lastAt     time.Time // when the latest checkpoint began (or the job opened)
	cost       time.Duration
	recovering *recovery
	stats      RecoveryStats
	seen       map[string]bool // members at Open or already considered (joins)
	leaving    map[string]bool // nodes draining out of the job
}

func (r *resilience) init(j *Job) {
	r.on = j.cfg.OnNodeLoss == RecoverOnLoss
	r.lastAt = time.Now()
	r.ckpt = &checkpoint{data: map[*Buffer][]byte{}}
	r.seen = map[string]bool{}
	r.leaving = map[string]bool{}
	for _, ns := range j.nodes {
		r.seen[ns.name] = true
	}
}

func (r *resilience) appendLocked(op logOp) {
	if r.on {
		r.log = append(r.log, op)
	}
}

func (r *resilience) logGroupLocked(g Group, ids []GroupID) {
	r.since += len(ids)
	r.appendLocked(logOp{kind: opGroup, g: g, ids: ids})
}

// waitRecovered waits until no recovery is in progress.
func (j *Job) waitRecovered(ctx context.Context) error {
	for {
		j.mu.Lock()
		err, rec, ch := j.err, j.res.recovering, j.changed
		j.mu.Unlock()
		if err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// replayable adapts a logged group to the devices left: a pin to a lost
// device is dropped (placement chooses again), split devices that are
// lost are left out (the split is cut over the others).
func (j *Job) replayable(g Group) Group {
	j.mu.Lock()
	defer j.mu.Unlock()
	gone := func(name string) bool {
		i, ok := j.devByID[name]
		return !ok || j.devices[i].lost || j.devices[i].leaving
	}
	if g.Device != "" && gone(g.Device) {
		g.Device = ""
	}
	if g.Split != nil && len(g.Split.Devices) > 0 {
		sp := *g.Split
		sp.Devices = slices.DeleteFunc(slices.Clone(sp.Devices), gone)
		g.Split = &sp
	}
	return g
}

// startRecoveryLocked ends the epoch and starts a recovery from the loss
// of ns (e describes what was lost); false when the job cannot recover
// (policy, or no node left).
func (j *Job) startRecoveryLocked(ns *nodeState, how string, e *NodeLostError, lostBytes int64) bool {
	if !j.res.on {
		return false
	}
	// A recovery under way takes in the loss even when no node is left:
	// its close and reopen of ns are cancelled, and restart then fails
	// naming every node lost.
	if r := j.res.recovering; r != nil {
		if cancel := r.reopening[ns]; cancel != nil {
			cancel()
		}
		r.nodes = append(r.nodes, ns.name)
		r.report.Lost = append(r.report.Lost, e.Lost...)
		r.report.LostBytes += lostBytes
		r.again = true
		j.ep.cancel(errEpochChanged)
		return true
	}
	left := false
	for _, d := range j.devices {
		if !d.lost && !d.leaving {
			left = true
		}
	}
	if !left {
		e.How += "; no node is left to recover on"
		return false
	}
	detect := time.Duration(0)
	if !ns.lastSeen.IsZero() {
		detect = time.Since(ns.lastSeen)
	}
	r := &recovery{nodes: []string{ns.name}, report: RecoveryReport{Node: ns.name, How: how, AtGroup: j.nextCG - 1, Lost: e.Lost,
		LostBytes: lostBytes, Detection: detect, Started: time.Now(), Checkpoint: j.res.ckpt.after}}
	j.res.recovering = r
	j.ep.cancel(errEpochChanged)
	j.signalLocked()
	j.log.Warn("node lost: recovering", "node", ns.name, "how", how, "lost_bytes", lostBytes, "at_group", r.report.AtGroup)
	j.wg.Add(1)
	go j.recover(r)
	return true
}

// recover runs recovery r to its end (in its own goroutine).
func (j *Job) recover(r *recovery) {
	defer j.wg.Done()
	if j.cfg.OnRecovery != nil {
		j.cfg.OnRecovery(r.report)
	}
	for {
		ids, err := j.restart(r)
		j.mu.Lock()
		r.report.Rerun += len(ids)
		if err == nil && r.again {
			r.again = false
			j.mu.Unlock()
			continue
		}
		rep := &r.report
		rep.Node = strings.Join(r.nodes, ", ")
		j.res.recovering = nil
		ep := j.ep
		j.signalLocked()
		j.mu.Unlock()
		if err == nil {
			// The program goes on meanwhile; the recovery is over when
			// what it replayed has run.
			if werr := j.waitGroups(j.ctx, ep, ids); werr != nil && werr != errEpochChanged {
				err = werr
			}
		}
		j.mu.Lock()
		rep.Ended, rep.Done = time.Now(), true
		rep.Replay = rep.Ended.Sub(rep.Started)
		if err != nil {
			rep.Err = err
			j.failLocked(err)
		} else {
			j.res.stats.Recoveries++
			j.res.stats.RerunGroups += rep.Rerun
			j.res.stats.Restored += rep.RestoredBytes
			j.log.Warn("recovered", "nodes", rep.Node, "rerun", rep.Rerun, "took", rep.Replay)
		}
		j.signalLocked()
		report := *rep
		j.mu.Unlock()
		if j.cfg.OnRecovery != nil {
			j.cfg.OnRecovery(report)
		}
		return
	}
}

// restart ends the current epoch and starts the next one from the latest
// checkpoint, replaying the log since. It returns the groups re-run.
func (j *Job) restart(r *recovery) ([]GroupID, error) {
	j.mu.Lock()
	old := j.ep
	j.mu.Unlock()
	// A loss seen while the previous pass reopened the job cancelled the
	// epoch before that one, not the epoch the pass then started.
	old.cancel(errEpochChanged)
	old.wg.Wait()
	if j.ctx.Err() != nil {
		return nil, context.Cause(j.ctx)
	}

	// Close the job on the survivors (their allocations and pending
	// instructions go) and open it again for the next epoch.
	j.mu.Lock()
	var alive []*nodeState
	for _, ns := range j.nodes {
		if !ns.lost {
			alive = append(alive, ns)
		}
	}
	next := j.newEpoch(old.n + 1)
	r.reopening = map[*nodeState]context.CancelFunc{}
	ctxs := make([]context.Context, len(alive))
	for i, ns := range alive {
		ctxs[i], r.reopening[ns] = context.WithCancel(j.ctx)
	}
	j.mu.Unlock()
	njs := make([]*nodeclient.Job, len(alive))
	errs := make([]error, len(alive))
	var wg sync.WaitGroup
	for i, ns := range alive {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctxs[i], 3*time.Second)
			defer cancel()
			ns.nj.Close(cctx) // best effort: its lease ends it otherwise
			octx, ocancel := context.WithTimeout(ctxs[i], 10*time.Second)
			defer ocancel()
			njs[i], errs[i] = j.cl.Open(octx, ns.name, next.jobID, nodeclient.JobOptions{Lease: j.cfg.Lease, MaxBytes: j.cfg.MaxBytes, Recovery: uint32(next.n)})
		})
	}
	wg.Wait()
	j.mu.Lock()
	for _, cancel := range r.reopening {
		cancel()
	}
	r.reopening = nil
	j.mu.Unlock()
	if testHookReopened != nil {
		testHookReopened()
	}

	j.mu.Lock()
	if j.err != nil {
		j.mu.Unlock()
		return nil, j.err
	}
	for i, ns := range alive {
		if ns.lost { // lost meanwhile (nodeLostLocked): r.nodes has it
			if nj := njs[i]; nj != nil {
				j.wg.Add(1)
				go func() { // owned by the job: Close cancels j.ctx and waits
					defer j.wg.Done()
					cctx, cancel := context.WithTimeout(j.ctx, 3*time.Second)
					defer cancel()
					nj.Close(cctx) // best effort: its lease ends it otherwise
				}()
			}
			continue
		}
		if errs[i] != nil {
			j.log.Warn("node left out of the recovery: cannot open the job again", "node", ns.name, "error", errs[i])
			j.markLostLocked(ns)
			r.nodes = append(r.nodes, ns.name)
			continue
		}
		ns.nj = njs[i]
	}
	left := false
	for _, d := range j.devices {
		if !d.lost && !d.leaving {
			left = true
		}
	}
	if !left {
		j.mu.Unlock()
		return nil, &NodeLostError{Node: strings.Join(r.nodes, ", "), How: r.report.How + "; no node is left to recover on", Lost: r.report.Lost}
	}

	// The new epoch: a fresh page directory holding the checkpoint.
	owed := j.owedLocked(r)
	j.ep = next
	j.core = coherence.New(coherence.Config{})
	j.live = map[GroupID]*groupState{}
	j.gated = 0
	clear(j.queued)
	clear(j.pending)
	j.lineage = map[coherence.BufferID][]writeRec{}
	for _, ns := range j.nodes {
		ns.outbox, ns.instrs, ns.enqSeq, ns.subSeq, ns.nextInstr = nil, map[uint64]instrRef{}, 0, 0, 0
		ns.low, ns.forgot = 0, 0 // the next epoch's node jobs number from 1 again
	}
	ck := j.res.ckpt
	j.bufs = map[coherence.BufferID]*Buffer{}
	restored := int64(0)
	for b, data := range ck.data {
		b.allocs = nil
		bs := coherence.BufferSpec{ID: b.id, Geometry: b.geo}
		b.host = nil
		if data != nil {
			b.host = slices.Clone(data)
			a := clientAlloc
			bs.HostData = &a
			restored += int64(len(data))
		}
		if err := j.core.AddBuffer(bs); err != nil {
			j.mu.Unlock()
			return nil, fmt.Errorf("%w: recovery: restore %s: %w", ErrJobFailed, b, err)
		}
		j.bufs[b.id] = b
	}
	r.report.FromCheckpoint, r.report.RestoredBytes = len(ck.data), r.report.RestoredBytes+restored
	ops := slices.Clone(j.res.log[ck.at-j.res.base:])
	pending := owed
	plan := j.planReplayLocked(ops, pending)
	for _, ns := range j.nodes {
		if !ns.lost {
			j.startNodeLocked(next, ns)
		}
	}
	j.signalLocked()
	j.mu.Unlock()

	// Replay, in log order.
	ctx := next.ctx
	var rerun []GroupID
	for i, op := range ops {
		var err error
		switch op.kind {
		case opNewBuffer:
			j.mu.Lock()
			op.buf.allocs, op.buf.host = nil, nil
			bs := coherence.BufferSpec{ID: op.buf.id, Geometry: op.buf.geo}
			if op.data != nil {
				op.buf.host = slices.Clone(op.data)
				a := clientAlloc
				bs.HostData = &a
			}
			if err = j.core.AddBuffer(bs); err == nil {
				j.bufs[op.buf.id] = op.buf
			}
			j.mu.Unlock()
		case opWrite:
			_, _, err = j.hostAccessOnce(ctx, op.buf, op.off, op.rng, op.data, true)
		case opRelease:
			err = j.releaseOnce(ctx, op.buf, true)
		case opGroup:
			if !plan[i] {
				continue
			}
			rep := &replaySet{chunks: len(op.ids)}
			for _, id := range op.ids {
				if pending[id] {
					rep.orig = append(rep.orig, id)
					delete(pending, id)
				}
			}
			var ids []GroupID
			for {
				ids, err = j.submit(ctx, op.g, rep)
				if err != errDevicesChanged { // a drain while planning: plan again
					break
				}
			}
			rerun = append(rerun, ids...)
		}
		if err != nil {
			if next.ctx.Err() != nil && j.ctx.Err() == nil {
				r.unassigned = pending
				return rerun, nil // another loss: the caller starts over
			}
			return rerun, fmt.Errorf("%w: recovery: replay: %w", ErrJobFailed, err)
		}
	}
	// Program groups still waiting that the replay did not run (read-only
	// groups before the checkpoint): nothing they did can be lost.
	var traces []GroupTrace
	j.mu.Lock()
	r.unassigned = nil
	for id := range pending {
		traces = append(traces, GroupTrace{ID: id, Kernel: "replayed", Device: "-", Chunks: 1, Replayed: true, Done: time.Now()})
	}
	if j.cfg.OnGroupDone != nil {
		j.notifying += len(traces)
	}
	j.mu.Unlock()
	j.notify(traces)
	return rerun, nil
}

// testHookReopened, when set (tests only), runs in restart once the job
// was opened again on the survivors, before the new epoch starts: where
// another loss can come during a recovery.
var testHookReopened func()

// markLostLocked takes ns and its devices out of the job without the
// page directory (which recovery replaces).
func (j *Job) markLostLocked(ns *nodeState) {
	ns.lost = true
	for _, d := range j.devices {
		if d.node == ns {
			d.lost = true
		}
	}
}

// owedLocked is the set of program group IDs not yet reported done: the
// live program groups, the ones live replays stand for, and those an
// interrupted replay had not reached yet.
func (j *Job) owedLocked(r *recovery) map[GroupID]bool {
	out := map[GroupID]bool{}
	for id := range r.unassigned {
		out[id] = true
	}
	for _, gs := range j.live {
		if gs.rep != nil {
			for _, id := range gs.rep.orig {
				out[id] = true
			}
		} else if gs.user && !gs.completed {
			out[gs.id] = true
		}
	}
	return out
}

// planReplayLocked says which logged ops to replay: every op but the
// completed groups whose writes are all overwritten, unread, later
// (coherence.PlanReplay).
func (j *Job) planReplayLocked(ops []logOp, pending map[GroupID]bool) []bool {
	var gs []coherence.LoggedGroup
	var at []int
	for i, op := range ops {
		if op.kind != opGroup {
			continue
		}
		lg := coherence.LoggedGroup{ID: op.ids[0], Done: true}
		for _, id := range op.ids {
			if pending[id] {
				lg.Done = false
			}
		}
		for _, a := range op.g.Args {
			if a.acc == nil {
				continue
			}
			acc := a.acc
			pages := acc.Buffer.geo.All()
			if op.g.Split == nil {
				if p, err := acc.Buffer.pageRange(acc.Offset, acc.Range); err == nil {
					pages = p
				}
			}
			lg.Accesses = append(lg.Accesses, coherence.Access{Buffer: acc.Buffer.id, Pages: pages, Mode: acc.Mode,
				// A split's chunks write parts of the range: only a whole,
				// unsplit discard write kills what was there.
				Discard: acc.NoInit && op.g.Split == nil && acc.Buffer.geo.ElementBox(pages) == (coherence.Box{Lo: acc.Offset, Hi: addDims(acc.Offset, rangeOr(acc))})})
		}
		gs = append(gs, lg)
		at = append(at, i)
	}
	keep := coherence.PlanReplay(gs)
	out := make([]bool, len(ops))
	for i, op := range ops {
		if op.kind != opGroup {
			out[i] = true
		}
	}
	for k, i := range at {
		out[i] = keep[k]
	}
	return out
}

func rangeOr(a *Accessor) Dims {
	if a.Range == (Dims{}) {
		return sub(a.Buffer.geo.Range, a.Offset)
	}
	return a.Range
}

// ---- checkpoints ----

// checkpointDueLocked says whether to take a checkpoint now.
func (j *Job) checkpointDueLocked() bool {
	r := &j.res
	if !r.on || r.taking || r.recovering != nil || j.cfg.Checkpoint < 0 || len(j.bufs) == 0 {
		return false
	}
	if n := j.cfg.Checkpoint; n > 0 {
		return r.since >= n
	}
	if r.since == 0 {
		return false
	}
	return time.Since(r.lastAt) >= j.checkpointIntervalLocked()
}

// checkpointIntervalLocked is Young's interval sqrt(2·C·M): C the last
// checkpoint's time (before the first: the buffers' bytes at the network
// bandwidth), M the mean time between failures of the job's nodes.
func (j *Job) checkpointIntervalLocked() time.Duration {
	c := j.res.cost
	if c == 0 {
		total := 0
		for _, b := range j.bufs {
			total += b.geo.Bytes()
		}
		c = time.Duration(float64(total) / j.cfg.NetworkBandwidth * float64(time.Second))
	}
	// A checkpoint costs at least a round trip and its planning, whatever
	// its size: tiny buffers must not be copied at every Submit.
	c = max(c, minCheckpointCost)
	nodes := 0
	for _, ns := range j.nodes {
		if !ns.lost {
			nodes++
		}
	}
	m := j.cfg.NodeMTBF / time.Duration(max(nodes, 1))
	return time.Duration(math.Sqrt(2 * c.Seconds() * m.Seconds() * 1e18))
}

// maybeCheckpoint starts a checkpoint when one is due.
func (j *Job) maybeCheckpoint() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil || !j.checkpointDueLocked() {
		return
	}
	j.startCheckpointLocked()
}

// startCheckpointLocked plans a host read of every buffer at this point
// of the submission order and finishes them in a goroutine.
func (j *Job) startCheckpointLocked() {
	r := &j.res
	r.taking, r.since, r.lastAt = true, 0, time.Now()
	ck := &checkpoint{at: r.base + len(r.log), after: j.nextCG - 1, data: map[*Buffer][]byte{}}
	ep := j.ep
	var reads []*hostOp
	for _, id := range slices.Sorted(maps.Keys(j.bufs)) {
		b := j.bufs[id]
		if len(j.core.Allocations(id)) == 0 {
			ck.data[b] = nil // nothing written yet, and no Init
			continue
		}
		op, err := j.planHostLocked(ep, b, Dims{}, b.geo.Range, b.geo.All(), nil, "checkpoint")
		if err != nil {
			j.log.Warn("checkpoint not taken", "error", err)
			r.taking = false
			return
		}
		reads = append(reads, op)
	}
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		start := time.Now()
		var mu sync.Mutex
		var bytes int64
		errs := make([]error, len(reads))
		var wg sync.WaitGroup
		for i, op := range reads {
			wg.Go(func() {
				data, n, err := j.finishHost(ep.ctx, op, true)
				errs[i] = err
				mu.Lock()
				ck.data[op.b] = data
				bytes += n
				mu.Unlock()
			})
		}
		wg.Wait()
		took := time.Since(start)
		j.mu.Lock()
		defer j.mu.Unlock()
		r.taking = false
		if err := errors.Join(errs...); err != nil || ep != j.ep {
			j.log.Info("checkpoint abandoned", "error", err)
			return
		}
		for _, d := range ck.data {
			ck.bytes += int64(len(d))
		}
		// The log before the checkpoint is no longer needed.
		drop := ck.at - r.base
		clear(r.log[:drop])
		r.log = r.log[drop:]
		r.base = ck.at
		r.ckpt = ck
		r.cost = took
		r.stats.Checkpoints++
		r.stats.CheckpointBytes += bytes
		r.stats.CheckpointTime += took
		if j.cfg.OnCheckpoint != nil {
			j.cfg.OnCheckpoint(CheckpointReport{After: ck.after, Bytes: bytes, Start: start, Took: took})
		}
		j.log.Debug("checkpoint", "after_group", ck.after, "bytes", bytes, "took", took)
	}()
}

// minCheckpointCost is the least a checkpoint is assumed to cost.
const minCheckpointCost = 10 * time.Millisecond

// CheckpointReport describes a completed checkpoint.
type CheckpointReport struct {
	After GroupID // the last group before it
	Bytes int64   // bytes brought to the client
	Start time.Time
	Took  time.Duration
}
