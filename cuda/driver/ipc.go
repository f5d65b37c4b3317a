package driver

import (
	"encoding/binary"
	"errors"
	"runtime"
	"unsafe"
)

// IpcMemHandle is a CUipcMemHandle: an allocation exported for other
// processes of the host.
type IpcMemHandle [64]byte

// IpcMemLazyEnablePeerAccess is CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: map the
// memory with peer access to its device enabled when needed.
const IpcMemLazyEnablePeerAccess = 0x1

// ErrIpcUnsupported: opening IPC handles needs the x86-64 calling
// convention this package implements (a 64-byte struct passed by value).
var ErrIpcUnsupported = errors.New("cuda driver: IPC memory handles are only supported on linux/amd64")

// IpcGetMemHandle is cuIpcGetMemHandle: exports device memory allocated
// with cuMemAlloc.
func (l *Lib) IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	err := l.call(pIpcGetMemHandle, uintptr(unsafe.Pointer(&h)), uintptr(p))
	runtime.KeepAlive(&h)
	return h, err
}

// IpcOpenMemHandle is cuIpcOpenMemHandle_v2: maps memory another process
// exported into the current context. The handle is passed by value; on
// x86-64 (System V) a 64-byte struct goes on the stack while the other
// arguments take the first integer registers, so the call passes the
// pointer and the flags, four unused registers, then the handle's eight
// words as stack arguments.
func (l *Lib) IpcOpenMemHandle(h IpcMemHandle, flags uint32) (DevicePtr, error) {
	if runtime.GOARCH != "amd64" {
		return 0, ErrIpcUnsupported
	}
	var p DevicePtr
	args := []uintptr{uintptr(unsafe.Pointer(&p)), uintptr(flags), 0, 0, 0, 0}
	for i := 0; i < len(h); i += 8 {
		args = append(args, uintptr(binary.LittleEndian.Uint64(h[i:])))
	}
	err := l.call(pIpcOpenMemHandle, args...)
	return p, err
}

// IpcCloseMemHandle is cuIpcCloseMemHandle: unmaps memory IpcOpenMemHandle
// mapped.
func (l *Lib) IpcCloseMemHandle(p DevicePtr) error { return l.call(pIpcCloseMemHandle, uintptr(p)) }

// MemGetAddressRange is cuMemGetAddressRange_v2: the base and size of the
// allocation that contains p.
func (l *Lib) MemGetAddressRange(p DevicePtr) (DevicePtr, uint64, error) {
	base, size := new(DevicePtr), new(uint64)
	err := l.call(pMemGetAddressRange, uintptr(unsafe.Pointer(base)), uintptr(unsafe.Pointer(size)), uintptr(p))
	return *base, *size, err
}
