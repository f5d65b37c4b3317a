package device

// ModuleUnloader is implemented by devices that load kernel modules (PTX)
// on their first launch and keep them loaded, keyed by the identity of the
// module's bytes: the address of Kernel.PTX.Module's first byte and its
// length (the CUDA backend does). The CPU backend loads nothing and does
// not implement it; a caller asserts the interface and skips devices
// without it.
//
// UnloadModule makes the device forget the module it loaded from exactly
// that slice (same data pointer, same length): its handle and the entry
// points taken from it are released. A slice with the same contents at
// another address is another module and stays. A module the device never
// loaded is a no-op with a nil error. Once it returns, a launch from that
// slice loads the module again.
//
// The caller guarantees that no op launching a kernel from module is still
// queued or running on the device, and that none is enqueued until
// UnloadModule returns: unloading does not wait for them (the CUDA driver
// API reference for cuModuleUnload promises no synchronisation and makes
// any later use of the unloaded handle undefined behaviour). The node
// calls it when the last job that shipped the module has closed and its
// instructions have all finished (node/kernels.go).
//
// It may block until the device's owner goroutine has done it, so it must
// not be called from an op's done callback. It is safe for concurrent use
// with other methods. After Close it returns an error wrapping ErrClosed:
// the device's modules went with it.
type ModuleUnloader interface {
	UnloadModule(module []byte) error
}

// KernelPreparer is implemented by devices that turn a kernel into what
// they run before its first launch: the CUDA backend compiles a kernel
// given as CUDA C source (Kernel.CUDA) with NVRTC for its GPU, from its
// disk cache when it can, and checks the entry against Kernel.Params.
// PrepareKernel returns the compiler's error (with file:line of the
// source) or nil; it keeps nothing (a launch compiles again, from the
// cache), so a caller may prepare a kernel it then drops. A node prepares
// the CUDA C kernels a job ships when they are registered, so that their
// errors reach the client then, not at the first launch. Kernels that
// need no preparing return nil. It runs on the caller's goroutine and may
// take as long as a compilation.
type KernelPreparer interface {
	PrepareKernel(k *Kernel) error
}

// InOrderQueuer is implemented by devices whose queues run ops in the
// order they were enqueued, as a CUDA stream does. The executor then
// enqueues a command group whose dependencies are all on one such queue
// right away, instead of waiting for them to complete ("issue-ahead",
// docs/RUNTIME.md): the queue's order gives the dependency, and the
// host round trip per dependent group goes.
//
// InOrderQueues reports whether the promise holds; it never changes. The
// promise covers launches, fills of the device's own memory that the host
// cannot see (Mem.Host nil), and copies between the device's own memory
// and host memory: such ops enqueued on one queue index (modulo
// Capabilities.Queues) start only after the ones enqueued on it before
// have finished (their done calls may still come in any order). Other ops
// (fills the host does, copies that involve another device) need not keep
// the order; the executor never issues them ahead. The CPU backend, whose
// workers run independent ops concurrently, does not implement it.
type InOrderQueuer interface {
	InOrderQueues() bool
}
