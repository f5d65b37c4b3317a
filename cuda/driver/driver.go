package driver

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the driver library's soname; Open("") loads it.
const DefaultLibrary = "libcuda.so.1"

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrNoDriver is returned by Open when the driver library cannot be
	// loaded: the machine has no NVIDIA driver (or not this soname). Package
	// cuda turns it into zero devices and one log line.
	ErrNoDriver = errors.New("cuda driver: libcuda.so.1 not found; install the NVIDIA driver to use GPUs")
	// ErrNotResolved is matched by an *Error for a call whose symbol the
	// loaded driver does not export (a driver older than the API we call).
	ErrNotResolved = errors.New("cuda driver: entry point not exported by this driver; upgrade the NVIDIA driver")
	// ErrOutOfMemory is matched by an *Error with CUDA_ERROR_OUT_OF_MEMORY.
	ErrOutOfMemory = errors.New("cuda driver: out of memory")
	// ErrNotReady is matched by an *Error with CUDA_ERROR_NOT_READY (an event
	// or stream query whose work has not finished: not a failure).
	ErrNotReady = errors.New("cuda driver: not ready")
	// ErrNoDevice is matched by an *Error with CUDA_ERROR_NO_DEVICE.
	ErrNoDevice = errors.New("cuda driver: no CUDA-capable device")
	// ErrContextLost is matched by an *Error whose code leaves the
	// process's CUDA state unusable (a kernel faulted: an illegal or
	// misaligned address, an illegal instruction, an invalid address space
	// or PC, a hardware stack error, a failed or timed-out launch). NVIDIA documents
	// that every later CUDA call of the process returns the same error
	// and that the process must be restarted to use CUDA again.
	ErrContextLost = errors.New("cuda driver: the CUDA context is lost (a kernel faulted); restart the process to use the GPU again")
)

// Result is a CUresult.
type Result int32

// CUresult values the runtime branches on (cuda.h, enum cudaError_enum).
const (
	Success            Result = 0
	ErrorInvalidValue  Result = 1
	ErrorOutOfMemory   Result = 2
	ErrorNotInit       Result = 3
	ErrorNoDevice      Result = 100
	ErrorInvalidDevice Result = 101
	ErrorInvalidPTX    Result = 218
	ErrorNotFound      Result = 500
	ErrorNotReady      Result = 600
	ErrorIllegalAddr   Result = 700
	ErrorLaunchOOR     Result = 701
	ErrorLaunchTimeout Result = 702
	ErrorHWStack       Result = 714
	ErrorIllegalInstr  Result = 715
	ErrorMisaligned    Result = 716
	ErrorAddrSpace     Result = 717
	ErrorInvalidPC     Result = 718
	ErrorLaunchFailed  Result = 719
	ErrorPeerEnabled   Result = 704
	ErrorUnknown       Result = 999
	errorUnresolved    Result = -1 // ours: the symbol did not resolve
)

// fallbackNames are used when cuGetErrorName itself is unavailable (no driver
// loaded, as in tests, or the call fails). The driver's own name wins.
var fallbackNames = map[Result]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE", 200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 218: "CUDA_ERROR_INVALID_PTX", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	400: "CUDA_ERROR_INVALID_HANDLE", 500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", 714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE", 718: "CUDA_ERROR_INVALID_PC",
	719: "CUDA_ERROR_LAUNCH_FAILED", 999: "CUDA_ERROR_UNKNOWN",
	-1: "unresolved symbol",
}

// Error is a failed driver call.
type Error struct {
	Call string // the driver entry point, e.g. "cuMemAlloc_v2"
	Code Result // the CUresult it returned
	Name string // cuGetErrorName of Code, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // cuGetErrorString of Code, may be empty
}

func (e *Error) Error() string {
	if e.Code == errorUnresolved {
		return fmt.Sprintf("%s: %v", e.Call, ErrNotResolved)
	}
	s := fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, int32(e.Code))
	if e.Desc != "" {
		s += ": " + e.Desc
	}
	return s
}

// Is matches the package's sentinels by code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrOutOfMemory:
		return e.Code == ErrorOutOfMemory
	case ErrNotReady:
		return e.Code == ErrorNotReady
	case ErrNoDevice:
		return e.Code == ErrorNoDevice
	case ErrNotResolved:
		return e.Code == errorUnresolved
	case ErrContextLost:
		return e.Code.ContextLost()
	}
	return false
}

// Lib is a loaded driver: the resolved address of every entry in procs
// (zero where the symbol is missing).
type Lib struct {
	handle uintptr
	addr   [numProcs]uintptr
	// lost is the first error of a call that lost the process's CUDA
	// state (ErrContextLost); nil while none did.
	lost atomic.Pointer[Error]
}

// ContextLost reports whether r leaves the process's CUDA state unusable
// (ErrContextLost).
func (r Result) ContextLost() bool {
	switch r {
	case ErrorIllegalAddr, ErrorLaunchTimeout, ErrorHWStack, ErrorIllegalInstr, ErrorMisaligned, ErrorAddrSpace, ErrorInvalidPC, ErrorLaunchFailed:
		return true
	}
	return false
}

// Lost returns the first error of a call through l that lost the
// process's CUDA state (it matches ErrContextLost), or nil while none did.
// After it, every call fails: callers refuse new work at once instead of
// letting it fail in the driver.
func (l *Lib) Lost() *Error { return l.lost.Load() }

// Open loads the driver library (path "" means DefaultLibrary) and resolves
// every entry point in procs. It fails only when the library cannot be
// loaded (ErrNoDriver); missing symbols are reported per call, and listed by
// Missing.
func Open(path string) (*Lib, error) {
	if path == "" {
		path = DefaultLibrary
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w (dlopen %s: %v)", ErrNoDriver, path, err)
	}
	l := &Lib{handle: h}
	for i := range procs {
		if a, err := purego.Dlsym(h, procs[i].name); err == nil {
			l.addr[i] = a
		}
	}
	return l, nil
}

// Missing lists the entry points the loaded driver does not export.
func (l *Lib) Missing() []string {
	var out []string
	for i, a := range l.addr {
		if a == 0 {
			out = append(out, procs[i].name)
		}
	}
	return out
}

// Resolved reports whether the entry point named sym resolved (for tests and
// for optional features such as graphs).
func (l *Lib) Resolved(sym string) bool {
	for i := range procs {
		if procs[i].name == sym {
			return l.addr[i] != 0
		}
	}
	return false
}

// call invokes entry point p. Pointer arguments must be converted to uintptr
// in the call expression itself (unsafe.Pointer rule 4): uintptrescapes keeps
// them alive and unmoved until the call returns.
//
//go:uintptrescapes
func (l *Lib) call(p procID, args ...uintptr) error {
	fn := l.addr[p]
	if fn == 0 {
		return &Error{Call: procs[p].name, Code: errorUnresolved, Name: fallbackNames[errorUnresolved]}
	}
	r1, _, _ := purego.SyscallN(fn, args...)
	if r := Result(int32(r1)); r != Success {
		if r == ErrorNotReady {
			return notReady[p]
		}
		e := l.newError(p, r)
		if r.ContextLost() {
			l.lost.CompareAndSwap(nil, e)
		}
		return e
	}
	return nil
}

// notReady holds one CUDA_ERROR_NOT_READY error per entry point: queries
// (cuEventQuery, cuStreamQuery) return it in a loop while work runs, and
// building a fresh error there cost two more driver calls (cuGetErrorName,
// cuGetErrorString) and an allocation per query. Callers must not modify
// the *Error they get.
var notReady = func() (e [numProcs]*Error) {
	for i := range e {
		e[i] = &Error{Call: procs[i].name, Code: ErrorNotReady, Name: "CUDA_ERROR_NOT_READY",
			Desc: "asynchronous operations issued previously have not completed yet"}
	}
	return e
}()

func (l *Lib) newError(p procID, r Result) *Error {
	e := &Error{Call: procs[p].name, Code: r, Name: fallbackNames[r]}
	if l.addr[pGetErrorName] != 0 {
		var s uintptr
		if r1, _, _ := purego.SyscallN(l.addr[pGetErrorName], uintptr(r), uintptr(unsafe.Pointer(&s))); r1 == 0 && s != 0 {
			e.Name = goString(s)
		}
	}
	if l.addr[pGetErrorString] != 0 {
		var s uintptr
		if r1, _, _ := purego.SyscallN(l.addr[pGetErrorString], uintptr(r), uintptr(unsafe.Pointer(&s))); r1 == 0 && s != 0 {
			e.Desc = goString(s)
		}
	}
	if e.Name == "" {
		e.Name = fmt.Sprintf("CUresult %d", int32(r))
	}
	return e
}

// goString copies a NUL-terminated C string owned by the driver.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := HostPointer(p)
	var n int
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
		if n > 4096 {
			break
		}
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// HostPointer turns an address the driver returned (pinned or mapped host
// memory, a static string) into an unsafe.Pointer. The memory is not Go's, so
// the garbage collector neither moves nor frees it.
func HostPointer(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

func cstr(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}
