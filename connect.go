package acpp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/exec"
)

// ErrClosureOnCluster: a command group of a cluster queue (Connect) declared
// a Go closure (ParallelFor, ParallelForChunks, SingleTask, ParallelForND)
// or a host-side Copy/Fill. Only named kernels travel to the nodes.
var ErrClosureOnCluster = errors.New("acpp: closures cannot run on a cluster; register a named kernel with Go and PTX implementations and use h.Launch")

// ErrNotOnCluster: the operation needs local devices (USM, per-device
// release), which a cluster queue does not have.
var ErrNotOnCluster = errors.New("acpp: not available on a cluster queue")

// clusterConfig holds the options only Connect takes.
type clusterConfig struct {
	creds       *credentials.Credentials
	dir, client string
	nodes       []string
	labels      map[string][]string
	match       []string
	tune        func(*coordinator.Config)
}

func (c *queueConfig) clusterCfg() *clusterConfig {
	if c.cluster == nil {
		c.cluster = &clusterConfig{}
	}
	return c.cluster
}

// WithCredentials names the client credentials Connect uses: the directory
// made by `acpp-node credentials --dir DIR client NAME` and the client's
// name (acpp-submit's --credentials and --client). Connect only.
func WithCredentials(dir, client string) Option {
	return func(c *queueConfig) { cc := c.clusterCfg(); cc.dir, cc.client = dir, client }
}

// WithClientCredentials passes credentials already loaded with
// credentials.LoadClient. Connect only.
func WithClientCredentials(creds *credentials.Credentials) Option {
	return func(c *queueConfig) { c.clusterCfg().creds = creds }
}

// WithNodes limits a cluster queue to the devices of the named nodes
// (acpp-submit's --nodes). Connect only; WithKind applies too.
func WithNodes(names ...string) Option {
	return func(c *queueConfig) { cc := c.clusterCfg(); cc.nodes = append(cc.nodes, names...) }
}

// WithLabels limits a cluster queue to the nodes that carry every label in
// match; labels maps node names to their labels (nodes do not publish
// labels: they come from the caller, e.g. a cluster file). Connect only.
func WithLabels(labels map[string][]string, match ...string) Option {
	return func(c *queueConfig) { cc := c.clusterCfg(); cc.labels, cc.match = labels, append(cc.match, match...) }
}

// WithCoordinator adjusts the job's coordinator.Config before Connect opens
// it (placement policy, loss detection times, a shared nodeclient.Client).
// Connect only.
func WithCoordinator(f func(*coordinator.Config)) Option {
	return func(c *queueConfig) { c.clusterCfg().tune = f }
}

// OnNode runs the command group on device id of the named node of a
// cluster queue (a pinned device). On(id) alone picks the first device of
// the job with that kind and index.
func OnNode(node string, id DeviceID) SubmitOption {
	return func(c *submitConfig) { c.dev, c.node = &id, node }
}

// Connect opens a job on the acpp-node agents at addrs (their QUIC
// addresses) and returns a queue over their devices: all of them, or those
// WithKind, WithNodes and WithLabels select. The job's coordinator runs in
// this process. Buffers, accessors, named kernels (h.Launch), host access,
// events, Wait and Close work as on NewQueue's queue; Go closures cannot
// travel and are refused at Submit (ErrClosureOnCluster). A node lost
// during the job fails the groups that need it with an error matching
// coordinator.ErrNodeLost (*coordinator.NodeLostError names the node and
// the lost ranges). ctx bounds the queue's life as for NewQueue. Split
// and Map work as on NewQueue's queue, except that the command-group
// function runs once and the coordinator makes the chunks.
func Connect(ctx context.Context, addrs []string, opts ...Option) (*Queue, error) {
	if ctx == nil {
		return nil, errors.New("acpp: Connect needs a context; pass context.Background() for a queue that lives until Close")
	}
	var cfg queueConfig
	for _, o := range opts {
		o(&cfg)
	}
	var errs []error
	if cfg.cpus != 0 || cfg.workers != 0 || len(cfg.devices) > 0 {
		errs = append(errs, errors.New("WithCPUDevices, WithWorkers and WithDevices apply to NewQueue only; the nodes' devices are configured on acpp-node"))
	}
	if len(cfg.selected) > 0 {
		errs = append(errs, errors.New("WithDevice applies to NewQueue only; select cluster devices with WithKind, WithNodes or WithLabels, and pin a group with acpp.OnNode"))
	}
	cc := cfg.cluster
	if cc == nil {
		cc = &clusterConfig{}
	}
	creds := cc.creds
	switch {
	case creds != nil:
	case cc.dir != "" && cc.client != "":
		c, err := credentials.LoadClient(cc.dir, cc.client)
		if err != nil {
			errs = append(errs, err)
		}
		creds = c
	default:
		errs = append(errs, errors.New("Connect needs client credentials: pass acpp.WithCredentials(dir, client) (made by acpp-node credentials --dir DIR client NAME) or acpp.WithClientCredentials"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("acpp: Connect: %w", err)
	}
	ccfg := coordinator.Config{Nodes: addrs, Credentials: creds, Logger: cfg.log,
		Devices: coordinator.DeviceFilter{Nodes: cc.nodes, Labels: cc.labels, MatchLabels: cc.match}}
	for _, k := range cfg.kinds {
		ccfg.Devices.Kinds = append(ccfg.Devices.Kinds, k.String())
	}
	if cc.tune != nil {
		cc.tune(&ccfg)
	}
	cq := &clusterQueue{kick: make(chan struct{}, 1), pending: map[coordinator.GroupID]*clusterEvent{},
		early: map[coordinator.GroupID]coordinator.GroupTrace{}, watched: make(chan struct{})}
	user := ccfg.OnGroupDone
	ccfg.OnGroupDone = func(tr coordinator.GroupTrace) {
		cq.groupDone(tr)
		if user != nil {
			user(tr)
		}
	}
	job, err := coordinator.Open(ctx, ccfg)
	if err != nil {
		return nil, fmt.Errorf("acpp: Connect: %w", err)
	}
	cq.job = job
	qctx, cancel := context.WithCancelCause(ctx)
	q := &Queue{cl: cq, onError: cfg.onError, ctx: qctx, cancel: cancel, buffers: map[*bufState]struct{}{}}
	go cq.watch(qctx)
	return q, nil
}

// clusterQueue is the cluster side of a Queue made by Connect: the job and
// the events of its command groups.
type clusterQueue struct {
	job     *coordinator.Job
	kick    chan struct{} // a group was submitted: watch the job again
	watched chan struct{} // closed when watch returns

	mu      sync.Mutex
	pending map[coordinator.GroupID]*clusterEvent          // guarded by mu
	early   map[coordinator.GroupID]coordinator.GroupTrace // finished before registered; guarded by mu
	failed  error                                          // the job's failure, once seen; guarded by mu
	errs    []error                                        // errors for the next Wait; guarded by mu
	links   []Transfer                                     // page transfers of finished groups; guarded by mu
	nextBuf coherence.BufferID                             // guarded by Queue.mu
}

// clusterEvent is the completion of one Submit: one coordinator group (or
// several, one per chunk).
type clusterEvent struct {
	ids  []coordinator.GroupID
	done chan struct{}
	// chunks are the groups of an embedded split (submitChunks), one per
	// chunk, set before Submit returns; nil on a cluster queue.
	chunks []*exec.Node

	// guarded by clusterQueue.mu
	left                     int
	err                      error
	submitted, issued, ended time.Time
	finished                 bool
	transfers                []Transfer // of its finished groups
}

func (cq *clusterQueue) groupDone(tr coordinator.GroupTrace) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.links = traceTransfers(cq.links, tr)
	if tr.Device == "" { // host reads and writes, releases: no event to complete
		return
	}
	ev := cq.pending[tr.ID]
	if ev == nil {
		cq.early[tr.ID] = tr
		return
	}
	delete(cq.pending, tr.ID)
	cq.countLocked(ev, tr)
}

func (cq *clusterQueue) countLocked(ev *clusterEvent, tr coordinator.GroupTrace) {
	if ev.issued.IsZero() || (!tr.Issued.IsZero() && tr.Issued.Before(ev.issued)) {
		ev.issued = tr.Issued
	}
	if tr.Done.After(ev.ended) {
		ev.ended = tr.Done
	}
	if !ev.finished { // read without the lock once done is closed
		ev.transfers = traceTransfers(ev.transfers, tr)
	}
	ev.left--
	if ev.left == 0 {
		cq.finishLocked(ev, nil)
	}
}

func (cq *clusterQueue) finishLocked(ev *clusterEvent, err error) {
	if ev.finished {
		return
	}
	ev.finished, ev.err = true, err
	if ev.ended.IsZero() {
		ev.ended = time.Now()
	}
	close(ev.done)
}

// register makes the event of groups ids, submitted at t.
func (cq *clusterQueue) register(ids []coordinator.GroupID, t time.Time) *clusterEvent {
	ev := &clusterEvent{ids: ids, done: make(chan struct{}), left: len(ids), submitted: t}
	cq.mu.Lock()
	if cq.failed != nil {
		cq.finishLocked(ev, cq.failed)
	}
	for _, id := range ids {
		if tr, ok := cq.early[id]; ok {
			delete(cq.early, id)
			cq.countLocked(ev, tr)
		} else if !ev.finished {
			cq.pending[id] = ev
		}
	}
	cq.mu.Unlock()
	select {
	case cq.kick <- struct{}{}:
	default:
	}
	return ev
}

// watch fails the pending events when the job fails or ctx ends. It runs
// until then; Queue.Close ends it by cancelling ctx.
func (cq *clusterQueue) watch(ctx context.Context) {
	defer close(cq.watched)
	for {
		err := cq.job.Wait(ctx)
		if err == nil {
			select {
			case <-cq.kick:
				continue
			case <-ctx.Done():
				err = context.Cause(ctx)
			}
		}
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		cq.failAll(err)
		return
	}
}

func (cq *clusterQueue) failAll(err error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.failed == nil {
		cq.failed = err
	}
	ids := make([]coordinator.GroupID, 0, len(cq.pending))
	for id := range cq.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ev := cq.pending[id]
		delete(cq.pending, id)
		cq.finishLocked(ev, err)
	}
}

func (cq *clusterQueue) addErr(err error) {
	cq.mu.Lock()
	cq.errs = append(cq.errs, err)
	cq.mu.Unlock()
}

func (cq *clusterQueue) takeErrs() []error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	e := cq.errs
	cq.errs = nil
	return e
}

// ---- Queue methods on a cluster ----

// clusterInfo describes a job device as a device.Info: ID parsed from
// "kind:index", Name the full "node/kind:index".
func clusterInfo(d coordinator.Device) device.Info {
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

func (q *Queue) clusterDevices() []device.Info {
	devs := q.cl.job.Devices()
	out := make([]device.Info, len(devs))
	for i, d := range devs {
		out[i] = clusterInfo(d)
	}
	return out
}

// ClusterDevices names the devices of a cluster queue ("node/kind:index"),
// in job order; nil for a queue made by NewQueue.
func (q *Queue) ClusterDevices() []string {
	if q.cl == nil {
		return nil
	}
	devs := q.cl.job.Devices()
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.String()
	}
	return out
}

func (q *Queue) clusterWait(ctx context.Context) error {
	err := q.cl.job.Wait(ctx)
	return q.report(append(q.cl.takeErrs(), err))
}

func (q *Queue) clusterClose() error {
	open, ok := q.markClosed()
	if !ok {
		return nil
	}
	var errs []error
	ctx := context.Background()
	for _, b := range open {
		errs = append(errs, b.close(ctx))
	}
	if err := q.cl.job.Wait(ctx); err != nil && !errors.Is(err, coordinator.ErrClosed) {
		errs = append(errs, err)
	}
	errs = append(errs, q.cl.takeErrs()...)
	errs = append(errs, q.cl.job.Close(ctx))
	q.cancel(ErrClosed)
	<-q.cl.watched
	return q.report(errs)
}

// pinned returns the job device a submit names ("" for placement).
func (q *Queue) pinned(cfg submitConfig) (string, error) {
	if cfg.dev == nil {
		return "", nil
	}
	names := q.ClusterDevices()
	if cfg.node != "" {
		name := cfg.node + "/" + cfg.dev.String()
		if !slices.Contains(names, name) {
			return "", fmt.Errorf("%w: %s is not one of the cluster queue's devices %v", ErrNoDevice, name, names)
		}
		return name, nil
	}
	for _, n := range names {
		if strings.HasSuffix(n, "/"+cfg.dev.String()) {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w: no device %s among the cluster queue's devices %v; pin one with acpp.OnNode", ErrNoDevice, cfg.dev, names)
}

// clusterCG is what a cluster command group declared.
type clusterCG struct {
	group *coordinator.Group
	after []*Event // cluster events to wait for
}

// clusterDevice stands for the device of a cluster command group in its
// Handler: it describes it, and runs nothing here.
type clusterDevice struct{ info device.Info }

func (d clusterDevice) Info() device.Info { return d.info }
func (d clusterDevice) Alloc(device.MemKind, int) (*device.Mem, error) {
	return nil, ErrNotOnCluster
}
func (d clusterDevice) Free(*device.Mem) error                    { return ErrNotOnCluster }
func (d clusterDevice) Enqueue(int, device.Op, func(error)) error { return ErrNotOnCluster }
func (d clusterDevice) Close() error                              { return nil }

// clusterMem stands for a buffer's memory on a node in a cluster accessor:
// device memory, not reachable from here.
var clusterMem = &device.Mem{Kind: device.MemDevice}

func (q *Queue) submitCluster(cgf func(h *Handler) error, cfg submitConfig) (*Event, error) {
	if err := q.ctx.Err(); err != nil {
		return nil, context.Cause(q.ctx)
	}
	pin, err := q.pinned(cfg)
	if err != nil {
		return nil, err
	}
	info := device.Info{Name: "cluster: the coordinator places the group"}
	if pin != "" {
		for _, d := range q.cl.job.Devices() {
			if d.String() == pin {
				info = clusterInfo(d)
			}
		}
	}
	cg := new(cgroup)
	h := &cg.h
	h.q, h.dev, h.name = q, clusterDevice{info}, cfg.name
	h.reqs = h.reqBuf[:0]
	h.cl = &clusterCG{}
	if cfg.split != nil {
		if pin != "" {
			return nil, fmt.Errorf("%w: On/OnNode and Split both choose devices; name the devices in SplitOpts.Devices or ClusterDevices", ErrSplit)
		}
		// The function runs once; the coordinator makes the chunks.
		h.split = &splitChunk{opts: cfg.split}
	}
	if len(cfg.after) > 0 {
		h.DependsOn(cfg.after...)
	}
	err = cgf(h)
	h.done = true
	if err != nil {
		return nil, err
	}
	if len(h.errs) > 0 {
		return nil, errors.Join(h.errs...)
	}
	if h.act == "" {
		return nil, fmt.Errorf("%w: the group declared none", ErrNoKernel)
	}
	if h.cl.group == nil {
		return nil, fmt.Errorf("%w (the group declared %s)", ErrClosureOnCluster, h.act)
	}
	// The coordinator orders groups by their accessors; explicit
	// dependencies on other events are met by waiting for them here.
	for _, e := range h.cl.after {
		if err := e.Wait(q.ctx); err != nil {
			return nil, fmt.Errorf("acpp: an event group %q waits for failed: %w", h.name, err)
		}
	}
	g := *h.cl.group
	g.Device = pin
	now := time.Now()
	ids, err := q.cl.job.Submit(q.ctx, g)
	if err != nil && len(ids) == 0 {
		return nil, fmt.Errorf("acpp: submit %q to the cluster: %w", h.name, err)
	}
	ev := q.cl.register(ids, now)
	if err != nil {
		q.cl.mu.Lock()
		q.cl.finishLocked(ev, err)
		q.cl.mu.Unlock()
	}
	cg.ev.c = ev
	return &cg.ev, nil
}

// requester is every buffer accessor.
type requester interface{ request() *req }

// launchCluster turns a named kernel launch into a coordinator group.
func (h *Handler) launchCluster(name string, nd device.NDRange, args []KernelArg) {
	dargs, ok := h.kernelArgs(name, args)
	if !ok {
		return
	}
	conv := dargs
	var params []device.Param
	if k, err := device.Kernels.Lookup(name); err == nil {
		// Known here: check the arguments now (A2); otherwise the nodes do.
		if conv, err = device.ValidateArgs(k, dargs, 0); err != nil {
			h.fail(err)
			return
		}
		params = k.Params
	}
	cargs := make([]coordinator.Arg, len(args))
	for i, a := range args {
		switch conv[i].Kind {
		case device.ArgScalar:
			cargs[i] = coordinator.Scalar(conv[i].Scalar)
			continue
		case device.ArgLocal:
			cargs[i] = coordinator.LocalMem(conv[i].LocalBytes)
			continue
		}
		for {
			s, ok := a.(spaceArg)
			if !ok {
				break
			}
			a = s.inner
		}
		rq, ok := a.(requester)
		if !ok || rq.request() == nil || rq.request().st.cb == nil {
			h.fail(fmt.Errorf("%w: kernel %q argument %d is not an accessor of a buffer of this queue; USM pointers cannot travel to a cluster", device.ErrBadArg, name, i))
			return
		}
		r := rq.request()
		acc := coordinator.Accessor{Buffer: r.st.cb, Mode: r.mode, NoInit: r.noInit, Offset: r.off, Range: r.rng, Kind: conv[i].Kind}
		if r.brange != r.st.geo.Range || r.elem != r.st.geo.ElemSize {
			var param *device.Param
			if i < len(params) {
				param = &params[i]
			}
			if err := viewOnCluster(r, &acc, param); err != nil {
				h.fail(fmt.Errorf("kernel %q argument %d: %w", name, i, err))
				return
			}
		}
		if h.split != nil {
			m := h.split.mapperOf(r)
			if m == nil {
				h.fail(fmt.Errorf("%w: argument %d of split kernel %q is an accessor without a range mapper; declare it with acpp.Map(acpp.OneToOne()) (or Neighbourhood, All, Fixed, a MapFunc)", ErrSplit, i, name))
				return
			}
			if r.brange != r.st.geo.Range || r.elem != r.st.geo.ElemSize {
				h.fail(fmt.Errorf("%w: kernel %q argument %d: a range mapper on an accessor of a reshaped or reinterpreted view cannot travel to a cluster (the coordinator maps chunks onto the buffer's own shape); map the buffer itself", ErrNotOnCluster, name, i))
				return
			}
			cm, err := m.forBuffer(nd.Dims, r.vdims)
			if err != nil {
				h.fail(fmt.Errorf("kernel %q argument %d: %w", name, i, err))
				return
			}
			acc.Map = cm
		}
		cargs[i] = coordinator.Acc(acc)
	}
	g := &coordinator.Group{Kernel: name, Range: nd.Global, Args: cargs}
	if nd.Local != ([3]int{}) {
		g.Local = nd.Local
	}
	if h.split != nil {
		cs, err := h.q.clusterSplit(h.split.opts, nd.Dims)
		if err != nil {
			h.fail(err)
			return
		}
		g.Split = cs
	}
	if h.checkAction("launch " + name) {
		h.cl.group = g
		h.recordAction("launch "+name, nil)
	}
}

// viewOnCluster sets acc's region for an accessor of a reshaped or
// reinterpreted view (P5). The nodes give a kernel the buffer's own range
// and element size, so only a raw pointer (which carries neither, V3, V4)
// can stand for a view; its region becomes the element box of the view's
// page range, which covers every byte the view's region touches. A
// discard (NoInit) survives only when the access covers all of the view:
// otherwise the box may hold bytes outside it, which must not be lost.
func viewOnCluster(r *req, acc *coordinator.Accessor, param *device.Param) error {
	geo := r.st.geo
	if acc.Kind != device.ArgPointer {
		return fmt.Errorf("%w: an accessor with a range of a reshaped or reinterpreted view (range %v, %d-byte elements) over a buffer of range %v and %d-byte elements: the nodes would give the kernel the buffer's shape; use a raw accessor (ReadRaw, WriteRaw, ReadWriteRaw, narrowed with Within) or a raw kernel parameter, or access the buffer itself",
			ErrNotOnCluster, r.brange, r.elem, geo.Range, geo.ElemSize)
	}
	if r.elem != geo.ElemSize && (param == nil || param.ElemSize != 0) {
		return fmt.Errorf("%w: a raw accessor of a view with %d-byte elements over a buffer of %d-byte elements: the nodes check the kernel's declared element size against the buffer's; declare the parameter with ElemSize 0, or reinterpret to a type of the buffer's size",
			ErrNotOnCluster, r.elem, geo.ElemSize)
	}
	eb := geo.ElementBox(r.pages)
	acc.Offset = eb.Lo
	acc.Range = coordinator.Dims{eb.Hi[0] - eb.Lo[0], eb.Hi[1] - eb.Lo[1], eb.Hi[2] - eb.Lo[2]}
	if acc.NoInit && (r.off != [3]int{} || r.rng != r.brange) {
		acc.NoInit = false
	}
	return nil
}

// ---- buffers on a cluster ----

func (q *Queue) addClusterBufferLocked(st *bufState, user *device.Mem) error {
	spec := coordinator.BufferSpec{Range: st.geo.Range, ElemSize: st.geo.ElemSize, PageSize: st.geo.PageSize}
	if user != nil {
		spec.Init = user.Host
	}
	cb, err := q.cl.job.NewBuffer(spec)
	if err != nil {
		return err
	}
	q.cl.nextBuf++
	st.id, st.cb = q.cl.nextBuf, cb
	q.buffers[st] = struct{}{}
	return nil
}

// clusterWriteBack reads the whole buffer back and, for a buffer made over
// a slice (L1), copies it there.
func (st *bufState) clusterWriteBack(ctx context.Context) error {
	data, err := st.q.cl.job.Read(ctx, st.cb, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		return err
	}
	if st.writeBack && st.host != nil {
		copy(st.host.Host, data)
	}
	return nil
}

func (st *bufState) closeCluster(ctx context.Context) error {
	var err error
	if st.writeBack {
		err = st.clusterWriteBack(ctx)
	}
	st.q.mu.Lock()
	delete(st.q.buffers, st)
	st.q.mu.Unlock()
	if err != nil {
		return err
	}
	return st.q.cl.job.Release(ctx, st.cb)
}

func bytesOf[T any](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func elemsOf[T any](b []byte) []T {
	var z T
	out := make([]T, len(b)/int(unsafe.Sizeof(z)))
	copy(bytesOf(out), b)
	return out
}

// ---- events on a cluster ----

func (e *clusterEvent) wait(ctx context.Context) error {
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *clusterEvent) state() (Status, error) {
	select {
	case <-e.done:
		if e.err != nil {
			return Failed, e.err
		}
		return Complete, nil
	default:
		for _, n := range e.chunks {
			if n.State() != exec.Submitted {
				return Running, nil
			}
		}
		return Submitted, nil
	}
}

func (e *clusterEvent) timing() Timing {
	select {
	case <-e.done:
		return Timing{Submitted: e.submitted, Started: e.issued, Ended: e.ended}
	default:
		t := Timing{Submitted: e.submitted}
		for _, n := range e.chunks {
			if _, started, _ := n.Times(); !started.IsZero() && (t.Started.IsZero() || started.Before(t.Started)) {
				t.Started = started
			}
		}
		return t
	}
}

// deps are the groups an embedded split's chunks waited for, other than
// its own chunks, in ID order; nil on a cluster queue.
func (e *clusterEvent) deps() []uint64 {
	var out []uint64
	for _, n := range e.chunks {
		for _, d := range n.Deps() {
			own := slices.ContainsFunc(e.chunks, func(c *exec.Node) bool { return c.ID == d })
			if !own && !slices.Contains(out, uint64(d)) {
				out = append(out, uint64(d))
			}
		}
	}
	slices.Sort(out)
	return out
}
