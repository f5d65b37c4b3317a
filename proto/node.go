package proto

import (
	"fmt"
	"strconv"
)

// This file holds the messages between a job's client (its coordinator,
// acpp-submit, a test) and acpp-node agents: job open/renew/close, batches
// of instructions with explicit dependencies, completion feeds, and the
// node's inventory. docs/NODE.md describes the instruction set and its
// semantics; the node's executor is node/, the client side node/nodeclient.

// Node and coordinator messages.
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	// MsgJobOpen opens a job on a node: body [JobOpen], reply [JobOpened].
	MsgJobOpen MsgType = MsgFirstApp + iota
	// MsgJobRenew renews a job's lease: body [JobRef], reply [JobOpened].
	MsgJobRenew
	// MsgJobClose closes a job, failing what is still pending and freeing
	// every allocation it holds: body [JobRef], reply [JobClosed].
	MsgJobClose
	// MsgSubmit submits a batch of instructions: body [Submit], reply
	// [Submitted].
	MsgSubmit
	// MsgWait waits for instructions to finish: body [Wait], reply
	// [WaitResult].
	MsgWait
	// MsgEvents reads the job's completion feed (long poll): body
	// [EventsRequest], reply [EventsReply].
	MsgEvents
	// MsgInventory asks a node for its devices, memories and load: empty
	// body, reply [Inventory].
	MsgInventory
	// MsgMembers asks a node for the cluster members it sees, with their
	// QUIC addresses and device summaries (clients cannot read the gossip,
	// which is encrypted with the cluster's key): empty body, reply
	// [Members].
	MsgMembers
)

// Application error codes of node replies.
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	// CodeNoJob: the job is not open on this node (never opened, closed,
	// or its lease expired).
	CodeNoJob ErrorCode = CodeFirstApp + iota
	// CodeNotOwner: the job belongs to another client.
	CodeNotOwner
	// CodeBadInstr: an instruction is malformed (unknown kind, a missing
	// field, an unknown dependency, a duplicate ID).
	CodeBadInstr
	// CodeDraining: the node is shutting down and takes no new work.
	CodeDraining
)

func init() {
	for t, n := range map[MsgType]string{
		MsgJobOpen: "MsgJobOpen", MsgJobRenew: "MsgJobRenew", MsgJobClose: "MsgJobClose",
		MsgSubmit: "MsgSubmit", MsgWait: "MsgWait", MsgEvents: "MsgEvents", MsgInventory: "MsgInventory",
		MsgMembers: "MsgMembers",
	} {
		appNames[t] = n
	}
}

// JobOpen opens a job. The job ID is chosen by the client (the coordinator
// uses the same ID on every node of the job); the node binds it to the
// client's identity, and only that client may use it afterwards.
type JobOpen struct {
	Job uint64 `msgpack:"j"`
	// Lease is how long the node keeps the job without hearing from its
	// client, in nanoseconds; 0 means the node's default. The node caps it
	// at its own maximum and says in the reply what it granted.
	Lease int64 `msgpack:"l,omitempty"`
	// MaxBytes asks for a memory limit below the node's per-job limit (0:
	// the node's limit).
	MaxBytes uint64 `msgpack:"mb,omitempty"`
	// Recovery is set when a client opens the job again after it lost a
	// node (its recovery number, 1…); the node counts it in /metrics.
	Recovery uint32 `msgpack:"rc,omitempty"`
}

// JobOpened is the reply to MsgJobOpen and MsgJobRenew.
type JobOpened struct {
	// Lease is the granted lease in nanoseconds: renew well within it.
	Lease int64 `msgpack:"l"`
	// MaxBytes is the job's memory limit on this node (0: none).
	MaxBytes uint64 `msgpack:"mb,omitempty"`
	// Node is the node's name.
	Node string `msgpack:"n"`
	// Boot is the boot ID of the node's process (its Hello Instance and
	// membership BootID): the run that holds the job. The coordinator
	// names it in the Send and Recv instructions that other nodes get for
	// this node (Instr.PeerBoot). 0: unknown (a node before this field).
	Boot uint64 `msgpack:"bt,omitempty"`
}

// JobRef names a job.
type JobRef struct {
	Job uint64 `msgpack:"j"`
}

// JobClosed is the reply to MsgJobClose.
type JobClosed struct {
	// Freed is the number of bytes of allocations the close released.
	Freed uint64 `msgpack:"f"`
}

// InstrKind is what an instruction does.
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
type InstrKind uint8

const (
	// InstrAlloc allocates the full buffer (Range × ElemSize bytes) in
	// memory Mem (B1): the allocation of (Buffer, Mem).
	InstrAlloc InstrKind = iota + 1
	// InstrFree frees the allocation of (Buffer, Mem).
	InstrFree
	// InstrCopy copies Boxes of Buffer from its allocation in Mem to its
	// allocation in DstMem, both on this node (one backend copy per box).
	InstrCopy
	// InstrSend sends Boxes of Buffer from its allocation in Mem to node
	// Peer, into that node's allocation in PeerMem. It completes when the
	// peer has the bytes in place.
	InstrSend
	// InstrRecv expects Boxes of Buffer from node Peer into the allocation
	// in Mem. It completes when the bytes have arrived and are written into
	// the allocation. It is how remote dependencies are expressed: local
	// instructions that need the pages depend on the Recv, and the node
	// waits for the peer's bytes itself, never through the coordinator. If
	// Peer (its run PeerBoot, when set) fails or leaves before the bytes
	// arrive, the Recv fails with an error naming it.
	InstrRecv
	// InstrLaunch runs Launch.Kernel (by its name in the node's kernel
	// registry) on Launch.Device.
	InstrLaunch
	// InstrUpload expects Boxes of Buffer from the job's client into the
	// allocation in Mem (a Recv whose peer is the client).
	InstrUpload
	// InstrReadBack sends Boxes of Buffer from the allocation in Mem to the
	// job's client, tagged with Ticket (the page header's Mem field), and
	// completes when the client has them.
	InstrReadBack
	// InstrFill writes Pattern over Boxes of Buffer's allocation in Mem
	// (over the whole allocation when Boxes is empty).
	InstrFill
)

var instrNames = [...]string{
	InstrAlloc: "alloc", InstrFree: "free", InstrCopy: "copy", InstrSend: "send", InstrRecv: "recv",
	InstrLaunch: "launch", InstrUpload: "upload", InstrReadBack: "readback", InstrFill: "fill",
}

// InstrKinds lists every instruction kind, in numeric order.
var InstrKinds = []InstrKind{InstrAlloc, InstrFree, InstrCopy, InstrSend, InstrRecv, InstrLaunch, InstrUpload, InstrReadBack, InstrFill}

func (k InstrKind) String() string {
	if int(k) < len(instrNames) && instrNames[k] != "" {
		return instrNames[k]
	}
	return "instr(" + strconv.Itoa(int(k)) + ")"
}

// Instr is one instruction of a job on one node. Which fields matter
// depends on Kind (see the InstrKind constants); the others stay zero.
type Instr struct {
	// ID names the instruction within the job on this node; unique, never
	// 0. The coordinator numbers them; Deps refer to them.
	ID   uint64    `msgpack:"i"`
	Kind InstrKind `msgpack:"k"`
	// Deps are instructions of the same job on the same node that must
	// complete first. They must have been submitted before (in an earlier
	// batch or earlier in the same batch). If one fails, this one fails too
	// without running.
	Deps   []uint64 `msgpack:"d,omitempty"`
	Buffer uint64   `msgpack:"b,omitempty"`
	// Mem is the node-local memory of the allocation the instruction
	// reads or writes (0 is host memory; see Inventory.Memories).
	Mem uint32 `msgpack:"m,omitempty"`
	// DstMem is InstrCopy's destination memory.
	DstMem uint32 `msgpack:"dm,omitempty"`
	// Range and ElemSize give the buffer's extent in elements (dimension 2
	// fastest; a 1D buffer of n is {1, 1, n}) and its element size
	// (InstrAlloc).
	Range    [3]uint64 `msgpack:"r,omitempty"`
	ElemSize uint32    `msgpack:"e,omitempty"`
	// Boxes are element boxes of the buffer (Copy, Send, Recv, Upload,
	// ReadBack, Fill), at most MaxBoxes, not overlapping. Send and Recv of
	// one transfer carry the same boxes in the same order.
	Boxes []Box `msgpack:"x,omitempty"`
	// Peer is the other node of a Send (destination) or Recv (source).
	Peer string `msgpack:"p,omitempty"`
	// PeerMem is a Send's destination memory on Peer.
	PeerMem uint32 `msgpack:"pm,omitempty"`
	// PeerBoot is the boot ID of Peer's run that holds the job (what
	// Peer's JobOpened said). The node fails the Send or Recv when that
	// run is lost, and only then: news that an earlier run of Peer failed
	// or restarted does not concern it. 0: unknown, any run of Peer lost
	// fails it.
	PeerBoot uint64 `msgpack:"pb,omitempty"`
	// Ticket tags a ReadBack's pages for the client (their PageHeader.Mem).
	Ticket uint32 `msgpack:"t,omitempty"`
	// Pattern is InstrFill's byte pattern; the element size must be a
	// multiple of its length.
	Pattern []byte `msgpack:"pt,omitempty"`
	// Launch describes InstrLaunch.
	Launch *Launch `msgpack:"l,omitempty"`
}

// Launch is a kernel launch.
type Launch struct {
	// Kernel is the kernel's name in the node's registry.
	Kernel string `msgpack:"n"`
	// Device is the device to run on, as "kind:index" ("cpu:0", "cuda:1").
	Device string `msgpack:"dv"`
	// Global, Local and Offset are the ND range (device.NDRange): Local all
	// zero is a flat launch.
	Global [3]uint64 `msgpack:"g"`
	Local  [3]uint64 `msgpack:"lc,omitempty"`
	Offset [3]uint64 `msgpack:"o,omitempty"`
	Args   []KArg    `msgpack:"a,omitempty"`
	// Replay marks a launch a recovering client runs again (its first run
	// was lost with another node); the node counts these in /metrics.
	Replay bool `msgpack:"rp,omitempty"`
}

// KArg is one kernel argument. Memory arguments (Kind pointer or
// accessor) name an allocation of the job by (Buffer, Mem); the node
// substitutes the allocation's address. Kind and Space take the numeric
// values of device.ArgKind and device.AddrSpace.
type KArg struct {
	Kind   uint8  `msgpack:"k"`
	Space  uint8  `msgpack:"s,omitempty"`
	Buffer uint64 `msgpack:"b,omitempty"`
	Mem    uint32 `msgpack:"m,omitempty"`
	// Offset is a byte offset into the allocation.
	Offset       uint64    `msgpack:"o,omitempty"`
	ElemSize     uint32    `msgpack:"e,omitempty"`
	Range        [3]uint64 `msgpack:"r,omitempty"`
	AccessOffset [3]uint64 `msgpack:"ao,omitempty"`
	AccessRange  [3]uint64 `msgpack:"ar,omitempty"`
	ReadOnly     bool      `msgpack:"ro,omitempty"`
	LocalBytes   uint64    `msgpack:"lb,omitempty"`
	Scalar       []byte    `msgpack:"v,omitempty"`
}

// MaxBatch bounds the instructions of one Submit.
const MaxBatch = 4096

// MaxDeps bounds the dependencies of one instruction.
const MaxDeps = 1024

// MaxKernelArgs bounds the arguments of one Launch.
const MaxKernelArgs = 256

// MaxLaunchItems bounds the work items of one Launch (the product of its
// global range): 2^48, hours of any device's time.
const MaxLaunchItems = 1 << 48

// Submit is a batch of instructions for one job.
type Submit struct {
	Job    uint64  `msgpack:"j"`
	Instrs []Instr `msgpack:"is"`
	// Forget promises that no later instruction or Wait names a finished
	// instruction with an ID below it: the node drops their records, so a
	// long job does not grow the node's memory. 0 forgets nothing.
	Forget uint64 `msgpack:"fg,omitempty"`
}

// Submitted is the reply to MsgSubmit: the whole batch was accepted.
type Submitted struct {
	// Pending is the number of the job's instructions not yet finished.
	Pending int `msgpack:"p"`
}

// Wait asks for instructions to finish. The node replies when all of IDs
// have finished (done or failed), or when the request's deadline is near,
// with what is known then.
type Wait struct {
	Job uint64   `msgpack:"j"`
	IDs []uint64 `msgpack:"is"`
}

// WaitResult lists the outcome of waited-for instructions.
type WaitResult struct {
	// Done lists the instructions that completed successfully.
	Done []uint64 `msgpack:"d,omitempty"`
	// Failed lists those that failed, with why.
	Failed []InstrError `msgpack:"f,omitempty"`
	// Pending lists those still running or waiting.
	Pending []uint64 `msgpack:"p,omitempty"`
}

// InstrError is a failed instruction.
type InstrError struct {
	ID uint64 `msgpack:"i"`
	// Code classifies the failure (node loss, memory limit, ...).
	Code ErrorCode `msgpack:"c"`
	// Node names the node whose loss caused the failure, if one did.
	Node    string `msgpack:"n,omitempty"`
	Message string `msgpack:"m"`
}

// Failure codes of InstrError (application codes).
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	// CodeNodeLost: a peer the instruction depended on failed or left.
	CodeNodeLost ErrorCode = CodeFirstApp + 100 + iota
	// CodeMemoryLimit: an allocation exceeded the job's or the node's
	// memory limit.
	CodeMemoryLimit
	// CodeDepFailed: a dependency failed, so the instruction never ran.
	CodeDepFailed
	// CodeDevice: the device refused or failed the work.
	CodeDevice
	// CodeJobClosed: the job was closed (by its client, its lease ran out,
	// or the node drained) before the instruction finished.
	CodeJobClosed
	// CodeTransfer: a page transfer failed or its receiver refused it (no
	// such job or allocation there, wrong sizes, a broken connection).
	CodeTransfer
)

// EventsRequest reads the job's completion feed: every instruction that
// finished, in the order they finished, numbered from 1. After
// acknowledges every event up to it (the node forgets them); the reply
// holds the events after it, waiting for at least one until the request's
// deadline is near.
type EventsRequest struct {
	Job   uint64 `msgpack:"j"`
	After uint64 `msgpack:"a"`
	// Max bounds the events of one reply (0: 1024).
	Max int `msgpack:"mx,omitempty"`
}

// EventsReply carries completion events.
type EventsReply struct {
	Events []Event `msgpack:"e,omitempty"`
}

// Event is one finished instruction. Err is nil when it succeeded.
type Event struct {
	Seq uint64      `msgpack:"s"`
	ID  uint64      `msgpack:"i"`
	Err *InstrError `msgpack:"x,omitempty"`
	// Start and End are when the instruction started (its dependencies
	// had completed and it went to a device or the network; for a Recv or
	// Upload, when it was armed) and when it finished, in Unix nanoseconds
	// of the node's clock. Zero when unknown (an instruction that failed
	// before it started). They feed traces and the coordinator's kernel
	// time estimates; clocks of different hosts are only as close as
	// their time synchronisation.
	Start int64 `msgpack:"ts,omitempty"`
	End   int64 `msgpack:"te,omitempty"`
}

// Inventory is a node's device inventory and load (the full version of the
// device summary it gossips).
type Inventory struct {
	Node     string      `msgpack:"n"`
	Devices  []DeviceInv `msgpack:"d"`
	Memories []MemoryInv `msgpack:"m"`
	// Jobs is the number of open jobs; Allocated the bytes they hold.
	Jobs      int    `msgpack:"j"`
	Allocated uint64 `msgpack:"a"`
	// MaxBytes and MaxJobBytes are the node's memory limits (0: none).
	MaxBytes    uint64   `msgpack:"mb,omitempty"`
	MaxJobBytes uint64   `msgpack:"mj,omitempty"`
	Kernels     []string `msgpack:"k,omitempty"`
	Draining    bool     `msgpack:"dr,omitempty"`
	// Lost lists devices lost while the node runs ("cuda:0: why"), left
	// out of Devices and Memories: a GPU whose context a faulting kernel
	// made unusable until the node restarts.
	Lost []string `msgpack:"lo,omitempty"`
	// KernelDecls declare the kernels of Kernels: their parameters and the
	// forms the node has, so that a client places a group only on devices
	// whose node has a form for their backend, refuses a kernel declared
	// otherwise than in the client, and lets a job name a node's own
	// kernel. Nodes before 2026-11-25 send names only.
	KernelDecls []KernelDecl `msgpack:"kd,omitempty"`
	// JobList describes each open job (sorted by ID) that the asker may
	// see: an operator (and a node) sees every job, a client only its
	// own, and then OwnJobsOnly is set. Jobs and Allocated count every
	// job either way (the node's load, without whose jobs they are).
	JobList     []JobInv `msgpack:"jl,omitempty"`
	OwnJobsOnly bool     `msgpack:"oj,omitempty"`
}

// KernelDecl is one kernel a node has: its declaration and the forms of
// its implementations ("go" for CPU devices, "ptx" for CUDA devices: PTX
// or CUDA C).
type KernelDecl struct {
	Name   string        `msgpack:"n"`
	Params []KernelParam `msgpack:"p,omitempty"`
	Forms  []string      `msgpack:"f,omitempty"`
}

// JobInv is one open job of a node, for status tables.
type JobInv struct {
	ID uint64 `msgpack:"i"`
	// Client is the owner's identity name.
	Client string `msgpack:"c"`
	// Bytes are the bytes it holds (allocations and staged arrivals);
	// Allocs its allocations.
	Bytes  uint64 `msgpack:"b"`
	Allocs int    `msgpack:"a"`
	// Pending are its instructions not finished, Running those running
	// now, Known those the node still remembers (finished ones until the
	// coordinator lets it forget them).
	Pending int `msgpack:"p"`
	Running int `msgpack:"r"`
	Known   int `msgpack:"k"`
}

// Members is the cluster membership as one node sees it (MsgMembers).
type Members struct {
	// Node is the node that answered.
	Node string `msgpack:"n"`
	// Members are sorted by name; failed and departed members are listed
	// too, with their state.
	Members []Member `msgpack:"m"`
}

// Member is one cluster member.
type Member struct {
	Name string `msgpack:"n"`
	// State is "alive", "left" or "failed"; Leaving marks an alive member
	// that drains (no new work).
	State   string `msgpack:"s"`
	Leaving bool   `msgpack:"l,omitempty"`
	// QUICAddr is where clients and peers reach it (host:port); empty when
	// its metadata could not be read.
	QUICAddr   string `msgpack:"q,omitempty"`
	GossipAddr string `msgpack:"g,omitempty"`
	// Devices summarise its devices per kind.
	Devices []DeviceSummary `msgpack:"d,omitempty"`
	// Boot is the boot ID of the run this record is of (JobOpened.Boot):
	// a "failed" record of an earlier run of a node says nothing of the
	// run a job was opened on since. 0: unknown.
	Boot uint64 `msgpack:"b,omitempty"`
}

// DeviceSummary is one device kind of a member (the gossiped summary).
type DeviceSummary struct {
	Kind     string `msgpack:"k"`
	Count    uint32 `msgpack:"c"`
	MemBytes uint64 `msgpack:"b,omitempty"`
	Unified  bool   `msgpack:"u,omitempty"`
}

// DeviceInv is one device of a node.
type DeviceInv struct {
	// ID is "kind:index" ("cpu:0").
	ID          string `msgpack:"i"`
	Name        string `msgpack:"n"`
	HostUnified bool   `msgpack:"u,omitempty"`
	MemBytes    uint64 `msgpack:"mb,omitempty"`
	Queues      int    `msgpack:"q,omitempty"`
	// Mem is the memory its kernels use (0: host memory).
	Mem uint32 `msgpack:"m"`
	// Forms lists the kernel forms it runs ("go", "ptx").
	Forms []string `msgpack:"f,omitempty"`
}

// MemoryInv is one physical memory of a node, the unit of allocation
// (coherence.MemID).
type MemoryInv struct {
	ID uint32 `msgpack:"i"`
	// Device is the device that allocates it ("cpu:0" for host memory).
	Device string `msgpack:"d"`
	Host   bool   `msgpack:"h,omitempty"`
	// Bytes is its size (0: unknown).
	Bytes uint64 `msgpack:"b,omitempty"`
	// Budget is what jobs may allocate in it together (0: no budget; see
	// acpp-node --max-bytes); Used what they hold now, staging included.
	Budget uint64 `msgpack:"bg,omitempty"`
	Used   uint64 `msgpack:"u,omitempty"`
}

// Validate checks the fields an instruction of its kind needs, and the
// bounds that keep the node safe from a malformed batch. It wraps
// ErrMalformed and names the instruction and the field.
func (in *Instr) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: instruction %d (%v): %s", ErrMalformed, in.ID, in.Kind, fmt.Sprintf(format, a...))
	}
	if in.ID == 0 {
		return bad("ID 0 is reserved; number instructions from 1")
	}
	if len(in.Deps) > MaxDeps {
		return bad("%d dependencies, at most %d", len(in.Deps), MaxDeps)
	}
	for _, d := range in.Deps {
		if d == in.ID {
			return bad("depends on itself")
		}
	}
	needBoxes := func(optional bool) error {
		if len(in.Boxes) == 0 && !optional {
			return bad("no boxes")
		}
		if len(in.Boxes) > MaxBoxes {
			return bad("%d boxes, at most %d; split it", len(in.Boxes), MaxBoxes)
		}
		for i, b := range in.Boxes {
			if n, ok := b.Elems(); !ok || n == 0 {
				return bad("box %d %v..%v is empty or inverted", i, b.Lo, b.Hi)
			}
			for j := range i {
				if b.Overlaps(in.Boxes[j]) {
					return bad("boxes %d and %d overlap", j, i)
				}
			}
		}
		return nil
	}
	switch in.Kind {
	case InstrAlloc:
		if in.ElemSize == 0 {
			return bad("ElemSize 0")
		}
		n, ok := (Box{Hi: in.Range}).Elems()
		if !ok || n == 0 || n > (1<<62)/uint64(in.ElemSize) {
			return bad("range %v × %d bytes is empty or too large", in.Range, in.ElemSize)
		}
	case InstrFree:
	case InstrCopy, InstrRecv, InstrUpload, InstrReadBack:
		if err := needBoxes(false); err != nil {
			return err
		}
		if (in.Kind == InstrRecv) && in.Peer == "" {
			return bad("no Peer")
		}
	case InstrSend:
		if err := needBoxes(false); err != nil {
			return err
		}
		if in.Peer == "" {
			return bad("no Peer")
		}
	case InstrFill:
		if err := needBoxes(true); err != nil {
			return err
		}
		if len(in.Pattern) == 0 || len(in.Pattern) > 64 {
			return bad("pattern of %d bytes; give 1 to 64", len(in.Pattern))
		}
	case InstrLaunch:
		if in.Launch == nil || in.Launch.Kernel == "" || in.Launch.Device == "" {
			return bad("no Launch, kernel name or device")
		}
		if len(in.Launch.Args) > MaxKernelArgs {
			return bad("%d kernel arguments, at most %d", len(in.Launch.Args), MaxKernelArgs)
		}
		for d := range 3 {
			if in.Launch.Global[d] > 1<<40 || in.Launch.Local[d] > 1<<20 || in.Launch.Offset[d] > 1<<40 {
				return bad("ND range %v/%v/%v out of bounds", in.Launch.Global, in.Launch.Local, in.Launch.Offset)
			}
		}
		// Each extent is bounded, their product was not: 2^120 items
		// overflowed the device's count and the launch "succeeded" having
		// run nothing.
		if n, ok := (Box{Hi: in.Launch.Global}).Elems(); !ok || n > MaxLaunchItems {
			return bad("global range %v is more than %d work items", in.Launch.Global, uint64(MaxLaunchItems))
		}
	default:
		return bad("unknown kind; this node speaks kinds 1..%d (upgrade it?)", len(InstrKinds))
	}
	return nil
}
