package coordinator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// Mode is an access mode (coherence.Mode).
type Mode = coherence.Mode

// Access modes.
const (
	Read      = coherence.Read
	Write     = coherence.Write
	ReadWrite = coherence.ReadWrite
)

// Accessor is a buffer accessor of a command group.
type Accessor struct {
	Buffer *Buffer
	Mode   Mode
	// Offset and Range are the accessed region in elements (ranged
	// accessor); a zero Range means from Offset to the end of the buffer.
	// Ignored in split groups, where Map gives the region per chunk.
	Offset, Range Dims
	// NoInit (discard) accessors never cause a transfer (T1).
	NoInit bool
	// Kind is how the kernel receives it: device.ArgPointer (raw),
	// device.ArgAccessor or device.ArgRangedAccessor. 0 means what the
	// kernel declares when it is registered in this process
	// (device.Kernels), else ArgAccessor.
	Kind device.ArgKind
	// Map gives the accessed region of each chunk of a split group
	// (required there; OneToOne, Neighbourhood, All, Fixed or MapFunc). In
	// a group without Split, Offset and Range decide when either is set;
	// else Map, when set, maps the group's whole range as one chunk.
	Map RangeMapper
}

// Arg is one kernel argument: an accessor, a scalar or local memory, in
// the kernel's parameter order.
type Arg struct {
	acc    *Accessor
	scalar []byte
	local  int
}

// Acc passes an accessor.
func Acc(a Accessor) Arg { return Arg{acc: &a} }

// Scalar passes bytes by value (little-endian, Go layout).
func Scalar(b []byte) Arg { return Arg{scalar: slices.Clone(b)} }

// ScalarF32 passes a float32.
func ScalarF32(v float32) Arg {
	return Arg{scalar: binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))}
}

// ScalarU64 passes a uint64.
func ScalarU64(v uint64) Arg { return Arg{scalar: binary.LittleEndian.AppendUint64(nil, v)} }

// ScalarU32 passes a uint32.
func ScalarU32(v uint32) Arg { return Arg{scalar: binary.LittleEndian.AppendUint32(nil, v)} }

// LocalMem passes work-group local memory of the given size (A3).
func LocalMem(bytes int) Arg { return Arg{local: bytes} }

// Group is a command group: one kernel launch with its accessors.
type Group struct {
	// Kernel is the kernel's name in the nodes' registries.
	Kernel string
	// Range is the global ND range (every component ≥ 1); Local the
	// work-group size (zero: a flat launch); Offset the launch offset.
	Range, Local, Offset Dims
	Args                 []Arg
	// Device pins the group to a device ("node/kind:index"); empty lets
	// the placement policy choose. A split group is pinned with
	// Split.Devices instead (Device and Split together are ErrInvalid).
	Device string
	// Split, when set, divides the range across devices; each accessor
	// must then have a Map.
	Split *Split
}

// chunkPlan is one command group to submit: a chunk and its device.
type chunkPlan struct {
	chunk Chunk
	dev   int // -1: choose by placement
	regs  []accRegion
}

type accRegion struct {
	off, rng Dims
	pages    coherence.Box
}

// Submit submits a command group (or, with Split, one per chunk) and
// returns their IDs. It returns once the groups are planned and queued for
// their nodes; it never waits for earlier groups to finish. A failed job
// returns its failure. Invalid input is refused before anything is
// submitted; if planning a later chunk of a split group fails (a node was
// lost meanwhile), the IDs of the chunks already submitted come back with
// the error.
func (j *Job) Submit(ctx context.Context, g Group) ([]GroupID, error) {
	for {
		if err := j.waitRecovered(ctx); err != nil {
			return nil, err
		}
		ids, err := j.submit(ctx, g, nil)
		if err != errEpochChanged && err != errDevicesChanged {
			if err == nil {
				j.maybeCheckpoint()
			}
			return ids, err
		}
	}
}

// errEpochChanged: a recovery started while a call was planning; the
// call starts again once it has finished.
var errEpochChanged = errors.New("coordinator: recovery started meanwhile")

// errDevicesChanged: a device the call planned on was lost or began to
// drain between planning (outside the lock) and submitting; the call
// plans again over the devices left.
var errDevicesChanged = errors.New("coordinator: devices changed meanwhile")

// submit plans g. rep is nil for the program's groups (they are logged
// for recovery), or the replay a recovery runs g for.
func (j *Job) submit(ctx context.Context, g Group, rep *replaySet) ([]GroupID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := j.Err(); err != nil {
		return nil, err
	}
	j.mu.Lock()
	ep := j.ep
	j.mu.Unlock()
	if rep != nil {
		g = j.replayable(g)
	}
	params, err := j.validate(&g)
	if err != nil {
		return nil, err
	}
	if err := j.declMismatch(g.Kernel); err != nil {
		return nil, err
	}
	capable := j.capable(g.Kernel)
	var plans []chunkPlan
	switch {
	case g.Split != nil:
		devs := capable
		if len(g.Split.Devices) > 0 {
			devs = nil
			for i, name := range g.Split.Devices {
				d, ok := j.deviceIndex(name)
				if !ok {
					return nil, fmt.Errorf("%w: Split.Devices[%d] %q is not a device of this job (%v)", ErrNoDevice, i, name, j.deviceNames())
				}
				if err := j.gone(d); err != nil {
					return nil, fmt.Errorf("Split.Devices[%d]: %w", i, err)
				}
				if !slices.Contains(capable, d) {
					return nil, fmt.Errorf("%w: Split.Devices[%d] %s cannot run kernel %q", ErrNoDevice, i, name, g.Kernel)
				}
				devs = append(devs, d)
			}
		}
		if len(devs) == 0 {
			return nil, j.noDeviceFor(g.Kernel)
		}
		chunks, chunkDevs, err := cutSplit(g.Split, g.Offset, g.Range, g.Local, len(devs))
		if err != nil {
			return nil, err
		}
		for i, c := range chunks {
			p := chunkPlan{chunk: c, dev: devs[chunkDevs[i]]}
			for k, a := range g.Args {
				if a.acc == nil {
					continue
				}
				if a.acc.Map == nil {
					return nil, fmt.Errorf("%w: argument %d of split kernel %q has no range mapper; set Accessor.Map (OneToOne, Neighbourhood, All, Fixed or MapFunc)", ErrInvalid, k, g.Kernel)
				}
				off, rng, err := mapAccess(a.acc.Map, c, a.acc.Buffer.geo.Range)
				if err != nil {
					return nil, fmt.Errorf("argument %d of kernel %q: %w", k, g.Kernel, err)
				}
				p.regs = append(p.regs, accRegion{off: off, rng: rng})
			}
			plans = append(plans, p)
		}
	default:
		p := chunkPlan{chunk: Chunk{Offset: g.Offset, Range: g.Range}, dev: -1}
		if g.Device != "" {
			d, ok := j.deviceIndex(g.Device)
			if !ok {
				return nil, fmt.Errorf("%w: Device %q is not a device of this job (%v)", ErrNoDevice, g.Device, j.deviceNames())
			}
			if err := j.gone(d); err != nil {
				return nil, err
			}
			if !slices.Contains(capable, d) {
				return nil, fmt.Errorf("%w: device %s cannot run kernel %q (not in its node's registry, or no implementation for its backend)", ErrNoDevice, g.Device, g.Kernel)
			}
			p.dev = d
		} else if len(capable) == 0 {
			return nil, j.noDeviceFor(g.Kernel)
		}
		for k, a := range g.Args {
			if a.acc == nil {
				continue
			}
			if a.acc.Map != nil && a.acc.Offset == (Dims{}) && a.acc.Range == (Dims{}) {
				off, rng, err := mapAccess(a.acc.Map, p.chunk, a.acc.Buffer.geo.Range)
				if err != nil {
					return nil, fmt.Errorf("argument %d of kernel %q: %w", k, g.Kernel, err)
				}
				p.regs = append(p.regs, accRegion{off: off, rng: rng})
				continue
			}
			rng := a.acc.Range
			if rng == (Dims{}) {
				rng = sub(a.acc.Buffer.geo.Range, a.acc.Offset)
			}
			p.regs = append(p.regs, accRegion{off: a.acc.Offset, rng: rng})
		}
		plans = append(plans, p)
	}
	// Map regions to pages before taking the lock (errors change nothing).
	for pi := range plans {
		k := 0
		for ai, a := range g.Args {
			if a.acc == nil {
				continue
			}
			r := &plans[pi].regs[k]
			pages, err := a.acc.Buffer.geo.PageRange(r.off, r.rng)
			if err != nil {
				return nil, fmt.Errorf("%w: argument %d (%s) of kernel %q: %w", ErrInvalid, ai, a.acc.Buffer, g.Kernel, err)
			}
			r.pages = pages
			k++
		}
	}
	ids := make([]GroupID, 0, len(plans))
	if testHookPlanned != nil {
		testHookPlanned()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if ep != j.ep || (rep == nil && j.res.recovering != nil) {
		return nil, errEpochChanged
	}
	if !pinned(&g) {
		for _, p := range plans {
			if p.dev >= 0 && (j.devices[p.dev].lost || j.devices[p.dev].leaving) {
				return nil, errDevicesChanged // a drain or loss since capable(): cut again
			}
		}
	}
	for _, p := range plans {
		if j.err != nil {
			return ids, j.err
		}
		id, err := j.submitLocked(&g, params, p, capable, len(plans))
		if err != nil {
			return ids, err
		}
		gs := j.live[id]
		gs.rep = rep
		gs.user = rep == nil
		ids = append(ids, id)
	}
	if rep != nil {
		rep.left += len(ids)
	} else {
		j.res.logGroupLocked(g, ids)
	}
	return ids, nil
}

// deviceIndex finds a device of the job by its full name (joins add
// devices while the job runs: under the lock).
func (j *Job) deviceIndex(name string) (int, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	i, ok := j.devByID[name]
	return i, ok
}

func (j *Job) deviceNames() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]string, len(j.devices))
	for i, d := range j.devices {
		out[i] = d.String()
	}
	return out
}

// validate checks a group and returns the kernel's declared parameters
// when the kernel is registered in this process (nil otherwise).
func (j *Job) validate(g *Group) ([]device.Param, error) {
	var errs []error
	if g.Kernel == "" {
		errs = append(errs, errors.New("Kernel is empty"))
	}
	for d := range 3 {
		if g.Range[d] < 1 || g.Offset[d] < 0 || g.Local[d] < 0 {
			errs = append(errs, fmt.Errorf("Range %v must be ≥ 1 and Offset %v, Local %v ≥ 0 in every dimension (a 1D range n is {1, 1, n})", g.Range, g.Offset, g.Local))
			break
		}
		if g.Local != (Dims{}) && (g.Local[d] < 1 || g.Range[d]%g.Local[d] != 0) {
			errs = append(errs, fmt.Errorf("Range %v is not a multiple of the work-group size Local %v", g.Range, g.Local))
			break
		}
	}
	if g.Split != nil && g.Device != "" {
		errs = append(errs, fmt.Errorf("Device %q and Split are both set; pin a split group's chunks with Split.Devices, or leave Device empty", g.Device))
	}
	var params []device.Param
	k, kerr := j.kernel(g.Kernel)
	if kerr == nil {
		params = k.Params
		if len(g.Args) != len(params) {
			errs = append(errs, fmt.Errorf("kernel %q takes %d arguments, got %d", g.Kernel, len(params), len(g.Args)))
		}
	}
	j.mu.Lock()
	for i, a := range g.Args {
		switch {
		case a.acc != nil:
			if a.acc.Buffer == nil || j.bufs[a.acc.Buffer.id] != a.acc.Buffer {
				errs = append(errs, fmt.Errorf("argument %d: the accessor's buffer is not a buffer of this job (make it with Job.NewBuffer)", i))
			} else if m := a.acc.Mode; m != Read && m != Write && m != ReadWrite {
				errs = append(errs, fmt.Errorf("argument %d: mode %v; use Read, Write or ReadWrite", i, m))
			} else if a.acc.NoInit && m == Read {
				errs = append(errs, fmt.Errorf("argument %d: a read-only accessor cannot be NoInit", i))
			}
		case a.scalar == nil && a.local <= 0:
			errs = append(errs, fmt.Errorf("argument %d is empty; build it with Acc, Scalar… or LocalMem", i))
		}
	}
	j.mu.Unlock()
	if len(errs) == 0 && kerr == nil {
		// The nodes check the arguments against the same declaration
		// (device.ValidateArgs, then the kernel's Check) and fail the
		// whole job when they do not match: refuse them here instead,
		// so that the job goes on. Address spaces depend on the device
		// placement picks, so the nodes still check those.
		if err := checkArgs(k, g, params); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: kernel %q: %w", ErrInvalid, g.Kernel, err)
	}
	return params, nil
}

// accKind is the kind an accessor argument travels as: its own, or,
// when it says none, its parameter's if that takes memory (a pointer or
// an accessor), else ArgAccessor: an accessor given for a scalar or local
// parameter stays an accessor, which the kernel's declaration refuses,
// instead of becoming a scalar with no bytes that a kernel indexes.
func accKind(own device.ArgKind, params []device.Param, i int) device.ArgKind {
	if own != 0 {
		return own
	}
	if i < len(params) {
		switch k := params[i].Kind; k {
		case device.ArgPointer, device.ArgAccessor, device.ArgRangedAccessor:
			return k
		}
	}
	return device.ArgAccessor
}

// checkArgs checks g's arguments against k's declared parameters as a node
// will (device.ValidateArgs: kinds, conversions between accessor variants,
// element and scalar sizes, read-only data for constant parameters; then
// device.CheckLaunch, the kernel's own Check), with each accessor taken in
// the address space its parameter declares.
func checkArgs(k *device.Kernel, g *Group, params []device.Param) error {
	args := make([]device.Arg, len(g.Args))
	mems := make([]device.Mem, len(g.Args)) // each buffer's size, for launches that run past it
	for i, a := range g.Args {
		switch {
		case a.acc != nil:
			kind := accKind(a.acc.Kind, params, i)
			b := a.acc.Buffer
			r := b.geo.Range
			// Which memory the accessor ends up in is known only once the
			// group is placed: any device memory stands for it here.
			mems[i] = device.Mem{Kind: device.MemDevice, Bytes: r[0] * r[1] * r[2] * b.geo.ElemSize}
			args[i] = device.Arg{Kind: kind, Space: params[i].Space, Mem: &mems[i], ElemSize: b.geo.ElemSize,
				Range: r, AccessRange: r, ReadOnly: a.acc.Mode == Read}
		case a.local > 0:
			args[i] = device.Arg{Kind: device.ArgLocal, Space: device.Local, LocalBytes: a.local}
		default:
			args[i] = device.Arg{Kind: device.ArgScalar, Space: device.Private, Scalar: a.scalar}
		}
	}
	conv, err := device.ValidateArgs(k, args, 0)
	if err != nil {
		return err
	}
	return device.CheckLaunch(k, device.NDRange{Global: g.Range, Local: g.Local, Offset: g.Offset}, conv)
}

// capable lists the job's devices (not lost) that can run kernel: the
// node has it in its registry (an empty registry list is taken as "any"),
// and, when this process knows the kernel, the device runs one of its
// forms.
func (j *Job) capable(kernel string) []int {
	k, kerr := j.kernel(kernel)
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []int
	for i, d := range j.devices {
		if d.lost || d.leaving {
			continue
		}
		if decl, ok := nodeDecl(d.node, kernel); ok {
			// The node declares its kernels: it runs this one where it has
			// a form for the device's backend.
			if decl != nil && runsOn(decl.Forms, d.Forms) {
				out = append(out, i)
			}
			continue
		}
		if ks := d.node.inv.Kernels; len(ks) > 0 && !slices.Contains(ks, kernel) {
			continue
		}
		if kerr == nil && (k.Has(device.FormGo) || k.Has(device.FormPTX)) && len(d.Forms) > 0 {
			ok := false
			for _, f := range d.Forms {
				if (f == device.FormGo.String() && k.Has(device.FormGo)) || (f == device.FormPTX.String() && k.Has(device.FormPTX)) {
					ok = true
				}
			}
			if !ok {
				continue
			}
		}
		out = append(out, i)
	}
	return out
}

// nodeDecl is ns's declaration of kernel (nil: it does not have it); ok is
// false where ns declares no kernels (a node before declarations, or
// one without an inventory).
func nodeDecl(ns *nodeState, kernel string) (decl *proto.KernelDecl, ok bool) {
	if ns.inv == nil || len(ns.inv.KernelDecls) == 0 {
		return nil, false
	}
	for i := range ns.inv.KernelDecls {
		if ns.inv.KernelDecls[i].Name == kernel {
			return &ns.inv.KernelDecls[i], true
		}
	}
	return nil, true
}

// runsOn reports whether a kernel with forms runs on a device of
// devForms (a device that names no forms runs any).
func runsOn(forms, devForms []string) bool {
	if len(devForms) == 0 {
		return true
	}
	for _, f := range devForms {
		if slices.Contains(forms, f) {
			return true
		}
	}
	return false
}

// declMismatch is an error when a node declares kernel with other
// parameters than this process does: the same name must mean the same
// kernel, or arguments would be laid out for one and read by the other.
func (j *Job) declMismatch(kernel string) error {
	k, err := j.localKernel(kernel)
	if err != nil {
		return nil // unknown here: the nodes check the arguments
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	seen := map[*nodeState]bool{}
	for _, d := range j.devices {
		if seen[d.node] || d.node.lost {
			continue
		}
		seen[d.node] = true
		decl, ok := nodeDecl(d.node, kernel)
		if !ok || decl == nil {
			continue
		}
		if theirs := proto.Params(decl.Params); !slices.Equal(theirs, k.Params) {
			return fmt.Errorf("%w: kernel %q is declared in this process as %s and on node %s as %s: the same name must mean the same parameters; rename one, or build the node with this declaration",
				ErrInvalid, kernel, paramsString(k.Params), d.node.name, paramsString(theirs))
		}
	}
	return nil
}

// paramsString is a declaration for messages: (a scalar private 4B, …).
func paramsString(ps []device.Param) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s %v %v %dB", p.Name, p.Kind, p.Space, p.ElemSize)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// noDeviceFor is the error of a group that no device of the job can run:
// ErrNoDevice with each node's reason, which also matches
// device.ErrUnknownKernel when the kernel is registered nowhere (not in
// this process, not shipped to the job, on no node).
func (j *Job) noDeviceFor(kernel string) error {
	why := j.whyNoDevice(kernel)
	if j.unknownKernel(kernel) {
		return fmt.Errorf("%w: no device of this job can run kernel %q (%w: not in this process, not on any node of the job): %s",
			ErrNoDevice, kernel, device.ErrUnknownKernel, why)
	}
	return fmt.Errorf("%w: no device of this job can run kernel %q: %s", ErrNoDevice, kernel, why)
}

// unknownKernel reports whether kernel is registered nowhere: this process
// does not know it, and every node left lists its kernels without it. A
// node that lists no kernels might have it.
func (j *Job) unknownKernel(kernel string) bool {
	if _, err := j.localKernel(kernel); err == nil {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, ns := range j.nodes {
		if ns.lost {
			continue
		}
		if decl, ok := nodeDecl(ns, kernel); ok {
			if decl != nil {
				return false
			}
			continue
		}
		if ns.inv == nil || len(ns.inv.Kernels) == 0 || slices.Contains(ns.inv.Kernels, kernel) {
			return false
		}
	}
	return true
}

// whyNoDevice says, node by node, why none of the job's devices can run
// kernel: the node lacks it (its binary does not register it, and no job
// shipped it), or has it but no form for its devices' backends.
func (j *Job) whyNoDevice(kernel string) string {
	k, kerr := j.kernel(kernel)
	j.mu.Lock()
	defer j.mu.Unlock()
	var parts []string
	seen := map[*nodeState]bool{}
	for _, d := range j.devices {
		ns := d.node
		if seen[ns] {
			continue
		}
		seen[ns] = true
		var devs []string
		for _, e := range j.devices {
			if e.node == ns {
				devs = append(devs, fmt.Sprintf("%s (%s)", e.ID, strings.Join(e.Forms, ",")))
			}
		}
		decl, declared := nodeDecl(ns, kernel)
		switch {
		case ns.lost:
			parts = append(parts, fmt.Sprintf("%s is lost", ns.name))
		case declared && decl != nil:
			parts = append(parts, fmt.Sprintf("%s has it in forms %v, none for its devices %s", ns.name, decl.Forms, strings.Join(devs, ", ")))
		case declared || ns.inv != nil && len(ns.inv.Kernels) > 0 && !slices.Contains(ns.inv.Kernels, kernel):
			parts = append(parts, fmt.Sprintf("%s does not have it (its binary registers %d kernels; build a node that registers %q, node/nodecmd, or ship PTX/CUDA C with the job)", ns.name, len(ns.inv.Kernels), kernel))
		case kerr == nil:
			parts = append(parts, fmt.Sprintf("%s has devices %s, and the kernel's forms are go=%v ptx=%v", ns.name, strings.Join(devs, ", "), k.Has(device.FormGo), k.Has(device.FormPTX)))
		default:
			parts = append(parts, fmt.Sprintf("%s has devices %s", ns.name, strings.Join(devs, ", ")))
		}
	}
	return strings.Join(parts, "; ")
}

// testHookPlanned, when set (tests only), runs between planning a call's
// chunks and submitting them under the lock: where a drain or a loss can
// make the plan stale.
var testHookPlanned func()

// pinned reports whether the program chose g's devices itself (Device, or
// Split.Devices): those are refused when lost or draining, not replaced.
func pinned(g *Group) bool {
	return g.Device != "" || g.Split != nil && len(g.Split.Devices) > 0
}

// gone refuses a pinned device whose node the job lost or that drains
// (capable leaves those out, which would read as "cannot run").
func (j *Job) gone(d int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if dev := j.devices[d]; dev.lost || dev.leaving {
		return fmt.Errorf("%w: device %s is on a lost or draining node; pin a device of another node, or leave the group unpinned", ErrNoDevice, dev)
	}
	return nil
}

// submitLocked plans one command group on the core and queues its
// instructions for the nodes.
func (j *Job) submitLocked(g *Group, params []device.Param, p chunkPlan, capable []int, chunks int) (GroupID, error) {
	dev := p.dev
	if dev >= 0 && (j.devices[dev].lost || j.devices[dev].leaving) {
		return 0, fmt.Errorf("%w: device %s is on a lost or draining node", ErrNoDevice, j.devices[dev])
	}
	if dev < 0 {
		dev = j.placeLocked(g, p, capable)
		if dev < 0 {
			return 0, fmt.Errorf("%w: no device of this job can run kernel %q any more (nodes lost)", ErrNoDevice, g.Kernel)
		}
	}
	d := j.devices[dev]
	target := coherence.AllocID{Node: d.node.id, Mem: coherence.MemID(d.Mem)}
	id := j.nextCG
	cg := coherence.CommandGroup{ID: id}
	k := 0
	for _, a := range g.Args {
		if a.acc == nil {
			continue
		}
		r := p.regs[k]
		k++
		if r.pages.Empty() {
			continue
		}
		acc := coherence.Access{Buffer: a.acc.Buffer.id, Pages: r.pages, Mode: a.acc.Mode, Target: target}
		if a.acc.NoInit {
			out, err := a.acc.Buffer.geo.AppendNoInit(cg.Accesses, acc, r.off, r.rng)
			if err != nil { // the region passed PageRange above; stay safe
				out = append(cg.Accesses, acc)
			}
			cg.Accesses = out
		} else {
			cg.Accesses = append(cg.Accesses, acc)
		}
	}
	step, err := j.core.Submit(cg)
	if err != nil {
		return 0, fmt.Errorf("coordinator: kernel %q: %w", g.Kernel, err)
	}
	j.nextCG++
	if j.log.Enabled(context.Background(), slog.LevelDebug) {
		j.log.Debug("plan", "group", id, "kernel", g.Kernel, "device", d.String(), "accesses", fmt.Sprint(cg.Accesses), "step", fmt.Sprintf("%+v", step))
	}
	items := p.chunk.Range.Volume()
	gs := &groupState{id: id, kernel: g.Kernel, dev: dev, items: items, chunks: chunks, submitted: time.Now()}
	gs.estimate = j.est.estimate(g.Kernel, *d, items)
	j.queued[dev] += gs.estimate
	j.pending[dev]++
	j.live[id] = gs
	j.stats.Groups++
	j.stats.Placed[d.String()]++

	launch := &proto.Launch{Kernel: g.Kernel, Device: d.ID, Global: toU64(p.chunk.Range), Local: toU64(g.Local), Offset: toU64(p.chunk.Offset),
		Replay: j.res.recovering != nil} // only a recovery's replay submits while it runs
	k = 0
	for i, a := range g.Args {
		switch {
		case a.acc != nil:
			r := p.regs[k]
			k++
			kind := accKind(a.acc.Kind, params, i)
			b := a.acc.Buffer
			ka := proto.KArg{Kind: uint8(kind), Buffer: uint64(b.id), Mem: d.Mem, ElemSize: uint32(b.geo.ElemSize), Range: toU64(b.geo.Range), ReadOnly: a.acc.Mode == Read}
			if kind == device.ArgRangedAccessor {
				ka.AccessOffset, ka.AccessRange = toU64(r.off), toU64(r.rng)
			}
			launch.Args = append(launch.Args, ka)
			if !r.pages.Empty() {
				gs.uses = append(gs.uses, pageUse{buf: b, alloc: target, pages: r.pages, write: a.acc.Mode != Read})
				if a.acc.Mode != Read {
					j.recordWriteLocked(b.id, id, r.pages)
				}
			}
		case a.local > 0:
			launch.Args = append(launch.Args, proto.KArg{Kind: uint8(device.ArgLocal), LocalBytes: uint64(a.local)})
		default:
			launch.Args = append(launch.Args, proto.KArg{Kind: uint8(device.ArgScalar), Scalar: a.scalar})
		}
	}
	j.issueLocked(gs, step, d.node, launch)
	return id, nil
}

// recordWriteLocked keeps the lineage: which group last wrote which pages.
// Older records covered by the new write are dropped, so the list stays
// as long as the number of distinct live write regions. It is sorted by
// the boxes' low corners (row-major), and a record the new write covers
// has its low corner between the write's corners, so only those are
// looked at: a split group's chunks each replace their own record
// instead of scanning every member's.
func (j *Job) recordWriteLocked(buf coherence.BufferID, g GroupID, pages coherence.Box) {
	l := j.lineage[buf]
	last := coherence.Dims{pages.Hi[0] - 1, pages.Hi[1] - 1, pages.Hi[2] - 1}
	lo, _ := slices.BinarySearchFunc(l, pages.Lo, func(w writeRec, d coherence.Dims) int { return cmpDims(w.pages.Lo, d) })
	hi := lo
	for hi < len(l) && cmpDims(l[hi].pages.Lo, last) <= 0 {
		hi++
	}
	keep := lo
	for i := lo; i < hi; i++ {
		if !covers(pages, l[i].pages) {
			l[keep] = l[i]
			keep++
		}
	}
	w := writeRec{g: g, pages: pages}
	if keep == hi {
		j.lineage[buf] = slices.Insert(l, lo, w)
		return
	}
	copy(l[lo+1:keep+1], l[lo:keep])
	l[lo] = w
	j.lineage[buf] = append(l[:keep+1], l[hi:]...)
}

// cmpDims orders points row-major (dimension 0 slowest).
func cmpDims(a, b coherence.Dims) int {
	for d := range 3 {
		if a[d] != b[d] {
			return a[d] - b[d]
		}
	}
	return 0
}

// placeLocked picks a device for an unpinned, unsplit group.
func (j *Job) placeLocked(g *Group, p chunkPlan, capable []int) int {
	var cands []int
	for _, i := range capable {
		if !j.devices[i].lost && !j.devices[i].leaving {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return -1
	}
	if j.cfg.Placement == PlaceRoundRobin {
		d := cands[j.rr%len(cands)]
		j.rr++
		return d
	}
	cs := make([]candidate, len(cands))
	// byNode[k]: accessor k's buffer's allocations by node, made once per
	// group when a candidate lacks pages (per candidate, listing them all
	// made placement O(members²) at many members).
	byNode := make([]map[coherence.NodeID][]coherence.AllocID, len(p.regs))
	for ci, di := range cands {
		d := j.devices[di]
		target := coherence.AllocID{Node: d.node.id, Mem: coherence.MemID(d.Mem)}
		c := candidate{dev: di, queue: j.queued[di], pending: j.pending[di], kernel: j.est.estimate(g.Kernel, *d, p.chunk.Range.Volume())}
		k := 0
		for _, a := range g.Args {
			if a.acc == nil {
				continue
			}
			r := p.regs[k]
			k++
			if r.pages.Empty() {
				continue
			}
			b := a.acc.Buffer
			total := elemBytes(b, []coherence.Box{r.pages})
			if a.acc.NoInit {
				continue
			}
			out, err := j.core.Outdated(b.id, target, r.pages)
			if err != nil {
				continue
			}
			missing := elemBytes(b, out)
			// Pages another memory of the same node holds come over the
			// node's own bus, not the network.
			remote := out
			if len(out) > 0 {
				if byNode[k-1] == nil {
					byNode[k-1] = map[coherence.NodeID][]coherence.AllocID{}
					for _, a := range j.core.Allocations(b.id) {
						byNode[k-1][a.Node] = append(byNode[k-1][a.Node], a)
					}
				}
				remote = j.heldNowhereOfLocked(b.id, out, byNode[k-1][target.Node], func(a coherence.AllocID) bool { return a != target })
			}
			net := elemBytes(b, remote)
			c.netBytes += net
			c.localBytes += missing - net
			c.haveBytes += total - missing
		}
		cs[ci] = c
	}
	return cs[chooseAuto(cs, j.cfg.NetworkBandwidth, j.cfg.LocalBandwidth)].dev
}

// heldNowhereLocked is the part of pages that none of buf's allocations
// for which in is true holds up to date.
func (j *Job) heldNowhereLocked(buf coherence.BufferID, pages []coherence.Box, in func(coherence.AllocID) bool) []coherence.Box {
	return j.heldNowhereOfLocked(buf, pages, j.core.Allocations(buf), in)
}

// heldNowhereOfLocked is heldNowhereLocked over the allocations allocs of
// buf (placement lists them once per group, grouped by node).
func (j *Job) heldNowhereOfLocked(buf coherence.BufferID, pages []coherence.Box, allocs []coherence.AllocID, in func(coherence.AllocID) bool) []coherence.Box {
	for _, a := range allocs {
		if len(pages) == 0 {
			break
		}
		if !in(a) {
			continue
		}
		var next []coherence.Box
		for _, pb := range pages {
			if out, err := j.core.Outdated(buf, a, pb); err == nil {
				next = append(next, out...)
			}
		}
		pages = next
	}
	return pages
}

func elemBytes(b *Buffer, pages []coherence.Box) int {
	n := 0
	for _, p := range pages {
		n += b.geo.ElementBox(p).Volume()
	}
	return n * b.geo.ElemSize
}

// boxBytes is the size of element boxes of a buffer with elements of
// elem bytes.
func boxBytes(boxes []proto.Box, elem int) int64 {
	var n int64
	for _, b := range boxes {
		v := int64(1)
		for d := range 3 {
			v *= int64(b.Hi[d] - b.Lo[d])
		}
		n += v
	}
	return n * int64(elem)
}

// builder collects one group's instructions per node.
type builder struct {
	j       *Job
	g       *groupState
	entries map[coherence.NodeID]*entry
	order   []coherence.NodeID
}

// entry returns the group's entry for ns, creating it.
func (bd *builder) entry(ns *nodeState) *entry {
	e := bd.entries[ns.id]
	if e == nil {
		e = &entry{}
		bd.entries[ns.id] = e
		bd.order = append(bd.order, ns.id)
	}
	return e
}

func (bd *builder) add(ns *nodeState, in proto.Instr) uint64 {
	e := bd.entry(ns)
	ns.nextInstr++
	in.ID = ns.nextInstr
	e.instrs = append(e.instrs, in)
	ref := instrRef{g: bd.g, launch: in.Kind == proto.InstrLaunch, kind: in.Kind, peer: in.Peer}
	if bd.j.cfg.OnGroupDone != nil && len(in.Boxes) > 0 { // bytes only feed traces
		if b := bd.j.bufs[coherence.BufferID(in.Buffer)]; b != nil {
			ref.bytes = boxBytes(in.Boxes, b.geo.ElemSize)
		}
	}
	ns.instrs[in.ID] = ref
	bd.g.pending++
	return in.ID
}

// maxInherited bounds the dependencies of one instruction on other groups'
// instructions; past it the entry waits in the coordinator for the group's
// dependencies to complete instead (proto.MaxDeps bounds what a node
// accepts).
const maxInherited = proto.MaxDeps / 2

// pageUse is one accessor of a launch: the pages of the buffer it touches
// in the launch's memory, and whether it writes them.
type pageUse struct {
	buf   *Buffer
	alloc coherence.AllocID
	pages coherence.Box
	write bool
}

// issueLocked turns a step into instructions and queues them (pipelined:
// nothing here waits for a node). g.uses are the launch's accessors (none
// without a launch: a drain's move).
//
// Ordering. Each instruction waits for the pending instructions on its
// node that touch the same pages of the same allocation in a conflicting
// way (hazard.go), and for the allocation instruction of each allocation
// it touches while that is pending; the launch also waits for the group's
// own instructions on x (its copies, recvs, uploads and allocations).
// Recvs make remote data a local dependency: a send waits for the writer
// of its pages on the source node.
//
// Gates keep D3 literal across allocations: a launch waits in the
// coordinator until a dependency completes unless something orders that
// dependency's launch before it (see launchOrderedLocked), and always for
// host accesses, whose read-backs are not in the FIFOs, and for drains. A
// group completes only after its dependencies did, so completion is
// transitive.
func (j *Job) issueLocked(g *groupState, step coherence.Step, x *nodeState, launch *proto.Launch) {
	bd := &builder{j: j, g: g, entries: map[coherence.NodeID]*entry{}}
	deps := j.liveDepsLocked(g, step.Deps)
	g.waitsOn = deps
	// after: the groups whose launches g's instructions wait for directly.
	var after []*groupState
	// bound keeps an instruction's dependencies on other groups within
	// maxInherited: past it, the node's entry waits for g's dependencies
	// to complete (which covers them: each was issued for a group g
	// depends on) and only g's own instructions stay.
	bound := func(ns *nodeState, ids []uint64) []uint64 {
		slices.Sort(ids)
		ids = slices.Compact(ids)
		others := 0
		for _, id := range ids {
			if ns.instrs[id].g != g {
				others++
			}
		}
		if others <= maxInherited {
			return ids
		}
		e := bd.entry(ns)
		if len(e.gate) == 0 {
			e.gate = slices.Clone(deps)
		}
		own := ids[:0]
		for _, id := range ids {
			if ns.instrs[id].g == g {
				own = append(own, id)
			}
		}
		return own
	}
	local := []uint64{} // this group's instructions on x before the launch
	for _, a := range step.Allocate {
		b := j.bufs[a.Buffer]
		if a.Alloc.Node == ClientNode {
			if b.host == nil {
				b.host = make([]byte, b.geo.Bytes())
			}
			continue
		}
		ns := j.nodes[a.Alloc.Node-1]
		// Groups that do not depend on each other may all list an
		// allocation (coherence.Step.Allocate): the first one issues the
		// alloc instruction, the others wait for that instruction only,
		// not for its group (D4). Nodes make an allocation once.
		if _, issued := b.allocs[a.Alloc]; issued {
			continue // instructions that touch it wait for it (allocWait)
		}
		id := bd.add(ns, proto.Instr{Kind: proto.InstrAlloc, Buffer: uint64(a.Buffer), Mem: uint32(a.Alloc.Mem), Range: toU64(b.geo.Range), ElemSize: uint32(b.geo.ElemSize)})
		if b.allocs == nil {
			b.allocs = map[coherence.AllocID]uint64{}
		}
		b.allocs[a.Alloc] = id
		if ns == x {
			local = append(local, id)
		}
	}
	for _, c := range step.Copies {
		b := j.bufs[c.Buffer]
		boxes := make([]proto.Box, 0, len(c.Boxes))
		for _, pb := range c.Boxes {
			boxes = append(boxes, protoBox(b.geo.ElementBox(pb)))
		}
		bytes := int64(elemBytes(b, c.Boxes))
		j.stats.PlannedBytes[j.nodeName(c.Src.Node)+"->"+j.nodeName(c.Dst.Node)] += bytes
		dst := j.nodes[c.Dst.Node-1] // copies always go to the target, on x
		dstH := j.hazardsLocked(c.Buffer, c.Dst)
		cdeps := allocWait(b, c.Dst, dst, nil)
		for _, pb := range c.Boxes {
			cdeps = dstH.waitFor(dst, pb, true, cdeps, &after)
		}
		var src *nodeState
		var srcH *allocHazards
		var sdeps []uint64
		if c.Src.Node != ClientNode {
			src = j.nodes[c.Src.Node-1]
			srcH = j.hazardsLocked(c.Buffer, c.Src)
			if src == dst {
				cdeps = allocWait(b, c.Src, src, cdeps)
				for _, pb := range c.Boxes {
					cdeps = srcH.waitFor(src, pb, false, cdeps, &after)
				}
			} else {
				// The pages' writer there waited for the allocation; a
				// pending one is listed all the same, cheaply.
				sdeps = allocWait(b, c.Src, src, nil)
				for _, pb := range c.Boxes {
					sdeps = srcH.waitFor(src, pb, false, sdeps, &after)
				}
				sdeps = bound(src, sdeps)
			}
		}
		cdeps = bound(dst, cdeps)
		for lo := 0; lo < len(boxes); lo += proto.MaxBoxes {
			hi := min(len(boxes), lo+proto.MaxBoxes)
			part, pages := boxes[lo:hi], c.Boxes[lo:hi]
			var id uint64
			switch {
			case src == nil:
				id = bd.add(dst, proto.Instr{Kind: proto.InstrUpload, Deps: cdeps, Buffer: uint64(c.Buffer), Mem: uint32(c.Dst.Mem), Boxes: part})
				e := bd.entries[dst.id]
				e.uploads = append(e.uploads, upload{buf: b, host: b.host, mem: uint32(c.Dst.Mem), boxes: part})
			case src == dst:
				id = bd.add(dst, proto.Instr{Kind: proto.InstrCopy, Deps: cdeps, Buffer: uint64(c.Buffer), Mem: uint32(c.Src.Mem), DstMem: uint32(c.Dst.Mem), Boxes: part})
				for _, pb := range pages {
					srcH.record(src, pb, id, false)
				}
			default:
				sid := bd.add(src, proto.Instr{Kind: proto.InstrSend, Deps: sdeps, Buffer: uint64(c.Buffer), Mem: uint32(c.Src.Mem), Peer: dst.name, PeerBoot: dst.boot(), PeerMem: uint32(c.Dst.Mem), Boxes: part})
				for _, pb := range pages {
					srcH.record(src, pb, sid, false)
				}
				id = bd.add(dst, proto.Instr{Kind: proto.InstrRecv, Deps: cdeps, Buffer: uint64(c.Buffer), Mem: uint32(c.Dst.Mem), Peer: src.name, PeerBoot: src.boot(), Boxes: part})
				if len(g.recvs) == 0 || g.recvs[len(g.recvs)-1].buf != c.Buffer || g.recvs[len(g.recvs)-1].src != src.id {
					g.recvs = append(g.recvs, recvRec{buf: c.Buffer, src: src.id, dst: c.Dst, pages: c.Boxes})
				}
			}
			for _, pb := range pages {
				dstH.record(dst, pb, id, true)
			}
			local = append(local, id)
		}
	}
	if launch == nil {
		// Pages moved, no kernel (a drain hands pages over).
		j.enqueueLocked(bd)
		return
	}
	ldeps := local
	for _, u := range g.uses {
		ldeps = allocWait(u.buf, u.alloc, x, ldeps)
		ldeps = j.hazardsLocked(u.buf.id, u.alloc).waitFor(x, u.pages, u.write, ldeps, &after)
	}
	lid := bd.add(x, proto.Instr{Kind: proto.InstrLaunch, Deps: bound(x, ldeps), Launch: launch})
	g.launchID = lid
	for _, u := range g.uses {
		j.hazardsLocked(u.buf.id, u.alloc).record(x, u.pages, lid, u.write)
	}
	g.uses = nil
	ex := bd.entries[x.id]
	ex.launch = g
	for _, dg := range deps {
		if !j.launchOrderedLocked(dg, after) {
			ex.gate = appendGate(ex.gate, dg)
		}
	}
	if len(ex.gate) > 0 {
		j.stats.Gated++
		g.gated = true
	}
	j.enqueueLocked(bd)
}

// launchOrderedLocked reports whether dg's launch is ordered before the
// launch of a group whose instructions wait directly for the launches of
// the groups after: dg's launch has finished, or it is one of them, or a
// direct dependency of one of them (whose launch was ordered after it in
// turn). Every instruction of a group precedes its launch: those on its
// node by dependency, its sends because their recvs wait for their pages.
// Host accesses and drains have no launch in the FIFOs: never ordered.
func (j *Job) launchOrderedLocked(dg *groupState, after []*groupState) bool {
	if dg.host || dg.dev < 0 || dg.launchID == 0 {
		return false
	}
	if _, pending := j.devices[dg.dev].node.instrs[dg.launchID]; !pending {
		return true
	}
	for _, h := range after {
		if h == dg || slices.Contains(h.waitsOn, dg) {
			return true
		}
	}
	return false
}

// allocWait appends the instruction that makes allocation a of b while it
// is pending on ns.
func allocWait(b *Buffer, a coherence.AllocID, ns *nodeState, deps []uint64) []uint64 {
	if id, ok := b.allocs[a]; ok {
		if _, pending := ns.instrs[id]; pending {
			deps = append(deps, id)
		}
	}
	return deps
}

func appendGate(gate []*groupState, g *groupState) []*groupState {
	if slices.Contains(gate, g) {
		return gate
	}
	return append(gate, g)
}

// liveDepsLocked returns the step's dependencies that have not completed,
// and records g as waiting for them (completion is transitive).
func (j *Job) liveDepsLocked(g *groupState, ids []GroupID) []*groupState {
	var out []*groupState
	for _, d := range ids {
		if dg := j.live[d]; dg != nil && !dg.completed {
			out = append(out, dg)
			dg.dependents = append(dg.dependents, g)
			g.waitFor++
		}
	}
	return out
}

// enqueueLocked appends the builder's entries to their nodes' FIFOs and
// wakes the senders.
func (j *Job) enqueueLocked(bd *builder) {
	for _, nid := range bd.order {
		ns := j.nodes[nid-1]
		e := bd.entries[nid]
		if ns.lost {
			continue
		}
		ns.enqSeq++
		e.seq = ns.enqSeq
		if len(e.gate) > 0 {
			j.gated++
		}
		ns.outbox = append(ns.outbox, e)
		select {
		case ns.wake <- struct{}{}:
		default:
		}
	}
}

// Read brings an element region of a buffer up to date on the client (only
// outdated pages travel, each from a node that holds it, straight to the
// client) and returns a copy of it, row-major. A zero rng means from off to
// the end of the buffer. Read waits for the groups that write the region.
func (j *Job) Read(ctx context.Context, b *Buffer, off, rng Dims) ([]byte, error) {
	return j.hostAccess(ctx, b, off, rng, nil)
}

// Write replaces an element region of a buffer with data (row-major, the
// region's volume × the element size) as a host accessor would: it waits
// for the groups that use the region, writes the client's copy, and later
// groups upload the new pages where they need them. Pages the region only
// partly covers are first brought up to date on the client. A zero rng
// means from off to the end of the buffer.
func (j *Job) Write(ctx context.Context, b *Buffer, off, rng Dims, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	_, err := j.hostAccess(ctx, b, off, rng, data)
	return err
}

// hostAccess is a host accessor on the client's allocation: a read (data
// nil) or a write of data. A recovery that starts meanwhile makes a read
// start again; a write it has logged, the recovery replays.
func (j *Job) hostAccess(ctx context.Context, b *Buffer, off, rng Dims, data []byte) ([]byte, error) {
	for {
		if err := j.waitRecovered(ctx); err != nil {
			return nil, err
		}
		out, logged, err := j.hostAccessOnce(ctx, b, off, rng, data, false)
		if err != errEpochChanged {
			return out, err
		}
		if logged {
			return nil, j.waitRecovered(ctx)
		}
	}
}

// hostOp is a planned host access: the group, and the read backs that
// bring the pages it lacks.
type hostOp struct {
	ep    *epoch
	b     *Buffer
	gs    *groupState
	deps  []GroupID
	need  map[*nodeState]uint64
	rbs   []readBack
	host  []byte
	off   Dims
	rng   Dims
	data  []byte
	bytes int64
}

type readBack struct {
	ns    *nodeState
	nj    *nodeclient.Job
	id    uint64
	mem   uint32
	boxes []proto.Box
}

// hostAccessOnce plans and runs one host access in the current epoch;
// logged reports whether a write went into the recovery log (replay: a
// recovery's own replay of it, not logged again).
func (j *Job) hostAccessOnce(ctx context.Context, b *Buffer, off, rng Dims, data []byte, replay bool) (out []byte, logged bool, err error) {
	what := "read"
	if data != nil {
		what = "write"
	}
	if b == nil {
		return nil, false, fmt.Errorf("%w: host %s of a nil buffer", ErrInvalid, what)
	}
	if rng == (Dims{}) {
		rng = sub(b.geo.Range, off)
	}
	pages, err := b.pageRange(off, rng)
	if err != nil {
		return nil, false, err
	}
	if data != nil && len(data) != rng.Volume()*b.geo.ElemSize {
		return nil, false, fmt.Errorf("%w: write of %d bytes to %s region %v+%v, which holds %d", ErrInvalid, len(data), b, off, rng, rng.Volume()*b.geo.ElemSize)
	}
	j.mu.Lock()
	if j.err != nil {
		j.mu.Unlock()
		return nil, false, j.err
	}
	if !replay && j.res.recovering != nil {
		j.mu.Unlock()
		return nil, false, errEpochChanged
	}
	if j.bufs[b.id] != b {
		j.mu.Unlock()
		return nil, false, fmt.Errorf("%w: %s is not a buffer of this job", ErrInvalid, b)
	}
	op, err := j.planHostLocked(j.ep, b, off, rng, pages, data, "host "+what)
	if err == nil && data != nil && !replay {
		j.res.appendLocked(logOp{kind: opWrite, buf: b, off: off, rng: rng, data: slices.Clone(data)})
		logged = j.res.on
	}
	j.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	out, _, err = j.finishHost(ctx, op, false)
	return out, logged, err
}

// planHostLocked plans a host access of b's region in epoch ep (j.ep):
// the group on the core and the read backs its copies need.
func (j *Job) planHostLocked(ep *epoch, b *Buffer, off, rng Dims, pages coherence.Box, data []byte, kernel string) (*hostOp, error) {
	acc := coherence.Access{Buffer: b.id, Pages: pages, Mode: Read, Target: clientAlloc}
	if data != nil {
		acc.Mode = Write
		// Whole pages need not be fetched first (T1).
		acc.Discard = b.geo.ElementBox(pages) == coherence.Box{Lo: off, Hi: addDims(off, rng)}
	}
	id := j.nextCG
	step, err := j.core.Submit(coherence.CommandGroup{ID: id, Accesses: []coherence.Access{acc}})
	if err != nil {
		return nil, fmt.Errorf("coordinator: %s of %s: %w", kernel, b, err)
	}
	j.nextCG++
	gs := &groupState{id: id, kernel: kernel, dev: -1, host: true, pending: 1, submitted: time.Now(), internal: kernel == "checkpoint"} // the extra 1 is held until the copy
	j.live[id] = gs
	if !gs.internal {
		j.stats.Groups++
	}
	// It waits for its dependencies itself, then reads back outside the
	// FIFOs: later groups that depend on it are gated (issueLocked).
	j.liveDepsLocked(gs, step.Deps)
	if data != nil {
		j.recordWriteLocked(b.id, id, pages)
	}
	for _, a := range step.Allocate {
		if a.Alloc.Node == ClientNode && b.host == nil {
			b.host = make([]byte, b.geo.Bytes())
		}
	}
	op := &hostOp{ep: ep, b: b, gs: gs, deps: step.Deps, need: map[*nodeState]uint64{}, host: b.host, off: off, rng: rng, data: data} // host read under the lock: Release clears the field
	for _, c := range step.Copies {
		src := j.nodes[c.Src.Node-1]
		boxes := make([]proto.Box, 0, len(c.Boxes))
		for _, pb := range c.Boxes {
			boxes = append(boxes, protoBox(b.geo.ElementBox(pb)))
		}
		n := int64(elemBytes(b, c.Boxes))
		op.bytes += n
		j.stats.PlannedBytes[src.name+"->client"] += n
		for len(boxes) > 0 {
			part := boxes[:min(len(boxes), proto.MaxBoxes)]
			boxes = boxes[len(part):]
			src.nextInstr++
			src.instrs[src.nextInstr] = instrRef{g: gs, kind: proto.InstrReadBack, peer: "client", bytes: boxBytes(part, b.geo.ElemSize)}
			gs.pending++
			op.rbs = append(op.rbs, readBack{ns: src, nj: src.nj, id: src.nextInstr, mem: uint32(c.Src.Mem), boxes: part})
		}
		op.need[src] = src.enqSeq
	}
	return op, nil
}

// finishHost waits for op's dependencies, reads back what it lacks and
// copies the data out (a read; whole: the whole buffer, for a
// checkpoint) or in (a write). It returns the bytes read back.
func (j *Job) finishHost(ctx context.Context, op *hostOp, whole bool) ([]byte, int64, error) {
	b := op.b
	err := j.finishRead(ctx, op.ep, op.gs, op.deps, op.need, func(ctx context.Context) error {
		errs := make([]error, len(op.rbs))
		var wg sync.WaitGroup
		for i, r := range op.rbs {
			wg.Go(func() {
				errs[i] = r.nj.ReadBack(ctx, r.id, nil, uint64(b.id), r.mem, toU64(b.geo.Range), uint32(b.geo.ElemSize), r.boxes, op.host)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil && ctx.Err() == nil {
				j.readBackFailed(op.ep, op.rbs[i].ns, err)
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	switch {
	case whole:
		out = slices.Clone(op.host)
	case op.data == nil:
		out = copyOut(op.host, b.geo, op.off, op.rng)
	default:
		copyIn(op.host, b.geo, op.off, op.rng, op.data)
	}
	j.mu.Lock()
	if op.ep != j.ep {
		j.mu.Unlock()
		return nil, 0, errEpochChanged
	}
	op.gs.pending--
	var done []GroupTrace
	if op.gs.pending == 0 && !op.gs.finished {
		done = j.finishLocked(op.gs, time.Now())
		j.signalLocked()
		if j.gated > 0 {
			j.wakeAllLocked()
		}
	}
	j.mu.Unlock()
	j.notify(done)
	return out, op.bytes, nil
}

func addDims(a, b Dims) Dims { return Dims{a[0] + b[0], a[1] + b[1], a[2] + b[2]} }

func copyIn(host []byte, geo coherence.Geometry, off, rng Dims, data []byte) {
	es := geo.ElemSize
	br := geo.Range
	k := 0
	for z := off[0]; z < off[0]+rng[0]; z++ {
		for y := off[1]; y < off[1]+rng[1]; y++ {
			s := ((z*br[1]+y)*br[2] + off[2]) * es
			k += copy(host[s:s+rng[2]*es], data[k:])
		}
	}
}

// finishRead waits for the read's dependencies and for the nodes' FIFOs to
// have sent what was queued before it, then runs the read backs. It
// returns errEpochChanged when a recovery ends ep meanwhile.
func (j *Job) finishRead(ctx context.Context, ep *epoch, gs *groupState, deps []GroupID, need map[*nodeState]uint64, run func(context.Context) error) error {
	if err := j.waitGroups(ctx, ep, deps); err != nil {
		return err
	}
	for {
		j.mu.Lock()
		err, ch, cur := j.err, j.changed, j.ep
		ready := true
		for ns, seq := range need {
			if ns.subSeq < seq {
				ready = false
			}
		}
		j.mu.Unlock()
		if err != nil {
			return err
		}
		if cur != ep {
			return errEpochChanged
		}
		if ready {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A read back fails when its node is lost; the feed turns that into
	// the job's failure or a recovery, which we prefer to the transport's
	// error.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ep.ctx, cancel)
	defer stop()
	if err := run(rctx); err != nil {
		if jerr := j.Err(); jerr != nil {
			return jerr
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if j.waitEpochEnd(ctx, ep) {
			return errEpochChanged
		}
		err = fmt.Errorf("%w: read back: %w", ErrJobFailed, err)
		j.fail(err)
		return err
	}
	return nil
}

// waitEpochEnd reports whether epoch ep ends (a recovery starts) within
// the time it takes to notice a lost node; without recovery it does not
// wait.
func (j *Job) waitEpochEnd(ctx context.Context, ep *epoch) bool {
	limit := time.After(j.cfg.LostTimeout + time.Second)
	for {
		j.mu.Lock()
		changed := j.ep != ep || j.res.recovering != nil
		on, ch := j.res.on, j.changed
		j.mu.Unlock()
		if changed || ep.ctx.Err() != nil {
			return true
		}
		if !on {
			return false
		}
		select {
		case <-ch:
		case <-limit:
			return false
		case <-ctx.Done():
			// ctx may be the epoch's own: look once more.
			j.mu.Lock()
			changed := j.ep != ep || j.res.recovering != nil
			j.mu.Unlock()
			return changed || ep.ctx.Err() != nil
		}
	}
}

// readBackFailed turns a failed read back into the job's failure: a node
// that failed the instruction because a node was lost, or that cannot be
// reached, is lost (C5); the node's other refusals fail the job.
func (j *Job) readBackFailed(ep *epoch, ns *nodeState, err error) {
	var ife *nodeclient.InstrFailedError
	if errors.As(err, &ife) {
		j.mu.Lock()
		defer j.mu.Unlock()
		if ep != j.ep {
			return
		}
		for _, name := range ife.LostNodes() {
			if lost := j.byName[name]; lost != nil {
				j.nodeLostLocked(lost, "failed, reported by "+ns.name)
			}
		}
		if j.res.recovering != nil {
			return
		}
		j.failLocked(fmt.Errorf("%w: read back from node %s: %w", ErrJobFailed, ns.name, err))
		return
	}
	if j.res.on {
		// With recovery on, a failed read back does not lose its node by
		// itself: a node that is really gone is seen by membership, its
		// feed or the pings, and that recovery makes the read start
		// again (finishRead waits for it). A node that failed one read
		// back because a peer died must not be taken for dead.
		return
	}
	j.transportFailure(ep, ns, "read back", err)
}

func copyOut(host []byte, geo coherence.Geometry, off, rng Dims) []byte {
	es := geo.ElemSize
	br := geo.Range
	out := make([]byte, 0, rng.Volume()*es)
	for z := off[0]; z < off[0]+rng[0]; z++ {
		for y := off[1]; y < off[1]+rng[1]; y++ {
			s := ((z*br[1]+y)*br[2] + off[2]) * es
			out = append(out, host[s:s+rng[2]*es]...)
		}
	}
	return out
}
