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
