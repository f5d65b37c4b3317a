package driver

// proc names one driver entry point. The table below is the complete list of
// foreign functions this project calls; Open resolves each one and Lib.call
// refuses to call one that did not resolve.
type proc struct {
	name string // exported symbol in libcuda.so.1 (the _v2 names are the current ABI)
	doc  string // the function's documentation
}

// procID indexes procs and Lib.addr.
type procID int

const docBase = "https://docs.nvidia.com/cuda/cuda-driver-api/"

// The driver entry points, one line each. Keep this list in the order of the
// driver API documentation's groups; append freely (the IDs are not on any wire).
const (
	pGetErrorName procID = iota
	pGetErrorString
	pInit
	pDriverGetVersion
	pDeviceGet
	pDeviceGetCount
	pDeviceGetName
	pDeviceTotalMem
	pDeviceGetAttribute
	pDeviceCanAccessPeer
	pDevicePrimaryCtxRetain
	pDevicePrimaryCtxRelease
	pCtxSetCurrent
	pCtxSynchronize
	pCtxEnablePeerAccess
	pMemGetInfo
	pMemAlloc
	pMemFree
	pMemAllocHost
	pMemHostAlloc
	pMemFreeHost
	pMemHostGetDevicePointer
	pMemHostRegister
	pMemHostUnregister
	pMemAllocManaged
	pIpcGetMemHandle
	pIpcOpenMemHandle
	pIpcCloseMemHandle
	pMemGetAddressRange
	pMemcpyAsync
	pMemcpyHtoD
	pMemcpyDtoH
	pMemcpyHtoDAsync
	pMemcpyDtoHAsync
	pMemcpyDtoDAsync
	pMemcpyPeerAsync
	pMemcpy2DAsync
	pMemcpy3DAsync
	pMemcpy3DPeerAsync
	pMemsetD8Async
	pMemsetD32Async
	pMemsetD16Async
	pPointerGetAttribute
	pStreamCreate
	pStreamDestroy
	pStreamSynchronize
	pStreamQuery
	pStreamWaitEvent
	pStreamBeginCapture
	pStreamEndCapture
	pLaunchHostFunc
	pEventCreate
	pEventRecord
	pEventQuery
	pEventSynchronize
	pEventDestroy
	pEventElapsedTime
	pModuleLoadData
	pModuleUnload
	pModuleGetFunction
	pFuncGetAttribute
	pFuncSetAttribute
	pLaunchKernel
	pGraphInstantiate
	pGraphLaunch
	pGraphExecDestroy
	pGraphDestroy
	numProcs
)

var procs = [numProcs]proc{
	pGetErrorName:            {"cuGetErrorName", docBase + "group__CUDA__ERROR.html"},
	pGetErrorString:          {"cuGetErrorString", docBase + "group__CUDA__ERROR.html"},
	pInit:                    {"cuInit", docBase + "group__CUDA__INITIALIZE.html"},
	pDriverGetVersion:        {"cuDriverGetVersion", docBase + "group__CUDA__VERSION.html"},
	pDeviceGet:               {"cuDeviceGet", docBase + "group__CUDA__DEVICE.html"},
	pDeviceGetCount:          {"cuDeviceGetCount", docBase + "group__CUDA__DEVICE.html"},
	pDeviceGetName:           {"cuDeviceGetName", docBase + "group__CUDA__DEVICE.html"},
	pDeviceTotalMem:          {"cuDeviceTotalMem_v2", docBase + "group__CUDA__DEVICE.html"},
	pDeviceGetAttribute:      {"cuDeviceGetAttribute", docBase + "group__CUDA__DEVICE.html"},
	pDeviceCanAccessPeer:     {"cuDeviceCanAccessPeer", docBase + "group__CUDA__PEER__ACCESS.html"},
	pDevicePrimaryCtxRetain:  {"cuDevicePrimaryCtxRetain", docBase + "group__CUDA__PRIMARY__CTX.html"},
	pDevicePrimaryCtxRelease: {"cuDevicePrimaryCtxRelease_v2", docBase + "group__CUDA__PRIMARY__CTX.html"},
	pCtxSetCurrent:           {"cuCtxSetCurrent", docBase + "group__CUDA__CTX.html"},
	pCtxSynchronize:          {"cuCtxSynchronize", docBase + "group__CUDA__CTX.html"},
	pCtxEnablePeerAccess:     {"cuCtxEnablePeerAccess", docBase + "group__CUDA__PEER__ACCESS.html"},
	pMemGetInfo:              {"cuMemGetInfo_v2", docBase + "group__CUDA__MEM.html"},
	pMemAlloc:                {"cuMemAlloc_v2", docBase + "group__CUDA__MEM.html"},
	pMemFree:                 {"cuMemFree_v2", docBase + "group__CUDA__MEM.html"},
	pMemAllocHost:            {"cuMemAllocHost_v2", docBase + "group__CUDA__MEM.html"},
	pMemHostAlloc:            {"cuMemHostAlloc", docBase + "group__CUDA__MEM.html"},
	pMemFreeHost:             {"cuMemFreeHost", docBase + "group__CUDA__MEM.html"},
	pMemHostGetDevicePointer: {"cuMemHostGetDevicePointer_v2", docBase + "group__CUDA__MEM.html"},
	pMemHostRegister:         {"cuMemHostRegister_v2", docBase + "group__CUDA__MEM.html"},
	pMemHostUnregister:       {"cuMemHostUnregister", docBase + "group__CUDA__MEM.html"},
	pMemAllocManaged:         {"cuMemAllocManaged", docBase + "group__CUDA__MEM.html"},
	pIpcGetMemHandle:         {"cuIpcGetMemHandle", docBase + "group__CUDA__MEM.html"},
	pIpcOpenMemHandle:        {"cuIpcOpenMemHandle_v2", docBase + "group__CUDA__MEM.html"},
	pIpcCloseMemHandle:       {"cuIpcCloseMemHandle", docBase + "group__CUDA__MEM.html"},
	pMemGetAddressRange:      {"cuMemGetAddressRange_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpyAsync:             {"cuMemcpyAsync", docBase + "group__CUDA__MEM.html"},
	pMemcpyHtoD:              {"cuMemcpyHtoD_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpyDtoH:              {"cuMemcpyDtoH_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpyHtoDAsync:         {"cuMemcpyHtoDAsync_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpyDtoHAsync:         {"cuMemcpyDtoHAsync_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpyDtoDAsync:         {"cuMemcpyDtoDAsync_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpyPeerAsync:         {"cuMemcpyPeerAsync", docBase + "group__CUDA__MEM.html"},
	pMemcpy2DAsync:           {"cuMemcpy2DAsync_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpy3DAsync:           {"cuMemcpy3DAsync_v2", docBase + "group__CUDA__MEM.html"},
	pMemcpy3DPeerAsync:       {"cuMemcpy3DPeerAsync", docBase + "group__CUDA__MEM.html"},
	pMemsetD8Async:           {"cuMemsetD8Async", docBase + "group__CUDA__MEM.html"},
	pMemsetD32Async:          {"cuMemsetD32Async", docBase + "group__CUDA__MEM.html"},
	pMemsetD16Async:          {"cuMemsetD16Async", docBase + "group__CUDA__MEM.html"},
	pPointerGetAttribute:     {"cuPointerGetAttribute", docBase + "group__CUDA__UNIFIED.html"},
	pStreamCreate:            {"cuStreamCreate", docBase + "group__CUDA__STREAM.html"},
	pStreamDestroy:           {"cuStreamDestroy_v2", docBase + "group__CUDA__STREAM.html"},
	pStreamSynchronize:       {"cuStreamSynchronize", docBase + "group__CUDA__STREAM.html"},
	pStreamQuery:             {"cuStreamQuery", docBase + "group__CUDA__STREAM.html"},
	pStreamWaitEvent:         {"cuStreamWaitEvent", docBase + "group__CUDA__STREAM.html"},
	pStreamBeginCapture:      {"cuStreamBeginCapture_v2", docBase + "group__CUDA__STREAM.html"},
	pStreamEndCapture:        {"cuStreamEndCapture", docBase + "group__CUDA__STREAM.html"},
	pLaunchHostFunc:          {"cuLaunchHostFunc", docBase + "group__CUDA__EXEC.html"},
	pEventCreate:             {"cuEventCreate", docBase + "group__CUDA__EVENT.html"},
	pEventRecord:             {"cuEventRecord", docBase + "group__CUDA__EVENT.html"},
	pEventQuery:              {"cuEventQuery", docBase + "group__CUDA__EVENT.html"},
	pEventSynchronize:        {"cuEventSynchronize", docBase + "group__CUDA__EVENT.html"},
	pEventDestroy:            {"cuEventDestroy_v2", docBase + "group__CUDA__EVENT.html"},
	pEventElapsedTime:        {"cuEventElapsedTime", docBase + "group__CUDA__EVENT.html"},
	pModuleLoadData:          {"cuModuleLoadData", docBase + "group__CUDA__MODULE.html"},
	pModuleUnload:            {"cuModuleUnload", docBase + "group__CUDA__MODULE.html"},
	pModuleGetFunction:       {"cuModuleGetFunction", docBase + "group__CUDA__MODULE.html"},
	pFuncGetAttribute:        {"cuFuncGetAttribute", docBase + "group__CUDA__EXEC.html"},
	pFuncSetAttribute:        {"cuFuncSetAttribute", docBase + "group__CUDA__EXEC.html"},
	pLaunchKernel:            {"cuLaunchKernel", docBase + "group__CUDA__EXEC.html"},
	pGraphInstantiate:        {"cuGraphInstantiateWithFlags", docBase + "group__CUDA__GRAPH.html"},
	pGraphLaunch:             {"cuGraphLaunch", docBase + "group__CUDA__GRAPH.html"},
	pGraphExecDestroy:        {"cuGraphExecDestroy", docBase + "group__CUDA__GRAPH.html"},
	pGraphDestroy:            {"cuGraphDestroy", docBase + "group__CUDA__GRAPH.html"},
}
