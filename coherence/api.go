package coherence

// This file is the contract between coherence and its callers (the embedded
// runtime in the root package, the cluster coordinator). Callers use only the
// names declared here; everything else in the package is machinery.

import "errors"

// Dims is a 3D extent or index. Dimension 2 varies fastest in memory
// (row-major, like SYCL's last dimension). A 1D range n is {1, 1, n}; a 2D
// range (rows, cols) is {1, rows, cols}.
type Dims [3]int

// Box is a half-open 3D box [Lo, Hi), of elements or of pages depending on
// where it is used (page boxes unless a name says otherwise).
type Box struct{ Lo, Hi Dims }

// NodeID names a node of the cluster; the embedded runtime is node 0.
type NodeID uint32

// MemID names one physical memory on a node. HostMem is the node's host
// memory; every device that shares physical memory with the host (CPU
// devices, host-unified GPUs: L2, L3) uses HostMem, so it shares the host
// allocation (B4).
type MemID uint32

// HostMem is the MemID of a node's host memory.
const HostMem MemID = 0

// AllocID identifies one allocation of a buffer: the buffer's storage in one
// physical memory of one node.
type AllocID struct {
	Node NodeID
	Mem  MemID
}

// BufferID names a buffer; the caller picks it and must not reuse it while the
// buffer exists.
type BufferID uint64

// CGID names a command group. IDs must be passed to Submit in strictly
// increasing order: the order of IDs is the submission order (D3).
type CGID uint64

// Mode is an access mode.
type Mode uint8

// Access modes. Read is the only read-only mode.
const (
	Read Mode = iota + 1
	Write
	ReadWrite
	// Reduce reads and updates in place with an associative, commutative
	// operator (Access.Op). Reductions with the same operator on the same
	// allocation do not conflict with each other (they run concurrently,
	// e.g. with atomics); everything else conflicts with them as with
	// ReadWrite.
	Reduce
	// Release is internal to Core.Release; callers never pass it.
	release
)

// ReduceOp names a reduction operator; only equality matters.
type ReduceOp uint32

// Access is one accessor of a command group, already mapped to pages.
type Access struct {
	Buffer BufferID
	// Pages is the accessor's page range (Geometry.PageRange or
	// Geometry.ViewPageRange).
	Pages Box
	Mode  Mode
	// Op is the reduction operator, with Mode == Reduce.
	Op ReduceOp
	// Discard (no_init) accessors never cause a transfer (T1). Only a
	// mode that writes may discard: Read with Discard fails with
	// ErrBadAccess.
	Discard bool
	// Target is the allocation the kernel uses: the memory of the device it
	// runs on, or the host allocation for a host accessor.
	Target AllocID
}

// CommandGroup is a unit of work: a kernel (or copy, fill, host access) with
// the accessors it declared.
type CommandGroup struct {
	ID       CGID
	Accesses []Access
}

// Step is what the caller must do to run a command group, in this order: wait
// for Deps, create the allocations in Allocate, run Copies (in any order; they
// touch disjoint pages of their destinations), run the work, free the
// allocations in Free (Release only). All slices are sorted deterministically.
type Step struct {
	ID CGID
	// Deps are earlier, incomplete command groups that must complete first:
	// those this group conflicts with (D1, D3: a read waits for the last
	// writer, a write for the readers since), and those whose copies are
	// still bringing in pages this group relies on (on its target, or on a
	// copy source); for a Release also every incomplete group that uses
	// the allocation it frees, and the one whose Allocate creates the host
	// allocation it evacuates to. Edges implied by others are dropped where
	// cheap. Never a completed group. An allocation still being made is no
	// reason for an edge (D4): see Allocate.
	Deps []CGID
	// Allocate lists the allocations this group's accesses use that may not
	// exist when it runs: those it uses first (B5), and those an incomplete
	// group listed first that none of Deps has used. Several groups that do
	// not depend on each other may list the same allocation; the caller
	// makes each one once, by whichever of them runs first, and the others
	// use it (allocating is idempotent, under the caller's own lock).
	Allocate []Allocation
	Copies   []Copy
	Free     []Allocation
	// Lost lists pages this group needs that have no valid copy left anywhere
	// (their last copies were on lost nodes, C5). When it is non-empty the
	// group cannot run; Submit also returns an error wrapping ErrLostPages.
	Lost []LostPages
}

// Allocation is a buffer's allocation in one memory; it always has the full
// buffer size (B1).
type Allocation struct {
	Buffer BufferID
	Alloc  AllocID
	Bytes  int
}

// Copy moves page boxes of one buffer from one allocation to another. Each box
// is meant to be one backend transfer (T4).
type Copy struct {
	Buffer   BufferID
	Src, Dst AllocID
	Boxes    []Box
	Pages    int // total pages in Boxes
}

// LostPages are pages of a buffer with no valid copy left.
type LostPages struct {
	Buffer BufferID
	Boxes  []Box
	Nodes  []NodeID // the lost nodes that held the last copies, where known
}

// CostModel ranks copy sources: the planner takes each page from the valid
// copy with the lowest cost to the destination. Implementations must be
// deterministic.
type CostModel interface {
	Cost(src, dst AllocID) int
}

// Config configures a Core. The zero value is ready to use.
type Config struct {
	// Cost ranks sources; nil means DefaultCost.
	Cost CostModel
}

// BufferSpec describes a new buffer.
type BufferSpec struct {
	ID       BufferID
	Geometry Geometry
	// HostData, when set, is an allocation that already holds the buffer's
	// initial contents (the host allocation made by the constructor, or the
	// user's own memory, L1): it exists, and every page is up to date there.
	// When nil, the buffer holds no initialised data (T2).
	HostData *AllocID
}

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrUnknownBuffer: a call named a buffer that AddBuffer did not add or
	// that was removed.
	ErrUnknownBuffer = errors.New("coherence: unknown buffer")
	// ErrBufferExists: AddBuffer named a buffer ID that is already in use.
	ErrBufferExists = errors.New("coherence: buffer already exists")
	// ErrOutOfRange: a page box or element range lies outside the buffer.
	ErrOutOfRange = errors.New("coherence: range outside the buffer")
	// ErrBadGeometry: a geometry has a zero or negative extent, element size
	// or page size, a byte size that overflows int, or more than MaxPages
	// pages; or a Geometry not built by NewGeometry was used.
	ErrBadGeometry = errors.New("coherence: invalid buffer geometry")
	// ErrOrder: command group IDs were not strictly increasing.
	ErrOrder = errors.New("coherence: command group IDs out of order")
	// ErrLostPages: a command group needs pages that have no valid copy left.
	ErrLostPages = errors.New("coherence: pages have no valid copy left")
	// ErrBadAccess: an access has an invalid mode, or is a Read with
	// Discard.
	ErrBadAccess = errors.New("coherence: invalid access")
	// ErrTooManyAllocations: a buffer would have more allocations than its
	// page states can track (255); release some with Core.Release.
	ErrTooManyAllocations = errors.New("coherence: too many allocations for one buffer")
	// ErrNoAllocation: Release named an allocation the buffer does not have.
	ErrNoAllocation = errors.New("coherence: no such allocation")
	// ErrLastCopy: Release of a host allocation that holds the only valid
	// copy of some pages; there is nowhere to evacuate them.
	ErrLastCopy = errors.New("coherence: allocation holds the only valid copy")
)
