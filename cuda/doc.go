// Package cuda is the CUDA backend: it drives NVIDIA GPUs through the driver
// API (package cuda/driver, loaded at run time, no cgo) and exposes each GPU
// as a device.Device. Importing the package registers the backend
// (device.RegisterBackend), so a runtime that opens its backends finds the
// machine's GPUs; a machine without a driver or a GPU simply has none.
//
// # Usage
//
//	devs, err := cuda.Open(ctx, cuda.Config{Logger: log}) // zero devices without a driver, nil error
//	d := devs[0]
//	m, _ := d.Alloc(device.MemDevice, 1<<20)
//	_ = d.Enqueue(0, device.CopyOp{...}, func(err error) { ... })
//	defer d.Close()
//
// # Kernels
//
// Named kernels run from PTX (device.Kernel.PTX) or from CUDA C source
// (device.Kernel.CUDA): the first launch of a source kernel on a device
// compiles it with NVRTC (package cuda/nvrtc) for that GPU's compute
// capability, on the launching goroutine, through NVRTC's disk cache
// (Config.NVRTC), and the device keeps the PTX until UnloadModule is
// called with the source's bytes. PrepareKernel compiles and checks ahead
// of a launch (a node does it when a job ships the kernel). Without
// libnvrtc a source kernel's launch fails with nvrtc.ErrNoNVRTC; PTX
// kernels never load NVRTC.
//
// # Concurrency
//
// A CUDA context is current per OS thread. Each Device has one owner
// goroutine that is the only caller of the driver for that device's work:
// Enqueue, Alloc, Free and Do hand it tasks through an unbounded queue
// (Enqueue never blocks; the owner takes everything queued at each wake-up,
// which batches pipelined submissions). While it talks to the driver the
// owner is locked to its OS thread with the device's context current
// (cuCtxSetCurrent each time it locks); while it waits for work it is an
// ordinary goroutine, which makes waking it several times cheaper than
// waking a goroutine locked to a sleeping thread. The owner spreads ops over Config.Streams streams by the
// queue hint (D4). Completion is reported by a second goroutine per device,
// the completer, by one of four strategies (Config.Completion, or the
// environment variable ACPP_CUDA_COMPLETION when that is left zero):
// polling CUDA events, sleeping an eighth of the time the newest pending
// batch has waited between rounds (default; measured best, see
// docs/CUDA.md), a blocking-sync event wait, a driver host-function
// callback, or spinning (CompletionSpin: the completer queries back to
// back, and waiters spin before they park, device.SpinWaiter). Either way
// one CUDA event (or callback) covers every op the
// owner issued on one stream in one batch, and done is called from the
// completer goroutine, never from the caller's. Close stops both goroutines
// after the work queued before it has finished.
//
// Copies between two GPUs go peer to peer (cuMemcpy3DPeerAsync) when the
// driver allows it, else through pinned host memory: the source's owner
// copies the box out and hands the destination's owner an event to wait
// for, so no owner ever blocks on another.
//
// # Memory
//
// device.MemDevice is cuMemAlloc (full size, fixed address: B1, B2), or, on a
// GPU that shares memory with the host (integrated, or host page tables:
// L2, L3), mapped pinned host memory that the host can read without copies.
// device.MemHost is pinned, mapped, portable host memory (cuMemHostAlloc).
// device.MemShared is managed memory, refused with device.ErrOutOfMemory
// when it does not fit into the free device memory less
// Config.ManagedReserve (a larger managed allocation can hang the GPU).
//
// # Configuration
//
// Config's zero value is ready to use; Open refuses an invalid one with an
// error matching ErrConfig that names every bad field. Two environment
// variables, read by Open, choose for devices that acpp.NewQueue opens
// (which passes a zero Config): ACPP_CUDA_COMPLETION (poll,
// blocking-sync, callback or spin; used where Config.Completion is left
// zero) and ACPP_CUDA_GRAPHS=0 (Config.NoGraphs). Any other value of
// either fails Open with ErrConfig, also on a machine without a GPU.
//
// # Errors
//
// Enqueue refuses malformed ops at once: device.ErrBadOp, device.ErrUnsupported,
// *device.ArgError naming the kernel argument (A2), kernels.ErrLayout when a
// PTX entry does not take the declared arguments. Driver failures carry the
// driver's error name and the call (*driver.Error); allocation failures also
// match device.ErrOutOfMemory. A kernel that faults (an illegal address,
// ...) loses the process's CUDA state for good: the op fails with an error
// matching device.ErrDeviceLost and driver.ErrContextLost, the device
// reports itself lost (Device.Lost, device.Health) and refuses every later
// use at once; restart the process to use the GPU again.
package cuda
