package acpp

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/device"
)

// Splitting a kernel across devices (issue 6), as Celerity does with range
// mappers: Split divides a ParallelFor or Launch range into chunks, one
// command group per chunk on its own device, and each accessor says with
// Map which part of its buffer a chunk touches.
//
// On a queue of local devices (NewQueue) Submit calls the command-group
// function once per chunk, with a Handler on that chunk's device: the
// accessors it declares are the chunk's (their access region is the
// mapper's region for the chunk, so the conflict rules and transfers work
// per chunk) and the kernel runs the chunk's items only, with global ids.
// On a cluster queue (Connect) the function runs once and the coordinator
// splits the group (coordinator.Group.Split, coordinator.Accessor.Map).

// ErrSplit: a split command group is malformed (a range mapper on a group
// that is not split, an accessor without one in a group that is, an action
// that cannot be split, a bad chunk count or dimension). The message says
// which.
var ErrSplit = errors.New("acpp: cannot split this command group")

// SplitOpts says how to split a command group's range across devices.
type SplitOpts struct {
	// Devices are the devices to split across. On a queue of local devices
	// they are queue devices (unknown ones are an error); on a cluster
	// queue a DeviceID selects that device on every node that has it.
	// Empty (with ClusterDevices empty too) means every device of the
	// queue that can run the group's kernel, the default device first.
	Devices []DeviceID
	// ClusterDevices names cluster devices exactly ("node/kind:index", as
	// Queue.ClusterDevices lists them). Cluster queues only.
	ClusterDevices []string
	// Chunks is the number of chunks; 0 means one per device. There are
	// never more chunks than items (work-groups for an ND launch) along the
	// split dimension.
	Chunks int
	// Along is the dimension to cut, in the range's order: SplitAuto (the
	// zero value) picks the outermost dimension larger than 1.
	Along SplitDim
	// Interleave assigns chunk i to device i mod len(devices) instead of
	// in contiguous runs (with 6 chunks over 3 devices the default is
	// 0 0 1 1 2 2, which keeps a stencil's halos on one device).
	Interleave bool
	// Borders, when > 0, cuts a chunk of this many items (work-groups for
	// an ND launch) along the split dimension off each side of a device's
	// block that touches another device's block: a stencil's halos then
	// cross between devices while the interior computes. It needs whole
	// blocks per device (Chunks 0 or a multiple of the number of devices,
	// no Interleave); with several chunks per device the interior is cut
	// into them.
	Borders int
}

// cut is the coordinator's split of a range (coherence order) over devs
// devices for these options, with the split dimension dim (-1: auto).
func (o *SplitOpts) cut(off, rng, local [3]int, dim, devs int) ([]coordinator.Chunk, []int, error) {
	cs := coordinator.Split{Chunks: o.Chunks, Interleave: o.Interleave, Borders: o.Borders}
	if dim >= 0 {
		cs.Along = coordinator.SplitDim(dim + 1)
	}
	chunks, devOf, err := cs.Cut(off, rng, local, devs)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrSplit, err)
	}
	return chunks, devOf, nil
}

// SplitDim names the dimension a split cuts, in the range's own order
// (dimension 0 slowest, as R2(rows, cols)).
type SplitDim uint8

// Split dimensions.
const (
	SplitAuto SplitDim = iota
	SplitDim0
	SplitDim1
	SplitDim2
)

// Split divides the group's ParallelFor, ParallelForChunks, ParallelForND,
// Launch or LaunchND range across devices (all that can run it when none
// are named), one chunk per device. Every accessor of the group needs a
// range mapper (Map). The returned Event completes when every chunk has,
// with the first chunk's error (in chunk order) if any failed. See
// SplitWith for more control.
func Split(devices ...DeviceID) SubmitOption {
	return SplitWith(SplitOpts{Devices: devices})
}

// SplitWith is Split with options.
func SplitWith(o SplitOpts) SubmitOption {
	o.Devices = slices.Clone(o.Devices)
	o.ClusterDevices = slices.Clone(o.ClusterDevices)
	return func(c *submitConfig) { c.split = &o }
}

// check validates the options for a kernel range of kd dimensions and
// returns the split dimension in coherence order (dimension 2 fastest), or
// -1 for SplitAuto.
func (o *SplitOpts) check(kd int) (int, error) {
	var errs []error
	if o.Chunks < 0 {
		errs = append(errs, fmt.Errorf("SplitOpts.Chunks is %d; it must be >= 1, or 0 for one chunk per device", o.Chunks))
	}
	dim := -1
	switch {
	case o.Along > SplitDim2:
		errs = append(errs, fmt.Errorf("SplitOpts.Along is %d; use SplitAuto or SplitDim0..SplitDim2", o.Along))
	case o.Along != SplitAuto && int(o.Along) > kd:
		errs = append(errs, fmt.Errorf("SplitOpts.Along is dimension %d of a %d-dimensional range", o.Along-1, kd))
	case o.Along != SplitAuto:
		dim = 3 - kd + int(o.Along) - 1
	}
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSplit, err)
	}
	return dim, nil
}

// ---- range mappers ----

// Chunk is one part of a split range: its offset and extent, in the
// range's order.
type Chunk struct {
	Offset ID
	Range  Range
}

// RangeMapper says which region of a buffer one chunk of a split kernel
// accesses, as Celerity's range mappers do. Build one with OneToOne,
// Neighbourhood, All, Fixed or MapFunc and pass it to an accessor
// constructor with Map. Regions are clipped to the buffer.
type RangeMapper interface {
	// forBuffer returns the mapper in coherence order for a kernel range
	// of kd dimensions and a buffer (or view) of bd dimensions.
	forBuffer(kd, bd int) (coordinator.RangeMapper, error)
}

// builtin is one of the coordinator's mappers with the dimensions it was
// made for.
type builtin struct {
	name     string
	m        coordinator.RangeMapper
	sameDims bool  // the kernel range and the buffer must have equal dimensions
	dims     int   // the buffer dimensions it was built for (0: any)
	err      error // a bad argument to the constructor
}

func (b builtin) forBuffer(kd, bd int) (coordinator.RangeMapper, error) {
	switch {
	case b.err != nil:
		return nil, b.err
	case b.sameDims && kd != bd:
		return nil, fmt.Errorf("%w: %s maps a %d-dimensional kernel range onto a %d-dimensional buffer; use All, Fixed or a MapFunc", ErrSplit, b.name, kd, bd)
	case b.dims != 0 && b.dims != bd:
		return nil, fmt.Errorf("%w: %s was given %d extents for a %d-dimensional buffer", ErrSplit, b.name, b.dims, bd)
	}
	return b.m, nil
}

// OneToOne maps work item i to element i: each chunk accesses its own
// range of the buffer (saxpy). The kernel range and the buffer must have
// the same dimensions.
func OneToOne() RangeMapper {
	return builtin{name: "OneToOne", m: coordinator.OneToOne(), sameDims: true}
}

// Neighbourhood maps a chunk to its own range grown by k elements on each
// side, clipped to the buffer (stencils: Neighbourhood(1) for a 5-point
// Jacobi sweep). One k applies to every dimension; otherwise give one per
// dimension of the buffer, in its order.
func Neighbourhood(k ...int) RangeMapper {
	b := builtin{name: fmt.Sprintf("Neighbourhood%v", k), sameDims: true}
	var e [3]int
	switch {
	case len(k) < 1 || len(k) > 3:
		b.err = fmt.Errorf("%w: Neighbourhood takes 1 to 3 extents, got %d", ErrSplit, len(k))
		return b
	case len(k) == 1:
		e = [3]int{k[0], k[0], k[0]}
	default:
		b.dims = len(k)
		e = toInternal(len(k), [3]int(append(slices.Clone(k), 0, 0)[:3]), 0)
	}
	for _, x := range k {
		if x < 0 {
			b.err = fmt.Errorf("%w: Neighbourhood%v has a negative extent", ErrSplit, k)
			return b
		}
	}
	b.m = coordinator.Neighbourhood(e[0], e[1], e[2])
	return b
}

// All maps every chunk to the whole buffer (a read of a small table, a
// matrix-vector product's vector).
func All() RangeMapper { return builtin{name: "All", m: coordinator.All()} }

// Fixed maps every chunk to the same region: rng at off, in the buffer's
// dimensions.
func Fixed(off ID, rng Range) RangeMapper {
	b := builtin{name: fmt.Sprintf("Fixed(%v at %v)", rng, off[:max(rng.dims, 1)]), dims: rng.dims}
	if err := rng.valid(); err != nil {
		b.err = fmt.Errorf("%w: Fixed: %w", ErrSplit, err)
		return b
	}
	b.m = coordinator.Fixed(toInternal(rng.dims, off, 0), rng.dims3())
	return b
}

// MapFunc is a custom range mapper: it gets the chunk and the buffer's
// range and returns the region the chunk accesses (clipped to the buffer);
// the region's Range must have the buffer's dimensions. It may run on any
// goroutine, once per chunk, at Submit.
type MapFunc func(c Chunk, buf Range) (offset ID, rng Range)

func (f MapFunc) forBuffer(kd, bd int) (coordinator.RangeMapper, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: nil MapFunc", ErrSplit)
	}
	return coordinator.MapFunc(func(c coordinator.Chunk, buf coordinator.Dims) (coordinator.Dims, coordinator.Dims) {
		off, rng := f(Chunk{Offset: ID(fromInternal(kd, c.Offset, 0)), Range: Range{kd, fromInternal(kd, c.Range, 1)}},
			Range{bd, fromInternal(bd, buf, 1)})
		if rng.dims != bd {
			// Refused by the caller's check (a negative extent).
			return coordinator.Dims{}, coordinator.Dims{-1, -1, -1}
		}
		return toInternal(bd, off, 0), rng.dims3()
	}), nil
}

// Map gives an accessor of a split command group its range mapper: the
// accessor of each chunk covers the mapper's region of the buffer (the
// region coherence makes up to date there and orders groups on), while
// indexing stays global, as in the unsplit kernel. Only Read, Write,
// ReadWrite and the Raw constructors take it (a ranged accessor's region
// is its own), and only in a group submitted with Split.
func Map(m RangeMapper) AccessOption {
	return func(c *accessConfig) { c.mapper = m }
}

// mappedReq is an accessor declared with Map.
type mappedReq struct {
	r *req
	m RangeMapper
}

// splitChunk is a split group's state in its Handler (Handler.split).
type splitChunk struct {
	opts *SplitOpts
	maps []mappedReq // accessors with a mapper, in declaration order

	// A named kernel's launch on a local queue waits until the chunk is
	// known: its arguments carry the chunk's regions.
	launch    *deferredLaunch
	launching bool // finalize is making the deferred launch

	onFinish func(error) // the chunk's completion (exec.Group.OnFinish)
}

type deferredLaunch struct {
	name string
	nd   device.NDRange
	args []KernelArg
}

// finisher is the OnFinish of a group: nil unless it is a chunk.
func (s *splitChunk) finisher() func(error) {
	if s == nil {
		return nil
	}
	return s.onFinish
}

// mapped records an accessor declared with Map (ranged: it came from a
// ranged constructor or Within). It reports false after recording an error.
func (h *Handler) mapped(r *req, m RangeMapper, ranged bool) bool {
	switch {
	case h.split == nil:
		h.fail(fmt.Errorf("%w: an accessor has a range mapper (Map) but the group is not split; submit it with acpp.Split", ErrSplit))
	case ranged:
		h.fail(fmt.Errorf("%w: Map sets the accessor's region per chunk; declare it with Read, Write, ReadWrite or a Raw constructor, without a range or Within", ErrSplit))
	default:
		h.split.maps = append(h.split.maps, mappedReq{r, m})
		return true
	}
	return false
}

// mapperOf is the mapper of r in a split group, or nil.
func (s *splitChunk) mapperOf(r *req) RangeMapper {
	for _, m := range s.maps {
		if m.r == r {
			return m.m
		}
	}
	return nil
}

// deferLaunch keeps a named kernel's launch of a chunk until finalize. It
// reports whether it took it.
func (s *splitChunk) deferLaunch(h *Handler, name string, nd device.NDRange, args []KernelArg) bool {
	if s.launching || h.cl != nil {
		return false
	}
	if h.checkAction("launch " + name) {
		h.recordAction("launch "+name, nil)
		s.launch = &deferredLaunch{name: name, nd: nd, args: slices.Clone(args)}
	}
	return true
}

// ---- splitting a range ----

// ---- a split group on a queue of local devices ----

// submitSplit runs cgf once per chunk, each time with a Handler on the
// chunk's device, and submits the chunks' groups.
func (q *Queue) submitSplit(cgf func(h *Handler) error, cfg submitConfig) (*Event, error) {
	sp := cfg.split
	var errs []error
	if cfg.dev != nil {
		errs = append(errs, errors.New("On and Split both choose devices; name the devices in Split (or SplitOpts.Devices)"))
	}
	if len(sp.ClusterDevices) > 0 {
		errs = append(errs, fmt.Errorf("SplitOpts.ClusterDevices %v names devices of a cluster queue (Connect); use SplitOpts.Devices on a queue of local devices", sp.ClusterDevices))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSplit, err)
	}
	devs := q.devs
	explicit := len(sp.Devices) > 0
	if explicit {
		devs = make([]device.Device, len(sp.Devices))
		for i, id := range sp.Devices {
			d, err := q.deviceByID(id)
			if err != nil {
				return nil, fmt.Errorf("acpp: Split device %d: %w", i, err)
			}
			devs[i] = d
		}
	}
	// Chunk 0 always goes to the first device; running the function for it
	// tells the action and its range, and so the chunks.
	first, err := q.collectChunk(cgf, cfg, devs[0])
	if err != nil {
		return nil, err
	}
	cgs := []*cgroup{first.cg}
	defer func() {
		// A refused split leaves no handler usable (submitted ones are
		// done already).
		for _, cg := range cgs {
			cg.h.done = true
		}
	}()
	act, err := first.action()
	if err != nil {
		return nil, err
	}
	dim, err := sp.check(act.nd.Dims)
	if err != nil {
		return nil, err
	}
	if !explicit {
		devs = slices.DeleteFunc(slices.Clone(devs[1:]), func(d device.Device) bool { return !act.runsOn(d) })
		devs = append([]device.Device{first.dev}, devs...)
	}
	chunks, devOf, err := sp.cut(act.nd.Offset, act.nd.Global, act.nd.Local, dim, len(devs))
	if err != nil {
		return nil, err
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("%w: the range %v is empty: there is nothing to split", ErrSplit, act.nd.Global)
	}
	for i := 1; i < len(chunks); i++ {
		c, err := q.collectChunk(cgf, cfg, devs[devOf[i]])
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		cgs = append(cgs, c.cg)
		a, err := c.action()
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		if a.what != act.what || a.nd != act.nd {
			return nil, fmt.Errorf("%w: the command-group function declared %s over %v for chunk 0 and %s over %v for chunk %d; with Split it runs once per chunk and must declare the same group each time",
				ErrSplit, act.what, act.nd.Global, a.what, a.nd.Global, i)
		}
	}
	for i, cg := range cgs {
		if err := finalizeChunk(&cg.h, act, chunks[i]); err != nil {
			if len(cgs) > 1 {
				err = fmt.Errorf("chunk %d: %w", i, err)
			}
			return nil, err
		}
	}
	submit := cgs
	cgs = nil // finalized (done), and their groups are about to run
	return q.submitChunks(submit)
}

// chunkGroup is one chunk's collected group.
type chunkGroup struct {
	cg  *cgroup
	dev device.Device
}

// collectChunk runs cgf with a Handler on dev for one chunk. The handler
// stays usable (done is false) until finalizeChunk.
func (q *Queue) collectChunk(cgf func(h *Handler) error, cfg submitConfig, dev device.Device) (chunkGroup, error) {
	cg := new(cgroup)
	h := &cg.h
	h.q, h.dev, h.mem, h.name = q, dev, q.rt.MemOf(dev.Info().ID), cfg.name
	h.reqs = h.reqBuf[:0]
	h.split = &splitChunk{opts: cfg.split}
	if len(cfg.after) > 0 {
		h.DependsOn(cfg.after...)
	}
	if err := cgf(h); err != nil {
		h.done = true
		return chunkGroup{}, err
	}
	if len(h.errs) > 0 {
		h.done = true
		return chunkGroup{}, errors.Join(h.errs...)
	}
	return chunkGroup{cg, dev}, nil
}

// splitAction is what a chunk's group declared: a kernel over a range.
type splitAction struct {
	what   string // h.act
	nd     device.NDRange
	kernel *device.Kernel // a named kernel; nil for a Go closure
}

func (c chunkGroup) action() (splitAction, error) {
	h := &c.cg.h
	s := h.split
	switch {
	case s.launch != nil:
		k, err := device.Kernels.Lookup(s.launch.name)
		if err != nil {
			return splitAction{}, err
		}
		return splitAction{what: h.act, nd: s.launch.nd, kernel: k}, nil
	case h.act == "":
		return splitAction{}, fmt.Errorf("%w: the group declared none", ErrNoKernel)
	case h.act == "parallel_for" || h.act == "parallel_for_nd":
		return splitAction{what: h.act, nd: h.ops[0].(device.LaunchOp).Range}, nil
	}
	return splitAction{}, fmt.Errorf("%w: the group declares %s; only ParallelFor, ParallelForChunks, ParallelForND, Launch and LaunchND split", ErrSplit, h.act)
}

// runsOn reports whether d runs the action.
func (a splitAction) runsOn(d device.Device) bool {
	caps := d.Info().Caps
	if a.kernel == nil {
		return caps.Runs(device.FormGo)
	}
	return caps.RunsKernel(a.kernel)
}

// finalizeChunk gives h's mapped accessors their regions for chunk c and
// narrows its kernel to c's items.
func finalizeChunk(h *Handler, act splitAction, c coordinator.Chunk) error {
	defer func() { h.done = true }()
	s := h.split
	// Every buffer accessor needs a mapper.
	for i, r := range h.reqs {
		if s.mapperOf(r) == nil {
			return fmt.Errorf("%w: accessor %d of the split group has no range mapper; declare it with acpp.Map(acpp.OneToOne()) (or Neighbourhood, All, Fixed, a MapFunc)", ErrSplit, i)
		}
	}
	keep := h.reqs[:0]
	for _, r := range h.reqs {
		m, err := s.mapperOf(r).forBuffer(act.nd.Dims, r.vdims)
		if err != nil {
			return err
		}
		off, rng, err := mapRegion(m, c, r.brange, r.vdims)
		if err != nil {
			return err
		}
		r.off, r.rng, r.ranged = off, rng, true
		if rng[0]*rng[1]*rng[2] == 0 {
			continue // nothing to access: no coherence access either
		}
		if r.pages, err = r.pageRange(off, rng); err != nil {
			return fmt.Errorf("%w: %v", ErrBadRange, err)
		}
		keep = append(keep, r)
	}
	h.reqs = keep
	if l := s.launch; l != nil {
		nd := l.nd
		nd.Global, nd.Offset = c.Range, c.Offset
		h.act, h.ops, s.launching = "", nil, true
		h.launch(l.name, nd, l.args)
		if len(h.errs) > 0 {
			return errors.Join(h.errs...)
		}
		// A kernel parameter declared ranged gets the chunk's region, as
		// the coordinator passes it.
		op := h.ops[0].(device.LaunchOp)
		for i, a := range l.args {
			for sa, ok := a.(spaceArg); ok; sa, ok = a.(spaceArg) {
				a = sa.inner
			}
			if rq, ok := a.(requester); ok && rq.request() != nil && op.Args[i].Kind == device.ArgRangedAccessor && s.mapperOf(rq.request()) != nil {
				op.Args[i].AccessOffset, op.Args[i].AccessRange = rq.request().off, rq.request().rng
			}
		}
		return nil
	}
	// A Go closure: run c's items, with global ids and the whole range.
	op := h.ops[0].(device.LaunchOp)
	full, inner := op.Range, op.Func
	op.Range.Global = c.Range
	o := c.Offset
	var g [3]int // the chunk's first work-group
	if full.Grouped() {
		for d := range 3 {
			g[d] = o[d] / full.Local[d]
		}
	}
	op.Func = func(w *device.Work) {
		rng, lo, hi, grp := w.Range, w.Lo, w.Hi, w.Group
		w.Range = full
		for d := range 3 {
			w.Lo[d] += o[d]
			w.Hi[d] += o[d]
			w.Group[d] += g[d]
		}
		inner(w)
		w.Range, w.Lo, w.Hi, w.Group = rng, lo, hi, grp
	}
	h.ops[0] = op
	return nil
}

// mapRegion applies m to chunk c of a buffer (or view) of range buf
// (coherence order) and clips the region to it.
func mapRegion(m coordinator.RangeMapper, c coordinator.Chunk, buf [3]int, bd int) (off, rng [3]int, err error) {
	o, r := m.Map(c, buf)
	for d := range 3 {
		if r[d] < 0 {
			return off, rng, fmt.Errorf("%w: the range mapper gave the region %v for chunk %v+%v: a negative extent, or a MapFunc Range without the buffer's %d dimensions",
				ErrSplit, r, c.Offset, c.Range, bd)
		}
		lo, hi := min(max(o[d], 0), buf[d]), min(max(o[d]+r[d], 0), buf[d])
		off[d], rng[d] = lo, hi-lo
	}
	return off, rng, nil
}

// pageRange is the page range of an access region of r's buffer or view.
func (r *req) pageRange(off, rng [3]int) (coherence.Box, error) {
	geo := r.st.geo
	if r.brange == geo.Range && r.elem == geo.ElemSize {
		return geo.PageRange(off, rng)
	}
	return geo.ViewPageRange(coherence.View{Range: r.brange, ElemSize: r.elem}, off, rng)
}

// submitChunks submits the chunks' groups and returns one event for all.
func (q *Queue) submitChunks(cgs []*cgroup) (*Event, error) {
	j := &chunkJoin{errs: make([]error, len(cgs)), left: len(cgs),
		ev: &clusterEvent{done: make(chan struct{}), submitted: time.Now()}}
	for i, cg := range cgs {
		j.ev.ids = append(j.ev.ids, 0)
		node := &cg.node
		cg.h.split.onFinish = func(err error) {
			_, started, _ := node.Times()
			j.chunkDone(i, started, err)
		}
	}
	for i, cg := range cgs {
		if _, err := q.submitGroup(cg); err != nil {
			if i == 0 {
				return nil, err
			}
			for k := i; k < len(cgs); k++ {
				j.chunkDone(k, time.Time{}, fmt.Errorf("acpp: chunk %d of %q not submitted: %w", k, cg.h.name, err))
			}
			break
		}
		j.ev.ids[i] = cg.node.ID // read only by Event.ID, after Submit returned
		j.ev.chunks = append(j.ev.chunks, &cg.node)
	}
	return &Event{c: j.ev}, nil
}

// chunkJoin completes a split group's event when its last chunk finishes.
type chunkJoin struct {
	mu   sync.Mutex
	ev   *clusterEvent // its fields are written under mu until done is closed
	errs []error       // per chunk; guarded by mu
	left int           // guarded by mu
}

// chunkDone counts chunk i finished with err. It runs in the chunk's
// OnFinish, when its group's end is final (so are the chunks' events,
// Event.Chunks, once the group's event is done), or at Submit for a chunk
// never submitted.
func (j *chunkJoin) chunkDone(i int, started time.Time, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.errs[i] = err
	if !started.IsZero() && (j.ev.issued.IsZero() || started.Before(j.ev.issued)) {
		j.ev.issued = started
	}
	if j.left--; j.left > 0 {
		return
	}
	for _, e := range j.errs {
		if e != nil {
			j.ev.err = e
			break
		}
	}
	j.ev.ended, j.ev.finished = time.Now(), true
	close(j.ev.done)
}

// ---- a split group on a cluster queue ----

// clusterSplit is the coordinator's form of a split for a kernel range of
// kd dimensions.
func (q *Queue) clusterSplit(sp *SplitOpts, kd int) (*coordinator.Split, error) {
	dim, err := sp.check(kd)
	if err != nil {
		return nil, err
	}
	cs := &coordinator.Split{Chunks: sp.Chunks, Interleave: sp.Interleave, Borders: sp.Borders}
	if dim >= 0 {
		cs.Along = coordinator.SplitDim(dim + 1)
	}
	names := q.ClusterDevices()
	for _, id := range sp.Devices {
		n := 0
		for _, name := range names {
			if strings.HasSuffix(name, "/"+id.String()) {
				cs.Devices = append(cs.Devices, name)
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: Split device %s is on no node of the cluster queue (%v)", ErrNoDevice, id, names)
		}
	}
	for _, name := range sp.ClusterDevices {
		if !slices.Contains(names, name) {
			return nil, fmt.Errorf("%w: SplitOpts.ClusterDevices: %s is not one of the cluster queue's devices %v", ErrNoDevice, name, names)
		}
		cs.Devices = append(cs.Devices, name)
	}
	return cs, nil
}
