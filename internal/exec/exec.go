package exec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
)

// ErrClosed: the runtime was closed; create a new queue. It is the
// engine's sentinel, which the root package exports.
var ErrClosed = engine.ErrClosed

// Config configures a Runtime.
type Config struct {
	// Devices are the devices the runtime may use. At least one must be
	// host-unified and run Go kernels (a CPU device): the first such
	// device allocates host memory and runs host-side copies; New fails
	// without one.
	Devices []device.Device
	// Logger receives debug events; nil means discard.
	Logger *slog.Logger
	// Context cancels the runtime: groups of device ops not yet started
	// fail with its cause, and Submit refuses new ones. Host groups and
	// releases still run, so that a buffer can be read, written back and
	// closed (its allocations freed) after it ended. nil means
	// context.Background().
	Context context.Context
	// MemoryLimit chooses the budget of each memory: allocations are
	// admitted against it before they are made, and one that does not fit
	// fails with an error matching device.ErrOverBudget instead of
	// crashing the process. The zero value is the default budgets
	// (device.DefaultHostShare of HostMemory, device.DefaultDeviceShare of
	// each device's memory).
	MemoryLimit device.MemoryLimit
	// HostMemory is the size of host memory in bytes (cpu.HostMemory); 0
	// means unknown, and host memory then has a budget only with
	// MemoryLimit.Bytes.
	HostMemory uint64
	// NoIssueAhead turns issue-ahead off: every group waits until its
	// dependencies have completed before its ops are enqueued, also on
	// devices with in-order queues (device.InOrderQueuer). The environment
	// variable ACPP_ISSUE_AHEAD=0 does the same, for diagnosis (and =1
	// keeps it on where the embedded engine would turn it off: with
	// several in-order devices, internal/engine/embedded).
	NoIssueAhead bool
}

// IssueAheadEnv is the environment variable that turns issue-ahead off
// when it is "0" (Config.NoIssueAhead). "1" or unset leaves the choice to
// Config.NoIssueAhead (the embedded engine reads "1" as a request for
// issue-ahead on several in-order devices too); New refuses any other
// value with an error naming the variable.
const IssueAheadEnv = "ACPP_ISSUE_AHEAD"

// inOrderDev is a device whose queues keep their order
// (device.InOrderQueuer), with its number of queues.
type inOrderDev struct {
	dev    device.Device
	id     device.ID
	queues int
	// ahead counts, per queue, the nodes issued ahead onto it that have
	// not finished: work queued behind dependencies still running.
	// Groups dispatched as usual go to a queue without any (queueFor), so
	// that they do not wait behind it.
	ahead []atomic.Int32
}

// Stats counts what the runtime did.
type Stats struct {
	// Groups is the number of command groups submitted.
	Groups int64
	// CopiesPlanned is the number of page-box copies coherence planned;
	// Copies the number of backend transfers the executor ran. They are
	// equal once every node has run.
	CopiesPlanned, Copies int64
	// BytesCopied is the total; HostToDevice and DeviceToHost split it by
	// direction (a device being a non-host memory).
	BytesCopied, BytesHostToDevice, BytesDeviceToHost int64
	// Allocations is the number of device allocations made.
	Allocations int64
	// Links are the copies run per direction between two memories (see
	// MemName), in the order of their memories, source first; links
	// without copies are left out.
	Links []Transfer
}

// Transfer counts the copies from one memory to another: backend
// transfers and their bytes.
type Transfer struct {
	From, To      string // memory names (MemName)
	Copies, Bytes int64
}

// linkCount counts the copies run from one memory to another.
type linkCount struct{ copies, bytes atomic.Int64 }

type allocKey struct {
	buf   coherence.BufferID
	alloc coherence.AllocID
}

// allocEntry is one allocation of a buffer. once makes concurrent first
// users allocate once (B5).
type allocEntry struct {
	once sync.Once
	mem  *device.Mem
	err  error
	user bool // the user's memory (L1, B3): never freed by the runtime
	// reserved is what the allocation took of the budget of memory at (0
	// for the user's memory); returned when it is freed.
	reserved uint64
	at       coherence.MemID
	// zeroed: the device's Alloc made it zeroed (Capabilities.ZeroedAlloc).
	zeroed atomic.Bool
}

type bufInfo struct {
	geo  coherence.Geometry
	name string // for errors; "" names it by number
}

// bufferClosedError is a group's planning error when one of its buffers
// was closed after the group was submitted and before it was planned: it
// matches ErrClosed (and wraps coherence.ErrUnknownBuffer).
type bufferClosedError struct{ err error }

func (e *bufferClosedError) Error() string {
	return "acpp: a buffer of the group was closed before it ran (" + e.err.Error() + ")"
}
func (e *bufferClosedError) Is(target error) bool { return target == ErrClosed }
func (e *bufferClosedError) Unwrap() error        { return e.err }

// Runtime is the executor of one queue.
type Runtime struct {
	log     *slog.Logger
	ctx     context.Context
	ctxDone <-chan struct{} // ctx.Done(), polled without a lock
	devs    []device.Device
	host    device.Device                     // allocates host memory
	memOf   map[device.ID]coherence.MemID     // device → the memory its kernels use
	devOf   map[coherence.MemID]device.Device // memory → the device that allocates it and runs its copies

	procs int // GOMAXPROCS at New: with one, every Submit plans inline

	// inOrder are the devices with in-order queues on which groups are
	// issued ahead of their dependencies' completion; empty when
	// issue-ahead is off.
	inOrder []inOrderDev

	// spinners are the devices whose waiters spin before they park
	// (device.SpinWaiter), with how long; empty for most runtimes.
	spinners []spinDev
	maxSpin  time.Duration // the longest of the spinners' waits (Runtime.Wait)

	// epoch is when the runtime started; nodes keep their times as
	// monotonic offsets from it (one clock read each instead of time.Now's
	// wall and monotonic reads).
	epoch time.Time

	// The field groups below are written by different goroutines (the
	// submitter, the planner, device workers); padding keeps each on its
	// own cache lines so that they do not invalidate each other's.
	_ cacheLinePad

	// Submitted nodes wait in pending, in ID order, until planned: by their
	// submitter (inline) or, while the runtime is busy, by a planner
	// goroutine (planLoop), so that planning overlaps building the next
	// group.
	pendMu    sync.Mutex
	next      coherence.CGID // guarded by pendMu
	pending   []*Node        // guarded by pendMu
	pendSpare []*Node        // an empty buffer for pending; guarded by pendMu
	npending  atomic.Int32   // len(pending), polled by an idle planner
	planning  bool           // a planLoop runs; guarded by pendMu
	planners  sync.WaitGroup // planLoop goroutines

	_       cacheLinePad
	mu      sync.Mutex
	core    *coherence.Core    // guarded by mu
	nextBuf coherence.BufferID // guarded by mu
	nodes   nodeWindow         // planned, not yet drained; guarded by mu
	bufs    map[coherence.BufferID]*bufInfo
	allocs  map[allocKey]*allocEntry // guarded by mu (entries have their own once)
	// touched holds the allocations a planned node used (as an access's
	// target or a copy's destination) or that were handed out as USM
	// (Touch): only an allocation not in it may still hold the zeros it was
	// made with. Guarded by mu; a buffer's keys go when it is removed.
	touched map[allocKey]struct{}
	readyMu sync.RWMutex // guards ready; taken after mu, never before
	// readyCache holds recently looked-up entries of ready, so that an
	// accessor's lookup is one atomic load. Entries are stored only under
	// readyMu (read-locked) and cleared under its write lock, so a dropped
	// allocation never stays cached.
	readyCache [readyCacheSize]atomic.Pointer[readyEntry]
	ready      map[allocKey]*device.Mem // made allocations, for lookups without mu
	closed     bool                     // written under mu and pendMu

	_ cacheLinePad
	// Finished nodes are handed to the core lazily: finish appends the ID
	// here and whoever next holds mu (Submit, RemoveBuffer, Wait) calls
	// Complete. Devices' goroutines thus never wait for mu, which the
	// submitting goroutine holds while coherence plans; a finished node that
	// is not yet drained only adds dependencies that are already met.
	doneMu    sync.Mutex
	completed []coherence.CGID // guarded by doneMu
	spare     []coherence.CGID // the other buffer of completed; guarded by mu

	_           cacheLinePad
	outstanding atomic.Int64 // nodes not finished
	waitMu      sync.Mutex
	idle        []chan struct{} // closed when outstanding is 0; guarded by waitMu
	errs        []error         // async errors not yet taken; guarded by waitMu

	_                                                 cacheLinePad
	groups, planned, copies, bytes, h2d, d2h, nallocs atomic.Int64
	// links counts copies by memory pair: [src*len(memNames)+dst].
	links    []linkCount
	memNames []string // MemName by MemID

	budget budgets // admission of allocations (budget.go)

	bg sync.WaitGroup // goroutines that free released allocations
}

// cacheLinePad separates fields that different goroutines write (two
// 64-byte lines: the adjacent-line prefetcher pairs them).
type cacheLinePad [128]byte

// nodeWindow maps the IDs of planned, undrained nodes to their nodes. IDs
// are dense and planned in increasing order, so it is a slice over
// [base, base+len(win)) with nil for absent IDs; its drained prefix is
// dropped as nodes drain.
type nodeWindow struct {
	base coherence.CGID
	win  []*Node
}

// maxIdleWindow is the largest array an empty window keeps for its next
// put.
const maxIdleWindow = 256

// put adds n; IDs must increase from one put to the next.
func (w *nodeWindow) put(n *Node) {
	if len(w.win) == 0 {
		w.base = n.Seq
	}
	for w.base+coherence.CGID(len(w.win)) < n.Seq {
		w.win = append(w.win, nil) // a group coherence refused
	}
	w.win = append(w.win, n)
}

func (w *nodeWindow) get(id coherence.CGID) *Node {
	if id < w.base || id-w.base >= coherence.CGID(len(w.win)) {
		return nil
	}
	return w.win[id-w.base]
}

func (w *nodeWindow) remove(id coherence.CGID) {
	if id < w.base || id-w.base >= coherence.CGID(len(w.win)) {
		return
	}
	w.win[id-w.base] = nil
	i := 0
	for i < len(w.win) && w.win[i] == nil {
		i++
	}
	if i == 0 {
		return
	}
	if i == len(w.win) {
		// Nothing left: the next put reuses a small array (no
		// allocation per group when groups run one at a time); a large
		// one goes.
		w.win = w.win[:0]
		if cap(w.win) > maxIdleWindow {
			w.win = nil
		}
		return
	}
	w.base += coherence.CGID(i)
	w.win = w.win[i:]
	if cap(w.win) > 64 && len(w.win) < cap(w.win)/4 {
		w.win = append([]*Node(nil), w.win...)
	}
}

// New builds a runtime over cfg.Devices.
func New(cfg Config) (*Runtime, error) {
	rt := &Runtime{
		log:     cfg.Logger,
		ctx:     cfg.Context,
		devs:    cfg.Devices,
		memOf:   map[device.ID]coherence.MemID{},
		devOf:   map[coherence.MemID]device.Device{},
		core:    coherence.New(coherence.Config{}),
		next:    1,
		epoch:   time.Now(),
		bufs:    map[coherence.BufferID]*bufInfo{},
		allocs:  map[allocKey]*allocEntry{},
		touched: map[allocKey]struct{}{},
		ready:   map[allocKey]*device.Mem{},
		procs:   runtime.GOMAXPROCS(0),
	}
	if rt.log == nil {
		rt.log = slog.New(slog.DiscardHandler)
	}
	if rt.ctx == nil {
		rt.ctx = context.Background()
	}
	rt.ctxDone = rt.ctx.Done()
	ahead := os.Getenv(IssueAheadEnv)
	switch ahead {
	case "", "0", "1":
	default:
		return nil, fmt.Errorf("exec: %s=%q: use 0 (no issue-ahead) or 1 (issue-ahead on every in-order device; without the variable a queue issues ahead only when it has a single in-order device), or unset it", IssueAheadEnv, ahead)
	}
	if !cfg.NoIssueAhead && ahead != "0" {
		for _, d := range cfg.Devices {
			if q, ok := d.(device.InOrderQueuer); ok && q.InOrderQueues() {
				info := d.Info()
				nq := max(1, info.Caps.Queues)
				rt.inOrder = append(rt.inOrder, inOrderDev{dev: d, id: info.ID, queues: nq, ahead: make([]atomic.Int32, nq)})
			}
		}
	}
	for _, d := range cfg.Devices {
		if w := device.SpinWaitOf(d); w > 0 {
			rt.spinners = append(rt.spinners, spinDev{dev: d, wait: w})
			rt.maxSpin = max(rt.maxSpin, w)
		}
	}
	mem := coherence.HostMem + 1
	for _, d := range cfg.Devices {
		info := d.Info()
		if info.Caps.HostUnified {
			// Linked to the host allocation (L2, L3); all such devices
			// share it (B4).
			rt.memOf[info.ID] = coherence.HostMem
			if rt.host == nil && info.Caps.Runs(device.FormGo) {
				rt.host = d
				rt.devOf[coherence.HostMem] = d
			}
			continue
		}
		rt.memOf[info.ID] = mem
		rt.devOf[mem] = d
		mem++
	}
	if rt.host == nil {
		return nil, errors.New("acpp: no host-unified device that runs Go kernels to hold host memory; add a CPU device (cpu.Open) to Config.Devices")
	}
	if err := rt.newBudgets(cfg.MemoryLimit, cfg.HostMemory); err != nil {
		return nil, err
	}
	rt.memNames = make([]string, mem)
	rt.memNames[coherence.HostMem] = "host"
	for m, d := range rt.devOf {
		if m != coherence.HostMem {
			rt.memNames[m] = d.Info().ID.String()
		}
	}
	rt.links = make([]linkCount, int(mem)*int(mem))
	return rt, nil
}

// MemName names a memory for counters and traces: "host" for the host
// memory (which every host-unified device uses), else the device that
// owns it ("cuda:0").
func (rt *Runtime) MemName(m coherence.MemID) string {
	if int(m) < len(rt.memNames) {
		return rt.memNames[m]
	}
	return fmt.Sprintf("memory %d", m)
}

// link is the counter of copies from src to dst.
func (rt *Runtime) link(src, dst coherence.MemID) *linkCount {
	return &rt.links[int(src)*len(rt.memNames)+int(dst)]
}

// MemOf is the memory a device's kernels use: HostMem for host-unified
// devices.
func (rt *Runtime) MemOf(d device.ID) coherence.AllocID {
	return coherence.AllocID{Node: 0, Mem: rt.memOf[d]}
}

// HostAlloc is the host allocation's ID.
func (rt *Runtime) HostAlloc() coherence.AllocID { return coherence.AllocID{Mem: coherence.HostMem} }

// Host is the device that holds host memory.
func (rt *Runtime) Host() device.Device { return rt.host }

// DeviceOf is the device that allocates and copies for a memory.
func (rt *Runtime) DeviceOf(a coherence.AllocID) device.Device { return rt.devOf[a.Mem] }

// Stats returns the counters.
func (rt *Runtime) Stats() Stats {
	s := Stats{Groups: rt.groups.Load(), CopiesPlanned: rt.planned.Load(), Copies: rt.copies.Load(),
		BytesCopied: rt.bytes.Load(), BytesHostToDevice: rt.h2d.Load(), BytesDeviceToHost: rt.d2h.Load(),
		Allocations: rt.nallocs.Load()}
	nm := len(rt.memNames)
	for i := range rt.links {
		l := &rt.links[i]
		if c := l.copies.Load(); c > 0 {
			s.Links = append(s.Links, Transfer{From: rt.memNames[i/nm], To: rt.memNames[i%nm], Copies: c, Bytes: l.bytes.Load()})
		}
	}
	return s
}

// AddBuffer registers a buffer. When user is non-nil it is existing memory
// that holds the buffer's contents (the user's host slice, L1, or a user USM
// allocation, B3) and becomes the buffer's allocation at at.
func (rt *Runtime) AddBuffer(geo coherence.Geometry, user *device.Mem, at coherence.AllocID) (coherence.BufferID, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return 0, ErrClosed
	}
	rt.nextBuf++
	id := rt.nextBuf
	spec := coherence.BufferSpec{ID: id, Geometry: geo}
	if user != nil {
		spec.HostData = &at
	}
	if err := rt.core.AddBuffer(spec); err != nil {
		return 0, err
	}
	rt.bufs[id] = &bufInfo{geo: geo}
	if user != nil {
		e := &allocEntry{mem: user, user: true}
		e.once.Do(func() {})
		rt.allocs[allocKey{id, at}] = e
	}
	return id, nil
}

// NameBuffer names buf in the runtime's errors (BufferLabel).
func (rt *Runtime) NameBuffer(buf coherence.BufferID, name string) {
	rt.mu.Lock()
	if b := rt.bufs[buf]; b != nil {
		b.name = name
	}
	rt.mu.Unlock()
}

// BufferLabel is how errors name buf: `buffer "grid"`, or `buffer 3`
// when it has no name.
func (rt *Runtime) BufferLabel(buf coherence.BufferID) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if b := rt.bufs[buf]; b != nil && b.name != "" {
		return fmt.Sprintf("buffer %q", b.name)
	}
	return fmt.Sprintf("buffer %d", buf)
}

// readyEntry is one cached entry of Runtime.ready.
type readyEntry struct {
	k allocKey
	m *device.Mem
}

const readyCacheSize = 64 // a power of two

func (k allocKey) slot() int {
	h := uint64(k.buf) ^ uint64(k.alloc.Mem)<<32 ^ uint64(k.alloc.Node)<<48
	return int(h * 0x9e3779b97f4a7c15 >> 58) // the top 6 bits: readyCacheSize slots
}

// Alloc returns the buffer's allocation at a, making it on first use (B5).
// The result is the same for the buffer's lifetime (B2) unless Release
// frees it. It may block in the device's allocator.
func (rt *Runtime) Alloc(buf coherence.BufferID, a coherence.AllocID) (*device.Mem, error) {
	k := allocKey{buf, a}
	slot := &rt.readyCache[k.slot()]
	if e := slot.Load(); e != nil && e.k == k {
		return e.m, nil
	}
	rt.readyMu.RLock()
	m := rt.ready[k]
	if m != nil {
		slot.Store(&readyEntry{k, m})
	}
	rt.readyMu.RUnlock()
	if m != nil { // made already: no contended lock
		return m, nil
	}
	rt.mu.Lock()
	bi := rt.bufs[buf]
	if bi == nil {
		rt.mu.Unlock()
		return nil, fmt.Errorf("%w: buffer %d", coherence.ErrUnknownBuffer, buf)
	}
	e := rt.allocs[k]
	if e == nil {
		e = &allocEntry{}
		rt.allocs[k] = e
	}
	rt.mu.Unlock()
	defer func() {
		if e.err == nil && e.mem != nil {
			rt.mu.Lock()
			if rt.allocs[k] == e { // not released meanwhile
				rt.readyMu.Lock()
				rt.ready[k] = e.mem
				rt.readyMu.Unlock()
			}
			rt.mu.Unlock()
		}
		if errors.Is(e.err, device.ErrOverBudget) {
			// Nothing was allocated: a later use may fit once other
			// allocations are gone.
			rt.mu.Lock()
			if rt.allocs[k] == e {
				delete(rt.allocs, k)
			}
			rt.mu.Unlock()
		}
	}()
	e.once.Do(func() {
		d := rt.devOf[a.Mem]
		if d == nil {
			e.err = fmt.Errorf("acpp: no device holds memory %d", a.Mem)
			return
		}
		// Admit before allocating: Go cannot recover from a failed
		// allocation.
		bytes := uint64(bi.geo.Bytes())
		if e.err = rt.reserve(a.Mem, bytes, "allocation"); e.err != nil {
			return
		}
		e.mem, e.err = d.Alloc(device.MemDevice, bi.geo.Bytes())
		e.zeroed.Store(e.err == nil && d.Info().Caps.ZeroedAlloc)
		if e.err != nil {
			rt.release(a.Mem, bytes)
		} else {
			e.reserved, e.at = bytes, a.Mem
			rt.nallocs.Add(1)
			rt.log.Debug("allocate", "buffer", buf, "device", d.Info().ID, "bytes", bi.geo.Bytes())
		}
	})
	return e.mem, e.err
}

func (rt *Runtime) dropReady(k allocKey) {
	rt.readyMu.Lock()
	delete(rt.ready, k)
	slot := &rt.readyCache[k.slot()]
	if e := slot.Load(); e != nil && e.k == k {
		slot.Store(nil)
	}
	rt.readyMu.Unlock()
}

// Geometry returns a buffer's geometry.
func (rt *Runtime) Geometry(buf coherence.BufferID) (coherence.Geometry, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	bi := rt.bufs[buf]
	if bi == nil {
		return coherence.Geometry{}, false
	}
	return bi.geo, true
}

// Group is a command group as the API hands it to the executor.
type Group struct {
	Name string
	// Accesses have their Target set (MemOf the executing device, or the
	// host allocation for host tasks).
	Accesses []coherence.Access
	// After are explicit dependencies (events, USM ordering).
	After []*Node
	// Device runs Ops. Host runs instead when set: a host task that calls
	// done exactly once (possibly later, e.g. when a host accessor is
	// closed).
	Device device.Device
	Ops    []device.Op
	Host   func(done func(error))
	// OnFinish, when set, runs once the node has finished: its error,
	// state and times are final and Done is closed; the queue does not
	// count it done before OnFinish returns (a split group's chunks).
	OnFinish func(err error)
	// Release, when set, makes the node the explicit release of this
	// allocation (B1) instead of a planned command group.
	Release *ReleaseReq
}

// ReleaseReq names an allocation to release.
type ReleaseReq struct {
	Buffer coherence.BufferID
	Alloc  coherence.AllocID
}

// State is a node's life-cycle state: the engine's Status.
type State = engine.Status

// Node states.
const (
	Submitted = engine.Submitted // waiting for dependencies
	Running   = engine.Running   // copies or work under way
	Complete  = engine.Complete  // finished without error
	Failed    = engine.Failed    // finished with an error
)

// Node is one submitted command group.
type Node struct {
	Seq coherence.CGID // the group's submission number (coherence's CGID)

	rt *Runtime
	g  Group
	// deps is coherence's Step.Deps; plan the whole Step when it has more
	// than dependencies (allocations, copies, frees), nil for most groups
	// (a smaller node).
	deps []coherence.CGID
	plan *coherence.Step
	err  error // set before state becomes Complete or Failed

	// done is made on the first Done call (most nodes are waited for
	// through the queue, never through a channel).
	done chan struct{} // guarded by linkMu

	// Offsets from rt.epoch; started and ended are set before done is
	// closed.
	submitted, started, ended time.Duration

	planErr  error   // coherence refused the group
	succ     []*Node // nodes waiting for this one; guarded by linkMu
	succBuf  [2]*Node
	firstErr error // guarded by errMu
	// io is the issue-ahead state of a group on a device with in-order
	// queues (tryAhead), nil for the others: set while planning, before
	// planned. Kept out of Node, which shares a size class with the API's
	// handler and event.
	io *inOrderState

	// The small fields last, packed (a node shares one allocation with
	// the API's handler and event: see the root package's cgroup).
	state   atomic.Int32
	pending atomic.Int32 // unfinished dependencies + 1 until planned and linked
	left    atomic.Int32 // copies or ops still running
	linkMu  sync.Mutex   // guards succ, done and setting fin
	errMu   sync.Mutex
	// fin is set, under linkMu, once the node has finished and its
	// successors were taken.
	fin     atomic.Bool
	planned atomic.Bool // deps and plan (or planErr) are set
	// opFailed is set once firstErr holds an error (countDone).
	opFailed atomic.Bool
	inline   bool // planned by its submitter, which reports planErr
	barrier  bool // SubmitBarrier: makes no allocations
}

// inOrderState is a node's issue-ahead state (Node.io). preds are the
// unfinished nodes it was linked after: written while planning, before
// planned is set, then under the node's linkMu. ahead: its ops were
// enqueued before its dependencies completed, and it holds one more
// pending count until its own work is done; aheadErr is that work's
// result, written before the count is released. issued and issueQ
// (guarded by linkMu) say that all its work not yet done is enqueued on
// its device's queue issueQ.
type inOrderState struct {
	preds    []*Node
	predBuf  [2]*Node
	ahead    atomic.Bool
	aheadErr error
	aheadQ   int
	aheadCnt *atomic.Int32 // its queue's count in inOrderDev.ahead
	issueQ   int
	issued   bool
}

// issuedAhead reports whether n was issued ahead.
func (n *Node) issuedAhead() bool { return n.io != nil && n.io.ahead.Load() }

// closedCh is the Done channel of nodes that finished before anyone asked.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done is closed when the node has finished.
func (n *Node) Done() <-chan struct{} {
	if n.fin.Load() {
		return closedCh
	}
	n.linkMu.Lock()
	defer n.linkMu.Unlock()
	if n.fin.Load() {
		return closedCh
	}
	if n.done == nil {
		n.done = make(chan struct{})
	}
	return n.done
}

// Finished reports whether the node has finished (Done is closed).
func (n *Node) Finished() bool { return n.fin.Load() }

// Wait blocks until the node has finished and returns its error, or ctx's
// error if ctx ends first. For a group on a device that asks for it
// (device.SpinWaiter: the CUDA backend under CompletionSpin) it first
// spins on the node's completion for up to the device's SpinWait, so that
// a completion within it needs no goroutine wake-up; then it parks.
func (n *Node) Wait(ctx context.Context) error {
	if n.fin.Load() {
		return n.err
	}
	if w := n.rt.SpinWait(n.g.Device); w > 0 && device.SpinUntil(&n.fin, w, ctx.Done()) {
		return n.err
	}
	select {
	case <-n.Done():
		return n.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Err is the node's error; valid once Done is closed.
func (n *Node) Err() error {
	if n.fin.Load() {
		return n.err
	}
	return nil
}

// State is the node's current state.
func (n *Node) State() State { return State(n.state.Load()) }

// Times returns when the node was submitted, started and ended (zero while
// not yet reached).
func (n *Node) Times() (submitted, started, ended time.Time) {
	at := n.rt.epoch.Add
	if n.fin.Load() {
		return at(n.submitted), at(n.started), at(n.ended)
	}
	if n.State() == Running {
		// started is written before the state changes to Running.
		return at(n.submitted), at(n.started), time.Time{}
	}
	return at(n.submitted), time.Time{}, time.Time{}
}

// Deps are the command groups coherence ordered this one after.
func (n *Node) Deps() []coherence.CGID { return n.Step().Deps }

// Step is coherence's plan for the node (planned now if it was not yet).
func (n *Node) Step() coherence.Step {
	if !n.planned.Load() {
		n.rt.flush()
	}
	if n.plan != nil {
		return *n.plan
	}
	return coherence.Step{ID: n.Seq, Deps: n.deps}
}

// Of reports whether n was submitted to rt.
func (n *Node) Of(rt *Runtime) bool { return n.rt == rt }

// Name is the group's name, for errors and logs.
func (n *Node) Name() string { return n.g.Name }

// Device is the device that runs the node's ops; nil for host tasks and
// releases.
func (n *Node) Device() device.Device { return n.g.Device }

// Transfers are the copies of the node's prologue per pair of memories,
// in plan order: backend transfers (one per page box) and their bytes.
// They are planned when the node is submitted and have all run once it is
// Complete; a node that failed may have run only some of them.
func (n *Node) Transfers() []Transfer {
	var out []Transfer
	for _, c := range n.Step().Copies {
		geo, _ := n.rt.Geometry(c.Buffer)
		var bytes int64
		for _, b := range c.Boxes {
			bytes += int64(geo.ElementBox(b).Volume()) * int64(geo.ElemSize)
		}
		from, to := n.rt.MemName(c.Src.Mem), n.rt.MemName(c.Dst.Mem)
		i := slices.IndexFunc(out, func(t Transfer) bool { return t.From == from && t.To == to })
		if i < 0 {
			out = append(out, Transfer{From: from, To: to})
			i = len(out) - 1
		}
		out[i].Copies += int64(len(c.Boxes))
		out[i].Bytes += bytes
	}
	return out
}

// steps is the node's plan beyond its dependencies (an empty Step for most
// groups); valid once planned.
func (n *Node) steps() *coherence.Step {
	if n.plan != nil {
		return n.plan
	}
	return &noSteps
}

// noSteps is the plan of a group with no allocations, copies or frees.
var noSteps coherence.Step

// Submit plans g and starts it as soon as its dependencies have finished.
func (rt *Runtime) Submit(g Group) (*Node, error) {
	n := new(Node)
	if err := rt.SubmitNode(n, g); err != nil {
		return nil, err
	}
	return n, nil
}

// SubmitBarrier submits a group that only waits for the groups it depends
// on (a buffer's close without write-back): its accesses discard and its
// work touches no memory, so it makes none of the allocations coherence
// plans for it, and closing a buffer that never fit its memory's budget
// does not fail.
func (rt *Runtime) SubmitBarrier(g Group) (*Node, error) {
	n := &Node{barrier: true}
	if err := rt.SubmitNode(n, g); err != nil {
		return nil, err
	}
	return n, nil
}

// SubmitNode is Submit into a Node the caller allocated (zero, never
// submitted), so that the API can make a group's handler, event and node in
// one allocation.
func (rt *Runtime) SubmitNode(n *Node, g Group) error {
	if err := rt.cancelledFor(&g); err != nil {
		return fmt.Errorf("acpp: queue context done, submit refused: %w", err)
	}
	n.rt, n.g, n.submitted = rt, g, time.Since(rt.epoch)
	n.succ = n.succBuf[:0]
	n.pending.Store(1) // released once planned and linked
	// Host groups and releases report coherence's verdict from Submit
	// (HostAccess and Release need it); so does everything when the
	// runtime is idle or has one processor.
	inline := g.Release != nil || g.Host != nil || rt.procs < 2
	rt.pendMu.Lock()
	if rt.closed {
		rt.pendMu.Unlock()
		return ErrClosed
	}
	n.Seq = rt.next
	rt.next++
	rt.pending = append(rt.pending, n)
	rt.npending.Store(int32(len(rt.pending)))
	busy := rt.outstanding.Add(1) > 1
	startPlanner := false
	if !inline && (rt.planning || busy) {
		if !rt.planning {
			rt.planning, startPlanner = true, true
			rt.planners.Add(1)
		}
	} else {
		inline = true
	}
	n.inline = inline
	rt.pendMu.Unlock()
	if !inline {
		if startPlanner {
			go rt.planLoop()
		}
		return nil
	}
	// Plan here, with every group pushed before this one: IDs reach
	// coherence in order.
	rt.mu.Lock()
	batch := rt.planPendingLocked()
	rt.mu.Unlock()
	err := n.planErr
	rt.start(batch)
	if err != nil {
		rt.leave()
	}
	return err
}

// planLoop plans pushed groups while the runtime is busy, so that coherence
// runs on another core than the submitting goroutine (the two overlap: the
// submitter builds group n+1 while group n is planned). It exits once no
// group arrived for a few scheduler rounds; the next busy Submit starts it
// again.
func (rt *Runtime) planLoop() {
	defer rt.planners.Done()
	for {
		if rt.npending.Load() == 0 {
			idle := true
			for range plannerSpins {
				runtime.Gosched()
				if rt.npending.Load() != 0 {
					idle = false
					break
				}
			}
			if idle {
				rt.pendMu.Lock()
				if len(rt.pending) == 0 {
					rt.planning = false
					rt.pendMu.Unlock()
					return
				}
				rt.pendMu.Unlock()
			}
		}
		rt.mu.Lock()
		batch := rt.planPendingLocked()
		rt.mu.Unlock()
		rt.start(batch)
	}
}

// plannerSpins is how many scheduler rounds an idle planner waits for the
// next group before it exits.
const plannerSpins = 64

// planPendingLocked hands finished nodes to the core, then plans every
// pushed node in ID order and links it to the nodes it depends on. It
// returns the batch for start. The caller holds mu: a batch is taken and
// planned under it, so whoever next holds mu sees every node pushed before
// as planned.
func (rt *Runtime) planPendingLocked() []*Node {
	rt.drainLocked()
	rt.pendMu.Lock()
	batch := rt.pending
	rt.pending, rt.pendSpare = rt.pendSpare, nil
	rt.npending.Store(0)
	rt.pendMu.Unlock()
	for _, n := range batch {
		var step coherence.Step
		var err error
		if r := n.g.Release; r != nil {
			step, err = rt.core.Release(n.Seq, r.Buffer, r.Alloc)
			if errors.Is(err, coherence.ErrNoAllocation) {
				// No group ever used the allocation: nothing in it is
				// valid and no group is in flight on it. Free what this
				// runtime made for Buffer.USM, if anything; releasing a
				// device that holds nothing is no error.
				step, err = coherence.Step{ID: n.Seq}, nil
				if _, made := rt.allocs[allocKey{r.Buffer, r.Alloc}]; made {
					step.Free = []coherence.Allocation{{Buffer: r.Buffer, Alloc: r.Alloc}}
				}
			}
		} else {
			step, err = rt.core.Submit(coherence.CommandGroup{ID: n.Seq, Accesses: n.g.Accesses})
		}
		if err != nil {
			if errors.Is(err, coherence.ErrUnknownBuffer) {
				// Its buffer was closed between the group's submission
				// and its planning (another goroutine's Close).
				err = &bufferClosedError{err}
			}
			n.planErr = err
			n.planned.Store(true)
			continue
		}
		n.deps = step.Deps
		rt.touchLocked(n, &step)
		if len(step.Allocate)+len(step.Copies)+len(step.Free)+len(step.Lost) > 0 {
			plan := step // escapes: allocated only here
			n.plan = &plan
		}
		rt.nodes.put(n)
		track := n.g.Device != nil && rt.inOrderQueues(n.g.Device) > 0
		if track {
			n.io = new(inOrderState)
			n.io.preds = n.io.predBuf[:0]
		}
		for _, d := range step.Deps {
			if p := rt.nodes.get(d); p != nil {
				n.linkAfter(p, track)
			}
		}
		for _, p := range n.g.After {
			if p != nil && p.rt == rt {
				n.linkAfter(p, track)
			}
		}
		// After the links: tryAhead, which another goroutine may call as
		// soon as n is a successor, reads preds only once planned is set.
		n.planned.Store(true)
	}
	return batch
}

// touchLocked drops the ops of a group that only fills zeros into fresh
// allocations (made zeroed by their device, Capabilities.ZeroedAlloc, and
// used by no node before, with no copy into them in this step): they hold
// zeros already, and the fill costs nothing. Then it records the
// allocations n's step uses.
func (rt *Runtime) touchLocked(n *Node, step *coherence.Step) {
	g := &n.g
	if len(g.Ops) > 0 && len(step.Copies) == 0 && rt.zeroFillOfFreshLocked(g) {
		g.Ops = nil
	}
	for _, a := range g.Accesses {
		rt.touched[allocKey{a.Buffer, a.Target}] = struct{}{}
	}
	for _, c := range step.Copies {
		rt.touched[allocKey{c.Buffer, c.Dst}] = struct{}{}
	}
}

// zeroFillOfFreshLocked: every op of g is a fill of zeros into the memory
// of an allocation g accesses that nothing used yet and that its device
// made zeroed.
func (rt *Runtime) zeroFillOfFreshLocked(g *Group) bool {
	for _, op := range g.Ops {
		f, ok := op.(device.FillOp)
		if !ok || f.Dst == nil {
			return false
		}
		for _, c := range f.Pattern {
			if c != 0 {
				return false
			}
		}
		fresh := false
		for _, a := range g.Accesses {
			k := allocKey{a.Buffer, a.Target}
			if e := rt.allocs[k]; e != nil && e.mem == f.Dst && e.zeroed.Load() {
				_, used := rt.touched[k]
				fresh = !used
				break
			}
		}
		if !fresh {
			return false
		}
	}
	return true
}

// Touch records that an allocation was handed out (as USM) to be written
// outside planned nodes: a zero fill of it is never dropped.
func (rt *Runtime) Touch(buf coherence.BufferID, a coherence.AllocID) {
	rt.mu.Lock()
	rt.touched[allocKey{buf, a}] = struct{}{}
	rt.mu.Unlock()
}

// start counts and dispatches a planned batch: nodes whose dependencies
// have finished run now. A node coherence refused fails (or, when its
// submitter planned it, Submit returns the error).
func (rt *Runtime) start(batch []*Node) {
	// One counter update (before any node can finish: Stats after Wait
	// counts them all) and one clock read for the batch.
	var groups, copies int64
	for _, n := range batch {
		if n.planErr == nil {
			groups++
			for _, c := range n.steps().Copies {
				copies += int64(len(c.Boxes))
			}
		}
	}
	rt.groups.Add(groups)
	if copies > 0 {
		rt.planned.Add(copies)
	}
	now := time.Since(rt.epoch)
	for _, n := range batch {
		if n.planErr != nil {
			if !n.inline {
				rt.finish(n, fmt.Errorf("acpp: %s: %w", n.g.Name, n.planErr))
			}
			continue
		}
		if len(rt.inOrder) > 0 {
			// While the planning count still holds n back: nobody else
			// dispatches it meanwhile.
			rt.tryAhead(n, now)
		}
		if n.pending.Add(-1) == 0 {
			rt.readied(n, now)
		}
	}
	clear(batch)
	rt.pendMu.Lock()
	if rt.pendSpare == nil {
		rt.pendSpare = batch[:0]
	}
	rt.pendMu.Unlock()
}

// flush plans every pushed node now.
func (rt *Runtime) flush() {
	rt.mu.Lock()
	batch := rt.planPendingLocked()
	rt.mu.Unlock()
	rt.start(batch)
}

// linkAfter makes n wait for p unless p has finished; track keeps p in
// n.io.preds for tryAhead.
func (n *Node) linkAfter(p *Node, track bool) {
	p.linkMu.Lock()
	if !p.fin.Load() {
		p.succ = append(p.succ, n)
		n.pending.Add(1)
		if track {
			n.io.preds = append(n.io.preds, p)
		}
	}
	p.linkMu.Unlock()
}

// cancelled returns the context's cause once it is done; a non-blocking
// receive keeps the common case free of the context's mutex.
func (rt *Runtime) cancelled() error {
	select {
	case <-rt.ctxDone:
		return context.Cause(rt.ctx)
	default:
		return nil
	}
}

// cancelledFor is cancelled for a group of device ops, and nil for a host
// group or a release: those read, write back and free buffers, which the
// program may still do once the runtime's context ended (Config.Context).
func (rt *Runtime) cancelledFor(g *Group) error {
	if g.Host != nil || g.Release != nil {
		return nil
	}
	return rt.cancelled()
}

// dispatchAt starts a node whose dependencies have finished, or, when it
// was issued ahead, whose dependencies are all enqueued before it on its
// queue. now is its start time, read by the caller that made it ready (a
// batch's one clock read, or its last dependency's end).
func (rt *Runtime) dispatchAt(n *Node, now time.Duration) {
	if rt.dispatch(n, now) {
		rt.cascade(n, now)
	}
}

// dispatch is dispatchAt without looking at n's successors: it reports
// whether n's work is now all enqueued on one in-order queue (setIssued),
// so that the caller looks at them (cascade).
func (rt *Runtime) dispatch(n *Node, now time.Duration) (issued bool) {
	n.started = now
	n.state.Store(int32(Running))
	// A group of device ops not started when the context ended fails
	// without running them; its copies still run (below): coherence
	// counts their pages valid where they go, so a read or a Close after
	// the context ended would take, and write back, what that memory held
	// before instead of the data.
	cancelled := rt.cancelledFor(&n.g)
	if cancelled != nil {
		cancelled = fmt.Errorf("not run, queue context done: %w", cancelled)
	}
	st := n.steps()
	for _, a := range st.Allocate {
		if n.barrier {
			break
		}
		if _, err := rt.Alloc(a.Buffer, a.Alloc); err != nil {
			rt.complete(n, fmt.Errorf("acpp: %s: allocate %s on memory %d: %w", n.g.Name, rt.BufferLabel(a.Buffer), a.Alloc.Mem, err))
			return false
		}
	}
	var ops []plannedCopy
	for _, c := range st.Copies {
		geo, _ := rt.Geometry(c.Buffer)
		src, err := rt.Alloc(c.Buffer, c.Src)
		if err == nil {
			var dst *device.Mem
			dst, err = rt.Alloc(c.Buffer, c.Dst)
			if err == nil {
				dev := rt.copyDevice(c)
				dir := 0
				switch {
				case c.Src.Mem == coherence.HostMem && c.Dst.Mem != coherence.HostMem:
					dir = 1
				case c.Src.Mem != coherence.HostMem && c.Dst.Mem == coherence.HostMem:
					dir = 2
				}
				for _, b := range c.Boxes {
					eb := geo.ElementBox(b)
					size := [3]int{eb.Hi[0] - eb.Lo[0], eb.Hi[1] - eb.Lo[1], eb.Hi[2] - eb.Lo[2]}
					ops = append(ops, plannedCopy{dev, device.CopyOp{
						Src:  device.Region{Mem: src, Extent: geo.Range, Origin: eb.Lo},
						Dst:  device.Region{Mem: dst, Extent: geo.Range, Origin: eb.Lo},
						Size: size, ElemSize: geo.ElemSize,
					}, dir, rt.link(c.Src.Mem, c.Dst.Mem)})
				}
			}
		}
		if err != nil {
			rt.complete(n, fmt.Errorf("acpp: %s: copy of %s: %w", n.g.Name, rt.BufferLabel(c.Buffer), err))
			return false
		}
	}
	work := n.g.Ops
	if cancelled != nil {
		if len(ops) == 0 {
			rt.complete(n, fmt.Errorf("acpp: %s %w", n.g.Name, cancelled))
			return false
		}
		// The last copy to finish fails the node (countDone) instead of
		// starting its work.
		work = nil
		n.errMu.Lock()
		n.firstErr = cancelled
		n.errMu.Unlock()
		n.opFailed.Store(true)
	}
	if n.issuedAhead() {
		return rt.issueInOrder(n, ops, work, n.io.aheadQ)
	}
	if len(ops) == 0 {
		return rt.run(n)
	}
	if nq := rt.inOrderQueues(n.g.Device); nq > 0 && rt.canIssueAhead(n) {
		// The copies and the work on one in-order queue: the work need
		// not wait for the copies' completion to reach the host either.
		return rt.issueInOrder(n, ops, work, rt.queueFor(n))
	}
	n.left.Store(int32(len(ops)))
	q := rt.queueFor(n)
	for i, p := range ops {
		cb := rt.countCopy(p, n, nil)
		cq := q + i // copies spread over queues, none onto one with work issued ahead
		if e := rt.inOrderOf(p.dev); e != nil {
			cq = rt.freeQueue(e, cq)
		}
		if err := p.dev.Enqueue(cq, p.op, cb); err != nil {
			rt.copyDone(n, fmt.Errorf("copy: %w", err))
		}
	}
	return false
}

// plannedCopy is one backend transfer of a node's prologue.
type plannedCopy struct {
	dev  device.Device // runs it
	op   device.CopyOp
	dir  int // 1 host→device, 2 device→host
	link *linkCount
}

// copyDevice is the device that runs a planned copy: the destination's,
// or the source's when the destination is host memory.
func (rt *Runtime) copyDevice(c coherence.Copy) device.Device {
	if c.Dst.Mem == coherence.HostMem {
		return rt.devOf[c.Src.Mem]
	}
	return rt.devOf[c.Dst.Mem]
}

// countCopy is the done callback of n's copy p: it counts a copy that
// succeeded in the statistics, then passes the result to next, or to
// copyDone when next is nil.
func (rt *Runtime) countCopy(p plannedCopy, n *Node, next func(error)) func(error) {
	bytes := int64(p.op.Bytes())
	dir, link := p.dir, p.link
	return func(err error) {
		if err == nil {
			rt.copies.Add(1)
			rt.bytes.Add(bytes)
			link.copies.Add(1)
			link.bytes.Add(bytes)
			switch dir {
			case 1:
				rt.h2d.Add(bytes)
			case 2:
				rt.d2h.Add(bytes)
			}
		}
		if next != nil {
			next(err)
		} else {
			rt.copyDone(n, err)
		}
	}
}

// IssuesAhead reports whether issue-ahead is on for some device of the
// runtime (Config.NoIssueAhead, ACPP_ISSUE_AHEAD, device.InOrderQueuer).
func (rt *Runtime) IssuesAhead() bool { return len(rt.inOrder) > 0 }

// inOrderQueues is d's number of queues when its queues keep their order
// and issue-ahead is on, else 0.
func (rt *Runtime) inOrderQueues(d device.Device) int {
	if e := rt.inOrderOf(d); e != nil {
		return e.queues
	}
	return 0
}

// spinDev is a device whose waiters spin for wait before they park.
type spinDev struct {
	dev  device.Device
	wait time.Duration
}

// SpinWait is how long a Wait for a group that d runs spins on its
// completion before it parks: d's SpinWait (device.SpinWaiter, the CUDA
// backend under CompletionSpin), 0 for other devices, host tasks (nil) and
// devices the runtime does not use.
func (rt *Runtime) SpinWait(d device.Device) time.Duration {
	for i := range rt.spinners {
		if rt.spinners[i].dev == d {
			return rt.spinners[i].wait
		}
	}
	return 0
}

// inOrderOf is d's entry in rt.inOrder, or nil.
func (rt *Runtime) inOrderOf(d device.Device) *inOrderDev {
	for i := range rt.inOrder {
		if rt.inOrder[i].dev == d {
			return &rt.inOrder[i]
		}
	}
	return nil
}

// inOrderMem: memory m is d's own (id) or host memory, so a copy or fill
// of it that d runs keeps d's queue order (device.InOrderQueuer); a fill
// also needs memory the host cannot see, since the host fills that.
func (rt *Runtime) inOrderMem(id device.ID, m *device.Mem, fill bool) bool {
	if m == nil {
		return false
	}
	if m.Device == id {
		return !fill || m.Host == nil
	}
	mem, ok := rt.memOf[m.Device]
	return ok && mem == coherence.HostMem && !fill
}

// canIssueAhead: n's own work could be issued ahead on its device, which
// has in-order queues: ops only (no host task, release or frees), and every
// op and planned copy one that keeps the queue's order. It does not look at
// the dependencies.
func (rt *Runtime) canIssueAhead(n *Node) bool {
	g := &n.g
	d := g.Device
	if d == nil || g.Host != nil || g.Release != nil || n.barrier || len(g.Ops) == 0 {
		return false
	}
	e := rt.inOrderOf(d)
	if e == nil {
		return false
	}
	id := e.id
	for _, op := range g.Ops {
		switch o := op.(type) {
		case device.LaunchOp:
		case device.FillOp:
			if !rt.inOrderMem(id, o.Dst, true) {
				return false
			}
		case device.CopyOp:
			if !rt.inOrderMem(id, o.Src.Mem, false) || !rt.inOrderMem(id, o.Dst.Mem, false) {
				return false
			}
		default:
			return false
		}
	}
	st := n.steps()
	if len(st.Free) > 0 {
		return false
	}
	mine := rt.memOf[id]
	for _, c := range st.Copies {
		if rt.copyDevice(c) != d {
			return false
		}
		for _, m := range []coherence.MemID{c.Src.Mem, c.Dst.Mem} {
			if m != coherence.HostMem && m != mine {
				return false
			}
		}
	}
	return true
}

// tryAhead issues n now if every dependency it still waits for is enqueued
// on one queue of n's device (which keeps its queues' order) and n's own
// work can go on that queue behind them (canIssueAhead): the queue's order
// then gives the dependencies, and n need not wait for their completion to
// reach the host. n then holds one more pending count until its own work
// is done, so it still finishes only after its dependencies have (complete,
// readied). A node is issued ahead at most once; one that cannot be waits as
// usual, and is looked at again when one of its dependencies is issued
// (cascade).
func (rt *Runtime) tryAhead(n *Node, now time.Duration) {
	if rt.claimAhead(n) {
		rt.dispatchAt(n, now)
	}
}

// claimAhead is tryAhead's decision: it reports whether n is to be issued
// ahead now (then it holds the extra pending count and its queue is set),
// and the caller dispatches it.
func (rt *Runtime) claimAhead(n *Node) bool {
	if !n.planned.Load() || n.io == nil || n.planErr != nil || n.io.ahead.Load() || n.pending.Load() == 0 || !rt.canIssueAhead(n) {
		return false
	}
	d, io := n.g.Device, n.io
	n.linkMu.Lock()
	if io.ahead.Load() || n.fin.Load() {
		n.linkMu.Unlock()
		return false
	}
	q := -1
	for _, p := range io.preds {
		if p.fin.Load() {
			continue
		}
		if p.io == nil { // not on an in-order device: it must complete first
			n.linkMu.Unlock()
			return false
		}
		p.linkMu.Lock() // successor before predecessor: the only nesting
		fin, issued, pq := p.fin.Load(), p.io.issued, p.io.issueQ
		p.linkMu.Unlock()
		if fin {
			continue
		}
		if !issued || p.g.Device != d || (q >= 0 && pq != q) {
			n.linkMu.Unlock()
			return false
		}
		q = pq
	}
	if q < 0 { // nothing left to wait for: it is dispatched as usual
		n.linkMu.Unlock()
		return false
	}
	for {
		v := n.pending.Load()
		if v == 0 { // its last dependency just finished: dispatched as usual
			n.linkMu.Unlock()
			return false
		}
		if n.pending.CompareAndSwap(v, v+1) {
			break
		}
	}
	io.ahead.Store(true)
	io.aheadQ = q
	if e := rt.inOrderOf(d); e != nil {
		io.aheadCnt = &e.ahead[q%e.queues]
		io.aheadCnt.Add(1)
	}
	io.preds = nil
	n.linkMu.Unlock()
	return true
}

// issueInOrder enqueues n's copies and work (its ops; none for a node
// the context cancelled), in that order, on queue q of its device, which keeps its queues' order (canIssueAhead): the queue of
// its dependencies for a node tryAhead issued. An Enqueue that fails ends
// the issue: the rest is not enqueued, since it would run without what
// failed, and n fails with that error. It reports whether all went on
// the queue (setIssued).
func (rt *Runtime) issueInOrder(n *Node, copies []plannedCopy, work []device.Op, q int) bool {
	total := len(copies) + len(work)
	n.left.Store(int32(total))
	done := getOpWaiter(n).fn
	fail := func(from int, err error) {
		for range total - from {
			done(err)
		}
	}
	for i, p := range copies {
		if err := p.dev.Enqueue(q, p.op, rt.countCopy(p, n, done)); err != nil {
			fail(i, fmt.Errorf("copy: %w", err))
			return false
		}
	}
	for i, op := range work {
		if err := n.g.Device.Enqueue(q, op, done); err != nil {
			fail(len(copies)+i, err)
			return false
		}
	}
	return rt.setIssued(n, q)
}

// setIssued records that n's remaining work is all enqueued on queue q of
// its device (a device with in-order queues); false when n has no
// issue-ahead state or has finished already.
func (rt *Runtime) setIssued(n *Node, q int) bool {
	if n.io == nil {
		return false
	}
	n.linkMu.Lock()
	defer n.linkMu.Unlock()
	if n.fin.Load() {
		return false
	}
	n.io.issued, n.io.issueQ = true, q
	return true
}

// cascade looks at the nodes waiting for n, just issued (setIssued): those
// whose dependencies are now all enqueued on one queue are issued ahead
// too, and so on down the chain. It works through a list, not by
// recursion: one batch of a long chain would otherwise grow the stack by
// a few frames per group.
func (rt *Runtime) cascade(n *Node, now time.Duration) {
	var buf [16]*Node
	work := append(buf[:0], n)
	for len(work) > 0 {
		p := work[len(work)-1]
		work = work[:len(work)-1]
		p.linkMu.Lock()
		var succ []*Node
		if !p.fin.Load() {
			succ = p.succ[:len(p.succ):len(p.succ)] // later links append past it
		}
		p.linkMu.Unlock()
		for _, s := range succ {
			if rt.claimAhead(s) && rt.dispatch(s, now) {
				work = append(work, s)
			}
		}
	}
}

// complete ends n's own work with err. A node issued ahead finishes only
// once its dependencies have too: the last of them or its work, whichever
// comes later, finishes it (ready).
func (rt *Runtime) complete(n *Node, err error) {
	if n.issuedAhead() {
		n.io.aheadErr = err
		if n.pending.Add(-1) != 0 {
			return
		}
	}
	rt.finish(n, err)
}

// readied handles a node whose pending count reached zero: it dispatches
// it, or, if it was issued ahead, its work is done too and it finishes.
func (rt *Runtime) readied(n *Node, now time.Duration) {
	if n.issuedAhead() {
		rt.finish(n, n.io.aheadErr)
		return
	}
	rt.dispatchAt(n, now)
}

// step counts one finished copy or op of n. It reports whether it was the
// last one, and then the first error of them.
func (n *Node) countDone(err error) (last bool, first error) {
	if err != nil {
		n.errMu.Lock()
		if n.firstErr == nil {
			n.firstErr = err
		}
		n.errMu.Unlock()
		n.opFailed.Store(true)
	}
	if n.left.Add(-1) != 0 {
		return false, nil
	}
	// The last one: the decrement orders after every recorded error, so
	// without a failure no lock is needed.
	if !n.opFailed.Load() {
		return true, nil
	}
	n.opFailed.Store(false)
	n.errMu.Lock()
	err = n.firstErr
	n.firstErr = nil
	n.errMu.Unlock()
	return true, err
}

// copyDone counts a finished copy; after the last one n's work starts.
func (rt *Runtime) copyDone(n *Node, err error) {
	if last, err := n.countDone(err); !last {
		return
	} else if err != nil {
		rt.complete(n, fmt.Errorf("acpp: %s: %w", n.g.Name, err))
		return
	}
	if rt.run(n) {
		rt.cascade(n, time.Since(rt.epoch))
	}
}

// opWaiter is the done callback of a node's ops. It is pooled, with its
// method value made once, so that enqueueing a group's ops allocates no
// closure.
type opWaiter struct {
	n  *Node
	fn func(error) // w.done
}

var opWaiters sync.Pool

func getOpWaiter(n *Node) *opWaiter {
	w, _ := opWaiters.Get().(*opWaiter)
	if w == nil {
		w = new(opWaiter)
		w.fn = w.done
	}
	w.n = n
	return w
}

func (w *opWaiter) done(err error) {
	n := w.n // read before counting: the last op's call recycles w
	last, err := n.countDone(err)
	if !last {
		return
	}
	w.n = nil
	opWaiters.Put(w)
	if err != nil {
		err = fmt.Errorf("acpp: %s: %w", n.g.Name, err)
	}
	n.rt.complete(n, err)
}

// queue spreads groups over a device's queues by ID (a hint; no shared
// counter to write).
func queue(n *Node) int { return int(uint32(n.Seq)) }

// freeQueue is the first queue of e from q that holds no work issued
// ahead, or q.
func (rt *Runtime) freeQueue(e *inOrderDev, q int) int {
	for i := range e.queues {
		if c := (q + i) % e.queues; e.ahead[c].Load() == 0 {
			return c
		}
	}
	return q % e.queues
}

// queueFor is the queue of n's device for n's own work when it is
// dispatched as usual (its dependencies have finished): queue(n), or on a
// device with issue-ahead the first queue from there that holds no work
// issued ahead. Such work waits for dependencies still running; a group
// that is ready, often on the critical path (a split's halo copy and its
// edge chunk), would otherwise wait behind it: on two H100s that made a
// split Jacobi 20-30 % slower with issue-ahead than without.
func (rt *Runtime) queueFor(n *Node) int {
	if e := rt.inOrderOf(n.g.Device); e != nil {
		return rt.freeQueue(e, queue(n))
	}
	return queue(n)
}

// run starts a node's work once its copies are done; issued as setIssued.
func (rt *Runtime) run(n *Node) (issued bool) {
	g := &n.g
	if g.Host != nil {
		g.Host(func(err error) {
			if err != nil {
				err = fmt.Errorf("acpp: %s: %w", n.g.Name, err)
			}
			rt.finish(n, err)
		})
		return false
	}
	if st := n.steps(); len(st.Free) > 0 {
		// Freeing may block in a driver whose goroutine may be the one
		// running this callback: free on a goroutine of our own.
		rt.bg.Add(1)
		go func() {
			defer rt.bg.Done()
			var errs []error
			for _, a := range st.Free {
				errs = append(errs, rt.FreeReleased(ReleaseReq{Buffer: a.Buffer, Alloc: a.Alloc}))
			}
			rt.finish(n, errors.Join(errs...))
		}()
		return false
	}
	if len(g.Ops) == 0 {
		rt.finish(n, nil)
		return false
	}
	n.left.Store(int32(len(g.Ops)))
	q := rt.queueFor(n)
	done := getOpWaiter(n).fn
	all := true
	for _, op := range g.Ops {
		if err := g.Device.Enqueue(q, op, done); err != nil {
			done(err)
			all = false
		}
	}
	if all && len(rt.inOrder) > 0 {
		if nq := rt.inOrderQueues(g.Device); nq > 0 && rt.canIssueAhead(n) {
			return rt.setIssued(n, q%nq)
		}
	}
	return false
}

// finish records n's result, lets coherence forget it and dispatches the
// nodes that were waiting only for it.
func (rt *Runtime) finish(n *Node, err error) {
	if n.io != nil && n.io.aheadCnt != nil {
		n.io.aheadCnt.Add(-1)
	}
	n.err = err
	end := time.Since(rt.epoch)
	n.ended = end
	if err != nil {
		n.state.Store(int32(Failed))
		rt.log.Debug("command group failed", "group", n.Seq, "name", n.g.Name, "error", err)
	} else {
		n.state.Store(int32(Complete))
	}
	rt.doneMu.Lock()
	rt.completed = append(rt.completed, n.Seq)
	rt.doneMu.Unlock()
	if err != nil {
		rt.waitMu.Lock()
		rt.errs = append(rt.errs, err)
		rt.waitMu.Unlock()
	}
	n.linkMu.Lock()
	n.fin.Store(true)
	succ := n.succ
	n.succ = nil
	if n.io != nil {
		n.io.preds = nil // finished nodes keep no chain of predecessors alive
	}
	done := n.done
	n.linkMu.Unlock()
	if done != nil {
		close(done) // before the queue counts it done: Wait implies Done
	}
	if n.g.OnFinish != nil {
		n.g.OnFinish(err)
	}
	rt.leave()
	for _, s := range succ {
		if s.pending.Add(-1) == 0 {
			rt.readied(s, end) // it starts as n ends
		}
	}
}

// allFinished: no submitted node is unfinished (leave has counted the
// last one out, after its Done was closed).
func (rt *Runtime) allFinished() bool { return rt.outstanding.Load() == 0 }

// leave counts a node out of outstanding and wakes waiters at zero.
func (rt *Runtime) leave() {
	if rt.outstanding.Add(-1) == 0 {
		rt.waitMu.Lock()
		// Re-check under the lock: a node submitted meanwhile keeps the
		// waiters waiting; its own finish wakes them.
		if rt.outstanding.Load() == 0 {
			for _, c := range rt.idle {
				close(c)
			}
			rt.idle = nil
		}
		rt.waitMu.Unlock()
	}
}

// drainLocked tells the core about finished nodes. The caller holds mu.
func (rt *Runtime) drainLocked() {
	rt.doneMu.Lock()
	ids := rt.completed
	rt.completed = rt.spare[:0]
	rt.doneMu.Unlock()
	for _, id := range ids {
		rt.core.Complete(id)
		rt.nodes.remove(id)
	}
	rt.spare = ids
}

// Wait blocks until every submitted node has finished, or ctx is done.
// When a device of the runtime asks its waiters to spin
// (device.SpinWaiter), Wait first spins on the count of unfinished nodes
// for up to the longest such SpinWait, as Node.Wait does, and parks only
// if they have not finished by then: a program that submits and waits in
// a loop is not woken 5-10 µs late each time.
func (rt *Runtime) Wait(ctx context.Context) error {
	if rt.maxSpin > 0 && device.SpinFor(rt.allFinished, rt.maxSpin, ctx.Done()) {
		rt.drain()
		return nil
	}
	rt.waitMu.Lock()
	if rt.outstanding.Load() == 0 {
		rt.waitMu.Unlock()
		rt.drain()
		return nil
	}
	c := make(chan struct{})
	rt.idle = append(rt.idle, c)
	rt.waitMu.Unlock()
	select {
	case <-c:
		rt.drain()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain hands finished nodes to the core now (so that an idle runtime holds
// no finished nodes).
func (rt *Runtime) drain() {
	rt.mu.Lock()
	rt.drainLocked()
	rt.mu.Unlock()
}

// TakeErrors returns the errors of nodes finished since the last call.
func (rt *Runtime) TakeErrors() []error {
	rt.waitMu.Lock()
	defer rt.waitMu.Unlock()
	e := rt.errs
	rt.errs = nil
	return e
}

// RemoveBuffer forgets a buffer and frees the allocations the runtime made.
// The caller must have waited for every node that used it.
func (rt *Runtime) RemoveBuffer(buf coherence.BufferID) error {
	rt.flush()
	rt.mu.Lock()
	rt.drainLocked()
	allocs, err := rt.core.RemoveBuffer(buf)
	var entries []*allocEntry
	if err == nil {
		for _, a := range allocs {
			k := allocKey{buf, a.Alloc}
			if e := rt.allocs[k]; e != nil {
				entries = append(entries, e)
				delete(rt.allocs, k)
				rt.dropReady(k)
			}
		}
		// Allocations made by the API (accessor creation) that coherence
		// did not plan are ours to free too.
		for k, e := range rt.allocs {
			if k.buf == buf {
				entries = append(entries, e)
				delete(rt.allocs, k)
				rt.dropReady(k)
			}
		}
		delete(rt.bufs, buf)
		for k := range rt.touched {
			if k.buf == buf {
				delete(rt.touched, k)
			}
		}
	}
	rt.mu.Unlock()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		// An accessor may be allocating this entry right now (Alloc's
		// once): wait for it, or keep it from starting, before reading
		// what it allocated.
		e.once.Do(func() { e.err = fmt.Errorf("%w: the buffer was closed while an accessor of it was made", ErrClosed) })
		rt.returnBudget(e)
		if e.user || e.mem == nil {
			continue
		}
		if d := rt.deviceByID(e.mem.Device); d != nil {
			errs = append(errs, d.Free(e.mem))
		}
	}
	return errors.Join(errs...)
}

// FreeReleased drops and frees the allocation a release node emptied.
func (rt *Runtime) FreeReleased(r ReleaseReq) error {
	rt.mu.Lock()
	k := allocKey{r.Buffer, r.Alloc}
	e := rt.allocs[k]
	delete(rt.allocs, k)
	rt.dropReady(k)
	rt.mu.Unlock()
	if e != nil {
		rt.returnBudget(e)
	}
	if e == nil || e.user || e.mem == nil {
		return nil
	}
	if d := rt.deviceByID(e.mem.Device); d != nil {
		return d.Free(e.mem)
	}
	return nil
}

func (rt *Runtime) deviceByID(id device.ID) device.Device {
	for _, d := range rt.devs {
		if d.Info().ID == id {
			return d
		}
	}
	return nil
}

// Close refuses new work after waiting for the submitted work.
func (rt *Runtime) Close(ctx context.Context) error {
	err := rt.Wait(ctx)
	rt.mu.Lock()
	rt.pendMu.Lock()
	rt.closed = true
	rt.pendMu.Unlock()
	rt.mu.Unlock()
	rt.planners.Wait()
	rt.bg.Wait()
	return err
}

// Devices lists every device the runtime knows.
func (rt *Runtime) Devices() []device.Device { return rt.devs }
