// Package cluster is the engine that runs command groups on a cluster of
// acpp-node agents (acpp.Connect): it opens a job with a coordinator in
// this process, turns each recorded group into a coordinator group (only
// named kernels travel), and completes the events as the nodes report.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
)

// CoordinatorConfig is the job's coordinator configuration, which
// acpp.WithCoordinator lets a program adjust.
type CoordinatorConfig = coordinator.Config

// NodeLossPolicy is coordinator.NodeLossPolicy (acpp.WithNodeLoss).
type NodeLossPolicy = coordinator.NodeLossPolicy

// The policies, and the checkpoint settings (acpp.WithCheckpoints).
const (
	RecoverOnLoss  = coordinator.RecoverOnLoss
	FailOnLoss     = coordinator.FailOnLoss
	CheckpointAuto = coordinator.CheckpointAuto
	CheckpointOff  = coordinator.CheckpointOff
)

// Config says which cluster to use and how.
type Config struct {
	Addrs       []string // the nodes' QUIC addresses
	Credentials *credentials.Credentials
	Logger      *slog.Logger
	Kinds       []device.Kind       // WithKind
	Nodes       []string            // WithNodes
	Labels      map[string][]string // WithLabels: node → labels
	MatchLabels []string            // WithLabels: labels a node must carry
	OnNodeLoss  NodeLossPolicy      // WithNodeLoss
	Checkpoint  *int                // WithCheckpoints (nil: the coordinator's default)
	Tune        func(*coordinator.Config)
}

// Engine runs groups on a cluster job. G is its user's memory of one
// group (see engine.Engine).
type Engine[G any] struct {
	job     *coordinator.Job
	ctx     context.Context // the queue's, bounded by Close
	cancel  context.CancelCauseFunc
	kick    chan struct{} // a group was submitted: watch the job again
	watched chan struct{} // closed when watch returns

	mu      sync.Mutex
	pending map[coordinator.GroupID]*event                 // guarded by mu
	early   map[coordinator.GroupID]coordinator.GroupTrace // finished before registered; guarded by mu
	failed  error                                          // the job's failure, once seen; guarded by mu
	errs    []error                                        // errors for the next Wait; guarded by mu
	links   []engine.Transfer                              // page transfers of finished groups; guarded by mu
	nextBuf engine.BufferID                                // guarded by mu
	bufs    engine.Buffers[buffer]

	// snaps reads the job for PageStates (snapshot.go): the program's
	// own (WithCoordinator setting Config.Snapshots) or one of the
	// engine's.
	snaps *coordinator.Snapshotter
	// newBuf makes buffers one at a time, so that the engine's buffer IDs
	// are the job's (both number them from 1 in the order they are made),
	// which PageStates reports.
	newBuf sync.Mutex
}

// buffer is a buffer of the job.
type buffer struct {
	cb        *coordinator.Buffer
	geo       coherence.Geometry
	user      []byte // the user's slice (L1) or nil
	writeBack bool
}

var _ engine.Engine[struct{}] = (*Engine[struct{}])(nil)

// Open opens a job on the nodes. ctx bounds the engine's life: when it is
// done, pending groups fail with its cause.
func Open[G any](ctx context.Context, cfg Config) (*Engine[G], error) {
	ccfg := coordinator.Config{Nodes: cfg.Addrs, Credentials: cfg.Credentials, Logger: cfg.Logger,
		Devices: coordinator.DeviceFilter{Nodes: cfg.Nodes, Labels: cfg.Labels, MatchLabels: cfg.MatchLabels}}
	for _, k := range cfg.Kinds {
		ccfg.Devices.Kinds = append(ccfg.Devices.Kinds, k.String())
	}
	ccfg.OnNodeLoss = cfg.OnNodeLoss
	if cfg.Checkpoint != nil {
		ccfg.Checkpoint = *cfg.Checkpoint
	}
	if cfg.Tune != nil {
		cfg.Tune(&ccfg)
	}
	if ccfg.Snapshots == nil {
		ccfg.Snapshots = &coordinator.Snapshotter{}
	}
	e := &Engine[G]{kick: make(chan struct{}, 1), pending: map[coordinator.GroupID]*event{},
		early: map[coordinator.GroupID]coordinator.GroupTrace{}, watched: make(chan struct{}), snaps: ccfg.Snapshots}
	user := ccfg.OnGroupDone
	ccfg.OnGroupDone = func(tr coordinator.GroupTrace) {
		// The program's hook first: when an event is done, the hook has
		// had the traces of all its groups.
		if user != nil {
			user(tr)
		}
		e.groupDone(tr)
	}
	job, err := coordinator.Open(ctx, ccfg)
	if nd := (*coordinator.NoDeviceError)(nil); errors.As(err, &nd) {
		// The public API's sentinel too: a program matches acpp.ErrNoDevice.
		// Name the options that made the selection: the program set
		// those, not coordinator.Config.Devices.
		what := cfg.selection()
		if what == "" {
			what = "the job's device selection selects"
		}
		return nil, fmt.Errorf("acpp: Connect: %w: %s none of the cluster's devices (%s); widen it (%w)", engine.ErrNoDevice, what, strings.Join(nd.All, ", "), coordinator.ErrNoDevice)
	}
	if err != nil {
		return nil, fmt.Errorf("acpp: Connect: %w", err)
	}
	e.job = job
	e.ctx, e.cancel = context.WithCancelCause(ctx)
	go e.watch()
	return e, nil
}

// selection names the options that selected no device ("WithKind(cuda),
// WithNodes(n9) select", "WithKind(cuda) selects"), or "" when none was
// given.
func (cfg Config) selection() string {
	var opts []string
	if len(cfg.Kinds) > 0 {
		ks := make([]string, len(cfg.Kinds))
		for i, k := range cfg.Kinds {
			ks[i] = k.String()
		}
		opts = append(opts, "WithKind("+strings.Join(ks, ", ")+")")
	}
	if len(cfg.Nodes) > 0 {
		opts = append(opts, "WithNodes("+strings.Join(cfg.Nodes, ", ")+")")
	}
	if len(cfg.MatchLabels) > 0 {
		opts = append(opts, "WithLabels(…, "+strings.Join(cfg.MatchLabels, ", ")+")")
	}
	if len(opts) == 0 {
		return ""
	}
	verb := " select"
	if len(opts) == 1 {
		verb = " selects"
	}
	return strings.Join(opts, ", ") + verb
}

// ---- devices ----

// info describes a job device as a device.Info: ID parsed from
// "kind:index", Name the full "node/kind:index".
func info(d coordinator.Device) device.Info {
	info := device.Info{Name: d.String()}
	k, idx, _ := strings.Cut(d.ID, ":")
	switch k {
	case "cpu":
		info.ID.Kind = device.KindCPU
	case "cuda":
		info.ID.Kind = device.KindCUDA
	}
	info.ID.Index, _ = strconv.Atoi(idx)
	if slices.Contains(d.Forms, device.FormGo.String()) {
		info.Caps.KernelForms = append(info.Caps.KernelForms, device.FormGo)
	}
	if slices.Contains(d.Forms, device.FormPTX.String()) {
		info.Caps.KernelForms = append(info.Caps.KernelForms, device.FormPTX)
	}
	info.Caps.HostUnified, info.Caps.MemBytes = d.HostUnified, int64(d.MemBytes)
	return info
}

// Devices implements engine.Engine.
func (e *Engine[G]) Devices() []device.Info {
	devs := e.job.Devices()
	out := make([]device.Info, len(devs))
	for i, d := range devs {
		out[i] = info(d)
	}
	return out
}

// ClusterDevices implements engine.Engine.
func (e *Engine[G]) ClusterDevices() []string {
	devs := e.job.Devices()
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.String()
	}
	return out
}

// pinned returns the job device p names ("" for placement).
func (e *Engine[G]) pinned(p engine.Place) (string, error) {
	if p.Device == nil {
		return "", nil
	}
	names := e.ClusterDevices()
	if p.Node != "" {
		name := p.Node + "/" + p.Device.String()
		if !slices.Contains(names, name) {
			return "", fmt.Errorf("%w: %s is not one of the cluster queue's devices %v", engine.ErrNoDevice, name, names)
		}
		return name, nil
	}
	for _, n := range names {
		if strings.HasSuffix(n, "/"+p.Device.String()) {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w: no device %s among the cluster queue's devices %v; pin one with acpp.OnNode", engine.ErrNoDevice, p.Device, names)
}

// Target implements engine.Engine.
func (e *Engine[G]) Target(p engine.Place) (engine.Target, error) {
	if err := e.ctx.Err(); err != nil {
		return nil, context.Cause(e.ctx)
	}
	pin, err := e.pinned(p)
	if err != nil {
		return nil, err
	}
	if p.Split != nil && pin != "" {
		return nil, fmt.Errorf("%w: On/OnNode and Split both choose devices; name the devices in SplitOpts.Devices or ClusterDevices", engine.ErrSplit)
	}
	t := &target{info: device.Info{Name: "cluster: the coordinator places the group"}, pin: pin}
	if pin != "" {
		for _, d := range e.job.Devices() {
			if d.String() == pin {
				t.info = info(d)
			}
		}
	}
	return t, nil
}

// target is a cluster group's device: a pinned one, or the placement's.
type target struct {
	info device.Info
	pin  string // "node/kind:index", or "" for placement
}

// placeholder stands for a buffer's memory on a node in a cluster
// accessor: device memory, not reachable from here.
var placeholder = &device.Mem{Kind: device.MemDevice}

func (t *target) Info() device.Info { return t.info }

func (t *target) Closure(what string) error {
	return fmt.Errorf("%w (%s)", engine.ErrClosureOnCluster, what)
}

func (t *target) Bind(engine.BufferID) (*device.Mem, error) { return placeholder, nil }

// Kernel checks the arguments now when the kernel is registered here (A2);
// otherwise the nodes do.
func (t *target) Kernel(name string, args []device.Arg) ([]device.Arg, *device.Kernel, error) {
	k, err := device.Kernels.Lookup(name)
	if err != nil {
		return args, nil, nil
	}
	conv, err := device.ValidateArgs(k, args, 0)
	if err != nil {
		return nil, nil, err
	}
	return conv, k, nil
}

// ---- the job's progress ----

func (e *Engine[G]) groupDone(tr coordinator.GroupTrace) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.links = traceTransfers(e.links, tr)
	if tr.Device == "" { // host reads and writes, releases: no event to complete
		return
	}
	ev := e.pending[tr.ID]
	if ev == nil {
		e.early[tr.ID] = tr
		return
	}
	delete(e.pending, tr.ID)
	e.countLocked(ev, tr)
}

// traceTransfers are the page transfers among a finished group's
// instructions: a recv (the payload arriving at its node from the peer),
// an upload (client → node), a copy within a node, a read-back (node →
// client). Sends are the other half of a recv and are not counted twice.
func traceTransfers(ts []engine.Transfer, tr coordinator.GroupTrace) []engine.Transfer {
	for _, in := range tr.Instrs {
		switch in.Kind {
		case "recv":
			ts = engine.AddTransfer(ts, in.Peer, in.Node, 1, in.Bytes)
		case "upload":
			ts = engine.AddTransfer(ts, "client", in.Node, 1, in.Bytes)
		case "copy":
			ts = engine.AddTransfer(ts, in.Node, in.Node, 1, in.Bytes)
		case "readback":
			ts = engine.AddTransfer(ts, in.Node, "client", 1, in.Bytes)
		}
	}
	return ts
}

func (e *Engine[G]) countLocked(ev *event, tr coordinator.GroupTrace) {
	if !ev.finished { // read without the lock once done is closed
		ev.issued = engine.EarlierStart(ev.issued, tr.Issued)
		if tr.Done.After(ev.ended) {
			ev.ended = tr.Done
		}
		ev.transfers = traceTransfers(ev.transfers, tr)
		if !slices.Contains(ev.devices, tr.Device) {
			ev.devices = append(ev.devices, tr.Device)
		}
	}
	ev.left--
	if ev.left == 0 {
		ev.finishLocked(nil)
	}
}

// register makes the event of groups ids, submitted at t.
func (e *Engine[G]) register(ids []coordinator.GroupID, t time.Time) *event {
	ev := &event{ids: ids, done: make(chan struct{}), left: len(ids), submitted: t}
	e.mu.Lock()
	if e.failed != nil {
		ev.finishLocked(e.failed)
	}
	for _, id := range ids {
		if tr, ok := e.early[id]; ok {
			delete(e.early, id)
			e.countLocked(ev, tr)
		} else if !ev.finished {
			e.pending[id] = ev
		}
	}
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
	return ev
}

// watch fails the pending events when the job fails or the engine's
// context ends. Close ends it by cancelling that context.
func (e *Engine[G]) watch() {
	defer close(e.watched)
	for {
		err := e.job.Wait(e.ctx)
		if err == nil {
			select {
			case <-e.kick:
				continue
			case <-e.ctx.Done():
				err = context.Cause(e.ctx)
			}
		}
		if e.ctx.Err() != nil {
			err = context.Cause(e.ctx)
		}
		e.failAll(err)
		return
	}
}

func (e *Engine[G]) failAll(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed == nil {
		e.failed = err
	}
	ids := make([]coordinator.GroupID, 0, len(e.pending))
	for id := range e.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ev := e.pending[id]
		delete(e.pending, id)
		ev.finishLocked(err)
	}
}

func (e *Engine[G]) addErr(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

// TakeErrors implements engine.Engine.
func (e *Engine[G]) TakeErrors() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	errs := e.errs
	e.errs = nil
	return errs
}

// Wait implements engine.Engine. The job's Wait returns once every
// group's trace went through OnGroupDone (groupDone), so the events of
// the groups it waited for are done too.
func (e *Engine[G]) Wait(ctx context.Context) ([]error, error) {
	err := e.job.Wait(ctx)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return e.TakeErrors(), err
	}
	return append(e.TakeErrors(), err), nil
}

// Close implements engine.Engine.
func (e *Engine[G]) Close(ctx context.Context) error {
	var errs []error
	if err := e.job.Wait(ctx); err != nil && !errors.Is(err, coordinator.ErrClosed) {
		errs = append(errs, err)
	}
	errs = append(errs, e.job.Close(ctx))
	e.cancel(engine.ErrClosed)
	<-e.watched
	return errors.Join(errs...)
}

// Stats implements engine.Engine: the job's groups and the transfers of
// its finished groups.
func (e *Engine[G]) Stats() engine.Stats {
	s := engine.Stats{Groups: int64(e.job.Stats().Groups)}
	e.mu.Lock()
	s.Links = slices.Clone(e.links)
	e.mu.Unlock()
	for _, t := range s.Links {
		s.Copies += t.Copies
		s.BytesCopied += t.Bytes
	}
	return s
}

// MemoryBudgets is nil: the nodes keep them (acpp-node --max-bytes).
func (e *Engine[G]) MemoryBudgets() []engine.MemoryBudget { return nil }

// ---- events ----

// event is the completion of one Submit: one coordinator group, or one
// per chunk of a split.
type event struct {
	ids  []coordinator.GroupID
	done chan struct{}

	// guarded by Engine.mu until done is closed
	left                     int
	err                      error
	submitted, issued, ended time.Time
	finished                 bool
	transfers                []engine.Transfer
	devices                  []string // of its finished groups, in the order they finished
}

func (ev *event) finishLocked(err error) {
	if ev.finished {
		return
	}
	ev.finished, ev.err = true, err
	if ev.ended.IsZero() {
		ev.ended = time.Now()
	}
	close(ev.done)
}

func (ev *event) isDone() bool {
	select {
	case <-ev.done:
		return true
	default:
		return false
	}
}

func (ev *event) Wait(ctx context.Context) error {
	select {
	case <-ev.done:
		return ev.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ev *event) Done() <-chan struct{} { return ev.done }

func (ev *event) Err() error {
	if ev.isDone() {
		return ev.err
	}
	return nil
}

func (ev *event) Status() engine.Status {
	switch {
	case !ev.isDone():
		return engine.Submitted
	case ev.err != nil:
		return engine.Failed
	}
	return engine.Complete
}

func (ev *event) Timing() engine.Timing {
	if ev.isDone() {
		return engine.Timing{Submitted: ev.submitted, Started: ev.issued, Ended: ev.ended}
	}
	return engine.Timing{Submitted: ev.submitted}
}

func (ev *event) ID() uint64 {
	if len(ev.ids) == 0 {
		return 0
	}
	return uint64(ev.ids[0])
}

// Device names the devices that ran the group's coordinator groups (a
// split's chunks), once it finished, in the order their groups finished.
func (ev *event) Device() string {
	if ev.isDone() {
		return strings.Join(ev.devices, ",")
	}
	return ""
}

// Deps is nil: the coordinator keeps them.
func (ev *event) Deps() []uint64 { return nil }

// Chunks is nil: the coordinator makes a split's chunks.
func (ev *event) Chunks() []engine.Event { return nil }

// Transfers are those the nodes reported, once the group finished.
func (ev *event) Transfers() []engine.Transfer {
	if ev.isDone() { // transfers are no longer written
		return slices.Clone(ev.transfers)
	}
	return nil
}
