package embedded

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/exec"
)

// cgroup is one submitted group's memory: the executor's node (also its
// event) and room for the common small group's access.
type cgroup struct {
	node exec.Node
	acc  [1]coherence.Access
}

// GroupBytes is the size of one group's memory with a user part G: one
// allocation, which the root package keeps within a size class
// (TestGroupMemorySize).
func GroupBytes[G any]() uintptr { return unsafe.Sizeof(slot[G]{}) }

// slot is one group's memory: its user's part and the engine's.
type slot[G any] struct {
	user G
	cg   cgroup
}

// NewGroup implements engine.Engine.
func (e *Engine[G]) NewGroup() (*G, engine.Slot) {
	s := new(slot[G])
	return &s.user, &s.cg
}

// Submit implements engine.Engine.
func (e *Engine[G]) Submit(s engine.Slot, g *engine.Group) (engine.Event, error) {
	t, ok := g.Target.(*target)
	if !ok || t.rt != e.rt {
		return nil, fmt.Errorf("%w: the group was recorded for another queue's device", engine.ErrNoDevice)
	}
	if g.Split != nil {
		return e.submitSplit(g, t)
	}
	cg, _ := s.(*cgroup)
	if cg == nil {
		cg = new(cgroup) // a record not made with NewGroup
	}
	after, err := nodesOf(e.rt, g.After)
	if err != nil {
		return nil, err
	}
	acc := cg.acc[:0]
	if len(g.Accesses) > len(cg.acc) {
		acc = make([]coherence.Access, 0, len(g.Accesses))
	}
	for _, a := range g.Accesses {
		acc = appendAccess(acc, a, t.mem)
	}
	if err := e.rt.SubmitNode(&cg.node, exec.Group{Name: g.Name, Accesses: acc, After: after, Device: t.dev, Ops: g.Ops}); err != nil {
		return nil, err
	}
	return (*event)(&cg.node), nil
}

// nodesOf are rt's nodes of explicit dependencies. An event of another
// queue is refused: the executor orders only its own nodes.
func nodesOf(rt *exec.Runtime, evs []engine.Event) ([]*exec.Node, error) {
	var out []*exec.Node
	for _, ev := range evs {
		switch x := ev.(type) {
		case *event:
			out = append(out, x.node())
		case *splitEvent:
			out = append(out, x.nodes...)
		default:
			return nil, fmt.Errorf("%w: an event of a cluster queue and a group of a local queue cannot be ordered; Wait for the event first", engine.ErrNotOnCluster)
		}
	}
	for _, n := range out {
		if !n.Of(rt) {
			return nil, errors.New("acpp: After or DependsOn names an event of another queue, which cannot order this group; Wait for the event first")
		}
	}
	return out, nil
}

// appendAccess appends the coherence accesses of a on memory at. The core
// tracks whole pages, and a discard access marks its whole page range
// valid on the target without a transfer (T1). Where a NoInit accessor
// covers a page only in part, the rest of that page must survive, so such
// edge pages become a plain write: their current contents are brought to
// the target first (T3) and nothing outside the accessor is lost.
// Page-aligned accessors (and whole-buffer ones) stay pure discards.
func appendAccess(acc []coherence.Access, a *engine.Access, at coherence.AllocID) []coherence.Access {
	ca := coherence.Access{Buffer: a.Buffer, Pages: a.Pages, Mode: a.Mode, Target: at}
	if !a.NoInit {
		return append(acc, ca)
	}
	if a.IsView() {
		// A reinterpreted or reshaped view: its page range is a bounding box
		// (P5), so only an access to all of its bytes may discard.
		ca.Discard = a.Off == (engine.Dims{}) && a.Rng == a.BRange
		return append(acc, ca)
	}
	out, err := a.Geo.AppendNoInit(acc, ca, a.Off, a.Rng)
	if err != nil { // cannot happen for a validated accessor; stay safe
		return append(acc, ca)
	}
	return out
}

// ---- events ----

// event is an unsplit group's event: its node, seen through the engine's
// Event (a conversion, no allocation).
type event exec.Node

func (v *event) node() *exec.Node { return (*exec.Node)(v) }

func (v *event) Wait(ctx context.Context) error { return v.node().Wait(ctx) }
func (v *event) Done() <-chan struct{}          { return v.node().Done() }
func (v *event) Err() error                     { return v.node().Err() }
func (v *event) Status() engine.Status          { return v.node().State() }
func (v *event) ID() uint64                     { return uint64(v.node().Seq) }
func (v *event) Chunks() []engine.Event         { return nil }

func (v *event) Device() string {
	if d := v.node().Device(); d != nil {
		return d.Info().ID.String()
	}
	return "host"
}
func (v *event) Transfers() []engine.Transfer { return transfers(v.node().Transfers()) }

func (v *event) Timing() engine.Timing {
	s, st, en := v.node().Times()
	return engine.Timing{Submitted: s, Started: st, Ended: en}
}

func (v *event) Deps() []uint64 {
	d := v.node().Deps()
	out := make([]uint64, len(d))
	for i, x := range d {
		out[i] = uint64(x)
	}
	return out
}

// ---- host access ----

// HostAccess implements engine.Engine: the host allocation itself, once
// the region's pages are up to date there and no group conflicts.
func (e *Engine[G]) HostAccess(ctx context.Context, r *engine.HostRequest) (engine.HostView, error) {
	host := e.rt.HostAlloc()
	m, err := e.rt.Alloc(r.Buffer, host)
	if err != nil {
		return engine.HostView{}, err
	}
	accs := appendAccess(nil, &r.Access, host)
	ready := make(chan func(error), 1)
	n, err := e.rt.Submit(exec.Group{Name: "host access", Accesses: accs, Host: func(done func(error)) { ready <- done }})
	if err != nil {
		return engine.HostView{}, err
	}
	select {
	case done := <-ready:
		return engine.HostView{Data: m.Host, Whole: true, Done: done}, nil
	case <-n.Done():
		return engine.HostView{}, n.Err()
	case <-ctx.Done():
		// Release the access as soon as it is granted.
		go func() {
			select {
			case done := <-ready:
				done(nil)
			case <-n.Done():
			}
		}()
		return engine.HostView{}, ctx.Err()
	}
}

// ReadInto implements engine.Engine.
func (e *Engine[G]) ReadInto(ctx context.Context, r *engine.HostRequest, dst []byte) error {
	v, err := e.HostAccess(ctx, r)
	if err != nil {
		return err
	}
	engine.CopyBox(v.Data, r.BRange, r.Elem, r.Off, r.Rng, dst, false)
	v.Done(nil)
	return nil
}

// WriteFrom implements engine.Engine.
func (e *Engine[G]) WriteFrom(ctx context.Context, r *engine.HostRequest, src []byte) error {
	v, err := e.HostAccess(ctx, r)
	if err != nil {
		return err
	}
	engine.CopyBox(v.Data, r.BRange, r.Elem, r.Off, r.Rng, src, true)
	v.Done(nil)
	return nil
}

// ---- USM ----

// Malloc implements engine.Engine: ErrClosed once Close began.
func (e *Engine[G]) Malloc(dev *device.ID, kind device.MemKind, bytes int) (*device.Mem, error) {
	if e.usmClosed() {
		return nil, fmt.Errorf("%w: Malloc after Close", engine.ErrClosed)
	}
	t := e.targets[0]
	if dev != nil {
		i, err := e.deviceIndex(*dev)
		if err != nil {
			return nil, err
		}
		t = e.targets[i]
	}
	m, err := e.rt.AllocOwned(t.dev, kind, bytes, "USM allocation")
	if err != nil {
		return nil, fmt.Errorf("acpp: Malloc %d bytes of %s memory on %s: %w", bytes, kind, t.info.ID, err)
	}
	e.usm.mu.Lock()
	if e.usm.closed { // Close began while the device allocated
		e.usm.mu.Unlock()
		_ = e.rt.FreeOwned(t.dev, m)
		return nil, fmt.Errorf("%w: Malloc after Close", engine.ErrClosed)
	}
	if e.usm.live == nil {
		e.usm.live = map[*device.Mem]*usmAlloc{}
	}
	e.usm.live[m] = &usmAlloc{dev: t.dev}
	e.usm.mu.Unlock()
	return m, nil
}

func (e *Engine[G]) usmClosed() bool {
	e.usm.mu.Lock()
	defer e.usm.mu.Unlock()
	return e.usm.closed
}

// Free implements engine.Engine: it frees only a live allocation of this
// engine's Malloc, once, and none that an open buffer is bound to.
func (e *Engine[G]) Free(m *device.Mem) error {
	e.usm.mu.Lock()
	if e.usm.closed {
		e.usm.mu.Unlock()
		return fmt.Errorf("%w: Free after Close (the queue's Malloc allocations went with its devices)", engine.ErrClosed)
	}
	a := e.usm.live[m]
	switch {
	case a == nil:
		e.usm.mu.Unlock()
		return fmt.Errorf("%w: Free of %s memory on %s that is no live Malloc allocation of this queue: freed already, a buffer's own allocation (Buffer.USM: Close or Release the buffer instead), or another queue's", engine.ErrBadRange, m.Kind, m.Device)
	case a.bound > 0:
		e.usm.mu.Unlock()
		return fmt.Errorf("%w: Free of a USM allocation that %d open buffer(s) made with NewBufferOver use; Close them first", engine.ErrBadRange, a.bound)
	case a.unfinished() > 0 || a.submitting > 0:
		n := len(a.ops) + a.submitting
		e.usm.mu.Unlock()
		return fmt.Errorf("%w: Free of a USM allocation that %d unfinished Memcpy, Memset or FillUSM use; Wait for their events first", engine.ErrBadRange, n)
	}
	delete(e.usm.live, m)
	e.usm.mu.Unlock()
	return e.rt.FreeOwned(a.dev, m)
}

// USMOp implements engine.Engine: the op runs on the device of the first
// memory the host cannot reach, or on the host.
func (e *Engine[G]) USMOp(name string, op device.Op, mems []*device.Mem, after []engine.Event) (engine.Event, error) {
	deps, err := nodesOf(e.rt, after)
	if err != nil {
		return nil, err
	}
	d := e.rt.Host()
	for _, m := range mems {
		if m.Host != nil {
			continue
		}
		if i := slices.IndexFunc(e.rt.Devices(), func(x device.Device) bool { return x.Info().ID == m.Device }); i >= 0 {
			d = e.rt.Devices()[i]
			break
		}
	}
	// Free refuses the allocations the op uses until it has finished:
	// from before it is submitted (submitting), then by its node (ops).
	var used []*usmAlloc
	e.usm.mu.Lock()
	for _, m := range mems {
		if a := e.usm.live[m]; a != nil && !slices.Contains(used, a) {
			a.submitting++
			used = append(used, a)
		}
	}
	e.usm.mu.Unlock()
	n, err := e.rt.Submit(exec.Group{Name: name, After: deps, Device: d, Ops: []device.Op{op}})
	e.usm.mu.Lock()
	for _, a := range used {
		a.submitting--
		if err == nil {
			a.unfinished() // keeps the list short in a long stream of ops
			a.ops = append(a.ops, n)
		}
	}
	e.usm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return (*event)(n), nil
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
