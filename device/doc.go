// Package device is the narrow interface between the acpp runtime and its
// backends (cpu/, cuda/, and the fakes in devicetest/), plus the kernel
// registry and the address-space rules that both sides share.
//
// A backend exposes each of its devices as a [Device]: identity and kind
// ([Info]), what it can do ([Capabilities]), full-size allocations with
// stable addresses ([Device.Alloc], B1, B2), and asynchronous work
// ([Device.Enqueue]): 3D box copies ([CopyOp], one page box = one backend
// call, T4), fills ([FillOp]) and kernel launches ([LaunchOp]). Kernels are
// named and registered once ([Register]) with one implementation per backend:
// a Go function for the CPU, a PTX module and entry point for CUDA. Their
// parameters are declared with an address space ([AddrSpace], A1) and every
// launch is checked against the declaration ([ValidateArgs], A2).
//
// # Usage
//
//	d := devs[0] // from a backend's Open, or devicetest.NewFake
//	m, err := d.Alloc(device.MemDevice, 1<<20)
//	...
//	err = d.Enqueue(0, device.FillOp{Dst: m, Bytes: m.Bytes, Pattern: []byte{0}},
//		func(err error) { /* on a device goroutine; must not block */ })
//
// # Who calls what
//
// The runtime's executor is the only caller of a Device. Info and
// Capabilities are fixed at Open ("fingerprinted") and may be read from any
// goroutine. Alloc and Free may block (a driver call) and are called from the
// goroutine that dispatches a command group, never while the executor holds a
// lock. Enqueue must not block on the work itself: it validates the op,
// queues it (without a bound that could make it wait) and returns. The
// executor calls Enqueue from its callers' goroutines and from done callbacks
// of any device, this one included. The device calls done exactly once, from
// a goroutine it owns, when the op finished or failed. done must not block:
// the executor records the result and enqueues follow-up work (never waiting
// for it). Ops passed to Enqueue are independent: a device may run them in any
// order and concurrently (D4); the executor orders dependent ops by waiting
// for done, except on a device that implements InOrderQueuer and says yes,
// which promises Enqueue order within one queue (the executor then issues a
// dependent group ahead, behind its dependencies). The queue index is a hint
// for spreading independent work over streams.
//
// # Errors
//
// Enqueue returns an error (and never calls done) when the op is malformed
// or unsupported: ErrBadOp (a box, fill or range that does not fit, the
// message naming the field), ErrUnsupported, ErrNoImplementation, ErrBadArg
// (an *ArgError naming the kernel argument that does not match its
// declaration, or the kernel's own Check refusing the launch), or ErrClosed
// after Close. Failures while the op runs, including panics in CPU kernels
// (ErrKernelPanic), arrive through done.
package device
