package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// instrState is where an instruction is in its life.
type instrState uint8

const (
	// stWaiting: some dependency has not completed.
	stWaiting instrState = iota + 1
	// stArmed: a Recv or Upload whose dependencies are done and whose
	// allocation exists, waiting for its pages.
	stArmed
	// stRunning: its work is on a device or on the network.
	stRunning
	stDone
	stFailed
)

type instr struct {
	in         proto.Instr
	state      instrState
	waiting    int // dependencies not yet completed
	dependents []*instr
	// claimed: an incoming transfer (or a staged arrival) fills this Recv.
	claimed bool
	// cancel stops a Send or ReadBack in flight.
	cancel context.CancelCauseFunc
	// started is when it started (Unix ns; 0 until then), reported on its
	// completion event.
	started int64
}

func (in *instr) finished() bool { return in.state == stDone || in.state == stFailed }

type allocKey struct {
	buf uint64
	mem uint32
}

// alloc is one allocation of a job: a buffer's full storage in one memory.
type alloc struct {
	key   allocKey
	m     *memory
	mem   *device.Mem
	rng   [3]uint64
	elem  uint32
	bytes uint64
	// exported is the allocation's export handle for pages by reference
	// (guarded by job.mu); nil until a send needed it. serial tells this
	// allocation from earlier ones that had the same address.
	exported []byte
	serial   uint64
	// exportFailed: the device could not export it; its pages go as
	// bytes.
	exportFailed bool
	// lentTo are the peers it was sent to by reference (guarded by
	// job.mu): they may have it mapped, and it is freed only after they
	// unmapped it (freeLent).
	lentTo []string
}

// arrival is a page transfer that came before its Recv was armed; its bytes
// wait in host memory, packed in payload order.
type arrival struct {
	from   string // sending node, "" for the job's client
	boot   uint64 // the sending node's run (its boot ID; 0: unknown)
	hdr    proto.PageHeader
	st     stagingBuf
	landed bool
	claim  *instr
	// ref is the sender's allocation, mapped, for pages by reference
	// (pageref.go); refBytes its size; refDone gets the copy's outcome.
	ref      *device.Mem
	refBytes uint64
	refDone  chan error
	// at, claimedAt and copyAt time a transfer by reference (debug logs):
	// mapped, claimed by its Recv, copy enqueued. claimedAt is set under
	// job.mu, copyAt by applyRef; both are read after refDone.
	at, claimedAt, copyAt time.Time
}

// job is one job on this node. mu guards every field below it; it is never
// held across a device call or network I/O.
type job struct {
	n     *Node
	id    uint64
	owner credentials.Identity
	// ctx is cancelled when the job closes; sends and readbacks derive
	// from it.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	closed   error // why the job closed; nil while open
	lease    time.Duration
	expires  time.Time
	maxBytes uint64
	bytes    uint64 // allocations and staged arrivals
	allocs   map[allocKey]*alloc
	instrs   map[uint64]*instr
	pending  int      // instructions not finished
	running  int      // instructions in stRunning
	recvs    []*instr // Recv and Upload instructions, in submission order: the unfinished ones, and up to as many finished (recvsDone)
	// recvsDone counts the finished instructions in recvs: they are
	// dropped together once they are half of it, so that finishing each
	// costs no search (closing a job with 40,000 waiting uploads took a
	// second with a search each, quadratic).
	recvsDone int
	// feedFull: events past Config.FeedLimit were not recorded (logged once).
	feedFull bool
	early    []*arrival
	events   []proto.Event
	seq      uint64
	failures map[uint64]*proto.InstrError
	changed  chan struct{} // closed and replaced at every completion
	freed    bool
	imports  map[string]imported // peers' allocations mapped for pages by reference
}

func newJob(n *Node, id uint64, owner credentials.Identity, lease time.Duration, maxBytes uint64) *job {
	j := &job{n: n, id: id, owner: owner, lease: lease, expires: time.Now().Add(lease), maxBytes: maxBytes,
		allocs: map[allocKey]*alloc{}, instrs: map[uint64]*instr{}, failures: map[uint64]*proto.InstrError{}, changed: make(chan struct{})}
	j.ctx, j.cancel = context.WithCancelCause(n.ctx)
	return j
}

func (j *job) touch() {
	j.mu.Lock()
	j.expires = time.Now().Add(j.lease)
	j.mu.Unlock()
}

func (j *job) expired(now time.Time) (time.Duration, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lease, j.closed == nil && now.After(j.expires)
}

func (j *job) busy() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pending
}

// reserveLocked admits page staging (host memory) against the job's
// limit, the host memory's budget and the node's total.
func (j *job) reserveLocked(bytes uint64, what string) error {
	return j.reserveInLocked(j.n.devs.host(), bytes, what)
}

// reserveInLocked admits bytes in memory m against the job's limit, m's
// budget and the node's total, before anything is allocated.
func (j *job) reserveInLocked(m *memory, bytes uint64, what string) error {
	if j.maxBytes != 0 && j.bytes+bytes > j.maxBytes {
		return fmt.Errorf("%w: %s of %d bytes would make job %d hold %d bytes, its limit is %d", ErrMemoryLimit, what, bytes, j.id, j.bytes+bytes, j.maxBytes)
	}
	if err := j.n.reserve(m, bytes, what); err != nil {
		return err
	}
	j.bytes += bytes
	return nil
}

// releaseLocked returns staging that reserveLocked admitted.
func (j *job) releaseLocked(bytes uint64) { j.releaseInLocked(j.n.devs.host(), bytes) }

// releaseInLocked returns bytes of memory m that reserveInLocked admitted.
func (j *job) releaseInLocked(m *memory, bytes uint64) {
	j.bytes -= bytes
	j.n.release(m, bytes)
}

// submit checks a batch as a whole and adds it; nothing is added when any
// instruction is bad. It returns the number of unfinished instructions.
func (j *job) submit(batch []proto.Instr, forget uint64) (int, error) {
	if len(batch) > proto.MaxBatch {
		return 0, reply(proto.CodeBadInstr, "batch of %d instructions, at most %d; split it", len(batch), proto.MaxBatch)
	}
	j.mu.Lock()
	if j.closed != nil {
		j.mu.Unlock()
		return 0, reply(proto.CodeNoJob, "job %d is closed: %v", j.id, j.closed)
	}
	if held, limit := len(j.instrs), j.n.cfg.MaxJobInstrs; held+len(batch) > limit {
		j.mu.Unlock()
		return 0, reply(proto.CodeTooLarge, "job %d holds %d instructions and this batch adds %d, more than this node keeps for one job (%d): let it forget finished ones (Submit.Forget) and wait for pending ones before submitting more", j.id, held, len(batch), limit)
	}
	seen := map[uint64]bool{}
	for i := range batch {
		in := &batch[i]
		if err := in.Validate(); err != nil {
			j.mu.Unlock()
			return 0, reply(proto.CodeBadInstr, "%v", err)
		}
		if (in.Kind == proto.InstrSend || in.Kind == proto.InstrRecv) && in.Peer == j.n.cfg.Name {
			j.mu.Unlock()
			return 0, reply(proto.CodeBadInstr, "instruction %d: %v with this node itself (%s); move pages within a node with a copy instruction", in.ID, in.Kind, in.Peer)
		}
		if _, dup := j.instrs[in.ID]; dup || seen[in.ID] {
			j.mu.Unlock()
			return 0, reply(proto.CodeBadInstr, "instruction %d: ID already used in job %d; IDs are unique per job and node", in.ID, j.id)
		}
		for _, d := range in.Deps {
			if _, ok := j.instrs[d]; !ok && !seen[d] {
				j.mu.Unlock()
				return 0, reply(proto.CodeBadInstr, "instruction %d depends on %d, which was not submitted before it", in.ID, d)
			}
		}
		seen[in.ID] = true
	}
	var ready []*instr
	for i := range batch {
		in := &instr{in: batch[i], state: stWaiting}
		j.instrs[in.in.ID] = in
		j.pending++
		var failedDep *instr
		for _, d := range slices.Compact(slices.Sorted(slices.Values(in.in.Deps))) {
			dep := j.instrs[d]
			switch dep.state {
			case stDone:
			case stFailed:
				failedDep = dep
			default:
				in.waiting++
				dep.dependents = append(dep.dependents, in)
			}
		}
		if in.in.Kind == proto.InstrRecv || in.in.Kind == proto.InstrUpload {
			j.recvs = append(j.recvs, in)
		}
		switch {
		case failedDep != nil:
			ready = append(ready, j.finishLocked(in, depFailed(failedDep))...)
		case in.waiting == 0:
			in.state, in.started = stRunning, time.Now().UnixNano()
			j.running++
			ready = append(ready, in)
		}
	}
	if forget > 0 {
		for id, in := range j.instrs {
			if id < forget && in.finished() {
				delete(j.instrs, id)
				delete(j.failures, id)
			}
		}
	}
	pending := j.pending
	j.n.met.pending.Add(float64(len(batch)))
	j.mu.Unlock()
	j.startAll(ready)
	return pending, nil
}

func depFailed(dep *instr) error {
	return &depError{id: dep.in.ID}
}

type depError struct{ id uint64 }

func (e *depError) Error() string {
	return fmt.Sprintf("dependency %d failed, so this instruction did not run", e.id)
}

func (j *job) startAll(ready []*instr) {
	for _, in := range ready {
		j.start(in)
	}
}

// finish records the outcome of a started instruction and starts the
// dependents that became ready.
func (j *job) finish(in *instr, err error) {
	j.mu.Lock()
	ready := j.finishLocked(in, err)
	free := j.freeIfIdleLocked()
	j.mu.Unlock()
	j.startAll(ready)
	free()
}

// finishLocked marks in finished (a no-op if it already is), fails its
// dependents transitively on error and returns the dependents that became
// ready, marked running.
func (j *job) finishLocked(in *instr, err error) []*instr {
	if in.finished() {
		return nil
	}
	var ready []*instr
	work := []*instr{in}
	errs := []error{err}
	for len(work) > 0 {
		cur, cerr := work[0], errs[0]
		work, errs = work[1:], errs[1:]
		if cur.finished() {
			continue
		}
		if cur.state == stRunning {
			j.running--
		}
		j.pending--
		j.seq++
		ev := proto.Event{Seq: j.seq, ID: cur.in.ID, Start: cur.started}
		if cur.started != 0 {
			ev.End = time.Now().UnixNano()
		}
		outcome := "ok"
		if cerr != nil {
			cur.state = stFailed
			code := proto.CodeDevice
			switch cur.in.Kind {
			case proto.InstrSend, proto.InstrRecv, proto.InstrUpload, proto.InstrReadBack:
				code = proto.CodeTransfer
			}
			var de *depError
			switch {
			case errors.As(cerr, &de):
				code = proto.CodeDepFailed
			case errors.Is(cerr, errJobClosed):
				code = proto.CodeJobClosed
			}
			ev.Err = instrErr(cur.in.ID, code, cerr)
			j.failures[cur.in.ID] = ev.Err
			outcome = outcomeOf(ev.Err.Code)
			if outcome == "failed" {
				j.n.log.Debug("instruction failed", "job", jobID(j.id), "instr", cur.in.ID, "kind", cur.in.Kind.String(), "error", cerr)
			}
		} else {
			cur.state = stDone
		}
		if cur.cancel != nil {
			cur.cancel(nil)
		}
		j.n.met.instrs.WithLabelValues(cur.in.Kind.String(), outcome).Inc()
		j.n.met.pending.Dec()
		if len(j.events) < j.n.cfg.FeedLimit {
			j.events = append(j.events, ev)
		} else if !j.feedFull {
			j.feedFull = true
			j.n.log.Warn("a job's client reads its completions too slowly: the node stops recording them until it catches up; the client asks for the instructions' state instead", "job", jobID(j.id), "unread", len(j.events))
		}
		if cur.in.Kind == proto.InstrRecv || cur.in.Kind == proto.InstrUpload {
			j.recvsDone++
			if j.recvsDone > 32 && 2*j.recvsDone > len(j.recvs) {
				j.recvs = slices.DeleteFunc(j.recvs, (*instr).finished)
				j.recvsDone = 0
			}
		}
		for _, d := range cur.dependents {
			if d.finished() {
				continue
			}
			if cerr != nil {
				work = append(work, d)
				errs = append(errs, depFailed(cur))
				continue
			}
			d.waiting--
			if d.waiting == 0 && d.state == stWaiting {
				d.state, d.started = stRunning, time.Now().UnixNano()
				j.running++
				ready = append(ready, d)
			}
		}
		cur.dependents = nil
	}
	close(j.changed)
	j.changed = make(chan struct{})
	return ready
}

var errJobClosed = errors.New("job closed")

// close fails everything that has not started and frees the job's memory
// once nothing runs any more.
func (j *job) close(cause error) uint64 {
	j.mu.Lock()
	if j.closed != nil {
		j.mu.Unlock()
		return 0
	}
	j.closed = cause
	j.cancel(cause)
	held := j.bytes
	var fail []*instr
	for _, in := range j.instrs {
		if in.state == stWaiting || in.state == stArmed && !in.claimed {
			fail = append(fail, in)
		}
	}
	slices.SortFunc(fail, func(a, b *instr) int { return int(a.in.ID - b.in.ID) })
	for _, in := range fail {
		j.finishLocked(in, fmt.Errorf("%w: %v", errJobClosed, cause))
	}
	for _, a := range j.early {
		if a.claim == nil && a.landed {
			j.releaseLocked(uint64(a.st.n))
			a.st.release()
		}
	}
	j.early = nil
	free := j.freeIfIdleLocked()
	j.mu.Unlock()
	free()
	return held
}

// refFreeGrace is how long an allocation that went to a peer by
// reference waits before it is freed when the peer could not be asked to
// unmap it (no answer), or answered that it holds no mapping because its
// part of the job has closed (it unmaps on its own then, at about the
// same time).
const refFreeGrace = 2 * time.Second

// freeLent frees allocations that went to peers by reference (CUDA IPC),
// on a node goroutine, after the peers unmapped them: each peer gets one
// MsgUnmapRef for the allocations it was lent and answers once it closed
// its mappings, since CUDA leaves freeing exported memory that another
// process still has open undefined. A peer known to be gone holds no
// mapping any more. Where a peer did not answer, or had nothing mapped,
// the free waits refFreeGrace. The node's shutdown cuts the wait short.
func (j *job) freeLent(lent []*alloc) {
	if len(lent) == 0 {
		return
	}
	byPeer := map[string][]uint64{}
	j.mu.Lock()
	for _, a := range lent {
		for _, p := range a.lentTo {
			byPeer[p] = append(byPeer[p], a.serial)
		}
	}
	j.mu.Unlock()
	j.n.goFunc(func() {
		grace := false
		for peer, allocs := range byPeer {
			if !j.n.unmapAt(j.id, peer, allocs) {
				grace = true
			}
		}
		if grace {
			select {
			case <-time.After(refFreeGrace):
			case <-j.n.ctx.Done():
			}
		}
		for _, a := range lent {
			j.freeAlloc(a)
		}
	})
}

// unmapAt asks peer to unmap allocations of job (MsgUnmapRef) and reports
// whether it is known that peer holds none of them any more: it answered
// having closed a mapping, or it is gone.
func (n *Node) unmapAt(job uint64, peer string, allocs []uint64) bool {
	if _, gone, _ := n.peerGone(peer, 0); gone {
		return true
	}
	ctx, cancel := context.WithTimeout(n.ctx, refAckTimeout)
	defer cancel()
	unmapped := 0
	for len(allocs) > 0 {
		k := min(len(allocs), proto.MaxUnmapAllocs)
		var done proto.UnmapRefDone
		if err := n.tr.Call(ctx, credentials.Node(peer), proto.MsgUnmapRef, &proto.UnmapRef{Job: job, Allocs: allocs[:k]}, &done); err != nil {
			if n.ctx.Err() == nil {
				n.log.Info("a peer was not asked to unmap this node's memory; freeing it late", "peer", peer, "job", jobID(job), "error", err)
			}
			return false
		}
		unmapped += done.Unmapped
		allocs = allocs[k:]
	}
	return unmapped > 0
}

func (j *job) freeAlloc(a *alloc) {
	if err := a.m.dev.Free(a.mem); err != nil {
		j.n.log.Warn("free failed", "job", jobID(j.id), "buffer", a.key.buf, "mem", a.key.mem, "error", err)
	}
}

// freeIfIdleLocked returns a func that frees every allocation of a closed
// job once no instruction runs any more (a device may still be writing
// into them until then).
func (j *job) freeIfIdleLocked() func() {
	if j.closed == nil || j.running > 0 || j.freed {
		return func() {}
	}
	j.freed = true
	var allocs []*alloc
	for _, a := range j.allocs {
		allocs = append(allocs, a)
		j.releaseInLocked(a.m, a.bytes)
	}
	j.allocs = map[allocKey]*alloc{}
	j.n.met.allocs.Sub(float64(len(allocs)))
	imports := j.imports
	j.imports = nil
	if len(allocs) == 0 && len(imports) == 0 {
		return func() {}
	}
	return func() {
		j.n.goFunc(func() {
			for _, im := range imports {
				if err := im.dev.Free(im.mem); err != nil {
					j.n.log.Warn("unmapping a peer's memory failed", "job", jobID(j.id), "device", im.dev.Info().ID, "error", err)
				}
			}
			var lent []*alloc
			for _, a := range allocs {
				if len(a.lentTo) > 0 {
					lent = append(lent, a)
					continue
				}
				j.freeAlloc(a)
			}
			j.freeLent(lent)
		})
	}
}

// peerLost fails every unfinished Recv from name and Send to name that
// names run boot of it, or no run (PeerBoot 0); boot 0 (unknown) is every
// run. Instructions for another run of name (a newer one, whose news came
// before this of the old run's loss) go on.
func (j *job) peerLost(name string, boot uint64, how string) {
	j.mu.Lock()
	var ready []*instr
	ids := make([]uint64, 0, len(j.instrs))
	for id := range j.instrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		in := j.instrs[id]
		if in.finished() || in.in.Peer != name || (in.in.Kind != proto.InstrRecv && in.in.Kind != proto.InstrSend) || !sameRun(boot, in.in.PeerBoot) {
			continue
		}
		if in.in.Kind == proto.InstrRecv && in.claimed && in.state == stRunning {
			// Its pages are coming in or being copied into place: the
			// transfer ends it (an error if the connection broke), and
			// until then the device or the transport still writes into
			// the allocation, which must not be freed.
			continue
		}
		err := &NodeLostError{Node: name, How: how, Buffer: in.in.Buffer, Boxes: in.in.Boxes}
		if in.in.Kind == proto.InstrSend && in.state == stRunning && in.cancel != nil {
			in.cancel(err) // the send goroutine finishes it with this cause
			continue
		}
		ready = append(ready, j.finishLocked(in, err)...)
	}
	j.early = slices.DeleteFunc(j.early, func(a *arrival) bool {
		if a.from == name && sameRun(boot, a.boot) && a.claim == nil && a.landed {
			j.releaseLocked(uint64(a.st.n))
			a.st.release()
			return true
		}
		return false
	})
	free := j.freeIfIdleLocked()
	j.mu.Unlock()
	j.startAll(ready)
	free()
}

// sameRun reports whether boot IDs a and b may name the same run of a
// node: they are equal, or either is 0 (unknown).
func sameRun(a, b uint64) bool { return a == 0 || b == 0 || a == b }

// allocFor returns the allocation of (buffer, mem).
func (j *job) allocFor(buf uint64, mem uint32) (*alloc, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.allocForLocked(buf, mem)
}

func (j *job) allocForLocked(buf uint64, mem uint32) (*alloc, error) {
	a, ok := j.allocs[allocKey{buf, mem}]
	if !ok {
		return nil, fmt.Errorf("job %d has no allocation of buffer %d in memory %d; allocate it first (an alloc instruction this one depends on)", j.id, buf, mem)
	}
	return a, nil
}

// events returns the events after `after`, dropping those up to it, and
// whether instructions of the job are still to finish.
func (j *job) eventsAfter(after uint64, limit int) ([]proto.Event, <-chan struct{}, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	i := 0
	for i < len(j.events) && j.events[i].Seq <= after {
		i++
	}
	j.events = j.events[i:]
	n := min(len(j.events), limit)
	return slices.Clone(j.events[:n]), j.changed, j.pending > 0
}

// waitResult reports the state of ids.
func (j *job) waitResult(ids []uint64) (proto.WaitResult, bool, <-chan struct{}, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var r proto.WaitResult
	for _, id := range ids {
		in, ok := j.instrs[id]
		if !ok {
			return r, false, nil, reply(proto.CodeBadInstr, "job %d has no instruction %d", j.id, id)
		}
		switch in.state {
		case stDone:
			r.Done = append(r.Done, id)
		case stFailed:
			r.Failed = append(r.Failed, *j.errOf(in))
		default:
			r.Pending = append(r.Pending, id)
		}
	}
	return r, len(r.Pending) == 0, j.changed, nil
}

// errOf finds in's failure in the event log, or rebuilds it.
func (j *job) errOf(in *instr) *proto.InstrError {
	if e, ok := j.failures[in.in.ID]; ok {
		return e
	}
	return &proto.InstrError{ID: in.in.ID, Code: proto.CodeDevice, Message: "failed"}
}

func outcomeOf(c proto.ErrorCode) string {
	switch c {
	case proto.CodeDepFailed:
		return "dep_failed"
	case proto.CodeJobClosed:
		return "job_closed"
	case proto.CodeNodeLost:
		return "node_lost"
	case proto.CodeMemoryLimit:
		return "memory_limit"
	case proto.CodeTransfer:
		return "transfer_failed"
	}
	return "failed"
}

// jobID is a job's ID for logs: decimal text, as acpp-submit status prints
// it. As a JSON number an ID above 2^53 would be rounded by most readers
// (jq, JavaScript) and no longer match.
func jobID(id uint64) string { return strconv.FormatUint(id, 10) }
