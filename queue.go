package acpp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/engine/embedded"
)

// Device kinds, for WithDevice and On.
const (
	CPU  = device.KindCPU
	CUDA = device.KindCUDA
)

// DeviceID names a device: kind and index (cpu:0, cuda:1).
type DeviceID = device.ID

type queueConfig struct {
	selected []DeviceID
	kinds    []device.Kind
	cpus     int
	workers  int
	log      *slog.Logger
	onError  func(error)
	devices  []device.Device // caller-owned devices (tests, node agents)
	cluster  *clusterConfig  // options only Connect takes
	accFirst bool            // WithAcceleratorsFirst
	mem      MemoryLimit     // WithMemoryLimit
	memSet   bool            // WithMemoryLimit was given (Connect refuses it)
}

// Option configures NewQueue.
type Option func(*queueConfig)

// WithDevice selects a device by kind and index. Repeat it to select
// several; the first selected is the default device of Submit. Without any
// selection the queue uses every device it finds with the CPU as default
// (Go closures run there; pick a GPU with WithKind(CUDA), WithDevice or On).
func WithDevice(kind device.Kind, index int) Option {
	return func(c *queueConfig) { c.selected = append(c.selected, DeviceID{Kind: kind, Index: index}) }
}

// WithKind selects every device of a kind. NewQueue and Connect refuse a
// kind that is none (ErrOption).
func WithKind(kind device.Kind) Option {
	return func(c *queueConfig) { c.kinds = append(c.kinds, kind) }
}

// checkKinds refuses a WithKind of no device kind, on either engine alike.
func checkKinds(kinds []device.Kind) error {
	for _, k := range kinds {
		if _, err := device.ParseKind(k.String()); err != nil {
			return fmt.Errorf("%w: WithKind(%s) is no device kind; pass acpp.CPU or acpp.CUDA", ErrOption, k)
		}
	}
	return nil
}

// Bounds of WithCPUDevices and WithWorkers. Each worker is a goroutine and
// may hold a work-group's local memory (cpu.LocalMemBytes, 1 MiB), so an
// unbounded count would exhaust memory before the queue opened; Go itself
// runs at most 1024 threads of Go code at once (GOMAXPROCS).
const (
	MaxCPUDevices = 64
	MaxWorkers    = 1024
)

// WithCPUDevices opens n CPU devices (default 1; 0 is the default, at most
// MaxCPUDevices). They are views of the same hardware and share one host
// allocation per buffer (B4). NewQueue refuses a negative n or one above
// MaxCPUDevices with ErrOption.
func WithCPUDevices(n int) Option { return func(c *queueConfig) { c.cpus = n } }

// WithWorkers sets the worker goroutines of each CPU device; 0 means
// GOMAXPROCS. NewQueue refuses a negative n or one above MaxWorkers with
// ErrOption.
func WithWorkers(n int) Option { return func(c *queueConfig) { c.workers = n } }

// WithLogger sets the logger for debug events; nil means discard.
func WithLogger(l *slog.Logger) Option { return func(c *queueConfig) { c.log = l } }

// WithAsyncHandler hands the errors of failed command groups to f instead
// of returning them from Queue.Wait (SYCL's async handler, called as
// wait_and_throw calls it): f is not called when a group fails, but later,
// by Queue.Wait and Queue.Close, on the goroutine that calls them, once per
// error that has not been reported yet; Wait and Close then return nil for
// those errors. Without it, Wait and Close return them joined. A group's
// own error is on its Event either way (Event.Wait, Event.Err).
func WithAsyncHandler(f func(error)) Option { return func(c *queueConfig) { c.onError = f } }

// WithAcceleratorsFirst makes the first accelerator (a GPU) the default
// device when the queue selects every device it finds (no WithDevice or
// WithKind) and there is one; the CPUs stay in the queue, after the
// accelerators. Without an accelerator the CPU is the default, as without
// the option. acpp-submit runs jobs this way: their kernels have GPU forms,
// while Go closures need the CPU default. NewQueue only: Connect refuses
// it (ErrOption), as a cluster queue places each group itself.
func WithAcceleratorsFirst() Option { return func(c *queueConfig) { c.accFirst = true } }

// MemoryLimit chooses the budget of each memory a queue allocates in (see
// WithMemoryLimit).
type MemoryLimit = device.MemoryLimit

// WithMemoryLimit sets the budget of each memory the queue allocates in
// (host memory, each GPU's). Buffer allocations, a buffer's copy of its
// data (CopyData) and USM allocations (Malloc) are admitted against it
// before they are made; one that does not fit fails (the command group's
// event and Wait, or NewBufferFrom and Malloc) with an error matching
// ErrMemoryLimit that names the size, the budget and what to do, and
// nothing is allocated: Go cannot recover from a failed allocation, so a
// buffer larger than the machine would otherwise crash the program.
//
// Without it the budget is 75% of host memory (MemTotal, or the process's
// cgroup limit where lower) and 90% of each GPU's. MemoryLimit{Bytes: n}
// gives each memory n bytes (at most its size), MemoryLimit{Share: 0.5}
// half of each, and MemoryLimit{Off: true} no budget. The budget covers
// the runtime's allocations, not the program's own slices (such as what
// Buffer.Read returns). NewQueue only: Connect refuses it (ErrOption),
// as the nodes keep budgets of their own (acpp-node --max-bytes).
func WithMemoryLimit(l MemoryLimit) Option {
	return func(c *queueConfig) { c.mem, c.memSet = l, true }
}

// WithDevices adds devices the caller opened and owns (fakes in tests, a
// node agent's devices). The queue does not close them.
func WithDevices(devs ...device.Device) Option {
	return func(c *queueConfig) { c.devices = append(c.devices, devs...) }
}

// Queue submits command groups to the devices of this machine (NewQueue)
// or of a cluster (Connect). It records each command group once and hands
// the record to its engine, which runs it. It is safe for concurrent use.
type Queue struct {
	eng     engine.Engine[cgroup]
	onError func(error)
	ctx     context.Context
	cancel  context.CancelCauseFunc
	// The default target, resolved once (Submit would otherwise ask the
	// engine per group); nil where the engine resolves each group's.
	def engine.Target

	mu      sync.Mutex
	buffers map[*bufState]struct{} // open buffers, written back by Close; guarded by mu
	usm     map[*usmState]struct{} // Malloc allocations not freed; guarded by mu
	closed  bool                   // guarded by mu
}

// openQueue wraps an opened engine.
func openQueue(eng engine.Engine[cgroup], ctx context.Context, cancel context.CancelCauseFunc, onError func(error), cacheDefault bool) *Queue {
	q := &Queue{eng: eng, onError: onError, ctx: ctx, cancel: cancel, buffers: map[*bufState]struct{}{}, usm: map[*usmState]struct{}{}}
	if cacheDefault {
		q.def, _ = eng.Target(engine.Place{})
	}
	return q
}

// NewQueue opens the local devices (the CPU always; CUDA devices when the
// CUDA backend is imported and finds a GPU) and returns a queue over the
// selected ones (all by default, cpu:0 the default device). ctx bounds the queue's life: when it is done, command
// groups not yet started fail with its cause and Submit refuses new ones;
// buffers can still be read, written and closed (Close writes back and
// frees), as on a cluster queue.
func NewQueue(ctx context.Context, opts ...Option) (*Queue, error) {
	if ctx == nil {
		return nil, errors.New("acpp: NewQueue needs a context; pass context.Background() for a queue that lives until Close")
	}
	var cfg queueConfig
	for _, o := range opts {
		if o != nil { // a nil option is none, as in onlyOptions
			o(&cfg)
		}
	}
	if cfg.cluster != nil {
		// Name the options given, as Connect names NewQueue's.
		given, verb, pron := cfg.cluster.given, "applies", "it"
		if len(given) > 1 {
			verb, pron = "apply", "them"
		}
		return nil, fmt.Errorf("%w: %s %s to Connect only; drop %s for a queue of this machine's devices", ErrOption, strings.Join(given, ", "), verb, pron)
	}
	if cfg.cpus < 0 || cfg.cpus > MaxCPUDevices || cfg.workers < 0 || cfg.workers > MaxWorkers {
		return nil, fmt.Errorf("%w: WithCPUDevices (%d) must be 0 to %d and WithWorkers (%d) 0 to %d (0: the default)",
			ErrOption, cfg.cpus, MaxCPUDevices, cfg.workers, MaxWorkers)
	}
	if err := checkKinds(cfg.kinds); err != nil {
		return nil, err
	}
	if err := cfg.mem.Validate(); err != nil {
		return nil, fmt.Errorf("%w: WithMemoryLimit: %w", ErrOption, err)
	}
	qctx, cancel := context.WithCancelCause(ctx)
	eng, err := embedded.Open[cgroup](qctx, embedded.Config{Selected: cfg.selected, Kinds: cfg.kinds, CPUs: cfg.cpus, Workers: cfg.workers,
		Devices: cfg.devices, AcceleratorsFirst: cfg.accFirst, MemoryLimit: cfg.mem, Logger: cfg.log})
	if err != nil {
		cancel(err)
		return nil, err
	}
	return openQueue(eng, qctx, cancel, cfg.onError, true), nil
}

// Devices describes the queue's devices; the first is the default. On a
// cluster queue they are the job's devices (Name is "node/kind:index").
func (q *Queue) Devices() []device.Info {
	if q == nil {
		return nil
	}
	return q.eng.Devices()
}

// Device describes the default device.
// On a cluster queue it is the job's first device (placement chooses where
// groups run unless they are pinned with OnNode).
func (q *Queue) Device() device.Info {
	if q == nil {
		return device.Info{}
	}
	return q.eng.Devices()[0]
}

// ClusterDevices names the devices of a cluster queue ("node/kind:index"),
// in job order; nil for a queue made by NewQueue.
func (q *Queue) ClusterDevices() []string {
	if q == nil {
		return nil
	}
	return q.eng.ClusterDevices()
}

// MemoryBudget is the budget of one memory of a queue (WithMemoryLimit).
type MemoryBudget struct {
	// Device is the device that allocates the memory; Host is set for host
	// memory (shared by every CPU device).
	Device DeviceID
	Host   bool
	// Size is the memory's size (0: unknown); Budget what the queue's
	// allocations may hold in it together (0: no budget); Used what they
	// hold now. How says how the budget was chosen.
	Size, Budget, Used uint64
	How                string
}

// MemoryBudgets lists the budget of each memory of the queue, host memory
// first. A cluster queue has none (the nodes keep them).
func (q *Queue) MemoryBudgets() []MemoryBudget {
	var out []MemoryBudget
	if q == nil {
		return nil
	}
	for _, b := range q.eng.MemoryBudgets() {
		out = append(out, MemoryBudget(b))
	}
	return out
}

// Stats returns the queue's counters (see Stats for what a cluster queue
// counts).
func (q *Queue) Stats() Stats {
	if q == nil {
		return Stats{}
	}
	return statsOf(q.eng.Stats())
}

// errNilQueue is the error of a call on a nil *Queue (the queue of a
// NewQueue or Connect that failed): ErrClosed, saying so, not a panic.
func errNilQueue(what string) error {
	return fmt.Errorf("%w: %s of a nil *Queue: NewQueue or Connect failed (check its error) or the queue was never made", ErrClosed, what)
}

// Wait blocks until every submitted command group has finished and returns
// the errors of those that failed since the last Wait (unless an async
// handler takes them). It returns ctx's error if ctx ends first.
func (q *Queue) Wait(ctx context.Context) error {
	if q == nil {
		return errNilQueue("Wait")
	}
	if err := checkCtx(ctx, "Queue.Wait"); err != nil {
		return err
	}
	failed, err := q.eng.Wait(ctx)
	if err != nil {
		return err
	}
	return q.report(failed)
}

// report hands errs to the async handler if there is one (and returns
// nil), or joins them.
func (q *Queue) report(errs []error) error {
	if q.onError != nil {
		for _, e := range errs {
			if e != nil {
				q.onError(e)
			}
		}
		return nil
	}
	return errors.Join(errs...)
}

// isClosed reports whether Close was called.
func (q *Queue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// markClosed marks q closed and returns its open buffers in creation
// order; ok is false when q was closed already.
func (q *Queue) markClosed() (open []*bufState, ok bool) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, false
	}
	q.closed = true
	// Malloc allocations not freed go with the devices: a pointer into one
	// is refused from now on, as after Free.
	for s := range q.usm {
		s.closed.Store(true)
		s.freed.Store(true)
	}
	q.usm = nil
	open = make([]*bufState, 0, len(q.buffers))
	for b := range q.buffers {
		open = append(open, b)
	}
	q.mu.Unlock()
	slices.SortFunc(open, func(a, b *bufState) int { return int(a.id) - int(b.id) })
	return open, true
}

// Close writes back and closes the buffers still open, waits for all work,
// and closes the devices the queue opened (or the cluster job). Calling it
// twice is safe. Close any HostAccessor first: an open host access holds
// its buffer, and Close waits for it.
func (q *Queue) Close() error {
	if q == nil {
		return errNilQueue("Close")
	}
	open, ok := q.markClosed()
	if !ok {
		return nil
	}
	// The queue's context ends also when the async error handler panics
	// below. A Close while this one runs returns nil at once: it may come
	// from that handler, or a kernel, which this one waits for.
	defer q.cancel(ErrClosed)
	var errs []error
	ctx := context.Background()
	for _, b := range open {
		errs = append(errs, b.close(ctx))
	}
	errs = append(errs, q.eng.Close(ctx), q.report(q.eng.TakeErrors()))
	return errors.Join(errs...)
}
