package embedded

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/exec"
	"github.com/acpp/acpp/internal/partition"
)

// A split group runs as one group per chunk, each on its own device: its
// accessors' regions are their range mappers' regions for the chunk (so
// the conflict rules and transfers work per chunk), and its kernel runs
// the chunk's items only, with global ids. Chunks follow the one rule for
// splitting (partition.Split.Cut) that the coordinator follows too.

// splitDevices are the devices a split may use: those it names, or every
// selected device, the default first.
func (e *Engine[G]) splitDevices(sp *engine.Split) ([]*target, error) {
	if len(sp.Devices) == 0 {
		return e.targets, nil
	}
	out := make([]*target, len(sp.Devices))
	for i, id := range sp.Devices {
		k, err := e.deviceIndex(id)
		if err != nil {
			return nil, fmt.Errorf("acpp: Split device %d: %w", i, err)
		}
		out[i] = e.targets[k]
	}
	return out, nil
}

// runs reports whether t runs g's action. A Go closure's accessors index
// the memory of the device the group was recorded for (first): only
// devices that share it (CPU devices and host-unified GPUs: the host
// allocation, B4) can run a chunk of it.
func runs(g *engine.Group, t, first *target) bool {
	if op, ok := g.Launch(); ok {
		return op.Kernel != nil && t.info.Caps.RunsKernel(op.Kernel)
	}
	return t.goOK && t.mem == first.mem
}

// splitRange is the range of a split group's action.
func splitRange(g *engine.Group) (device.NDRange, error) {
	if op, ok := g.Launch(); ok {
		return op.Range, nil
	}
	if len(g.Ops) == 1 {
		if op, ok := g.Ops[0].(device.LaunchOp); ok && op.Func != nil {
			return op.Range, nil
		}
	}
	return device.NDRange{}, fmt.Errorf("%w: the group declares %s; only ParallelFor, ParallelForChunks, ParallelForND, Launch and LaunchND split", engine.ErrSplit, g.Action)
}

func (e *Engine[G]) submitSplit(g *engine.Group, first *target) (engine.Event, error) {
	sp := g.Split
	nd, err := splitRange(g)
	if err != nil {
		return nil, err
	}
	devs, err := e.splitDevices(sp)
	if err != nil {
		return nil, err
	}
	if len(sp.Devices) == 0 {
		// Chunk 0 goes to the first device (the one the group was recorded
		// for); the others that run the action follow.
		rest := slices.DeleteFunc(slices.Clone(devs[1:]), func(t *target) bool { return !runs(g, t, first) })
		devs = append([]*target{first}, rest...)
	}
	chunks, devOf, err := sp.Cut(nd, len(devs))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrSplit, err)
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("%w: the range %v is empty: there is nothing to split", engine.ErrSplit, nd.Global)
	}
	after, err := nodesOf(e.rt, g.After)
	if err != nil {
		return nil, err
	}
	groups := make([]exec.Group, len(chunks))
	for i, c := range chunks {
		xg, err := chunkGroup(g, devs[devOf[i]], first, nd, c)
		if err != nil {
			if len(chunks) > 1 {
				err = fmt.Errorf("chunk %d: %w", i, err)
			}
			return nil, err
		}
		xg.After = after
		groups[i] = xg
	}
	return e.submitChunks(g.Name, groups)
}

// chunkGroup is the executor's group of chunk c of g on t.
func chunkGroup(g *engine.Group, t, first *target, nd device.NDRange, c partition.Chunk) (exec.Group, error) {
	xg := exec.Group{Name: g.Name, Device: t.dev}
	regions := make([]engine.Access, len(g.Accesses))
	for i, a := range g.Accesses {
		ca := *a
		off, rng, err := mapRegion(a.Map, c, a.BRange, int(a.VDims))
		if err != nil {
			return xg, err
		}
		ca.Off, ca.Rng, ca.Ranged = off, rng, true
		regions[i] = ca
		if rng.Volume() == 0 {
			continue // nothing to access: no coherence access either
		}
		if ca.Pages, err = ca.PageRange(off, rng); err != nil {
			return xg, fmt.Errorf("%w: %v", engine.ErrBadRange, err)
		}
		xg.Accesses = appendAccess(xg.Accesses, &ca, t.mem)
	}
	if k, ok := g.Launch(); ok {
		if g.Binding == nil || g.Binding.Rebind == nil {
			return xg, fmt.Errorf("%w: the split launch of %q cannot be rebound to %s", engine.ErrSplit, k.Name, t.info.ID)
		}
		args, err := g.Binding.Rebind(t)
		if err != nil {
			return xg, err
		}
		conv, def, err := t.Kernel(k.Name, args)
		if err != nil {
			return xg, err
		}
		// A kernel parameter declared ranged gets the chunk's region, as
		// the coordinator passes it.
		for i, ai := range g.Binding.ArgAccess {
			if ai >= 0 && conv[i].Kind == device.ArgRangedAccessor {
				conv[i].AccessOffset, conv[i].AccessRange = regions[ai].Off, regions[ai].Rng
			}
		}
		cnd := k.Range
		if max := t.info.Caps.MaxGroupSize; max > 0 && cnd.Grouped() && cnd.Local[0]*cnd.Local[1]*cnd.Local[2] > max {
			return xg, fmt.Errorf("%w: work-group of %d items, %s allows %d", engine.ErrBadRange, cnd.Local[0]*cnd.Local[1]*cnd.Local[2], t.info.ID, max)
		}
		cnd.Global, cnd.Offset = c.Range, c.Offset
		xg.Ops = []device.Op{device.LaunchOp{Name: k.Name, Kernel: def, Range: cnd, Args: conv}}
		return xg, nil
	}
	if err := t.Closure(g.Action); err != nil {
		return xg, err
	}
	if t.mem != first.mem {
		return xg, fmt.Errorf("%w: %s is a Go closure whose accessors index %s's memory, and %s has memory of its own; split it over devices that share the host memory (CPU devices), or use a named kernel", engine.ErrSplit, g.Action, first.info.ID, t.info.ID)
	}
	// A Go closure: run c's items, with global ids and the whole range.
	op := g.Ops[0].(device.LaunchOp)
	full, inner := op.Range, op.Func
	op.Range.Global = c.Range
	o := c.Offset
	var grp [3]int // the chunk's first work-group
	if full.Grouped() {
		for d := range 3 {
			grp[d] = o[d] / full.Local[d]
		}
	}
	op.Func = func(w *device.Work) {
		rng, lo, hi, wg := w.Range, w.Lo, w.Hi, w.Group
		w.Range = full
		for d := range 3 {
			w.Lo[d] += o[d]
			w.Hi[d] += o[d]
			w.Group[d] += grp[d]
		}
		inner(w)
		w.Range, w.Lo, w.Hi, w.Group = rng, lo, hi, wg
	}
	xg.Ops = []device.Op{op}
	return xg, nil
}

// mapRegion applies m to chunk c of a buffer (or view) of range buf
// (coherence order) with bd dimensions, clipped to it: the rule the
// coordinator follows too (partition.MapAccess).
func mapRegion(m partition.RangeMapper, c partition.Chunk, buf engine.Dims, bd int) (off, rng engine.Dims, err error) {
	if m == nil {
		return off, rng, fmt.Errorf("%w: an accessor of the split group has no range mapper", engine.ErrSplit)
	}
	if off, rng, err = partition.MapAccess(m, c, buf); err != nil {
		return off, rng, fmt.Errorf("%w: %w (a MapFunc Range without the buffer's %d dimensions gives one)", engine.ErrSplit, err, bd)
	}
	return off, rng, nil
}

// submitChunks submits the chunks' groups and returns one event for all.
func (e *Engine[G]) submitChunks(name string, groups []exec.Group) (engine.Event, error) {
	ev := &splitEvent{done: make(chan struct{}), submitted: time.Now(), errs: make([]error, len(groups)), left: len(groups)}
	for _, g := range groups {
		ev.spin = max(ev.spin, e.rt.SpinWait(g.Device))
	}
	nodes := make([]exec.Node, len(groups))
	for i := range groups {
		n := &nodes[i]
		groups[i].OnFinish = func(err error) {
			_, started, _ := n.Times()
			ev.chunkDone(i, started, err)
		}
	}
	for i, g := range groups {
		if err := e.rt.SubmitNode(&nodes[i], g); err != nil {
			if i == 0 {
				return nil, err
			}
			for k := i; k < len(groups); k++ {
				ev.chunkDone(k, time.Time{}, fmt.Errorf("acpp: chunk %d of %q not submitted: %w", k, name, err))
			}
			break
		}
		ev.nodes = append(ev.nodes, &nodes[i])
	}
	return ev, nil
}

// splitEvent completes a split group's event when its last chunk
// finishes, with the first chunk's error (in chunk order) if any failed.
type splitEvent struct {
	nodes     []*exec.Node // the chunks submitted, in order; set before Submit returns
	done      chan struct{}
	fin       atomic.Bool   // set just before done is closed: what Wait spins on
	spin      time.Duration // how long Wait spins: the longest SpinWait of the chunks' devices
	submitted time.Time

	mu            sync.Mutex
	errs          []error // per chunk; guarded by mu
	left          int     // guarded by mu
	first         error   // the event's error; written under mu before done is closed
	issued, ended time.Time
}

// chunkDone counts chunk i finished with err. It runs in the chunk's
// OnFinish, when its group's end is final, or at Submit for a chunk never
// submitted.
func (v *splitEvent) chunkDone(i int, started time.Time, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs[i] = err
	v.issued = engine.EarlierStart(v.issued, started)
	if v.left--; v.left > 0 {
		return
	}
	for _, e := range v.errs {
		if e != nil {
			v.first = e
			break
		}
	}
	v.ended = time.Now()
	v.fin.Store(true)
	close(v.done)
}

func (v *splitEvent) finished() bool {
	select {
	case <-v.done:
		return true
	default:
		return false
	}
}

// Wait spins first where a chunk's device asks for it (exec's Node.Wait
// says why).
func (v *splitEvent) Wait(ctx context.Context) error {
	if v.spin > 0 && device.SpinUntil(&v.fin, v.spin, ctx.Done()) {
		return v.first
	}
	select {
	case <-v.done:
		return v.first
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *splitEvent) Done() <-chan struct{} { return v.done }

func (v *splitEvent) Err() error {
	if v.finished() {
		return v.first
	}
	return nil
}

func (v *splitEvent) Status() engine.Status {
	if v.finished() {
		if v.first != nil {
			return engine.Failed
		}
		return engine.Complete
	}
	for _, n := range v.nodes {
		if n.State() != exec.Submitted {
			return engine.Running
		}
	}
	return engine.Submitted
}

func (v *splitEvent) Timing() engine.Timing {
	if v.finished() {
		return engine.Timing{Submitted: v.submitted, Started: v.issued, Ended: v.ended}
	}
	t := engine.Timing{Submitted: v.submitted}
	for _, n := range v.nodes {
		_, started, _ := n.Times()
		t.Started = engine.EarlierStart(t.Started, started)
	}
	return t
}

func (v *splitEvent) ID() uint64 {
	if len(v.nodes) == 0 {
		return 0
	}
	return uint64(v.nodes[0].Seq)
}

// Deps are the groups the chunks waited for, other than the split's own
// chunks, in ID order.
func (v *splitEvent) Deps() []uint64 {
	var out []uint64
	for _, n := range v.nodes {
		for _, d := range n.Deps() {
			own := slices.ContainsFunc(v.nodes, func(c *exec.Node) bool { return c.Seq == d })
			if !own && !slices.Contains(out, uint64(d)) {
				out = append(out, uint64(d))
			}
		}
	}
	slices.Sort(out)
	return out
}

func (v *splitEvent) Device() string {
	var names []string
	for _, n := range v.nodes {
		if name := n.Device().Info().ID.String(); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, ",")
}

func (v *splitEvent) Chunks() []engine.Event {
	out := make([]engine.Event, len(v.nodes))
	for i, n := range v.nodes {
		out[i] = (*event)(n)
	}
	return out
}

// Transfers are the sum of the chunks'.
func (v *splitEvent) Transfers() []engine.Transfer {
	var out []engine.Transfer
	for _, n := range v.nodes {
		for _, t := range n.Transfers() {
			out = engine.AddTransfer(out, t.From, t.To, t.Copies, t.Bytes)
		}
	}
	return out
}

var (
	_ engine.Event = (*event)(nil)
	_ engine.Event = (*splitEvent)(nil)
)
