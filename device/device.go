package device

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
)

// Kind is the kind of a device.
type Kind uint8

// Device kinds. Append only: the values travel in cluster device
// advertisements.
const (
	KindCPU Kind = iota + 1
	KindCUDA
	// KindFake is the in-memory test device of devicetest.
	KindFake
)

func (k Kind) String() string {
	switch k {
	case KindCPU:
		return "cpu"
	case KindCUDA:
		return "cuda"
	case KindFake:
		return "fake"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind parses the names String returns.
func ParseKind(s string) (Kind, error) {
	for _, k := range []Kind{KindCPU, KindCUDA, KindFake} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("device: unknown device kind %q; use cpu or cuda", s)
}

// ID names one device of a process: its kind and its index among the devices
// of that kind (cpu:0, cuda:1).
type ID struct {
	Kind  Kind
	Index int
}

func (id ID) String() string { return id.Kind.String() + ":" + strconv.Itoa(id.Index) }

// LogValue logs an ID as its string ("cpu:0"), with JSON logs too (which
// would otherwise show {"Kind":1,"Index":0}).
func (id ID) LogValue() slog.Value { return slog.StringValue(id.String()) }

// Capabilities say what a device can do. They are fixed when the device is
// opened.
type Capabilities struct {
	// HostUnified: the device shares physical memory with the host (CPU
	// devices, integrated or host-coherent GPUs). Its buffer allocations are
	// linked to the host allocation: no second allocation, no copies (L2, L3).
	HostUnified bool
	// Queues is the number of independent queues (CUDA streams, CPU workers)
	// over which the device can run independent ops concurrently; at least 1.
	Queues int
	// LocalMemBytes is the work-group local memory available to one group
	// (A3); 0 means the device has no local memory limit of its own.
	LocalMemBytes int
	// MaxGroupSize is the largest number of work-items in one work-group; 0
	// means no limit.
	MaxGroupSize int
	// MemBytes is the device's memory size; 0 means unknown.
	MemBytes int64
	// USMKinds lists the USM kinds Alloc supports.
	USMKinds []MemKind
	// KernelForms says which kernel implementations the device runs:
	// FormGo (Go functions, in process) and/or FormPTX.
	KernelForms []Form
	// ZeroedAlloc: Alloc returns zeroed memory (fresh Go memory), so a
	// fill of zeros over an allocation nothing has used yet is skipped.
	ZeroedAlloc bool
}

// Supports reports whether the device can allocate memory of kind k.
func (c Capabilities) Supports(k MemKind) bool {
	for _, x := range c.USMKinds {
		if x == k {
			return true
		}
	}
	return false
}

// Runs reports whether the device runs kernels in form f.
func (c Capabilities) Runs(f Form) bool {
	for _, x := range c.KernelForms {
		if x == f {
			return true
		}
	}
	return false
}

// RunsKernel reports whether the device runs k: k has an implementation in
// a form the device runs.
func (c Capabilities) RunsKernel(k *Kernel) bool {
	return (k.Has(FormGo) && c.Runs(FormGo)) || (k.Has(FormPTX) && c.Runs(FormPTX))
}

// Info is a device's identity and capabilities.
type Info struct {
	ID   ID
	Name string // human-readable, e.g. "Go CPU (16 workers)" or "NVIDIA H200"
	Caps Capabilities
}

// MemKind is the kind of a USM allocation (B3).
type MemKind uint8

// USM kinds. Buffers allocate MemDevice.
const (
	// MemDevice is memory of the device; on a host-unified device it is host
	// memory too.
	MemDevice MemKind = iota + 1
	// MemHost is page-locked host memory that the device can access.
	MemHost
	// MemShared migrates between host and device on access.
	MemShared
)

func (k MemKind) String() string {
	switch k {
	case MemDevice:
		return "device"
	case MemHost:
		return "host"
	case MemShared:
		return "shared"
	}
	return "memkind(" + strconv.Itoa(int(k)) + ")"
}

// Mem is one allocation. Its address never changes while it exists (B2).
type Mem struct {
	// Device is the device that allocated it.
	Device ID
	Kind   MemKind
	Bytes  int
	// Addr is the address the device's kernels use (a CUdeviceptr on CUDA,
	// the host address on the CPU). It identifies the allocation for USM
	// look-ups.
	Addr uint64
	// Host is the host-visible view of the memory: set for MemHost and
	// MemShared, and for MemDevice on host-unified devices; nil when the host
	// cannot touch the memory directly.
	Host []byte
	// Handle is the backend's own state; callers must not touch it.
	Handle any
}

// Space is the address space a pointer to this memory has as a kernel
// argument: GlobalDevice for device memory, GlobalHost for host USM, Global
// for shared USM.
func (m *Mem) Space() AddrSpace {
	switch m.Kind {
	case MemHost:
		return GlobalHost
	case MemShared:
		return Global
	}
	return GlobalDevice
}

// Device is one device of a backend. See the package documentation for who
// calls each method, on which goroutine, and whether it may block.
type Device interface {
	// Info returns the device's identity and capabilities; it never changes.
	Info() Info
	// Alloc allocates bytes of memory of the given kind, zeroed or not (the
	// caller must not rely on the contents). The allocation has exactly the
	// requested size and a stable address until Free (B1, B2). It may block.
	Alloc(kind MemKind, bytes int) (*Mem, error)
	// Free releases an allocation made by this device. The caller guarantees
	// no op that uses it is still running. It may block.
	Free(m *Mem) error
	// Enqueue starts op asynchronously. It returns an error, and does not
	// call done, if the op is malformed or unsupported; otherwise it calls
	// done exactly once, from a goroutine the device owns, when the op has
	// finished. queue is a hint in [0, Caps.Queues).
	Enqueue(queue int, op Op, done func(error)) error
	// Close waits for running ops, stops the device's goroutines and frees
	// what it still holds. Calling it twice is safe. After Close, Enqueue
	// returns ErrClosed.
	Close() error
}

// Sentinel errors. Match with errors.Is.
var (
	// ErrClosed: the device was closed; open a new queue.
	ErrClosed = errors.New("device: closed")
	// ErrUnsupported: the device cannot perform this op or allocation kind;
	// check Capabilities before asking.
	ErrUnsupported = errors.New("device: operation not supported by this device")
	// ErrNoImplementation: the kernel has no implementation for this
	// device's backend; register one (a Go function for the CPU, PTX for
	// CUDA) or run the kernel on another device.
	ErrNoImplementation = errors.New("device: kernel has no implementation for this backend")
	// ErrBadOp: the op is malformed (a box outside its allocation, a fill
	// pattern that does not divide the size, ...). The message says which
	// field is wrong.
	ErrBadOp = errors.New("device: malformed operation")
	// ErrKernelPanic marks errors made from a panic in a CPU kernel.
	ErrKernelPanic = errors.New("device: kernel panicked")
	// ErrOutOfMemory: an allocation did not fit; release buffers or use a
	// device with more memory.
	ErrOutOfMemory = errors.New("device: out of memory")
	// ErrDeviceLost: the device can run nothing more in this process (a
	// GPU kernel faulted and left the process's CUDA state unusable). The
	// message names the first failure; restart the process to use the
	// device again. Its allocations are gone.
	ErrDeviceLost = errors.New("device: lost")
)

// Health is a device that can be lost while open (Device.Lost); the
// runtime and the node agent ask it to refuse work early and to report
// the device out of service.
type Health interface {
	// Lost is nil while the device works, else an error matching
	// ErrDeviceLost that says why and what to do. Once lost, a device
	// stays lost.
	Lost() error
}

// Backend opens the devices of one kind. Backends register themselves with
// RegisterBackend, usually from an init function of a package the program
// imports (import _ "github.com/acpp/acpp/cuda").
type Backend struct {
	Kind Kind
	// Open fingerprints the machine and returns its devices of this kind; no
	// devices (and a nil error) when there is no hardware or driver. The
	// caller owns the devices and closes them.
	Open func(ctx context.Context, cfg OpenConfig) ([]Device, error)
}

// OpenConfig configures Backend.Open. The zero value is ready to use.
type OpenConfig struct {
	// Workers is the number of worker goroutines of a CPU device; 0 means
	// GOMAXPROCS.
	Workers int
	// Devices is the number of devices to open of a kind that can be
	// partitioned (CPU); 0 means 1. CPU devices share one host memory (B4).
	Devices int
	// Logger receives the backend's log events (a GPU backend says why
	// it found no GPU, which link it chose, ...): the logger of the queue
	// or node that opens it. nil means discard.
	Logger *slog.Logger
}

// MemSharer is a device whose device memory another process on the same
// host can map (CUDA IPC). Nodes use it to move pages between GPUs of one
// host device to device, without staging them through the network
// (proto.PageRef).
type MemSharer interface {
	// ExportMem returns a handle by which another process maps m, which
	// must be device memory this device allocated.
	ExportMem(m *Mem) ([]byte, error)
	// ImportMem maps memory of bytes bytes that another process exported
	// into this device's address space. The result can be the source or
	// destination of copies on this device; Free unmaps it.
	ImportMem(handle []byte, bytes int) (*Mem, error)
}
