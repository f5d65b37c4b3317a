package acpp

import (
	"errors"
	"fmt"
	"slices"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/partition"
)

// Splitting a kernel across devices (issue 6), as Celerity does with range
// mappers: Split divides a ParallelFor or Launch range into chunks, one
// command group per chunk on its own device, and each accessor says with
// Map which part of its buffer a chunk touches.
//
// Submit calls the command-group function once, on every queue; the
// record carries the split options and each accessor's mapper. On a queue
// of local devices (NewQueue) the embedded engine makes one group per
// chunk on the chunk's device: its accessors' regions are their mappers'
// regions for the chunk (so the conflict rules and transfers work per
// chunk) and the kernel runs the chunk's items only, with global ids. On
// a cluster queue (Connect) the coordinator splits the group the same way
// (partition.Split.Cut is the one rule for both).

// ErrSplit: a split command group is malformed (a range mapper on a group
// that is not split, an accessor without one in a group that is, an action
// that cannot be split, a bad chunk count or dimension). The message says
// which.
var ErrSplit = engine.ErrSplit

// SplitOpts says how to split a command group's range across devices.
type SplitOpts struct {
	// Devices are the devices to split across. On a queue of local devices
	// they are queue devices (unknown ones are an error); on a cluster
	// queue a DeviceID selects that device on every node that has it.
	// Empty (with ClusterDevices empty too) means every device of the
	// queue that can run the group's kernel, the default device first. A
	// device named twice (here or in ClusterDevices) is ErrSplit.
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
	return func(c *submitConfig) {
		if c.split != nil && !c.split.same(&o) {
			c.again("Split")
		}
		c.split = &o
	}
}

// same: o and p split alike.
func (o *SplitOpts) same(p *SplitOpts) bool {
	return slices.Equal(o.Devices, p.Devices) && slices.Equal(o.ClusterDevices, p.ClusterDevices) &&
		o.Chunks == p.Chunks && o.Along == p.Along && o.Interleave == p.Interleave && o.Borders == p.Borders
}

// check validates the options for a kernel range of kd dimensions and
// returns the split dimension in coherence order (dimension 2 fastest), or
// -1 for SplitAuto.
func (o *SplitOpts) check(kd int) (int, error) {
	var errs []error
	if o.Chunks < 0 {
		errs = append(errs, fmt.Errorf("SplitOpts.Chunks is %d; it must be >= 1, or 0 for one chunk per device", o.Chunks))
	}
	// A device named twice would get a chunk per mention, and a cluster
	// queue a chunk per mention on every node: name each once and set
	// Chunks for more chunks.
	for i, d := range o.Devices {
		if slices.Contains(o.Devices[:i], d) {
			errs = append(errs, fmt.Errorf("Split names device %s twice; name each device once (SplitOpts.Chunks sets the number of chunks)", d))
			break
		}
	}
	for i, d := range o.ClusterDevices {
		if slices.Contains(o.ClusterDevices[:i], d) {
			errs = append(errs, fmt.Errorf("SplitOpts.ClusterDevices names %s twice; name each device once (SplitOpts.Chunks sets the number of chunks)", d))
			break
		}
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
	forBuffer(kd, bd int) (partition.RangeMapper, error)
}

// builtin is one of the partition package's mappers with the dimensions it was
// made for.
type builtin struct {
	name     string
	m        partition.RangeMapper
	sameDims bool  // the kernel range and the buffer must have equal dimensions
	dims     int   // the buffer dimensions it was built for (0: any)
	err      error // a bad argument to the constructor
}

func (b builtin) forBuffer(kd, bd int) (partition.RangeMapper, error) {
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
	return builtin{name: "OneToOne", m: partition.OneToOne(), sameDims: true}
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
	b.m = partition.Neighbourhood(e[0], e[1], e[2])
	return b
}

// All maps every chunk to the whole buffer (a read of a small table, a
// matrix-vector product's vector).
func All() RangeMapper { return builtin{name: "All", m: partition.All()} }

// Fixed maps every chunk to the same region: rng at off, in the buffer's
// dimensions.
func Fixed(off ID, rng Range) RangeMapper {
	b := builtin{name: fmt.Sprintf("Fixed(%v at %v)", rng, off[:max(rng.dims, 1)]), dims: rng.dims}
	if err := rng.valid(); err != nil {
		b.err = fmt.Errorf("%w: Fixed: %w", ErrSplit, err)
		return b
	}
	b.m = partition.Fixed(toInternal(rng.dims, off, 0), rng.dims3())
	return b
}

// MapFunc is a custom range mapper: it gets the chunk and the buffer's
// range and returns the region the chunk accesses (clipped to the buffer);
// the region's Range must have the buffer's dimensions. It may run on any
// goroutine, once per chunk, at Submit.
type MapFunc func(c Chunk, buf Range) (offset ID, rng Range)

func (f MapFunc) forBuffer(kd, bd int) (partition.RangeMapper, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: nil MapFunc", ErrSplit)
	}
	return partition.MapFunc(func(c partition.Chunk, buf partition.Dims) (partition.Dims, partition.Dims) {
		off, rng := f(Chunk{Offset: ID(fromInternal(kd, c.Offset, 0)), Range: Range{kd, fromInternal(kd, c.Range, 1)}},
			Range{bd, fromInternal(bd, buf, 1)})
		if rng.dims != bd {
			// Refused by the caller's check (a negative extent).
			return partition.Dims{}, partition.Dims{-1, -1, -1}
		}
		return toInternal(bd, off, 0), rng.dims3()
	}), nil
}

// Map gives an accessor of a split command group its range mapper: the
// accessor of each chunk covers the mapper's region of the buffer (the
// region coherence makes up to date there and orders groups on), while
// indexing stays global, as in the unsplit kernel. Only Read, Write,
// ReadWrite and the Raw constructors take it (a ranged accessor's region
// is its own), and only in a group submitted with Split. Given twice to one
// accessor it is ErrOption.
func Map(m RangeMapper) AccessOption {
	if m == nil { // refused at Submit, never taken for no mapper
		m = builtin{name: "nil", err: fmt.Errorf("%w: Map(nil): give a range mapper (OneToOne, Neighbourhood, All, Fixed or a MapFunc)", ErrSplit)}
	}
	return func(c *accessConfig) {
		if c.mapper != nil { // mappers need not be comparable: once only
			c.twice = "Map"
		}
		c.mapper = m
	}
}

// splitState is a split group's state in its Handler (Handler.splitting).
type splitState struct {
	opts    *SplitOpts
	mappers map[*req]RangeMapper // the accessors declared with Map
}

// record is the engine's form of the options, before the kernel's range
// tells the split dimension.
func (o *SplitOpts) record() *engine.Split {
	return &engine.Split{Devices: o.Devices, ClusterDevices: o.ClusterDevices, Chunks: o.Chunks,
		Along: -1, Interleave: o.Interleave, Borders: o.Borders}
}

// mapped records an accessor declared with Map (ranged: it came from a
// ranged constructor or Within). It reports false after recording an error.
func (h *Handler) mapped(r *req, m RangeMapper, ranged bool) bool {
	switch {
	case h.splitting() == nil:
		h.fail(fmt.Errorf("%w: an accessor has a range mapper (Map) but the group is not split; submit it with acpp.Split", ErrSplit))
	case ranged:
		h.fail(fmt.Errorf("%w: Map sets the accessor's region per chunk; declare it with Read, Write, ReadWrite or a Raw constructor, without a range or Within", ErrSplit))
	default:
		sp := h.splitting()
		if sp.mappers == nil {
			sp.mappers = map[*req]RangeMapper{}
		}
		sp.mappers[r] = m
		return true
	}
	return false
}

func isLaunch(g *engine.Group) bool { _, ok := g.Launch(); return ok }

// sealSplit completes a split group's record: the split dimension, from
// the kernel's range, and each accessor's mapper for its buffer. The
// engine cuts the range into chunks: the command-group function runs once
// on every queue.
func (h *Handler) sealSplit() error {
	var nd device.NDRange
	switch {
	case isLaunch(&h.rec):
		op, _ := h.rec.Launch()
		nd = op.Range
	case h.rec.Action == "parallel_for" || h.rec.Action == "parallel_for_nd":
		nd = h.rec.Ops[0].(device.LaunchOp).Range
	default:
		return fmt.Errorf("%w: the group declares %s; only ParallelFor, ParallelForChunks, ParallelForND, Launch and LaunchND split", ErrSplit, h.rec.Action)
	}
	dim, err := h.splitting().opts.check(nd.Dims)
	if err != nil {
		return err
	}
	sp := h.splitting().opts.record()
	sp.Along = dim
	h.rec.Split = sp
	for i, r := range h.reqs {
		mapper := h.splitting().mappers[r]
		if mapper == nil {
			return fmt.Errorf("%w: accessor %d of the split group is declared without a range mapper; declare it with acpp.Map(acpp.OneToOne()) (or Neighbourhood, All, Fixed, a MapFunc)", ErrSplit, i)
		}
		m, err := mapper.forBuffer(nd.Dims, int(r.VDims))
		if err != nil {
			return err
		}
		r.Map = m
	}
	return nil
}
