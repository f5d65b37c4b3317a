// Package embedded is the engine that runs command groups on the devices
// of this process (acpp.NewQueue): it opens them, keeps buffers coherent
// across them through internal/exec and the coherence core, and splits a
// group's range across them.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/exec"
)

// Config says which devices to open and how.
type Config struct {
	Selected []device.ID     // WithDevice, in order; the first is the default
	Kinds    []device.Kind   // WithKind
	CPUs     int             // CPU devices (views of the same hardware, B4)
	Workers  int             // workers per CPU device; 0 = GOMAXPROCS
	Devices  []device.Device // caller-owned devices; not closed
	// AcceleratorsFirst makes the first accelerator the default device
	// when nothing is selected.
	AcceleratorsFirst bool
	MemoryLimit       device.MemoryLimit
	Logger            *slog.Logger
}

// Engine runs groups on local devices. G is its user's memory of one
// group (see engine.Engine).
type Engine[G any] struct {
	rt      *exec.Runtime
	devs    []device.Device // selected, default first
	targets []*target       // one per selected device, same order
	owned   []device.Device // closed by Close

	bufs engine.Buffers[buffer]

	// usm holds the queue's live Malloc allocations, so that Free frees
	// only those, once, and nothing is allocated after Close.
	usm struct {
		mu     sync.Mutex
		closed bool                      // Close began; guarded by mu
		live   map[*device.Mem]*usmAlloc // guarded by mu
	}
}

// usmAlloc is a live Malloc allocation.
type usmAlloc struct {
	dev   device.Device // the device that made it
	bound int           // open buffers bound to it (NewBufferOver, B3)
	ops   []*exec.Node  // USM operations (USMOp) on it, unfinished when last looked at
	// submitting counts USMOp calls that use it and are being submitted
	// (not in ops yet): Free refuses it meanwhile too.
	submitting int
}

// unfinished drops the finished nodes of a.ops and returns how many are
// left. The caller holds usm.mu.
func (a *usmAlloc) unfinished() int {
	a.ops = slices.DeleteFunc(a.ops, (*exec.Node).Finished)
	return len(a.ops)
}

// buffer is what the engine keeps of a buffer besides the executor.
type buffer struct {
	geo       coherence.Geometry
	writeBack bool               // made over the user's slice (L1)
	bound     *coherence.AllocID // bound to a user USM allocation (B3)
	over      *device.Mem        // that allocation
}

var _ engine.Engine[struct{}] = (*Engine[struct{}])(nil)

// Open opens the local devices (the CPU always; the other backends
// imported, such as CUDA when it finds a GPU) and returns an engine over
// the selected ones (all by default, cpu:0 the default device). ctx bounds
// the engine: groups not yet started when it ends fail with its cause.
func Open[G any](ctx context.Context, cfg Config) (*Engine[G], error) {
	for i, d := range cfg.Devices {
		if d == nil {
			return nil, fmt.Errorf("%w: WithDevices got a nil device (argument %d); pass opened devices", engine.ErrOption, i)
		}
	}
	oc := device.OpenConfig{Workers: cfg.Workers, Devices: cfg.CPUs, Logger: cfg.Logger}
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
		devs, err := b.Open(ctx, device.OpenConfig{Logger: cfg.Logger})
		if err != nil {
			closeAll(owned)
			return nil, fmt.Errorf("acpp: open %s backend: %w", b.Kind, err)
		}
		owned = append(owned, devs...)
	}
	// Default order: CPUs (the default device: every kernel form runs
	// there), then caller devices, then accelerators.
	all = append(all, cpus...)
	all = append(all, cfg.Devices...)
	all = append(all, owned[len(cpus):]...)
	// The runtime knows a device by its ID (its memory, a group's target):
	// two devices with one ID would share a name and mix up their memories.
	seen := make(map[device.ID]bool, len(all))
	for _, d := range all {
		id := d.Info().ID
		if seen[id] {
			closeAll(owned)
			return nil, fmt.Errorf("%w: two devices of the queue are %s (have %v): a device passed to WithDevices twice, or one whose ID the queue's own devices (cpu:0…, cuda:0…) or another of WithDevices' have; give each its own index", engine.ErrOption, id, ids(all))
		}
		seen[id] = true
	}

	var sel []device.Device
	switch {
	case len(cfg.Selected) > 0 || len(cfg.Kinds) > 0:
		for _, id := range cfg.Selected {
			i := slices.IndexFunc(all, func(d device.Device) bool { return d.Info().ID == id })
			if i < 0 {
				closeAll(owned)
				return nil, fmt.Errorf("%w: %s (have %v); import the backend (e.g. _ \"github.com/acpp/acpp/cuda\") or pick another", engine.ErrNoDevice, id, ids(all))
			}
			if !slices.Contains(sel, all[i]) { // selected twice: once, as WithKind does
				sel = append(sel, all[i])
			}
		}
		for _, k := range cfg.Kinds {
			for _, d := range all {
				if d.Info().ID.Kind == k && !slices.Contains(sel, d) {
					sel = append(sel, d)
				}
			}
		}
		if len(sel) == 0 {
			closeAll(owned)
			return nil, fmt.Errorf("%w: none of kinds %v (have %v)", engine.ErrNoDevice, cfg.Kinds, ids(all))
		}
	case cfg.AcceleratorsFirst:
		sel = append(slices.Clone(all[len(cpus):]), cpus...)
	default:
		sel = all
	}
	hostSize, _, _ := cpu.HostMemory() // 0 where unknown: no default host budget
	rt, err := exec.New(exec.Config{Devices: all, Logger: cfg.Logger, Context: ctx, MemoryLimit: cfg.MemoryLimit, HostMemory: hostSize,
		NoIssueAhead: !issueAheadFor(sel)})
	if err != nil {
		closeAll(owned)
		return nil, err
	}
	e := &Engine[G]{rt: rt, devs: sel, owned: owned}
	for _, d := range sel {
		info := d.Info()
		e.targets = append(e.targets, &target{rt: rt, dev: d, info: info, mem: rt.MemOf(info.ID), goOK: info.Caps.Runs(device.FormGo)})
	}
	return e, nil
}

// issueAheadFor says whether the runtime issues groups ahead on the
// in-order devices among sel (exec.Config.NoIssueAhead): with one such
// device, yes; with several, only when ACPP_ISSUE_AHEAD=1 asks for it.
// Measured 2026-11-27 on two H100s (docs/PERFORMANCE.md, "Two GPUs"): a
// Jacobi split over both GPUs took 0.46-0.63 ms an iteration with
// issue-ahead on both against 0.38-0.53 with it only for one GPU, while on
// one GPU it gained and a chain of dependent steps went
// from 23-37 to 4-5 us a step (docs/PERFORMANCE.md). Why it loses across
// GPUs (found later, docs/RUNTIME.md "Issue-ahead on in-order queues"): the
// GPUs' edge chunks, the critical path, queued behind inner chunks issued
// ahead; queueFor now keeps them apart, which narrowed the gap but did not
// close it.
func issueAheadFor(sel []device.Device) bool {
	n := 0
	for _, d := range sel {
		if q, ok := d.(device.InOrderQueuer); ok && q.InOrderQueues() {
			n++
		}
	}
	return n <= 1 || os.Getenv(exec.IssueAheadEnv) == "1"
}

func ids(ds []device.Device) []device.ID {
	out := make([]device.ID, len(ds))
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

// Devices implements engine.Engine.
func (e *Engine[G]) Devices() []device.Info {
	out := make([]device.Info, len(e.targets))
	for i, t := range e.targets {
		out[i] = t.info
	}
	return out
}

// ClusterDevices is nil: the devices are local.
func (e *Engine[G]) ClusterDevices() []string { return nil }

// deviceIndex finds a selected device.
func (e *Engine[G]) deviceIndex(id device.ID) (int, error) {
	for i, t := range e.targets {
		if t.info.ID == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: %s is not one of the queue's devices %v", engine.ErrNoDevice, id, ids(e.devs))
}

// Target implements engine.Engine.
func (e *Engine[G]) Target(p engine.Place) (engine.Target, error) {
	if p.Node != "" {
		return nil, fmt.Errorf("%w: OnNode(%q, %s) names a node of a cluster queue (Connect); use On on a queue of local devices", engine.ErrNoDevice, p.Node, p.Device)
	}
	if sp := p.Split; sp != nil {
		var errs []error
		if p.Device != nil {
			errs = append(errs, errors.New("On and Split both choose devices; name the devices in Split (or SplitOpts.Devices)"))
		}
		if len(sp.ClusterDevices) > 0 {
			errs = append(errs, fmt.Errorf("SplitOpts.ClusterDevices %v names devices of a cluster queue (Connect); use SplitOpts.Devices on a queue of local devices", sp.ClusterDevices))
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("%w: %w", engine.ErrSplit, err)
		}
		devs, err := e.splitDevices(sp)
		if err != nil {
			return nil, err
		}
		return devs[0], nil
	}
	if p.Device == nil {
		return e.targets[0], nil
	}
	i, err := e.deviceIndex(*p.Device)
	if err != nil {
		return nil, err
	}
	return e.targets[i], nil
}

// target is one selected device as a group's target.
type target struct {
	rt   *exec.Runtime
	dev  device.Device
	info device.Info
	mem  coherence.AllocID // the memory its kernels use
	goOK bool              // it runs Go closures
}

func (t *target) Info() device.Info { return t.info }

func (t *target) Closure(what string) error {
	if t.goOK {
		return nil
	}
	return fmt.Errorf("%w: %s is a Go closure and %s runs no Go code; submit with acpp.On(a CPU device) or register a named kernel with an implementation for it", device.ErrNoImplementation, what, t.info.ID)
}

func (t *target) Bind(id engine.BufferID) (*device.Mem, error) {
	m, err := t.rt.Alloc(id, t.mem)
	if err != nil {
		return nil, fmt.Errorf("acpp: allocate %s on %s: %w", t.rt.BufferLabel(id), t.info.ID, err)
	}
	return m, nil
}

func (t *target) Kernel(name string, args []device.Arg) ([]device.Arg, *device.Kernel, error) {
	k, err := device.Kernels.Lookup(name)
	if err != nil {
		return nil, nil, engine.UnknownKernel(err)
	}
	caps := t.info.Caps
	if !caps.RunsKernel(k) {
		return nil, nil, fmt.Errorf("%w: kernel %q has no implementation that %s runs; register one or submit with acpp.On(another device)", device.ErrNoImplementation, name, t.info.ID)
	}
	conv, err := device.ValidateArgs(k, args, caps.LocalMemBytes)
	if err != nil {
		return nil, nil, err
	}
	return conv, k, nil
}

// ---- buffers ----

// NewBuffer implements engine.Engine.
func (e *Engine[G]) NewBuffer(s engine.BufferSpec) (engine.BufferID, error) {
	b := &buffer{geo: s.Geo}
	var user *device.Mem
	var at coherence.AllocID
	switch {
	case s.Over != nil:
		at = e.rt.MemOf(s.Over.Device)
		user, b.bound, b.over = s.Over, &at, s.Over
	case s.Data != nil && s.Copy:
		m, err := e.rt.AllocOwned(e.rt.Host(), device.MemDevice, len(s.Data), "copy of the data (CopyData)")
		if err != nil {
			return 0, fmt.Errorf("acpp: NewBufferFrom: %w", err)
		}
		copy(m.Host, s.Data)
		user, at = m, e.rt.HostAlloc()
	case s.Data != nil:
		user = &device.Mem{Device: e.rt.Host().Info().ID, Kind: device.MemDevice, Bytes: len(s.Data), Host: s.Data,
			Addr: addrOf(s.Data)}
		at, b.writeBack = e.rt.HostAlloc(), true
	}
	id, err := e.rt.AddBuffer(s.Geo, user, at)
	if err != nil {
		return 0, err
	}
	if s.Name != "" {
		e.rt.NameBuffer(id, s.Name)
	}
	e.bindUSM(b.over, 1)
	e.bufs.Put(id, b)
	return id, nil
}

// bindUSM counts d more open buffers bound to m, when m is a live Malloc
// allocation: Free refuses it while any is open.
func (e *Engine[G]) bindUSM(m *device.Mem, d int) {
	if m == nil {
		return
	}
	e.usm.mu.Lock()
	if a := e.usm.live[m]; a != nil {
		a.bound += d
	}
	e.usm.mu.Unlock()
}

func (e *Engine[G]) buffer(id engine.BufferID) (*buffer, error) { return e.bufs.Get(id) }

// hostTask submits a host-side group over the whole buffer and returns its
// node; the group finishes as soon as its copies are done.
func (e *Engine[G]) hostTask(id engine.BufferID, geo coherence.Geometry, mode coherence.Mode, discard bool, name string) (*exec.Node, error) {
	g := exec.Group{Name: name, Accesses: []coherence.Access{{Buffer: id, Pages: geo.All(), Mode: mode, Discard: discard, Target: e.rt.HostAlloc()}}}
	g.Host = func(done func(error)) { done(nil) }
	if discard { // it reads and writes nothing: it only orders
		return e.rt.SubmitBarrier(g)
	}
	return e.rt.Submit(g)
}

// WriteBack implements engine.Engine.
func (e *Engine[G]) WriteBack(ctx context.Context, id engine.BufferID) error {
	b, err := e.buffer(id)
	if err != nil {
		return err
	}
	n, err := e.hostTask(id, b.geo, coherence.Read, false, "write-back")
	if err != nil {
		return err
	}
	return n.Wait(ctx)
}

// CloseBuffer implements engine.Engine.
func (e *Engine[G]) CloseBuffer(ctx context.Context, id engine.BufferID) error {
	b, err := e.buffer(id)
	if err != nil {
		return err
	}
	// A read-write host group over every page conflicts with every earlier
	// user, so waiting for it waits for them all; it copies only when the
	// data must go back to the user's slice (otherwise it discards, T1).
	n, err := e.hostTask(id, b.geo, coherence.ReadWrite, !b.writeBack, "close")
	if err != nil {
		return err
	}
	if err := n.Wait(ctx); err != nil {
		return err
	}
	e.bufs.Delete(id)
	e.bindUSM(b.over, -1)
	return e.rt.RemoveBuffer(id)
}

// Release implements engine.Engine.
func (e *Engine[G]) Release(ctx context.Context, id engine.BufferID, dev device.ID) error {
	b, err := e.buffer(id)
	if err != nil {
		return err
	}
	i, err := e.deviceIndex(dev)
	if err != nil {
		return err
	}
	at := e.targets[i].mem
	if at == e.rt.HostAlloc() {
		return fmt.Errorf("%w: %s uses the host allocation, which lives as long as the buffer; Close the buffer to free it", engine.ErrMode, dev)
	}
	if b.bound != nil && *b.bound == at {
		return fmt.Errorf("%w: the buffer is bound to the user's USM allocation on %s (B3); free that yourself after Close", engine.ErrMode, dev)
	}
	n, err := e.rt.Submit(exec.Group{Name: "release", Release: &exec.ReleaseReq{Buffer: id, Alloc: at}})
	if err != nil {
		return err
	}
	return n.Wait(ctx)
}

// BufferUSM implements engine.Engine.
func (e *Engine[G]) BufferUSM(id engine.BufferID, dev device.ID) (*device.Mem, error) {
	i, err := e.deviceIndex(dev)
	if err != nil {
		return nil, err
	}
	at := e.targets[i].mem
	m, err := e.rt.Alloc(id, at)
	if err != nil {
		return nil, err
	}
	e.rt.Touch(id, at) // written outside command groups from now on
	return m, nil
}

// ---- the queue ----

// Wait implements engine.Engine.
func (e *Engine[G]) Wait(ctx context.Context) ([]error, error) {
	if err := e.rt.Wait(ctx); err != nil {
		return nil, err
	}
	return e.rt.TakeErrors(), nil
}

// TakeErrors implements engine.Engine.
func (e *Engine[G]) TakeErrors() []error { return e.rt.TakeErrors() }

// Close implements engine.Engine. Malloc allocations not freed go with
// the devices.
func (e *Engine[G]) Close(ctx context.Context) error {
	e.usm.mu.Lock()
	e.usm.closed, e.usm.live = true, nil
	e.usm.mu.Unlock()
	err := e.rt.Close(ctx)
	closeAll(e.owned)
	return err
}

// Stats implements engine.Engine.
func (e *Engine[G]) Stats() engine.Stats {
	s := e.rt.Stats()
	return engine.Stats{Groups: s.Groups, CopiesPlanned: s.CopiesPlanned, Copies: s.Copies,
		BytesCopied: s.BytesCopied, BytesHostToDevice: s.BytesHostToDevice, BytesDeviceToHost: s.BytesDeviceToHost,
		Allocations: s.Allocations, Links: transfers(s.Links)}
}

// transfers merges the executor's transfers per link, in their order.
func transfers(ts []exec.Transfer) []engine.Transfer {
	var out []engine.Transfer
	for _, t := range ts {
		out = engine.AddTransfer(out, t.From, t.To, t.Copies, t.Bytes)
	}
	return out
}

// MemoryBudgets implements engine.Engine.
func (e *Engine[G]) MemoryBudgets() []engine.MemoryBudget {
	var out []engine.MemoryBudget
	for _, b := range e.rt.MemoryBudgets() {
		out = append(out, engine.MemoryBudget{Device: b.Device, Host: b.Mem == coherence.HostMem, Size: b.Size, Budget: b.Budget, Used: b.Used, How: b.How})
	}
	return out
}
