package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/partition"
)

// ---- groups ----

// NewGroup implements engine.Engine: the engine keeps its groups' state
// with the coordinator, so it needs no slot.
func (e *Engine[G]) NewGroup() (*G, engine.Slot) { return new(G), nil }

// Submit implements engine.Engine: a named kernel's group becomes one
// coordinator group, which the coordinator orders by its accessors, places
// (unless pinned) and splits (with Split).
func (e *Engine[G]) Submit(_ engine.Slot, g *engine.Group) (engine.Event, error) {
	t, ok := g.Target.(*target)
	if !ok {
		return nil, fmt.Errorf("%w: the group was recorded for a local queue's device", engine.ErrNotOnCluster)
	}
	var cg *coordinator.Group
	var err error
	op, named := g.Launch()
	switch {
	case named:
		cg, err = e.group(g, op)
	case g.Action == "fill" || g.Action == "copy":
		cg, err = e.opGroup(g)
	default:
		return nil, fmt.Errorf("%w (the group declared %s)", engine.ErrClosureOnCluster, g.Action)
	}
	if err != nil {
		return nil, err
	}
	if err := e.waitAfter(g); err != nil {
		return nil, err
	}
	if cg == nil { // a copy or fill the client does itself
		return e.clientOp(g)
	}
	cg.Device = t.pin
	// A kernel registered in this process with PTX or CUDA C only goes to
	// the nodes that lack it on its first use.
	if err := e.job.ShipKernel(e.ctx, cg.Kernel); err != nil {
		return nil, fmt.Errorf("acpp: submit %q to the cluster: %w", g.Name, err)
	}
	now := time.Now()
	ids, err := e.job.Submit(e.ctx, *cg)
	if err != nil && len(ids) == 0 {
		// The public API's sentinels too, as on an embedded queue: a
		// program matches acpp.ErrSplit and acpp.ErrNoDevice.
		switch {
		case errors.Is(err, partition.ErrBadSplit):
			return nil, fmt.Errorf("acpp: submit %q to the cluster: %w: %w", g.Name, engine.ErrSplit, err)
		case errors.Is(err, coordinator.ErrNoDevice) && !errors.Is(err, engine.ErrNoDevice):
			return nil, fmt.Errorf("acpp: submit %q to the cluster: %w (%w)", g.Name, err, engine.ErrNoDevice)
		}
		return nil, fmt.Errorf("acpp: submit %q to the cluster: %w", g.Name, err)
	}
	ev := e.register(ids, now)
	if err != nil {
		e.mu.Lock()
		ev.finishLocked(err)
		e.mu.Unlock()
	}
	return ev, nil
}

// waitAfter meets g's explicit dependencies by waiting for them: the
// coordinator orders groups by their accessors, not by events.
func (e *Engine[G]) waitAfter(g *engine.Group) error {
	for _, a := range g.After {
		ev, ok := a.(*event)
		if !ok {
			return fmt.Errorf("%w: an event of a local queue and a group of a cluster queue cannot be ordered; Wait for the event first", engine.ErrNotOnCluster)
		}
		if err := ev.Wait(e.ctx); err != nil {
			return fmt.Errorf("acpp: an event group %q waits for failed: %w", g.Name, err)
		}
	}
	return nil
}

// opGroup is the coordinator's form of a copy or fill between buffers of
// 4-byte elements: the nodes' built-in fill_f32 and copy_f32 kernels
// (they move bytes: any 4-byte type). It is nil for the others, which the
// client does itself (clientOp).
func (e *Engine[G]) opGroup(g *engine.Group) (*coordinator.Group, error) {
	if g.Binding == nil {
		return nil, fmt.Errorf("%w: the %s group does not say which accessors it copies between", engine.ErrBadRange, g.Action)
	}
	side := func(i int) *engine.Access {
		if i >= 0 {
			return g.Accesses[i]
		}
		return nil
	}
	onNodes := func(a *engine.Access) bool { return a != nil && a.Elem == 4 && !a.IsView() }
	whole := func(a *engine.Access) bool { return a.Off == (engine.Dims{}) && a.Rng == a.BRange }
	if g.Action == "fill" {
		d := side(g.Binding.Dst)
		if !onNodes(d) {
			return nil, nil
		}
		b, err := e.buffer(d.Buffer)
		if err != nil {
			return nil, err
		}
		op := g.Ops[0].(device.FillOp)
		acc := coordinator.Accessor{Buffer: b.cb, Mode: coherence.Write, Offset: d.Off, Range: d.Rng, NoInit: whole(d), Map: coordinator.OneToOne()}
		return &coordinator.Group{Kernel: "fill_f32", Range: d.Rng, Offset: d.Off, Args: []coordinator.Arg{coordinator.Acc(acc), coordinator.Scalar(op.Pattern)}}, nil
	}
	s, d := side(g.Binding.Src), side(g.Binding.Dst)
	if !onNodes(s) || !onNodes(d) {
		return nil, nil
	}
	sb, err := e.buffer(s.Buffer)
	if err != nil {
		return nil, err
	}
	db, err := e.buffer(d.Buffer)
	if err != nil {
		return nil, err
	}
	return &coordinator.Group{Kernel: "copy_f32", Range: s.Rng, Args: []coordinator.Arg{
		coordinator.Acc(coordinator.Accessor{Buffer: sb.cb, Mode: coherence.Read, Offset: s.Off, Range: s.Rng, Kind: device.ArgRangedAccessor}),
		coordinator.Acc(coordinator.Accessor{Buffer: db.cb, Mode: coherence.Write, Offset: d.Off, Range: d.Rng, NoInit: whole(d), Kind: device.ArgRangedAccessor}),
	}}, nil
}

// clientOp runs a copy or fill through the client before it returns: a
// region read back from the nodes and written to them (only its pages
// travel, ordered with the job's groups as host reads and writes are).
// Copies to and from host slices (CopyToHost, CopyFromHost) go this way,
// and fills and copies of elements other than 4 bytes.
func (e *Engine[G]) clientOp(g *engine.Group) (engine.Event, error) {
	start := time.Now()
	req := func(i int, mode coherence.Mode) *engine.HostRequest {
		a := *g.Accesses[i]
		a.Mode, a.NoInit = mode, mode == coherence.Write
		return &engine.HostRequest{Access: a, Alloc: func(n int) []byte { return make([]byte, n) }}
	}
	var err error
	switch op := g.Ops[0].(type) {
	case device.FillOp:
		r := req(g.Binding.Dst, coherence.Write)
		data := make([]byte, 0, r.Rng.Volume()*r.Elem)
		for range r.Rng.Volume() {
			data = append(data, op.Pattern...)
		}
		err = e.WriteFrom(e.ctx, r, data)
	case device.CopyOp:
		src, dst := g.Binding.Src, g.Binding.Dst
		var data []byte
		if src < 0 {
			data = op.Src.Mem.Host
		} else {
			r := req(src, coherence.Read)
			if dst < 0 {
				data = op.Dst.Mem.Host
			} else {
				data = make([]byte, r.Rng.Volume()*r.Elem)
			}
			err = e.ReadInto(e.ctx, r, data)
		}
		if err == nil && dst >= 0 {
			err = e.WriteFrom(e.ctx, req(dst, coherence.Write), data)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("acpp: %s %q through the client: %w", g.Action, g.Name, err)
	}
	ev := &event{done: make(chan struct{}), submitted: start, issued: start, devices: []string{"client"}}
	e.mu.Lock()
	ev.finishLocked(nil)
	e.mu.Unlock()
	return ev, nil
}

// group is the coordinator's form of a recorded named kernel launch.
func (e *Engine[G]) group(g *engine.Group, k device.LaunchOp) (*coordinator.Group, error) {
	var params []device.Param
	if k.Kernel != nil {
		params = k.Kernel.Params
	}
	cargs := make([]coordinator.Arg, len(k.Args))
	for i, a := range k.Args {
		switch a.Kind {
		case device.ArgScalar:
			cargs[i] = coordinator.Scalar(a.Scalar)
			continue
		case device.ArgLocal:
			cargs[i] = coordinator.LocalMem(a.LocalBytes)
			continue
		}
		ai := g.Binding.ArgAccessOf(i)
		if ai < 0 {
			return nil, fmt.Errorf("%w: kernel %q argument %d is not an accessor of a buffer of this queue; USM pointers cannot travel to a cluster", device.ErrBadArg, k.Name, i)
		}
		r := g.Accesses[ai]
		b, err := e.buffer(r.Buffer)
		if err != nil {
			return nil, fmt.Errorf("kernel %q argument %d: %w", k.Name, i, err)
		}
		acc := coordinator.Accessor{Buffer: b.cb, Mode: r.Mode, NoInit: r.NoInit, Offset: r.Off, Range: r.Rng, Kind: a.Kind}
		if r.IsView() {
			var param *device.Param
			if i < len(params) {
				param = &params[i]
			}
			if err := viewOnCluster(r, &acc, param); err != nil {
				return nil, fmt.Errorf("kernel %q argument %d: %w", k.Name, i, err)
			}
		}
		if g.Split != nil {
			if r.Map == nil {
				return nil, fmt.Errorf("%w: argument %d of split kernel %q is an accessor without a range mapper; declare it with acpp.Map(acpp.OneToOne()) (or Neighbourhood, All, Fixed, a MapFunc)", engine.ErrSplit, i, k.Name)
			}
			if r.IsView() {
				return nil, fmt.Errorf("%w: kernel %q argument %d: a range mapper on an accessor of a reshaped or reinterpreted view cannot travel to a cluster (the coordinator maps chunks onto the buffer's own shape); map the buffer itself", engine.ErrNotOnCluster, k.Name, i)
			}
			acc.Map = r.Map
		}
		cargs[i] = coordinator.Acc(acc)
	}
	cg := &coordinator.Group{Kernel: k.Name, Range: k.Range.Global, Args: cargs}
	if k.Range.Local != ([3]int{}) {
		cg.Local = k.Range.Local
	}
	if g.Split != nil {
		cs, err := e.split(g.Split)
		if err != nil {
			return nil, err
		}
		cg.Split = cs
	}
	return cg, nil
}

// viewOnCluster sets acc's region for an accessor of a reshaped or
// reinterpreted view (P5). The nodes give a kernel the buffer's own range
// and element size, so only a raw pointer (which carries neither, V3, V4)
// can stand for a view; its region becomes the element box of the view's
// page range, which covers every byte the view's region touches. A
// discard (NoInit) survives only when the access covers all of the view:
// otherwise the box may hold bytes outside it, which must not be lost.
func viewOnCluster(r *engine.Access, acc *coordinator.Accessor, param *device.Param) error {
	geo := r.Geo
	if acc.Kind != device.ArgPointer {
		return fmt.Errorf("%w: an accessor with a range of a reshaped or reinterpreted view (range %v, %d-byte elements) over a buffer of range %v and %d-byte elements: the nodes would give the kernel the buffer's shape; use a raw accessor (ReadRaw, WriteRaw, ReadWriteRaw, narrowed with Within) or a raw kernel parameter, or access the buffer itself",
			engine.ErrNotOnCluster, r.BRange, r.Elem, geo.Range, geo.ElemSize)
	}
	if r.Elem != geo.ElemSize && (param == nil || param.ElemSize != 0) {
		return fmt.Errorf("%w: a raw accessor of a view with %d-byte elements over a buffer of %d-byte elements: the nodes check the kernel's declared element size against the buffer's; declare the parameter with ElemSize 0, or reinterpret to a type of the buffer's size",
			engine.ErrNotOnCluster, r.Elem, geo.ElemSize)
	}
	eb := geo.ElementBox(r.Pages)
	acc.Offset = eb.Lo
	acc.Range = coordinator.Dims{eb.Hi[0] - eb.Lo[0], eb.Hi[1] - eb.Lo[1], eb.Hi[2] - eb.Lo[2]}
	if acc.NoInit && (r.Off != engine.Dims{} || r.Rng != r.BRange) {
		acc.NoInit = false
	}
	return nil
}

// split is the coordinator's form of a split.
func (e *Engine[G]) split(sp *engine.Split) (*coordinator.Split, error) {
	cs := &coordinator.Split{Chunks: sp.Chunks, Interleave: sp.Interleave, Borders: sp.Borders}
	if sp.Along >= 0 {
		cs.Along = coordinator.SplitDim(sp.Along + 1)
	}
	names := e.ClusterDevices()
	for _, id := range sp.Devices {
		n := 0
		for _, name := range names {
			if strings.HasSuffix(name, "/"+id.String()) {
				cs.Devices = append(cs.Devices, name)
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: Split device %s is on no node of the cluster queue (%v)", engine.ErrNoDevice, id, names)
		}
	}
	for _, name := range sp.ClusterDevices {
		if !slices.Contains(names, name) {
			return nil, fmt.Errorf("%w: SplitOpts.ClusterDevices: %s is not one of the cluster queue's devices %v", engine.ErrNoDevice, name, names)
		}
		cs.Devices = append(cs.Devices, name)
	}
	return cs, nil
}

// ---- buffers ----

// NewBuffer implements engine.Engine. The job keeps a copy of the initial
// contents to upload from; the user's slice gets the contents back at
// WriteBack and CloseBuffer (unless Copy).
func (e *Engine[G]) NewBuffer(s engine.BufferSpec) (engine.BufferID, error) {
	if s.Over != nil {
		return 0, fmt.Errorf("%w: NewBufferOver (USM lives on local devices); use NewBufferFrom", engine.ErrNotOnCluster)
	}
	spec := coordinator.BufferSpec{Name: s.Name, Range: s.Geo.Range, ElemSize: s.Geo.ElemSize, PageSize: s.Geo.PageSize, Init: s.Data}
	e.newBuf.Lock()
	defer e.newBuf.Unlock()
	cb, err := e.job.NewBuffer(spec)
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	e.nextBuf++
	id := e.nextBuf
	e.mu.Unlock()
	e.bufs.Put(id, &buffer{cb: cb, geo: s.Geo, user: s.Data, writeBack: s.Data != nil && !s.Copy})
	return id, nil
}

func (e *Engine[G]) buffer(id engine.BufferID) (*buffer, error) { return e.bufs.Get(id) }

// WriteBack implements engine.Engine: it reads the whole buffer back and,
// for a buffer made over a slice (L1), copies it there.
func (e *Engine[G]) WriteBack(ctx context.Context, id engine.BufferID) error {
	b, err := e.buffer(id)
	if err != nil {
		return err
	}
	return e.writeBack(ctx, b)
}

func (e *Engine[G]) writeBack(ctx context.Context, b *buffer) error {
	data, err := e.job.Read(ctx, b.cb, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		return err
	}
	if b.writeBack {
		copy(b.user, data)
	}
	return nil
}

// CloseBuffer implements engine.Engine.
func (e *Engine[G]) CloseBuffer(ctx context.Context, id engine.BufferID) error {
	b, err := e.buffer(id)
	if err != nil {
		return err
	}
	if b.writeBack {
		if err := e.writeBack(ctx, b); err != nil {
			return err
		}
	}
	e.bufs.Delete(id)
	return e.job.Release(ctx, b.cb)
}

// Release is refused: the coordinator manages the nodes' allocations.
func (e *Engine[G]) Release(_ context.Context, _ engine.BufferID, dev device.ID) error {
	return fmt.Errorf("%w: %s: a cluster queue's buffers live on the nodes and the coordinator manages their allocations", engine.ErrNotOnCluster, dev)
}

// BufferUSM is refused: a cluster buffer's memory is on the nodes.
func (e *Engine[G]) BufferUSM(_ engine.BufferID, dev device.ID) (*device.Mem, error) {
	return nil, fmt.Errorf("%w: %s: a cluster queue's buffers live on the nodes and the coordinator manages their allocations", engine.ErrNotOnCluster, dev)
}

// ---- host access ----

// HostAccess implements engine.Engine. It reads the region back from the
// nodes (only its pages travel, T3) into a copy; a writable access writes
// the region back at Done. A view of another shape than its buffer's reads
// the element box of its pages (the coordinator tracks the buffer's own
// shape) into a copy of the whole buffer.
func (e *Engine[G]) HostAccess(ctx context.Context, r *engine.HostRequest) (engine.HostView, error) {
	b, err := e.buffer(r.Buffer)
	if err != nil {
		return engine.HostView{}, err
	}
	if r.Rng.Volume() == 0 {
		return engine.HostView{Done: func(error) {}}, nil
	}
	whole := r.Off == (engine.Dims{}) && r.Rng == r.BRange
	if whole || !r.IsView() {
		// The region in the buffer's own coordinates.
		off, rng := r.Off, r.Rng
		if whole {
			// The whole buffer, whatever the view's shape: the zero region
			// (the view's bytes are the buffer's, in the same order).
			off, rng = engine.Dims{}, engine.Dims{}
		}
		var data []byte
		if r.Mode == coherence.Write && r.NoInit {
			data = r.Alloc(r.Rng.Volume() * r.Elem)
		} else {
			raw, err := e.job.Read(ctx, b.cb, off, rng)
			if err != nil {
				return engine.HostView{}, err
			}
			data = r.Alloc(len(raw))
			copy(data, raw)
		}
		v := engine.HostView{Data: data, Done: func(error) {}}
		if r.Mode != coherence.Read {
			v.Done = func(error) {
				if err := e.job.Write(context.Background(), b.cb, off, rng, data); err != nil {
					e.addErr(fmt.Errorf("acpp: host access of a cluster buffer: write back at Close: %w", err))
				}
			}
		}
		return v, nil
	}
	// A region of a view of another shape: its pages' element box in the
	// buffer's coordinates, placed into a copy of the whole buffer.
	eb := b.geo.ElementBox(r.Pages)
	eo, er := eb.Lo, engine.Dims{eb.Hi[0] - eb.Lo[0], eb.Hi[1] - eb.Lo[1], eb.Hi[2] - eb.Lo[2]}
	raw, err := e.job.Read(ctx, b.cb, eo, er)
	if err != nil {
		return engine.HostView{}, err
	}
	all := r.Alloc(b.geo.Bytes())
	engine.CopyBox(all, b.geo.Range, b.geo.ElemSize, eo, er, raw, true)
	v := engine.HostView{Data: all, Whole: true, Done: func(error) {}}
	if r.Mode != coherence.Read {
		v.Done = func(error) {
			box := make([]byte, len(raw))
			engine.CopyBox(all, b.geo.Range, b.geo.ElemSize, eo, er, box, false)
			if err := e.job.Write(context.Background(), b.cb, eo, er, box); err != nil {
				e.addErr(fmt.Errorf("acpp: host access of a cluster buffer: write back at Close: %w", err))
			}
		}
	}
	return v, nil
}

// ReadInto implements engine.Engine: a copy of the region straight from
// the coordinator.
func (e *Engine[G]) ReadInto(ctx context.Context, r *engine.HostRequest, dst []byte) error {
	if r.IsView() {
		v, err := e.HostAccess(ctx, r)
		if err != nil {
			return err
		}
		copyRegion(v, r, dst, false)
		v.Done(nil)
		return nil
	}
	b, err := e.buffer(r.Buffer)
	if err != nil {
		return err
	}
	raw, err := e.job.Read(ctx, b.cb, r.Off, r.Rng)
	if err != nil {
		return err
	}
	copy(dst, raw)
	return nil
}

// WriteFrom implements engine.Engine.
func (e *Engine[G]) WriteFrom(ctx context.Context, r *engine.HostRequest, src []byte) error {
	if r.IsView() {
		v, err := e.HostAccess(ctx, r)
		if err != nil {
			return err
		}
		copyRegion(v, r, src, true)
		v.Done(nil)
		return nil
	}
	b, err := e.buffer(r.Buffer)
	if err != nil {
		return err
	}
	return e.job.Write(ctx, b.cb, r.Off, r.Rng, src)
}

// copyRegion copies the request's region between a view and box.
func copyRegion(v engine.HostView, r *engine.HostRequest, box []byte, in bool) {
	if v.Whole {
		engine.CopyBox(v.Data, r.BRange, r.Elem, r.Off, r.Rng, box, in)
	} else if in {
		copy(v.Data, box)
	} else {
		copy(box, v.Data)
	}
}

// ---- USM: local devices only ----

// Malloc is refused.
func (e *Engine[G]) Malloc(*device.ID, device.MemKind, int) (*device.Mem, error) {
	return nil, fmt.Errorf("%w: USM memory lives on local devices", engine.ErrNotOnCluster)
}

// Free is refused.
func (e *Engine[G]) Free(*device.Mem) error {
	return fmt.Errorf("%w: Free of USM memory", engine.ErrNotOnCluster)
}

// USMOp is refused.
func (e *Engine[G]) USMOp(name string, op device.Op, _ []*device.Mem, _ []engine.Event) (engine.Event, error) {
	what := "Memset or FillUSM"
	if _, ok := op.(device.CopyOp); ok {
		what = "Memcpy"
	}
	return nil, fmt.Errorf("%w: %s (%q) of USM memory, which lives on local devices", engine.ErrNotOnCluster, what, name)
}
