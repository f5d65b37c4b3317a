package acpp

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
)

// SubmitOption configures one Submit.
type SubmitOption func(*submitConfig)

type submitConfig struct {
	dev   *DeviceID
	after []*Event
	name  string
	node  string     // OnNode: the node of dev on a cluster queue
	split *SplitOpts // Split (split.go)
	// twice names options given more than once with different values:
	// the later would silently undo the earlier, so Submit refuses them.
	twice []string
}

// again records that option name was given before with another value.
func (c *submitConfig) again(name string) {
	if !slices.Contains(c.twice, name) {
		c.twice = append(c.twice, name)
	}
}

// twiceErr is the error for options given twice, or nil.
func (c *submitConfig) twiceErr() error {
	if len(c.twice) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s given more than once with different values; the group has one: pass it once",
		ErrOption, strings.Join(c.twice, ", "))
}

// On runs the command group on device id (one of the queue's devices)
// instead of the default device.
func On(id DeviceID) SubmitOption {
	return func(c *submitConfig) {
		if c.dev != nil && (*c.dev != id || c.node != "") {
			c.again("On")
		}
		c.dev = &id
	}
}

// After makes the group wait for events besides the dependencies its
// accessors imply (USM operations, host work).
func After(evs ...*Event) SubmitOption {
	return func(c *submitConfig) { c.after = append(c.after, evs...) }
}

// Named names the group in errors, logs and traces (Queue.RunningGroups).
// On a cluster queue it names the group in Submit's errors only: the
// coordinator's logs and traces name a group by its kernel.
func Named(name string) SubmitOption {
	return func(c *submitConfig) {
		if c.name != "" && c.name != name {
			c.again("Named")
		}
		c.name = name
	}
}

// given names the options c holds, as their functions are called.
func (c *submitConfig) given() []string {
	var out []string
	if c.dev != nil && c.node == "" {
		out = append(out, "On")
	}
	if c.node != "" {
		out = append(out, "OnNode")
	}
	if len(c.after) > 0 {
		out = append(out, "After")
	}
	if c.name != "" {
		out = append(out, "Named")
	}
	if c.split != nil {
		out = append(out, "Split")
	}
	return out
}

// onlyOptions applies opts for what (a call that is no command group), which
// takes only the options named in takes: an option that cannot apply is an
// error that names it, never ignored.
func onlyOptions(what string, opts []SubmitOption, takes ...string) (submitConfig, error) {
	var cfg submitConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.twiceErr(); err != nil {
		return cfg, err
	}
	var bad []string
	for _, g := range cfg.given() {
		if !slices.Contains(takes, g) {
			bad = append(bad, g)
		}
	}
	if len(bad) > 0 {
		them := "them"
		if len(bad) == 1 {
			them = "it"
		}
		return cfg, fmt.Errorf("%w: %s takes only %s; %s cannot apply to it: drop %s", ErrOption, what, strings.Join(takes, " and "),
			strings.Join(bad, ", "), them)
	}
	return cfg, nil
}

// Handler records a command group: its accessors and its one action. It
// is valid only inside the function passed to Submit: once Submit has
// returned, every function and method that takes it but Device (accessor
// constructors and Require, actions, LocalAccessor, DependsOn) panics with
// an error wrapping ErrHandlerDone. It records; the queue's engine runs
// the record (engine.Group).
type Handler struct {
	q    *Queue
	rec  engine.Group // the record; rec.Target is the device it is recorded for
	reqs []*req
	done bool
	more *handlerExtras // what few groups need; nil until then

	// Inline storage for the common small groups (fewer allocations per
	// submit): one requirement, two accessor slots and one op.
	reqStore [1]req
	reqBuf   [2]*req
	accBuf   [2]*engine.Access
	opBuf    [1]device.Op
}

// handlerExtras hold what few groups need, out of the group's one
// allocation (TestGroupMemorySize).
type handlerExtras struct {
	local []device.Arg // local memory arguments of ParallelForND and LaunchND
	errs  []error      // errors recorded while declaring the group
	split *splitState  // a split group's options and mappers (split.go)
}

// splitting is the group's split state; nil unless it is split.
func (h *Handler) splitting() *splitState {
	if h.more == nil {
		return nil
	}
	return h.more.split
}

func (h *Handler) extras() *handlerExtras {
	if h.more == nil {
		h.more = new(handlerExtras)
	}
	return h.more
}

// declErrs are the errors recorded while declaring the group.
func (h *Handler) declErrs() []error {
	if h.more == nil {
		return nil
	}
	return h.more.errs
}

// localArgs are the local memory arguments declared so far.
func (h *Handler) localArgs() []device.Arg {
	if h.more == nil {
		return nil
	}
	return h.more.local
}

// newReq returns a zeroed requirement owned by h.
func (h *Handler) newReq() *req {
	if n := len(h.reqs); n < len(h.reqStore) {
		return &h.reqStore[n]
	}
	return new(req)
}

// live panics when h is no longer live: used after its Submit returned (or
// nil). Such a use has no error to return and no group to fail, and
// recording an error on the finished handler would lose it: like a send on
// a closed channel, it is a programmer error, and the panic's value is an
// error wrapping ErrHandlerDone. what names the call.
func (h *Handler) live(what string) {
	if h == nil || h.done {
		handlerDone(what)
	}
}

func handlerDone(what string) {
	panic(fmt.Errorf("%w: %s on a Handler whose Submit has returned (or a nil one); build accessors and declare the group's action inside the command-group function", ErrHandlerDone, what))
}

func (h *Handler) fail(err error) { x := h.extras(); x.errs = append(x.errs, err) }

// Device describes the device the group runs on. On a cluster queue it is
// the pinned device (OnNode), or a stand-in when the coordinator places
// the group.
func (h *Handler) Device() device.Info { return h.rec.Target.Info() }

// DependsOn adds explicit dependencies, like the After option.
func (h *Handler) DependsOn(evs ...*Event) {
	h.live("DependsOn")
	for _, e := range evs {
		if e != nil {
			if e.e == nil {
				h.fail(errZeroEvent)
				continue
			}
			h.rec.After = append(h.rec.After, e.e)
		}
	}
}

// setAction1 is setAction for one op, without a variadic slice.
func (h *Handler) setAction1(name string, op device.Op) {
	if h.checkAction(name) {
		h.opBuf[0] = op
		h.recordAction(name, h.opBuf[:1])
	}
}

func (h *Handler) setAction(name string, ops ...device.Op) {
	if h.checkAction(name) {
		if len(ops) == 1 {
			h.opBuf[0] = ops[0]
			ops = h.opBuf[:1]
		}
		h.recordAction(name, ops)
	}
}

// checkAction records an error and reports false when h cannot take an
// action now (it has one); a finished h panics (live).
func (h *Handler) checkAction(name string) bool {
	h.live(name)
	if h.rec.Action != "" {
		h.fail(fmt.Errorf("%w: %s after %s", ErrNoKernel, name, h.rec.Action))
		return false
	}
	return true
}

func (h *Handler) recordAction(name string, ops []device.Op) {
	h.rec.Action = name
	h.rec.Ops = ops
	if h.rec.Name == "" {
		h.rec.Name = name
	}
}

// runsGo reports whether the group's device runs Go closures, after
// recording the engine's reason when not.
func (h *Handler) runsGo(what string) bool {
	if err := h.rec.Target.Closure(what); err != nil {
		h.fail(err)
		return false
	}
	return true
}

// Submit runs cgf to record a command group and hands the record to the
// queue's engine. The group runs once the groups it conflicts with (D1–D3)
// and the events it waits for have finished; independent groups run
// concurrently (D4). Errors in declaring the group (an accessor outside
// its buffer, a closed buffer, a kernel without an implementation for the
// device, ...) are returned here; errors while it runs are on the event.
func (q *Queue) Submit(cgf func(h *Handler) error, opts ...SubmitOption) (*Event, error) {
	if q == nil {
		return nil, errNilQueue("Submit")
	}
	if cgf == nil {
		return nil, fmt.Errorf("%w: Submit got a nil command-group function", ErrNoKernel)
	}
	var cfg submitConfig
	if len(opts) > 0 {
		c := new(submitConfig)
		for _, o := range opts {
			if o != nil { // a nil option is none, as in onlyOptions
				o(c)
			}
		}
		cfg = *c
		if err := cfg.twiceErr(); err != nil {
			return nil, err
		}
	}
	t := q.def
	if t == nil || cfg.dev != nil || cfg.node != "" || cfg.split != nil {
		p := engine.Place{Device: cfg.dev, Node: cfg.node}
		if cfg.split != nil {
			p.Split = cfg.split.record()
		}
		var err error
		if t, err = q.eng.Target(p); err != nil {
			return nil, err
		}
	}
	// One allocation holds the handler (which the kernel's accessors point
	// into), the event and the engine's part (its node).
	cg, slot := q.eng.NewGroup()
	h := &cg.h
	h.q = q
	h.rec.Name, h.rec.Target = cfg.name, t
	h.reqs = h.reqBuf[:0]
	if cfg.split != nil {
		h.extras().split = &splitState{opts: cfg.split}
	}
	if len(cfg.after) > 0 {
		h.DependsOn(cfg.after...)
	}
	err := cgf(h)
	h.done = true
	if err != nil {
		return nil, err
	}
	if errs := h.declErrs(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if h.rec.Action == "" {
		return nil, fmt.Errorf("%w: the group declared none", ErrNoKernel)
	}
	if err := h.seal(); err != nil {
		return nil, err
	}
	ev, err := q.eng.Submit(slot, &h.rec)
	if err != nil {
		return nil, err
	}
	cg.ev.e = ev
	return &cg.ev, nil
}

// cgroup is a command group's memory: handler and event.
type cgroup struct {
	h  Handler
	ev Event
}

// seal completes the record: the accessors' accesses, and a split's
// options and range mappers.
func (h *Handler) seal() error {
	acc := h.accBuf[:0]
	if len(h.reqs) > len(h.accBuf) {
		acc = make([]*engine.Access, 0, len(h.reqs))
	}
	for _, r := range h.reqs {
		acc = append(acc, &r.Access)
	}
	h.rec.Accesses = acc
	if h.splitting() != nil {
		return h.sealSplit()
	}
	return nil
}

// ---- kernels ----

// ParallelFor runs k once per item of r, on the CPU's workers in chunks.
// k is a Go closure: it captures the accessors it uses.
//
// Each item costs an indirect call (the compiler cannot inline k into the
// runtime's loop), a few nanoseconds: bandwidth-bound kernels such as saxpy
// reach about a third of a plain parallel loop this way (docs/RUNTIME.md).
// Use ParallelForChunks for those: its kernel loops itself and runs as fast
// as a hand-written loop.
func (h *Handler) ParallelFor(r Range, k func(it Item)) {
	h.live("ParallelFor")
	if k == nil {
		h.fail(errNilKernel("ParallelFor"))
		return
	}
	if err := r.valid(); err != nil {
		h.fail(err)
		return
	}
	if !h.runsGo("ParallelFor") {
		return
	}
	rr := &[3]int{r.e[0], r.e[1], r.e[2]}
	var fn device.GoFunc
	switch r.dims {
	case 1:
		fn = func(w *device.Work) {
			for i, hi := w.Lo[2], w.Hi[2]; i < hi; i++ {
				k(Item{i: i, r: rr})
			}
		}
	case 2:
		fn = func(w *device.Work) {
			for i := w.Lo[1]; i < w.Hi[1]; i++ {
				for j, hi := w.Lo[2], w.Hi[2]; j < hi; j++ {
					k(Item{i: i, j: j, r: rr})
				}
			}
		}
	default:
		fn = func(w *device.Work) {
			for i := w.Lo[0]; i < w.Hi[0]; i++ {
				for j := w.Lo[1]; j < w.Hi[1]; j++ {
					for l, hi := w.Lo[2], w.Hi[2]; l < hi; l++ {
						k(Item{i: i, j: j, k: l, r: rr})
					}
				}
			}
		}
	}
	h.setAction1("parallel_for", device.LaunchOp{Name: h.nameOr("parallel_for"), Func: fn, Range: device.NDRange{Global: r.dims3(), Dims: r.dims}})
}

// ParallelForChunks runs k over chunks of r: k gets the first item and the
// end (exclusive) of its chunk in every dimension and loops itself. It is
// the fastest form (no call per item) and the one to use for
// bandwidth-bound kernels: saxpy through raw, unranged or ranged accessors
// runs at 0.8–0.95× a hand-written parallel loop over plain slices.
func (h *Handler) ParallelForChunks(r Range, k func(lo, hi ID)) {
	h.live("ParallelForChunks")
	if k == nil {
		h.fail(errNilKernel("ParallelForChunks"))
		return
	}
	if err := r.valid(); err != nil {
		h.fail(err)
		return
	}
	if !h.runsGo("ParallelForChunks") {
		return
	}
	d := r.dims
	fn := func(w *device.Work) {
		k(ID(fromInternal(d, w.Lo, 0)), ID(fromInternal(d, w.Hi, 1)))
	}
	h.setAction1("parallel_for", device.LaunchOp{Name: h.nameOr("parallel_for"), Func: fn, Range: device.NDRange{Global: r.dims3(), Dims: r.dims}})
}

// errNilKernel is the error of a kernel method given a nil function: it
// would fail only when the group ran, with a nil dereference.
func errNilKernel(method string) error {
	return fmt.Errorf("%w: %s got a nil kernel function; pass the function the group runs", ErrNoKernel, method)
}

func (h *Handler) nameOr(s string) string {
	if h.rec.Name != "" {
		return h.rec.Name
	}
	return s
}

// SingleTask runs k once.
func (h *Handler) SingleTask(k func()) {
	h.live("SingleTask")
	if k == nil {
		h.fail(errNilKernel("SingleTask"))
		return
	}
	if !h.runsGo("SingleTask") {
		return
	}
	h.setAction1("single_task", device.LaunchOp{Name: h.nameOr("single_task"), Func: func(*device.Work) { k() },
		Range: device.NDRange{Global: [3]int{1, 1, 1}}})
}

// Group is one work-group of a ParallelForND, in the hierarchical form: the
// kernel runs phases over the group's items with Items; a barrier separates
// consecutive phases, and local memory (LocalAccessor) is shared by the
// group's items across phases (A3).
type Group struct {
	w *device.Work
}

// ix maps a user dimension to the internal one (dimension 2 fastest).
func (g Group) ix(d int) int { return 3 - g.w.Range.Dims + d }

// ID is the group's id in dimension d.
func (g Group) ID(d int) int { return g.w.Group[g.ix(d)] }

// LocalRange is the group's size in dimension d.
func (g Group) LocalRange(d int) int { return g.w.Range.Local[g.ix(d)] }

// GlobalRange is the launch's size in dimension d.
func (g Group) GlobalRange(d int) int { return g.w.Range.Global[g.ix(d)] }

// Groups is the number of groups in dimension d.
func (g Group) Groups(d int) int { return g.GlobalRange(d) / g.LocalRange(d) }

// Linear is the group's row-major linear id.
func (g Group) Linear() int {
	gr, l := g.w.Range.Global, g.w.Range.Local
	return (g.w.Group[0]*(gr[1]/l[1])+g.w.Group[1])*(gr[2]/l[2]) + g.w.Group[2]
}

// Items runs f for every item of the group. Returning from Items is a
// group barrier: every item finished this phase before the next begins.
func (g Group) Items(f func(it NDItem)) {
	w := g.w
	for i := w.Lo[0]; i < w.Hi[0]; i++ {
		for j := w.Lo[1]; j < w.Hi[1]; j++ {
			for k, hi := w.Lo[2], w.Hi[2]; k < hi; k++ {
				f(NDItem{w, i, j, k})
			}
		}
	}
}

// NDItem is a work-item of a ParallelForND. It is four words, so it
// travels in registers.
type NDItem struct {
	w       *device.Work
	i, j, k int // global id, internal order
}

func (it NDItem) at(x int) int {
	switch x {
	case 0:
		return it.i
	case 1:
		return it.j
	}
	return it.k
}

// GlobalID is the item's global id in dimension d.
func (it NDItem) GlobalID(d int) int { return it.at(3 - it.w.Range.Dims + d) }

// LocalID is the item's id in its group in dimension d.
func (it NDItem) LocalID(d int) int {
	x := 3 - it.w.Range.Dims + d
	return it.at(x) - it.w.Lo[x]
}

// LocalLinear is the item's row-major linear id within its group.
func (it NDItem) LocalLinear() int {
	w := it.w
	return ((it.i-w.Lo[0])*w.Range.Local[1]+(it.j-w.Lo[1]))*w.Range.Local[2] + it.k - w.Lo[2]
}

// GlobalLinear is the item's row-major linear global id.
func (it NDItem) GlobalLinear() int {
	g := it.w.Range.Global
	return (it.i*g[1]+it.j)*g[2] + it.k
}

// Group is the item's group.
func (it NDItem) Group() Group { return Group{it.w} }

// Local is a local accessor: n elements of work-group local memory, one
// allocation per work-group (A3).
type Local[T any] struct {
	idx int
	n   int
}

// LocalAccessor declares n elements of local memory for h's ParallelForND
// or LaunchND. The group's local accessors together must fit the local
// memory of one work-group of its device (Capabilities.LocalMemBytes; a
// CPU device's is cpu.LocalMemBytes, 1 MiB): Submit refuses more with
// ErrBadRange, as it does a size that overflows.
func LocalAccessor[T any](h *Handler, n int) Local[T] {
	h.live("LocalAccessor")
	es, err := elemSize[T]()
	if err != nil {
		h.fail(err)
		return Local[T]{}
	}
	if n <= 0 || n > math.MaxInt/es {
		h.fail(fmt.Errorf("%w: local accessor of %d elements of %d bytes", ErrBadRange, n, es))
		return Local[T]{}
	}
	bytes, have := n*es, 0
	for _, a := range h.localArgs() {
		have += a.LocalBytes
	}
	info := h.rec.Target.Info()
	if limit := info.Caps.LocalMemBytes; limit > 0 && bytes > limit-have {
		h.fail(fmt.Errorf("%w: local accessors of %d bytes in all (this one %d elements of %d bytes); a work-group of %s has %d bytes of local memory: use smaller work-groups or local arrays",
			ErrBadRange, uint64(have)+uint64(bytes), n, es, info.ID, limit))
		return Local[T]{}
	}
	if bytes > math.MaxInt-have {
		h.fail(fmt.Errorf("%w: local accessors of more than %d bytes in all", ErrBadRange, math.MaxInt))
		return Local[T]{}
	}
	x := h.extras()
	x.local = append(x.local, device.Arg{Kind: device.ArgLocal, Space: device.Local, LocalBytes: bytes})
	return Local[T]{idx: len(x.local) - 1, n: n}
}

// Slice is the group's local memory.
func (l Local[T]) Slice(g Group) []T {
	b := g.w.Local[l.idx]
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), l.n)
}

// Len is the number of elements.
func (l Local[T]) Len() int { return l.n }

// ParallelForND runs k once per work-group of local-sized groups covering
// global. global must be a multiple of local in every dimension.
func (h *Handler) ParallelForND(global, local Range, k func(g Group)) {
	h.live("ParallelForND")
	if k == nil {
		h.fail(errNilKernel("ParallelForND"))
		return
	}
	nd, err := h.ndRange(global, local)
	if err != nil {
		h.fail(err)
		return
	}
	if !h.runsGo("ParallelForND") {
		return
	}
	h.setAction1("parallel_for_nd", device.LaunchOp{Name: h.nameOr("parallel_for_nd"), Range: nd, Args: h.localArgs(),
		Func: func(w *device.Work) { k(Group{w: w}) }})
}

func (h *Handler) ndRange(global, local Range) (device.NDRange, error) {
	if err := global.valid(); err != nil {
		return device.NDRange{}, err
	}
	if err := local.valid(); err != nil {
		return device.NDRange{}, err
	}
	if global.dims != local.dims {
		return device.NDRange{}, fmt.Errorf("%w: global %v and local %v ranges differ in dimensions", ErrBadRange, global, local)
	}
	for d := 0; d < global.dims; d++ {
		if local.e[d] <= 0 || global.e[d]%local.e[d] != 0 {
			return device.NDRange{}, fmt.Errorf("%w: global range %v is not a multiple of the work-group size %v", ErrBadRange, global, local)
		}
	}
	info := h.rec.Target.Info()
	if caps := info.Caps; caps.MaxGroupSize > 0 && local.Count() > caps.MaxGroupSize {
		return device.NDRange{}, fmt.Errorf("%w: work-group of %d items, %s allows %d", ErrBadRange, local.Count(), info.ID, caps.MaxGroupSize)
	}
	return device.NDRange{Global: global.dims3(), Local: local.dims3(), Dims: global.dims}, nil
}

// ---- named kernels ----

// KernelArg is an argument of a named kernel: an accessor, a local
// accessor, a USM pointer, a Scalar, or one of those cast with Generic or
// Cast.
type KernelArg interface {
	kernelArg(c argCtx) (device.Arg, error)
}

// Launch runs the named kernel over r (a flat launch). The kernel must have
// an implementation for the group's device; each argument is checked
// against the kernel's declared parameters (A2).
func (h *Handler) Launch(name string, r Range, args ...KernelArg) {
	h.live("Launch")
	if err := r.valid(); err != nil {
		h.fail(err)
		return
	}
	h.launch(name, device.NDRange{Global: r.dims3(), Dims: r.dims}, args)
}

// LaunchND runs the named kernel over work-groups of size local.
func (h *Handler) LaunchND(name string, global, local Range, args ...KernelArg) {
	h.live("LaunchND")
	nd, err := h.ndRange(global, local)
	if err != nil {
		h.fail(err)
		return
	}
	h.launch(name, nd, args)
}

func (h *Handler) launch(name string, nd device.NDRange, args []KernelArg) {
	act := launchAction(name)
	if !h.checkAction(act) {
		return
	}
	var b *engine.Binding // which accessor each argument passes
	if len(args) > 0 || h.splitting() != nil {
		b = engine.NewBinding(len(args))
	}
	dargs, err := h.kernelArgs(name, args, argCtx{h: h, t: h.rec.Target}, b)
	if err != nil {
		if !errors.Is(err, errReported) {
			h.fail(err)
		}
		return
	}
	conv, def, err := h.rec.Target.Kernel(name, dargs)
	if err == nil {
		err = device.CheckLaunch(def, nd, conv)
	}
	if err != nil {
		h.fail(err)
		return
	}
	if h.splitting() != nil {
		// A split's chunks run on other devices: the engine rebinds the
		// arguments for each (the same accessors over that device's memory).
		args = slices.Clone(args)
		b.Rebind = func(t engine.Target) ([]device.Arg, error) {
			return h.kernelArgs(name, args, argCtx{h: h, t: t}, nil)
		}
	}
	h.rec.Binding = b
	h.opBuf[0] = device.LaunchOp{Name: name, Kernel: def, Range: nd, Args: conv}
	h.recordAction(act, h.opBuf[:1])
}

// launchActions caches "launch "+name per kernel name, so that recording a
// launch does not build the string each time.
var launchActions sync.Map // kernel name → action

func launchAction(name string) string {
	if a, ok := launchActions.Load(name); ok {
		return a.(string)
	}
	a := "launch " + name
	launchActions.Store(name, a)
	return a
}

// argCtx is what a kernel argument resolves against: the group, and the
// target whose memory its accessors pass (the group's, or a split chunk's).
type argCtx struct {
	h *Handler
	t engine.Target
}

func (a Raw[T]) kernelArg(c argCtx) (device.Arg, error)   { return a.rq.arg(c, device.ArgPointer) }
func (a RawRO[T]) kernelArg(c argCtx) (device.Arg, error) { return a.rq.arg(c, device.ArgPointer) }
func (a Unranged[T]) kernelArg(c argCtx) (device.Arg, error) {
	return a.rq.arg(c, device.ArgAccessor)
}
func (a UnrangedRO[T]) kernelArg(c argCtx) (device.Arg, error) {
	return a.rq.arg(c, device.ArgAccessor)
}
func (a Ranged[T]) kernelArg(c argCtx) (device.Arg, error) {
	return a.rq.arg(c, device.ArgRangedAccessor)
}
func (a RangedRO[T]) kernelArg(c argCtx) (device.Arg, error) {
	return a.rq.arg(c, device.ArgRangedAccessor)
}

func (l Local[T]) kernelArg(c argCtx) (device.Arg, error) {
	local := c.h.localArgs()
	if l.n == 0 && len(c.h.declErrs()) > 0 {
		return device.Arg{}, errReported // its LocalAccessor failed, and said why
	}
	if l.n == 0 || l.idx >= len(local) {
		return device.Arg{}, fmt.Errorf("%w: local accessor not declared in this group", ErrBadRange)
	}
	return local[l.idx], nil
}

// errReported is the error of a kernel argument whose construction failed
// and recorded why in the handler already: the launch stops without
// saying it twice.
var errReported = errors.New("acpp: argument not constructed (see the error before)")

// scalarArg is a scalar's bytes; a pointer, so that a KernelArg of a small
// scalar is one allocation (its bytes inline).
type scalarArg struct {
	b   []byte
	buf [16]byte
}

func (s *scalarArg) kernelArg(argCtx) (device.Arg, error) {
	return device.Arg{Kind: device.ArgScalar, Space: device.Private, Scalar: s.b, ElemSize: len(s.b)}, nil
}

// Scalar passes v by value (private space).
func Scalar[T any](v T) KernelArg {
	s := new(scalarArg)
	if n := unsafe.Sizeof(v); n <= uintptr(len(s.buf)) {
		s.b = s.buf[:n]
	} else {
		s.b = make([]byte, n)
	}
	copy(s.b, unsafe.Slice((*byte)(unsafe.Pointer(&v)), len(s.b)))
	return s
}

type spaceArg struct {
	inner KernelArg
	space device.AddrSpace
	cast  bool
}

func (s spaceArg) kernelArg(c argCtx) (device.Arg, error) {
	if s.inner == nil {
		what := "Generic"
		if s.cast {
			what = "Cast"
		}
		return device.Arg{}, fmt.Errorf("%w: %s of a nil argument", device.ErrBadArg, what)
	}
	a, err := s.inner.kernelArg(c)
	if err != nil {
		return a, err
	}
	real := a.Space
	if a.Mem != nil {
		real = a.Mem.Space()
	} else if a.Kind == device.ArgLocal {
		real = device.Local
	}
	switch {
	case !s.cast:
		if !device.ImplicitlyConverts(a.Space, s.space) {
			return a, fmt.Errorf("%w: a %s argument does not convert implicitly to %s; use Cast", device.ErrBadArg, a.Space, s.space)
		}
	default:
		if !device.ExplicitlyConverts(a.Space, s.space) {
			return a, fmt.Errorf("%w: a %s argument cannot be cast to %s", device.ErrBadArg, a.Space, s.space)
		}
		// A cast back from generic must name the pointer's real space (or
		// a space it converts to).
		if !device.ImplicitlyConverts(real, s.space) {
			return a, fmt.Errorf("%w: the argument points to %s memory; it cannot become %s", device.ErrBadArg, real, s.space)
		}
	}
	a.Space = s.space
	return a, nil
}

// Generic passes a as a generic-space pointer: the implicit conversion of
// every named space (A4).
func Generic(a KernelArg) KernelArg { return spaceArg{inner: a, space: device.Generic} }

// Cast converts a to a named space explicitly (A4): generic back to the
// space its memory really is in, or global to global_device/global_host.
func Cast(a KernelArg, space device.AddrSpace) KernelArg {
	return spaceArg{inner: a, space: space, cast: true}
}

// ---- copy and fill ----

// Readable is any accessor the group may read through.
type Readable[T any] interface {
	At(i int) T
	request() *req
}

// Writable is any accessor the group may write through.
type Writable[T any] interface {
	Readable[T]
	Set(i int, v T)
}

func (a Raw[T]) request() *req        { return a.rq }
func (a RawRO[T]) request() *req      { return a.rq }
func (a Unranged[T]) request() *req   { return a.rq }
func (a UnrangedRO[T]) request() *req { return a.rq }
func (a Ranged[T]) request() *req     { return a.rq }
func (a RangedRO[T]) request() *req   { return a.rq }

func (h *Handler) own(r *req, what string) bool {
	if r == nil {
		if len(h.declErrs()) == 0 { // else its construction failed, and said why
			h.fail(fmt.Errorf("%w: %s accessor was not constructed", ErrBadRange, what))
		}
		return false
	}
	if r.h != h {
		h.fail(fmt.Errorf("%w: %s accessor belongs to another command group", ErrHandlerDone, what))
		return false
	}
	return true
}

func (r *req) region() device.Region {
	return device.Region{Mem: r.mem, Extent: r.BRange, Origin: r.Off}
}

// Copy copies src's access region to dst's (same size) on the group's
// device.
func Copy[T any](h *Handler, src Readable[T], dst Writable[T]) {
	h.live("Copy")
	s, d := src.request(), dst.request()
	if !h.own(s, "source") || !h.own(d, "destination") {
		return
	}
	if s.Rng != d.Rng {
		h.fail(fmt.Errorf("%w: copy from a %v region to a %v region", ErrBadRange, s.Rng, d.Rng))
		return
	}
	h.setAction1("copy", device.CopyOp{Src: s.region(), Dst: d.region(), Size: s.Rng, ElemSize: s.Elem})
	h.opSides(s, d)
}

func hostMem[T any](h *Handler, s []T) *device.Mem {
	var z T
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
	return &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemHost, Bytes: len(b), Host: b}
}

// CopyToHost copies src's access region into dst (dense, row-major).
func CopyToHost[T any](h *Handler, src Readable[T], dst []T) {
	h.live("CopyToHost")
	s := src.request()
	if !h.own(s, "source") {
		return
	}
	n := s.Rng[0] * s.Rng[1] * s.Rng[2]
	if len(dst) < n {
		h.fail(fmt.Errorf("%w: destination slice has %d elements, the copy %d", ErrBadRange, len(dst), n))
		return
	}
	h.opSides(s, nil)
	h.setAction1("copy", device.CopyOp{Src: s.region(), Dst: device.Region{Mem: hostMem(h, dst[:n]), Extent: s.Rng},
		Size: s.Rng, ElemSize: s.Elem})
}

// CopyFromHost copies src (dense, row-major) into dst's access region.
func CopyFromHost[T any](h *Handler, src []T, dst Writable[T]) {
	h.live("CopyFromHost")
	d := dst.request()
	if !h.own(d, "destination") {
		return
	}
	n := d.Rng[0] * d.Rng[1] * d.Rng[2]
	if len(src) < n {
		h.fail(fmt.Errorf("%w: source slice has %d elements, the copy %d", ErrBadRange, len(src), n))
		return
	}
	h.opSides(nil, d)
	h.setAction1("copy", device.CopyOp{Src: device.Region{Mem: hostMem(h, src[:n]), Extent: d.Rng}, Dst: d.region(),
		Size: d.Rng, ElemSize: d.Elem})
}

// Fill sets every element of dst's access region to v.
func Fill[T any](h *Handler, dst Writable[T], v T) {
	h.live("Fill")
	d := dst.request()
	if !h.own(d, "destination") {
		return
	}
	pat := make([]byte, d.Elem)
	copy(pat, unsafe.Slice((*byte)(unsafe.Pointer(&v)), d.Elem))
	h.opSides(nil, d)
	h.setAction("fill", fillOps(d, pat)...)
}

// opSides records which accessors a copy's or fill's sides are (nil: host
// memory, or a fill's missing source), for an engine that runs them its
// own way (engine.Binding).
func (h *Handler) opSides(src, dst *req) {
	h.rec.Binding = &engine.Binding{Src: slices.Index(h.reqs, src), Dst: slices.Index(h.reqs, dst)}
}

// fillOps covers a box with as few contiguous fills as its shape allows.
func fillOps(r *req, pat []byte) []device.Op {
	e, o, s := r.BRange, r.Off, r.Rng
	at := func(z, y, x int) int { return ((z*e[1]+y)*e[2] + x) * r.Elem }
	var ops []device.Op
	switch {
	case s[2] == e[2] && s[1] == e[1]:
		ops = append(ops, device.FillOp{Dst: r.mem, Offset: at(o[0], 0, 0), Bytes: s[0] * e[1] * e[2] * r.Elem, Pattern: pat})
	case s[2] == e[2]:
		for z := o[0]; z < o[0]+s[0]; z++ {
			ops = append(ops, device.FillOp{Dst: r.mem, Offset: at(z, o[1], 0), Bytes: s[1] * e[2] * r.Elem, Pattern: pat})
		}
	default:
		for z := o[0]; z < o[0]+s[0]; z++ {
			for y := o[1]; y < o[1]+s[1]; y++ {
				ops = append(ops, device.FillOp{Dst: r.mem, Offset: at(z, y, o[2]), Bytes: s[2] * r.Elem, Pattern: pat})
			}
		}
	}
	return ops
}

// kernelArgs resolves kernel name's arguments against c and, when b is
// set, records in it the index in h.reqs of the accessor each passes (-1
// for none).
func (h *Handler) kernelArgs(name string, args []KernelArg, c argCtx, b *engine.Binding) ([]device.Arg, error) {
	if len(args) == 0 {
		return nil, nil
	}
	dargs := make([]device.Arg, len(args))
	for i, a := range args {
		if a == nil {
			return nil, fmt.Errorf("%w: kernel %q argument %d is nil", device.ErrBadArg, name, i)
		}
		da, err := a.kernelArg(c)
		if err != nil {
			return nil, fmt.Errorf("kernel %q argument %d: %w", name, i, err)
		}
		dargs[i] = da
		if b == nil {
			continue
		}
		b.ArgAccess[i] = -1
		for {
			s, ok := a.(spaceArg)
			if !ok {
				break
			}
			a = s.inner
		}
		if rq, ok := a.(requester); ok {
			b.ArgAccess[i] = slices.Index(h.reqs, rq.request())
		}
	}
	return dargs, nil
}

// requester is every buffer accessor.
type requester interface{ request() *req }
