// Package cpu is the CPU backend: devices that run Go kernels on a pool of
// worker goroutines over host memory.
//
// Every CPU device shares the host's physical memory: its allocations are
// ordinary (8-byte aligned, pointer-free) Go memory that never moves, and it
// reports Capabilities.HostUnified so the runtime links its buffer
// allocations to the host allocation (L2, L3) and several CPU devices share
// one allocation (B4).
//
// A flat launch is split into chunks along its slowest non-trivial dimension
// (a few per worker, so uneven chunks balance out); workers claim chunks with
// one atomic add. A grouped launch runs each work-group on one worker, with
// its own local memory (A3), at most LocalMemBytes (1 MiB) per work-group;
// a kernel's phases over the group's items are separated by barriers
// simply by running one after the other.
//
// A fill of 2 MiB or more runs in chunks of at least 1 MiB of whole
// patterns, one per worker at most (so every worker joins from
// Workers MiB on). From 4 MiB on,
// where the machine has AVX (amd64), each chunk streams a 4 KiB block of
// the pattern over its part with non-temporal stores, as memclr does for
// big clears: any pattern fills at memclr's speed (BenchmarkFill). A
// chunk of memory mostly fresh from the kernel (mincore) is written with
// cached stores instead, which is faster there (BenchmarkFillFresh).
//
// # Usage
//
//	devs, err := cpu.Open(ctx, device.OpenConfig{})
//	defer devs[0].Close()
//
// # Concurrency
//
// Each device owns Workers goroutines, started by Open and stopped by Close.
// Ops run concurrently, also ops of independent command groups (D4); done
// callbacks run on a worker goroutine, so a callback that enqueues follow-up
// work has it picked up by the same worker without a wake-up.
//
// # Errors
//
// A panic in a kernel fails that launch with an error wrapping
// device.ErrKernelPanic; the worker and the device carry on. So does a
// kernel that calls runtime.Goexit (t.Fatal in a kernel): the error names
// Goexit, and a new worker replaces the one that exited.
package cpu
