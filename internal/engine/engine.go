// Package engine is the seam between what a program asks and how it runs.
//
// The root package (acpp) records a command group into a Group: its
// accessors (Access), its action (a Go closure or copy or fill as device
// ops, or a named kernel with its arguments), its split options and its
// explicit dependencies. A queue hands the record to its Engine, which runs
// it: package embedded on this machine's devices (over internal/exec and
// the coherence core), package cluster on the devices of acpp-node agents
// (over package coordinator). The recording code knows neither; an
// operation one engine lacks is refused by that engine (ErrNotOnCluster,
// ErrClosureOnCluster).
//
// Everything here is plain data and interfaces: no I/O, no goroutines.
package engine

import (
	"context"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/partition"
)

// BufferID names a buffer in its engine.
type BufferID = coherence.BufferID

// Dims is an extent or offset in coherence order (dimension 2 fastest).
type Dims = coherence.Dims

// Engine runs recorded command groups and keeps the buffers they use.
// It is safe for concurrent use. G is the caller's memory of one command
// group (the root package's handler and event): NewGroup allocates it
// together with the engine's own, so that a group costs one allocation.
type Engine[G any] interface {
	// Devices describes the devices groups may run on, the default first.
	Devices() []device.Info
	// ClusterDevices names the devices of a cluster ("node/kind:index"),
	// in job order; nil for an engine of local devices.
	ClusterDevices() []string
	// Target resolves where a group is recorded for: the default device,
	// the one p names, or the first device of a split.
	Target(p Place) (Target, error)

	// NewBuffer makes a buffer of s.
	NewBuffer(s BufferSpec) (BufferID, error)
	// CloseBuffer waits for every group that uses the buffer, writes its
	// contents back to the user's slice (BufferSpec.Data without Copy) and
	// frees its allocations.
	CloseBuffer(ctx context.Context, id BufferID) error
	// WriteBack makes the user's slice (or host allocation) up to date.
	WriteBack(ctx context.Context, id BufferID) error
	// Release frees the buffer's allocation on one device (B1).
	Release(ctx context.Context, id BufferID, dev device.ID) error
	// BufferUSM returns the buffer's allocation on dev as USM memory (B3).
	BufferUSM(id BufferID, dev device.ID) (*device.Mem, error)

	// NewGroup allocates one group's memory: the caller's part and the
	// engine's (the slot, nil where the engine keeps none).
	NewGroup() (*G, Slot)
	// Submit runs a recorded group once its dependencies are met and
	// returns its event; s is the slot NewGroup gave with the record's
	// memory.
	Submit(s Slot, g *Group) (Event, error)

	// HostAccess grants the host a region of a buffer (r.Off, r.Rng) until
	// the view's Done is called.
	HostAccess(ctx context.Context, r *HostRequest) (HostView, error)
	// ReadInto copies a region of a buffer (row-major) into dst.
	ReadInto(ctx context.Context, r *HostRequest, dst []byte) error
	// WriteFrom replaces a region of a buffer with src (row-major).
	WriteFrom(ctx context.Context, r *HostRequest, src []byte) error

	// Malloc allocates USM memory on dev (nil: the default device).
	Malloc(dev *device.ID, kind device.MemKind, bytes int) (*device.Mem, error)
	// Free frees USM memory from Malloc.
	Free(m *device.Mem) error
	// USMOp runs a copy or fill of USM memory (a group named name) on the
	// device that reaches mems, after the events after.
	USMOp(name string, op device.Op, mems []*device.Mem, after []Event) (Event, error)

	// Wait blocks until every submitted group finished. err is ctx's
	// error when it ended first; failed are the errors of groups that
	// failed since the last Wait.
	Wait(ctx context.Context) (failed []error, err error)
	// TakeErrors returns the errors of failed groups not yet reported.
	TakeErrors() []error
	// Close waits for all work and ends the engine (and the devices or
	// job it opened). The queue closed its buffers first.
	Close(ctx context.Context) error

	Stats() Stats
	MemoryBudgets() []MemoryBudget
}

// Slot is an engine's part of a group's memory (see Engine.NewGroup).
type Slot any

// Place is where Submit's options ask a group to run.
type Place struct {
	Device *device.ID // On or OnNode; nil for the default device
	Node   string     // OnNode's node
	Split  *Split     // a split group: it is recorded for the split's first device
}

// Target is the device a group is recorded for. Its engine made it.
type Target interface {
	Info() device.Info
	// Closure is nil when Go closures run on the target, else the error
	// that says why not (what names the action: "ParallelFor", ...).
	Closure(what string) error
	// Bind returns the memory an accessor of buffer id shows the group's
	// kernel, allocating it on first use (B5). An engine whose memory is
	// elsewhere returns a stand-in no kernel here can use.
	Bind(id BufferID) (*device.Mem, error)
	// Kernel checks a named kernel launch on the target (A2) and returns
	// its arguments converted for it and the kernel (nil where it is not
	// registered here and the engine checks it later).
	Kernel(name string, args []device.Arg) ([]device.Arg, *device.Kernel, error)
}

// BufferSpec describes a new buffer.
type BufferSpec struct {
	Geo coherence.Geometry
	// Data is the user's slice (L1): the buffer's host allocation, written
	// back at Close and WriteBack; with Copy it is only the initial contents.
	Data []byte
	Copy bool
	// Over is a USM allocation the buffer is bound to (B3).
	Over *device.Mem
	// Name names the buffer in errors ("" : by number).
	Name string
}

// Access is one accessor of a recorded group: what it reads or writes.
// Regions are in coherence order; a view (Reshape, Reinterpret) has its
// own range and element size over the buffer's geometry.
type Access struct {
	Buffer BufferID
	Geo    *coherence.Geometry // the buffer's
	Pages  coherence.Box       // the pages the region covers
	Elem   int                 // the (view's) element size
	BRange Dims                // the (view's) range
	Off    Dims                // access offset
	Rng    Dims                // access range
	// Map says which region a chunk of a split group touches.
	Map    partition.RangeMapper
	Mode   coherence.Mode
	NoInit bool
	Ranged bool // declared with a range or Within
	VDims  int8 // dimensions of the (view's) range
}

// IsView reports whether the access is through a view of another shape
// or element type than the buffer's.
func (a *Access) IsView() bool { return a.BRange != a.Geo.Range || a.Elem != a.Geo.ElemSize }

// PageRange is the page range of a region of the access's buffer or view.
func (a *Access) PageRange(off, rng Dims) (coherence.Box, error) {
	if !a.IsView() {
		return a.Geo.PageRange(off, rng)
	}
	return a.Geo.ViewPageRange(coherence.View{Range: a.BRange, ElemSize: a.Elem}, off, rng)
}

// Group is a recorded command group.
type Group struct {
	Name     string
	Target   Target
	Accesses []*Access
	After    []Event // explicit dependencies
	// Action names what the group does ("parallel_for", "launch NAME",
	// "copy", "fill", "single_task", "parallel_for_nd").
	Action string
	// Ops run the group on Target, over the memory its accessors bound
	// there: a Go closure, copies, fills, or a named kernel's launch
	// (Launch).
	Ops []device.Op
	// Binding says where a named kernel's arguments or a copy's sides
	// come from; nil for other groups.
	Binding *Binding
	// Split divides the group's range across devices; nil otherwise.
	Split *Split
}

// Binding ties a group's op to its accessors.
type Binding struct {
	// ArgAccess is, for a named kernel's launch (Launch), per argument
	// the index in Group.Accesses of the accessor it passes, or -1.
	ArgAccess []int
	// Rebind makes a named kernel's arguments for another target (a split
	// chunk's device): the same accessors over that target's memory. Set
	// for split groups only.
	Rebind func(t Target) ([]device.Arg, error)
	// Src and Dst are a copy's source and destination accessors (a fill
	// has a destination only), as indices in Group.Accesses, or -1: host
	// memory (CopyToHost, CopyFromHost), or no source.
	Src, Dst int

	store [6]int // ArgAccess of short argument lists
}

// NewBinding makes the binding of a launch with n arguments.
func NewBinding(n int) *Binding {
	b := &Binding{Src: -1, Dst: -1}
	if n <= len(b.store) {
		b.ArgAccess = b.store[:n]
	} else {
		b.ArgAccess = make([]int, n)
	}
	return b
}

// ArgAccessOf is ArgAccess[i], or -1.
func (b *Binding) ArgAccessOf(i int) int {
	if b == nil || i >= len(b.ArgAccess) {
		return -1
	}
	return b.ArgAccess[i]
}

// Launch returns the group's named kernel launch (its one op, a
// device.LaunchOp without a Go closure: name, kernel where registered
// here, range and arguments converted for Target); ok is false for other
// groups.
func (g *Group) Launch() (op device.LaunchOp, ok bool) {
	if len(g.Ops) == 1 {
		if op, ok := g.Ops[0].(device.LaunchOp); ok && op.Func == nil {
			return op, true
		}
	}
	return device.LaunchOp{}, false
}

// Split says how to divide a group's range across devices.
type Split struct {
	Devices        []device.ID // local devices, or a kind:index on every node
	ClusterDevices []string    // cluster devices by name
	Chunks         int
	Along          int // the dimension to cut in coherence order; -1: auto
	Interleave     bool
	Borders        int
}

// Cut is the partition of the split for a launch of nd over devs devices.
func (s *Split) Cut(nd device.NDRange, devs int) ([]partition.Chunk, []int, error) {
	p := partition.Split{Chunks: s.Chunks, Interleave: s.Interleave, Borders: s.Borders}
	if s.Along >= 0 {
		p.Along = partition.SplitDim(s.Along + 1)
	}
	return p.Cut(nd.Offset, nd.Global, nd.Local, devs)
}

// Status is a command group's state.
type Status int32

// Command group states.
const (
	Submitted Status = iota // waiting for the groups it depends on
	Running                 // copies or kernel under way
	Complete                // finished
	Failed                  // finished with an error
)

func (s Status) String() string {
	return [...]string{"submitted", "running", "complete", "failed"}[s]
}

// Timing says when a group was submitted, started and ended.
type Timing struct {
	Submitted, Started, Ended time.Time
}

// Transfer counts the copies over one link between two memories.
type Transfer struct {
	From, To      string
	Copies, Bytes int64
}

// Event is a submitted group's handle.
type Event interface {
	Wait(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
	Status() Status
	Timing() Timing
	ID() uint64
	Deps() []uint64
	// Device names the device that ran the group ("cpu:1", on a cluster
	// "node/kind:index"); a split group's are its chunks', comma-separated
	// without repeats. "" while unknown.
	Device() string
	// Chunks are a split group's chunks; nil otherwise.
	Chunks() []Event
	Transfers() []Transfer
}

// HostRequest asks for host access to a region of a buffer.
type HostRequest struct {
	Access
	// Alloc makes host memory for a copy of n bytes, aligned for the
	// element type (the caller's []T).
	Alloc func(n int) []byte
}

// HostView is granted host access.
type HostView struct {
	// Data are the bytes the view indexes: the whole buffer (or view) when
	// Whole, else the region alone, row-major.
	Data  []byte
	Whole bool
	// Done ends the access: a writable one's data goes back to the buffer.
	Done func(error)
}

// Stats count what an engine did (see acpp.Stats).
type Stats struct {
	Groups, CopiesPlanned, Copies                     int64
	BytesCopied, BytesHostToDevice, BytesDeviceToHost int64
	Allocations                                       int64
	Links                                             []Transfer
}

// MemoryBudget is the budget of one memory (see acpp.MemoryBudget).
type MemoryBudget struct {
	Device             device.ID
	Host               bool
	Size, Budget, Used uint64
	How                string
}

// EarlierStart is the earlier of two start times, ignoring zero ones.
func EarlierStart(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// AddTransfer adds n copies of b bytes from → to to ts.
func AddTransfer(ts []Transfer, from, to string, n, b int64) []Transfer {
	for i := range ts {
		if ts[i].From == from && ts[i].To == to {
			ts[i].Copies += n
			ts[i].Bytes += b
			return ts
		}
	}
	return append(ts, Transfer{From: from, To: to, Copies: n, Bytes: b})
}

// PageReader is what an engine implements that can show its buffers' page
// states while it runs (acpp.Queue.PageStates, a live view); an engine
// without it has none to show. Both methods only read, and are safe for
// concurrent use with everything else.
type PageReader interface {
	// PageStates reads every open buffer's page states, in the order the
	// buffers were made.
	PageStates() []BufferPages
	// Running names the groups running now, each as "device: name": the
	// running frontier of the DAG.
	Running() []string
}

// BufferPages is a buffer's page states per allocation.
type BufferPages struct {
	ID   BufferID
	Name string // the name its engine knows it by; "" where none
	// Pages is the page grid's size per dimension.
	Pages  Dims
	Allocs []AllocPages
}

// AllocPages is one allocation of a buffer.
type AllocPages struct {
	// Mem names the memory: "host", "cuda:0" on local devices; "client"
	// or "node/mN" on a cluster.
	Mem string
	// Outdated are the page boxes not up to date there as planned;
	// Moving those that running groups are bringing there (they may
	// overlap each other and Outdated).
	Outdated, Moving []coherence.Box
}
