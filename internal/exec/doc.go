// Package exec is the embedded runtime's executor: it owns the coherence
// core, turns each command group's plan into a node of a DAG, and runs nodes
// on devices through the device interface as soon as their dependencies have
// completed.
//
// A node runs in three phases: wait for its Deps (coherence's conflict and
// producer edges, plus explicit event dependencies), run the page copies
// coherence planned (one CopyOp per page box, T4, on the device that owns the
// non-host end), then run its work (device ops, or a host task such as a host
// accessor). Independent nodes run concurrently, also on the same device
// (D4). Allocations are made on first use (B5) and kept until the buffer is
// removed or the user releases them (B1, B2). Devices that share the host's
// memory use the host allocation (L2, L3): there is one host allocation per
// buffer, shared by all CPU devices (B4), and it never needs a copy to or
// from them.
//
// # Concurrency
//
// A Runtime is safe for concurrent use. mu guards the coherence core and the
// DAG; it is never held across a device call. Nodes are dispatched on the
// goroutine that made them ready: the submitter, or the device goroutine
// whose done callback completed the last dependency, so a chain of dependent
// groups on the CPU runs without goroutine hand-offs.
//
// # Errors
//
// A failed copy or op fails its node; the error is on the node and in the
// runtime's list of asynchronous errors (TakeErrors). Later nodes still run
// (as in SYCL, a failure does not poison the queue).
package exec
