package proto

import "fmt"

// PageRef lets a transfer between two processes of one host skip the
// network: the sender exports its device allocation (CUDA IPC), the
// receiver maps it, copies the boxes device to device, and only then
// acknowledges, so the sender's pages stay untouched until they are
// copied. A receiver that cannot map it (another host, the same process,
// no such backend) refuses with CodeNoPageRef and the sender sends the
// bytes instead.
type PageRef struct {
	// Host identifies the sender's host (Linux: the kernel's boot ID); a
	// receiver on another host refuses.
	Host string `msgpack:"h"`
	// PID is the sender's process: a receiver in the same process refuses
	// (a CUDA IPC handle cannot be opened by its own process).
	PID int `msgpack:"p"`
	// Handle is the backend's export of the allocation (CUDA: a 64-byte
	// cuIpcMemHandle).
	Handle []byte `msgpack:"k"`
	// Bytes is the size of the exported allocation; the receiver's
	// allocation of the buffer has the same size (B1).
	Bytes uint64 `msgpack:"b"`
	// Alloc tells the sender's allocations apart: a freed allocation's
	// handle may come back for a new one at the same address, and the
	// receiver keeps its mappings by (sender, handle, Alloc).
	Alloc uint64 `msgpack:"a,omitempty"`
}

// Bounds of a PageRef.
const (
	MaxPageRefHandle = 256
	MaxPageRefHost   = 64
)

// CodeNoPageRef: the receiver cannot map memory by reference for this
// transfer; send the bytes. (Application code; never renumber.)
const CodeNoPageRef ErrorCode = CodeFirstApp + 300

// Validate checks the reference's fields.
func (r *PageRef) Validate() error {
	switch {
	case r.Host == "" || len(r.Host) > MaxPageRefHost:
		return fmt.Errorf("%w: page reference host ID of %d bytes (1 to %d)", ErrMalformed, len(r.Host), MaxPageRefHost)
	case len(r.Handle) == 0 || len(r.Handle) > MaxPageRefHandle:
		return fmt.Errorf("%w: page reference handle of %d bytes (1 to %d)", ErrMalformed, len(r.Handle), MaxPageRefHandle)
	case r.Bytes == 0:
		return fmt.Errorf("%w: page reference to an empty allocation", ErrMalformed)
	case r.PID <= 0:
		return fmt.Errorf("%w: page reference from process %d", ErrMalformed, r.PID)
	}
	return nil
}

// Messages of pages by reference, node to node.
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	// MsgUnmapRef asks a node to unmap allocations of the sending node
	// that it mapped for pages by reference, before the sender frees
	// them (CUDA leaves freeing exported memory that another process
	// still has open undefined): body [UnmapRef], reply [UnmapRefDone].
	MsgUnmapRef MsgType = MsgFirstApp + 32 + iota
)

func init() {
	appNames[MsgUnmapRef] = "MsgUnmapRef"
}

// MaxUnmapAllocs bounds the allocations of one MsgUnmapRef request.
const MaxUnmapAllocs = 4096

// UnmapRef names allocations of the sender (PageRef.Alloc) in one job.
type UnmapRef struct {
	Job    uint64   `msgpack:"j"`
	Allocs []uint64 `msgpack:"a"`
}

// Validate checks the request's size.
func (r *UnmapRef) Validate() error {
	if len(r.Allocs) == 0 || len(r.Allocs) > MaxUnmapAllocs {
		return fmt.Errorf("%w: unmap request for %d allocations (1 to %d)", ErrMalformed, len(r.Allocs), MaxUnmapAllocs)
	}
	return nil
}

// UnmapRefDone is the reply to MsgUnmapRef: the mappings closed. The
// receiver answers after closing them; an allocation it never mapped, or
// whose job it no longer has, counts nothing.
type UnmapRefDone struct {
	Unmapped int `msgpack:"u"`
}
