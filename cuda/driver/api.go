package driver

import (
	"runtime"
	"unsafe"
)

// Handles. They are opaque driver values; the zero value is "none".
type (
	Device    int32   // CUdevice
	Context   uintptr // CUcontext
	DevicePtr uint64  // CUdeviceptr
	Stream    uintptr // CUstream; 0 is the legacy default stream
	Event     uintptr // CUevent
	Module    uintptr // CUmodule
	Function  uintptr // CUfunction
	Graph     uintptr // CUgraph
	GraphExec uintptr // CUgraphExec
)

// DeviceAttribute is a CUdevice_attribute (cuda.h).
type DeviceAttribute int32

// The device attributes the runtime reads.
const (
	AttrMaxThreadsPerBlock           DeviceAttribute = 1
	AttrMaxSharedMemoryPerBlock      DeviceAttribute = 8
	AttrWarpSize                     DeviceAttribute = 10
	AttrMultiprocessorCount          DeviceAttribute = 16
	AttrIntegrated                   DeviceAttribute = 18
	AttrCanMapHostMemory             DeviceAttribute = 19
	AttrConcurrentKernels            DeviceAttribute = 31
	AttrPCIBusID                     DeviceAttribute = 33
	AttrPCIDeviceID                  DeviceAttribute = 34
	AttrAsyncEngineCount             DeviceAttribute = 40
	AttrUnifiedAddressing            DeviceAttribute = 41
	AttrComputeCapabilityMajor       DeviceAttribute = 75
	AttrComputeCapabilityMinor       DeviceAttribute = 76
	AttrManagedMemory                DeviceAttribute = 83
	AttrHostNativeAtomicSupported    DeviceAttribute = 86
	AttrPageableMemoryAccess         DeviceAttribute = 88
	AttrConcurrentManagedAccess      DeviceAttribute = 89
	AttrMaxSharedMemoryPerBlockOptin DeviceAttribute = 97
	AttrPageableMemoryUsesHostPT     DeviceAttribute = 100
	AttrDirectManagedMemFromHost     DeviceAttribute = 101
)

// Flags and enums passed to the calls below (cuda.h).
const (
	MemHostAllocPortable      = 0x01 // CU_MEMHOSTALLOC_PORTABLE
	MemHostAllocDeviceMap     = 0x02 // CU_MEMHOSTALLOC_DEVICEMAP
	MemHostAllocWriteCombined = 0x04 // CU_MEMHOSTALLOC_WRITECOMBINED
	MemHostRegisterPortable   = 0x01 // CU_MEMHOSTREGISTER_PORTABLE
	MemHostRegisterDeviceMap  = 0x02 // CU_MEMHOSTREGISTER_DEVICEMAP
	MemAttachGlobal           = 0x01 // CU_MEM_ATTACH_GLOBAL
	StreamNonBlocking         = 0x01 // CU_STREAM_NON_BLOCKING
	EventBlockingSync         = 0x01 // CU_EVENT_BLOCKING_SYNC
	EventDisableTiming        = 0x02 // CU_EVENT_DISABLE_TIMING
	StreamCaptureModeGlobal   = 0    // CU_STREAM_CAPTURE_MODE_GLOBAL
	StreamCaptureModeThread   = 1    // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	StreamCaptureModeRelaxed  = 2    // CU_STREAM_CAPTURE_MODE_RELAXED
	FuncAttrMaxThreadsPerBlk  = 0    // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	FuncAttrSharedSizeBytes   = 1    // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
	FuncAttrMaxDynamicShared  = 8    // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	PointerAttrMemoryType     = 2    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
	PointerAttrIsManaged      = 8    // CU_POINTER_ATTRIBUTE_IS_MANAGED
	PointerAttrDeviceOrdinal  = 9    // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
	launchParamEnd            = 0    // CU_LAUNCH_PARAM_END
	launchParamBufferPointer  = 1    // CU_LAUNCH_PARAM_BUFFER_POINTER
	launchParamBufferSize     = 2    // CU_LAUNCH_PARAM_BUFFER_SIZE
)

// MemoryType is a CUmemorytype, used in copy descriptors.
type MemoryType uint32

// CUmemorytype values.
const (
	MemoryTypeHost    MemoryType = 1
	MemoryTypeDevice  MemoryType = 2
	MemoryTypeArray   MemoryType = 3
	MemoryTypeUnified MemoryType = 4
)

// Memcpy2D is CUDA_MEMCPY2D (same field order and padding as cuda.h on
// 64-bit platforms).
type Memcpy2D struct {
	SrcXInBytes, SrcY uint64
	SrcMemoryType     MemoryType
	_                 uint32
	SrcHost           uintptr
	SrcDevice         DevicePtr
	SrcArray          uintptr
	SrcPitch          uint64
	DstXInBytes, DstY uint64
	DstMemoryType     MemoryType
	_                 uint32
	DstHost           uintptr
	DstDevice         DevicePtr
	DstArray          uintptr
	DstPitch          uint64
	WidthInBytes      uint64
	Height            uint64
}

// Memcpy3D is CUDA_MEMCPY3D.
type Memcpy3D struct {
	SrcXInBytes, SrcY, SrcZ, SrcLOD uint64
	SrcMemoryType                   MemoryType
	_                               uint32
	SrcHost                         uintptr
	SrcDevice                       DevicePtr
	SrcArray                        uintptr
	reserved0                       uintptr
	SrcPitch, SrcHeight             uint64
	DstXInBytes, DstY, DstZ, DstLOD uint64
	DstMemoryType                   MemoryType
	_                               uint32
	DstHost                         uintptr
	DstDevice                       DevicePtr
	DstArray                        uintptr
	reserved1                       uintptr
	DstPitch, DstHeight             uint64
	WidthInBytes, Height, Depth     uint64
}

// Memcpy3DPeer is CUDA_MEMCPY3D_PEER.
type Memcpy3DPeer struct {
	SrcXInBytes, SrcY, SrcZ, SrcLOD uint64
	SrcMemoryType                   MemoryType
	_                               uint32
	SrcHost                         uintptr
	SrcDevice                       DevicePtr
	SrcArray                        uintptr
	SrcContext                      Context
	SrcPitch, SrcHeight             uint64
	DstXInBytes, DstY, DstZ, DstLOD uint64
	DstMemoryType                   MemoryType
	_                               uint32
	DstHost                         uintptr
	DstDevice                       DevicePtr
	DstArray                        uintptr
	DstContext                      Context
	DstPitch, DstHeight             uint64
	WidthInBytes, Height, Depth     uint64
}

// Init is cuInit(0).
func (l *Lib) Init() error { return l.call(pInit, 0) }

// DriverVersion is cuDriverGetVersion (e.g. 13000 for CUDA 13.0).
func (l *Lib) DriverVersion() (int, error) {
	var v int32
	err := l.call(pDriverGetVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// DeviceGetCount is cuDeviceGetCount.
func (l *Lib) DeviceGetCount() (int, error) {
	var n int32
	err := l.call(pDeviceGetCount, uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// DeviceGet is cuDeviceGet.
func (l *Lib) DeviceGet(ordinal int) (Device, error) {
	var d Device
	err := l.call(pDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal))
	return d, err
}

// DeviceGetName is cuDeviceGetName.
func (l *Lib) DeviceGetName(d Device) (string, error) {
	buf := make([]byte, 256)
	if err := l.call(pDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d)); err != nil {
		return "", err
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i]), nil
		}
	}
	return string(buf), nil
}

// DeviceTotalMem is cuDeviceTotalMem_v2.
func (l *Lib) DeviceTotalMem(d Device) (uint64, error) {
	var n uint64
	err := l.call(pDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(d))
	return n, err
}

// DeviceGetAttribute is cuDeviceGetAttribute.
func (l *Lib) DeviceGetAttribute(a DeviceAttribute, d Device) (int, error) {
	var v int32
	err := l.call(pDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d))
	return int(v), err
}

// DeviceCanAccessPeer is cuDeviceCanAccessPeer.
func (l *Lib) DeviceCanAccessPeer(d, peer Device) (bool, error) {
	var v int32
	err := l.call(pDeviceCanAccessPeer, uintptr(unsafe.Pointer(&v)), uintptr(d), uintptr(peer))
	return v != 0, err
}

// DevicePrimaryCtxRetain is cuDevicePrimaryCtxRetain.
func (l *Lib) DevicePrimaryCtxRetain(d Device) (Context, error) {
	var c Context
	err := l.call(pDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(d))
	return c, err
}

// DevicePrimaryCtxRelease is cuDevicePrimaryCtxRelease_v2.
func (l *Lib) DevicePrimaryCtxRelease(d Device) error {
	return l.call(pDevicePrimaryCtxRelease, uintptr(d))
}

// CtxSetCurrent is cuCtxSetCurrent: binds c to the calling OS thread.
func (l *Lib) CtxSetCurrent(c Context) error { return l.call(pCtxSetCurrent, uintptr(c)) }

// CtxSynchronize is cuCtxSynchronize.
func (l *Lib) CtxSynchronize() error { return l.call(pCtxSynchronize) }

// CtxEnablePeerAccess is cuCtxEnablePeerAccess (from the current context to peer).
func (l *Lib) CtxEnablePeerAccess(peer Context) error {
	return l.call(pCtxEnablePeerAccess, uintptr(peer), 0)
}

// MemGetInfo is cuMemGetInfo_v2: free and total bytes of the current context's device.
func (l *Lib) MemGetInfo() (free, total uint64, err error) {
	err = l.call(pMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))
	return free, total, err
}

// MemAlloc is cuMemAlloc_v2.
func (l *Lib) MemAlloc(size uint64) (DevicePtr, error) {
	var p DevicePtr
	err := l.call(pMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size))
	return p, err
}

// MemFree is cuMemFree_v2.
func (l *Lib) MemFree(p DevicePtr) error { return l.call(pMemFree, uintptr(p)) }

// MemAllocHost is cuMemAllocHost_v2 (pinned, portable, mapped where supported).
func (l *Lib) MemAllocHost(size uint64) (uintptr, error) {
	var p uintptr
	err := l.call(pMemAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(size))
	return p, err
}

// MemHostAlloc is cuMemHostAlloc with MemHostAlloc* flags.
func (l *Lib) MemHostAlloc(size uint64, flags uint32) (uintptr, error) {
	var p uintptr
	err := l.call(pMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(flags))
	return p, err
}

// MemFreeHost is cuMemFreeHost.
func (l *Lib) MemFreeHost(p uintptr) error { return l.call(pMemFreeHost, p) }

// MemHostGetDevicePointer is cuMemHostGetDevicePointer_v2: the device address
// of mapped pinned host memory.
func (l *Lib) MemHostGetDevicePointer(host uintptr) (DevicePtr, error) {
	var p DevicePtr
	err := l.call(pMemHostGetDevicePointer, uintptr(unsafe.Pointer(&p)), host, 0)
	return p, err
}

// MemHostRegister is cuMemHostRegister_v2: page-locks existing host memory
// (which must stay allocated, and must not be Go-heap memory the collector
// can move; Go's heap does not move, but it must stay reachable).
func (l *Lib) MemHostRegister(p unsafe.Pointer, size uint64, flags uint32) error {
	return l.call(pMemHostRegister, uintptr(p), uintptr(size), uintptr(flags))
}

// MemHostUnregister is cuMemHostUnregister.
func (l *Lib) MemHostUnregister(p unsafe.Pointer) error {
	return l.call(pMemHostUnregister, uintptr(p))
}

// MemAllocManaged is cuMemAllocManaged with CU_MEM_ATTACH_GLOBAL.
func (l *Lib) MemAllocManaged(size uint64) (DevicePtr, error) {
	var p DevicePtr
	err := l.call(pMemAllocManaged, uintptr(unsafe.Pointer(&p)), uintptr(size), MemAttachGlobal)
	return p, err
}

// MemcpyAsync is cuMemcpyAsync (unified addressing: any direction).
func (l *Lib) MemcpyAsync(dst, src DevicePtr, n uint64, s Stream) error {
	return l.call(pMemcpyAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// MemcpyHtoD is the synchronous cuMemcpyHtoD_v2 (baseline for benchmarks).
func (l *Lib) MemcpyHtoD(dst DevicePtr, src uintptr, n uint64) error {
	return l.call(pMemcpyHtoD, uintptr(dst), src, uintptr(n))
}

// MemcpyDtoH is the synchronous cuMemcpyDtoH_v2 (baseline for benchmarks).
func (l *Lib) MemcpyDtoH(dst uintptr, src DevicePtr, n uint64) error {
	return l.call(pMemcpyDtoH, dst, uintptr(src), uintptr(n))
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync_v2. src must be pinned for the copy
// to be asynchronous.
func (l *Lib) MemcpyHtoDAsync(dst DevicePtr, src uintptr, n uint64, s Stream) error {
	return l.call(pMemcpyHtoDAsync, uintptr(dst), src, uintptr(n), uintptr(s))
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync_v2.
func (l *Lib) MemcpyDtoHAsync(dst uintptr, src DevicePtr, n uint64, s Stream) error {
	return l.call(pMemcpyDtoHAsync, dst, uintptr(src), uintptr(n), uintptr(s))
}

// MemcpyDtoDAsync is cuMemcpyDtoDAsync_v2.
func (l *Lib) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	return l.call(pMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

// MemcpyPeerAsync is cuMemcpyPeerAsync.
func (l *Lib) MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n uint64, s Stream) error {
	return l.call(pMemcpyPeerAsync, uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(n), uintptr(s))
}

// Memcpy2DAsync is cuMemcpy2DAsync_v2.
func (l *Lib) Memcpy2DAsync(c *Memcpy2D, s Stream) error {
	return l.call(pMemcpy2DAsync, uintptr(unsafe.Pointer(c)), uintptr(s))
}

// Memcpy3DAsync is cuMemcpy3DAsync_v2.
func (l *Lib) Memcpy3DAsync(c *Memcpy3D, s Stream) error {
	return l.call(pMemcpy3DAsync, uintptr(unsafe.Pointer(c)), uintptr(s))
}

// Memcpy3DPeerAsync is cuMemcpy3DPeerAsync.
func (l *Lib) Memcpy3DPeerAsync(c *Memcpy3DPeer, s Stream) error {
	return l.call(pMemcpy3DPeerAsync, uintptr(unsafe.Pointer(c)), uintptr(s))
}

// MemsetD8Async is cuMemsetD8Async.
func (l *Lib) MemsetD8Async(p DevicePtr, v uint8, n uint64, s Stream) error {
	return l.call(pMemsetD8Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
}

// MemsetD32Async is cuMemsetD32Async (n is a count of 32-bit words).
func (l *Lib) MemsetD32Async(p DevicePtr, v uint32, n uint64, s Stream) error {
	return l.call(pMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
}

// MemsetD16Async is cuMemsetD16Async (n is a count of 16-bit words).
func (l *Lib) MemsetD16Async(p DevicePtr, v uint16, n uint64, s Stream) error {
	return l.call(pMemsetD16Async, uintptr(p), uintptr(v), uintptr(n), uintptr(s))
}

// PointerGetAttribute is cuPointerGetAttribute for 32-bit attributes
// (PointerAttrMemoryType, PointerAttrIsManaged, PointerAttrDeviceOrdinal).
func (l *Lib) PointerGetAttribute(attr int, p DevicePtr) (uint32, error) {
	var v uint64 // the driver writes 4 bytes; 8 are room enough for any of these
	err := l.call(pPointerGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(p))
	return uint32(v), err
}

// StreamCreate is cuStreamCreate.
func (l *Lib) StreamCreate(flags uint32) (Stream, error) {
	var s Stream
	err := l.call(pStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags))
	return s, err
}

// StreamDestroy is cuStreamDestroy_v2.
func (l *Lib) StreamDestroy(s Stream) error { return l.call(pStreamDestroy, uintptr(s)) }

// StreamSynchronize is cuStreamSynchronize.
func (l *Lib) StreamSynchronize(s Stream) error { return l.call(pStreamSynchronize, uintptr(s)) }

// StreamQuery is cuStreamQuery; ErrNotReady while work is pending.
func (l *Lib) StreamQuery(s Stream) error { return l.call(pStreamQuery, uintptr(s)) }

// StreamWaitEvent is cuStreamWaitEvent: work on s after this call waits for e.
func (l *Lib) StreamWaitEvent(s Stream, e Event) error {
	return l.call(pStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

// StreamBeginCapture is cuStreamBeginCapture_v2.
func (l *Lib) StreamBeginCapture(s Stream, mode int) error {
	return l.call(pStreamBeginCapture, uintptr(s), uintptr(mode))
}

// StreamEndCapture is cuStreamEndCapture.
func (l *Lib) StreamEndCapture(s Stream) (Graph, error) {
	var g Graph
	err := l.call(pStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g)))
	return g, err
}

// LaunchHostFunc is cuLaunchHostFunc: fn (a C function pointer, e.g. from
// purego.NewCallback) runs on a driver thread once prior work on s is done.
func (l *Lib) LaunchHostFunc(s Stream, fn, userData uintptr) error {
	return l.call(pLaunchHostFunc, uintptr(s), fn, userData)
}

// EventCreate is cuEventCreate.
func (l *Lib) EventCreate(flags uint32) (Event, error) {
	var e Event
	err := l.call(pEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return e, err
}

// EventRecord is cuEventRecord.
func (l *Lib) EventRecord(e Event, s Stream) error {
	return l.call(pEventRecord, uintptr(e), uintptr(s))
}

// EventQuery is cuEventQuery; ErrNotReady while work is pending.
func (l *Lib) EventQuery(e Event) error { return l.call(pEventQuery, uintptr(e)) }

// EventSynchronize is cuEventSynchronize.
func (l *Lib) EventSynchronize(e Event) error { return l.call(pEventSynchronize, uintptr(e)) }

// EventDestroy is cuEventDestroy_v2.
func (l *Lib) EventDestroy(e Event) error { return l.call(pEventDestroy, uintptr(e)) }

// EventElapsedTime is cuEventElapsedTime, in milliseconds.
func (l *Lib) EventElapsedTime(start, end Event) (float32, error) {
	var ms float32
	err := l.call(pEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))
	return ms, err
}

// ModuleLoadData is cuModuleLoadData with a NUL-terminated PTX image.
func (l *Lib) ModuleLoadData(ptx []byte) (Module, error) {
	img := make([]byte, len(ptx)+1)
	copy(img, ptx)
	var m Module
	err := l.call(pModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])))
	return m, err
}

// ModuleUnload is cuModuleUnload.
func (l *Lib) ModuleUnload(m Module) error { return l.call(pModuleUnload, uintptr(m)) }

// ModuleGetFunction is cuModuleGetFunction.
func (l *Lib) ModuleGetFunction(m Module, name string) (Function, error) {
	var f Function
	err := l.call(pModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(cstr(name))))
	return f, err
}

// FuncGetAttribute is cuFuncGetAttribute.
func (l *Lib) FuncGetAttribute(attr int, f Function) (int, error) {
	var v int32
	err := l.call(pFuncGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(f))
	return int(v), err
}

// FuncSetAttribute is cuFuncSetAttribute.
func (l *Lib) FuncSetAttribute(f Function, attr, value int) error {
	return l.call(pFuncSetAttribute, uintptr(f), uintptr(attr), uintptr(value))
}

// LaunchConfig is the grid, block, dynamic shared memory and stream of a launch.
type LaunchConfig struct {
	Grid, Block [3]uint32
	SharedBytes uint32
	Stream      Stream
}

// LaunchKernel is cuLaunchKernel with the arguments packed into one
// parameter buffer (CU_LAUNCH_PARAM_BUFFER_POINTER), laid out as the
// kernel's .param list: each value at its natural alignment. params may be
// empty for a kernel without parameters.
func (l *Lib) LaunchKernel(f Function, c *LaunchConfig, params []byte) error {
	if len(params) == 0 {
		return l.call(pLaunchKernel, uintptr(f),
			uintptr(c.Grid[0]), uintptr(c.Grid[1]), uintptr(c.Grid[2]),
			uintptr(c.Block[0]), uintptr(c.Block[1]), uintptr(c.Block[2]),
			uintptr(c.SharedBytes), uintptr(c.Stream), 0, 0)
	}
	// The driver reads params and size through extra while the call runs.
	// The goroutine's stack cannot move during a foreign call, and the
	// KeepAlives keep both reachable until it returns.
	size := uintptr(len(params))
	extra := [5]uintptr{launchParamBufferPointer, uintptr(unsafe.Pointer(&params[0])), launchParamBufferSize, uintptr(unsafe.Pointer(&size)), launchParamEnd}
	err := l.call(pLaunchKernel, uintptr(f),
		uintptr(c.Grid[0]), uintptr(c.Grid[1]), uintptr(c.Grid[2]),
		uintptr(c.Block[0]), uintptr(c.Block[1]), uintptr(c.Block[2]),
		uintptr(c.SharedBytes), uintptr(c.Stream), 0, uintptr(unsafe.Pointer(&extra[0])))
	runtime.KeepAlive(params)
	runtime.KeepAlive(&size)
	return err
}

// GraphInstantiate is cuGraphInstantiateWithFlags(flags 0).
func (l *Lib) GraphInstantiate(g Graph) (GraphExec, error) {
	var x GraphExec
	err := l.call(pGraphInstantiate, uintptr(unsafe.Pointer(&x)), uintptr(g), 0)
	return x, err
}

// GraphLaunch is cuGraphLaunch.
func (l *Lib) GraphLaunch(x GraphExec, s Stream) error {
	return l.call(pGraphLaunch, uintptr(x), uintptr(s))
}

// GraphExecDestroy is cuGraphExecDestroy.
func (l *Lib) GraphExecDestroy(x GraphExec) error { return l.call(pGraphExecDestroy, uintptr(x)) }

// GraphDestroy is cuGraphDestroy.
func (l *Lib) GraphDestroy(g Graph) error { return l.call(pGraphDestroy, uintptr(g)) }
