package acpp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/exec"
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

// WithKind selects every device of a kind.
func WithKind(kind device.Kind) Option {
	return func(c *queueConfig) { c.kinds = append(c.kinds, kind) }
}

// WithCPUDevices opens n CPU devices (default 1). They are views of the
// same hardware and share one host allocation per buffer (B4).
func WithCPUDevices(n int) Option { return func(c *queueConfig) { c.cpus = n } }

// WithWorkers sets the worker goroutines of each CPU device; 0 means
// GOMAXPROCS.
func WithWorkers(n int) Option { return func(c *queueConfig) { c.workers = n } }

// WithLogger sets the logger for debug events; nil means discard.
func WithLogger(l *slog.Logger) Option { return func(c *queueConfig) { c.log = l } }

// WithAsyncHandler receives the errors of failed command groups as they
// happen (SYCL's async handler); without it they are returned by Wait.
func WithAsyncHandler(f func(error)) Option { return func(c *queueConfig) { c.onError = f } }

// WithAcceleratorsFirst makes the first accelerator (a GPU) the default
// device when the queue selects every device it finds (no WithDevice or
// WithKind) and there is one; the CPUs stay in the queue, after the
// accelerators. Without an accelerator the CPU is the default, as without
// the option. acpp-submit runs jobs this way: their kernels have GPU forms,
// while Go closures need the CPU default.
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
// Buffer.Read returns). A cluster queue (Connect) ignores it: the nodes
// keep budgets of their own (acpp-node --max-bytes).
func WithMemoryLimit(l MemoryLimit) Option { return func(c *queueConfig) { c.mem = l } }

// WithDevices adds devices the caller opened and owns (fakes in tests, a
// node agent's devices). The queue does not close them.
func WithDevices(devs ...device.Device) Option {
	return func(c *queueConfig) { c.devices = append(c.devices, devs...) }
}

// Queue submits command groups to the devices of this machine. It is safe
// for concurrent use.
type Queue struct {
	rt      *exec.Runtime
	cl      *clusterQueue   // set by Connect: the queue forwards to a cluster job
	devs    []device.Device // selected, default first
	owned   []device.Device // closed by Close
	onError func(error)
	ctx     context.Context
	cancel  context.CancelCauseFunc
	// The default device's memory and whether it runs Go closures, looked
	// up once (Submit would otherwise ask the device and a map per group).
	defMem coherence.AllocID
	defGo  bool

	mu      sync.Mutex
	buffers map[*bufState]struct{} // open buffers, written back by Close; guarded by mu
	closed  bool                   // guarded by mu
}

// NewQueue opens the local devices (the CPU always; CUDA devices when the
// CUDA backend is imported and finds a GPU) and returns a queue over the
// selected ones (all by default, cpu:0 the default device). ctx bounds the queue's life: when it is done, command
// groups not yet started fail with its cause and Submit refuses new ones.
func NewQueue(ctx context.Context, opts ...Option) (*Queue, error) {
	if ctx == nil {
		return nil, errors.New("acpp: NewQueue needs a context; pass context.Background() for a queue that lives until Close")
	}
	var cfg queueConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.cluster != nil {
		return nil, errors.New("acpp: WithCredentials, WithClientCredentials, WithNodes, WithLabels and WithCoordinator apply to Connect only")
	}
	if cfg.cpus < 0 || cfg.workers < 0 {
		return nil, fmt.Errorf("acpp: WithCPUDevices (%d) and WithWorkers (%d) must be >= 0", cfg.cpus, cfg.workers)
	}
	oc := device.OpenConfig{Workers: cfg.workers, Devices: cfg.cpus}
	var all, owned []device.Device
	cpus, err := cpu.Open(ctx, oc)
	if err != nil {
		return nil, err
	}
	owned = append(owned, cpus...)
	for _, b := range device.Backends() {
		if b.Kind == device.KindCPU {
			continue
		}
		devs, err := b.Open(ctx, device.OpenConfig{})
		if err != nil {
			closeAll(owned)
			return nil, fmt.Errorf("acpp: open %s backend: %w", b.Kind, err)
		}
		owned = append(owned, devs...)
	}
	// Default order: CPUs (the default device: every kernel form runs
	// there), then caller devices, then accelerators.
	all = append(all, cpus...)
	all = append(all, cfg.devices...)
	all = append(all, owned[len(cpus):]...)

	var sel []device.Device
	switch {
	case len(cfg.selected) > 0 || len(cfg.kinds) > 0:
		for _, id := range cfg.selected {
			i := slices.IndexFunc(all, func(d device.Device) bool { return d.Info().ID == id })
			if i < 0 {
				closeAll(owned)
				return nil, fmt.Errorf("%w: %s (have %v); import the backend (e.g. _ \"github.com/acpp/acpp/cuda\") or pick another", ErrNoDevice, id, ids(all))
			}
			sel = append(sel, all[i])
		}
		for _, k := range cfg.kinds {
			for _, d := range all {
				if d.Info().ID.Kind == k && !slices.Contains(sel, d) {
					sel = append(sel, d)
				}
			}
		}
		if len(sel) == 0 {
			closeAll(owned)
			return nil, fmt.Errorf("%w: none of kinds %v (have %v)", ErrNoDevice, cfg.kinds, ids(all))
		}
	case cfg.accFirst:
		sel = append(slices.Clone(all[len(cpus):]), cpus...)
	default:
		sel = all
	}
	qctx, cancel := context.WithCancelCause(ctx)
	hostSize, _, _ := cpu.HostMemory() // 0 where unknown: no default host budget
	rt, err := exec.New(exec.Config{Devices: all, Logger: cfg.log, Context: qctx, MemoryLimit: cfg.mem, HostMemory: hostSize})
	if err != nil {
		cancel(err)
		closeAll(owned)
		return nil, err
	}
	def := sel[0].Info()
	return &Queue{rt: rt, devs: sel, owned: owned, onError: cfg.onError, ctx: qctx, cancel: cancel,
		defMem: rt.MemOf(def.ID), defGo: def.Caps.Runs(device.FormGo),
		buffers: map[*bufState]struct{}{}}, nil
}

func ids(ds []device.Device) []DeviceID {
	out := make([]DeviceID, len(ds))
	for i, d := range ds {
		out[i] = d.Info().ID
	}
	return out
}

func closeAll(ds []device.Device) {
	for _, d := range ds {
		d.Close()
	}
}

// Devices describes the queue's selected devices; the first is the default.
func (q *Queue) Devices() []device.Info {
	if q.cl != nil {
		return q.clusterDevices()
	}
	out := make([]device.Info, len(q.devs))
	for i, d := range q.devs {
		out[i] = d.Info()
	}
	return out
}

// Device describes the default device.
// On a cluster queue it is the job's first device (placement chooses where
// groups run unless they are pinned with OnNode).
func (q *Queue) Device() device.Info {
	if q.cl != nil {
		return q.clusterDevices()[0]
	}
	return q.devs[0].Info()
}

func (q *Queue) deviceByID(id DeviceID) (device.Device, error) {
	if q.cl != nil {
		return nil, fmt.Errorf("%w: %s: a cluster queue's buffers live on the nodes and the coordinator manages their allocations", ErrNotOnCluster, id)
	}
	for _, d := range q.devs {
		if d.Info().ID == id {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: %s is not one of the queue's devices %v", ErrNoDevice, id, ids(q.devs))
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
	if q.cl != nil {
		return nil
	}
	var out []MemoryBudget
	for _, b := range q.rt.MemoryBudgets() {
		out = append(out, MemoryBudget{Device: b.Device, Host: b.Mem == coherence.HostMem, Size: b.Size, Budget: b.Budget, Used: b.Used, How: b.How})
	}
	return out
}

// Stats returns the queue's counters (see Stats for what a cluster queue
// counts).
func (q *Queue) Stats() Stats {
	if q.cl != nil {
		return q.cl.stats()
	}
	return statsFromExec(q.rt.Stats())
}

// Wait blocks until every submitted command group has finished and returns
// the errors of those that failed since the last Wait (unless an async
// handler takes them). It returns ctx's error if ctx ends first.
func (q *Queue) Wait(ctx context.Context) error {
	if q.cl != nil {
		return q.clusterWait(ctx)
	}
	if err := q.rt.Wait(ctx); err != nil {
		return err
	}
	return q.takeErrors()
}

func (q *Queue) takeErrors() error { return q.report(q.rt.TakeErrors()) }

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

// markClosed marks q closed and returns its open buffers in creation
// order; ok is false when q was closed already.
func (q *Queue) markClosed() (open []*bufState, ok bool) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, false
	}
	q.closed = true
	open = make([]*bufState, 0, len(q.buffers))
	for b := range q.buffers {
		open = append(open, b)
	}
	q.mu.Unlock()
	slices.SortFunc(open, func(a, b *bufState) int { return int(a.id) - int(b.id) })
	return open, true
}

// Close writes back and closes the buffers still open, waits for all work,
// and closes the devices the queue opened. Calling it twice is safe. Close
// any HostAccessor first: an open host access holds its buffer, and Close
// waits for it.
func (q *Queue) Close() error {
	if q.cl != nil {
		return q.clusterClose()
	}
	open, ok := q.markClosed()
	if !ok {
		return nil
	}
	var errs []error
	for _, b := range open {
		errs = append(errs, b.close(context.Background()))
	}
	errs = append(errs, q.rt.Close(context.Background()), q.takeErrors())
	q.cancel(ErrClosed)
	closeAll(q.owned)
	return errors.Join(errs...)
}
