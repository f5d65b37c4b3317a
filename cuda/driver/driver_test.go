package driver

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// TestProcsListed: every entry point has a symbol name and a documentation
// link, and no symbol is listed twice (STYLE.md "Foreign functions, one line
// each").
func TestProcsListed(t *testing.T) {
	seen := map[string]bool{}
	for i, p := range procs {
		if p.name == "" || !strings.HasPrefix(p.name, "cu") {
			t.Errorf("procs[%d] = %q, want a cu* symbol", i, p.name)
		}
		if !strings.HasPrefix(p.doc, docBase) {
			t.Errorf("procs[%d] (%s) doc = %q, want a link under %s", i, p.name, p.doc, docBase)
		}
		if seen[p.name] {
			t.Errorf("procs lists %s twice", p.name)
		}
		seen[p.name] = true
	}
}

// TestUnresolvedCallFails: a symbol the driver does not export is an error
// naming it, never a call through a nil pointer.
func TestUnresolvedCallFails(t *testing.T) {
	var l Lib // nothing resolved
	_, err := l.MemAlloc(1 << 20)
	var e *Error
	if !errors.As(err, &e) || e.Call != "cuMemAlloc_v2" {
		t.Fatalf("MemAlloc on an empty Lib = %v, want an *Error for cuMemAlloc_v2", err)
	}
	if !errors.Is(err, ErrNotResolved) {
		t.Errorf("errors.Is(%v, ErrNotResolved) = false, want true", err)
	}
	if got := len(l.Missing()); got != int(numProcs) {
		t.Errorf("Missing() lists %d symbols, want all %d", got, numProcs)
	}
	if l.Resolved("cuInit") {
		t.Errorf("Resolved(cuInit) on an empty Lib = true")
	}
}

// TestOpenNoDriver: a missing library is ErrNoDriver, not a crash.
func TestOpenNoDriver(t *testing.T) {
	_, err := Open("libcuda-acpp-does-not-exist.so.9")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open(missing) = %v, want ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "install the NVIDIA driver") {
		t.Errorf("error %q does not say what to do", err)
	}
}

// TestErrorMapping: CUresults map to names and sentinels; the message names
// the call and the CUDA error name.
func TestErrorMapping(t *testing.T) {
	var l Lib // no driver: names come from the fallback table
	tests := []struct {
		code     Result
		name     string
		sentinel error
	}{
		{ErrorOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY", ErrOutOfMemory},
		{ErrorNotReady, "CUDA_ERROR_NOT_READY", ErrNotReady},
		{ErrorNoDevice, "CUDA_ERROR_NO_DEVICE", ErrNoDevice},
		{ErrorIllegalAddr, "CUDA_ERROR_ILLEGAL_ADDRESS", nil},
		{Result(12345), "CUresult 12345", nil},
	}
	for _, tc := range tests {
		err := l.newError(pMemAlloc, tc.code)
		if err.Name != tc.name {
			t.Errorf("newError(%d).Name = %q, want %q", tc.code, err.Name, tc.name)
		}
		if !strings.Contains(err.Error(), "cuMemAlloc_v2") || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("newError(%d).Error() = %q, want the call and %s", tc.code, err.Error(), tc.name)
		}
		for _, s := range []error{ErrOutOfMemory, ErrNotReady, ErrNoDevice, ErrNotResolved} {
			if got, want := errors.Is(err, s), s == tc.sentinel; got != want {
				t.Errorf("errors.Is(%s, %v) = %v, want %v", tc.name, s, got, want)
			}
		}
	}
}

// TestCopyDescriptorLayout: the Go structs match cuda.h's CUDA_MEMCPY2D,
// CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER on 64-bit platforms.
func TestCopyDescriptorLayout(t *testing.T) {
	var m2 Memcpy2D
	var m3 Memcpy3D
	var mp Memcpy3DPeer
	tests := []struct {
		what      string
		got, want uintptr
	}{
		{"sizeof(CUDA_MEMCPY2D)", unsafe.Sizeof(m2), 128},
		{"CUDA_MEMCPY2D.srcHost", unsafe.Offsetof(m2.SrcHost), 24},
		{"CUDA_MEMCPY2D.dstXInBytes", unsafe.Offsetof(m2.DstXInBytes), 56},
		{"CUDA_MEMCPY2D.WidthInBytes", unsafe.Offsetof(m2.WidthInBytes), 112},
		{"sizeof(CUDA_MEMCPY3D)", unsafe.Sizeof(m3), 200},
		{"CUDA_MEMCPY3D.srcHost", unsafe.Offsetof(m3.SrcHost), 40},
		{"CUDA_MEMCPY3D.srcPitch", unsafe.Offsetof(m3.SrcPitch), 72},
		{"CUDA_MEMCPY3D.dstXInBytes", unsafe.Offsetof(m3.DstXInBytes), 88},
		{"CUDA_MEMCPY3D.WidthInBytes", unsafe.Offsetof(m3.WidthInBytes), 176},
		{"sizeof(CUDA_MEMCPY3D_PEER)", unsafe.Sizeof(mp), 200},
		{"CUDA_MEMCPY3D_PEER.srcContext", unsafe.Offsetof(mp.SrcContext), 64},
		{"CUDA_MEMCPY3D_PEER.dstContext", unsafe.Offsetof(mp.DstContext), 152},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.what, tc.got, tc.want)
		}
	}
}

const smokePTX = `.version 7.0
.target sm_52
.address_size 64
.visible .entry add1(.param .u64 p, .param .u32 n)
{
 .reg .pred q; .reg .b32 r<6>; .reg .b64 rd<5>;
 ld.param.u64 rd1, [p]; ld.param.u32 r1, [n];
 mov.u32 r2, %ctaid.x; mov.u32 r3, %ntid.x; mov.u32 r4, %tid.x;
 mad.lo.s32 r2, r2, r3, r4;
 setp.ge.u32 q, r2, r1; @q bra DONE;
 cvta.to.global.u64 rd2, rd1; mul.wide.u32 rd3, r2, 4; add.s64 rd4, rd2, rd3;
 ld.global.u32 r5, [rd4]; add.s32 r5, r5, 1; st.global.u32 [rd4], r5;
DONE: ret;
}
`

// openGPU returns the driver and device 0, or skips the test on a machine
// without a driver or a GPU.
func openGPU(t *testing.T) (*Lib, Device) {
	t.Helper()
	l, err := Open("")
	if err != nil {
		t.Skipf("no CUDA driver on this machine (%v); GPU tests run on the GPU machine (docs/CUDA.md)", err)
	}
	if err := l.Init(); err != nil {
		t.Skipf("cuInit: %v; no usable GPU here", err)
	}
	n, err := l.DeviceGetCount()
	if err != nil || n == 0 {
		t.Skipf("no CUDA device (count %d, %v)", n, err)
	}
	d, err := l.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	return l, d
}

// TestDriverSmoke exercises the binding end to end on a GPU: attributes,
// context, allocations, copies, a PTX module, a launch through the
// parameter buffer, and driver-named errors.
func TestDriverSmoke(t *testing.T) {
	l, d := openGPU(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	name, err := l.DeviceGetName(d)
	if err != nil || name == "" {
		t.Fatalf("DeviceGetName = %q, %v", name, err)
	}
	major, _ := l.DeviceGetAttribute(AttrComputeCapabilityMajor, d)
	mem, _ := l.DeviceTotalMem(d)
	v, _ := l.DriverVersion()
	t.Logf("device 0: %s, cc %d, %d MiB, driver API %d, missing symbols %v", name, major, mem>>20, v, l.Missing())
	ctx, err := l.DevicePrimaryCtxRetain(d)
	if err != nil {
		t.Fatal(err)
	}
	defer l.DevicePrimaryCtxRelease(d)
	if err := l.CtxSetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	dp, err := l.MemAlloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.MemFree(dp)
	hp, err := l.MemHostAlloc(n*4, MemHostAllocPortable|MemHostAllocDeviceMap)
	if err != nil {
		t.Fatal(err)
	}
	defer l.MemFreeHost(hp)
	h := unsafe.Slice((*uint32)(HostPointer(hp)), n)
	for i := range h {
		h[i] = uint32(i)
	}
	if err := l.MemcpyHtoD(dp, hp, n*4); err != nil {
		t.Fatal(err)
	}
	mod, err := l.ModuleLoadData([]byte(smokePTX))
	if err != nil {
		t.Fatal(err)
	}
	defer l.ModuleUnload(mod)
	f, err := l.ModuleGetFunction(mod, "add1")
	if err != nil {
		t.Fatal(err)
	}
	params := make([]byte, 12)
	*(*uint64)(unsafe.Pointer(&params[0])) = uint64(dp)
	*(*uint32)(unsafe.Pointer(&params[8])) = n
	s, err := l.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer l.StreamDestroy(s)
	if err := l.LaunchKernel(f, &LaunchConfig{Grid: [3]uint32{(n + 127) / 128, 1, 1}, Block: [3]uint32{128, 1, 1}, Stream: s}, params); err != nil {
		t.Fatal(err)
	}
	if err := l.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if err := l.MemcpyDtoH(hp, dp, n*4); err != nil {
		t.Fatal(err)
	}
	for i := range h {
		if h[i] != uint32(i)+1 {
			t.Fatalf("after add1: h[%d] = %d, want %d", i, h[i], i+1)
		}
	}
	_, err = l.ModuleGetFunction(mod, "nope")
	var e *Error
	if !errors.As(err, &e) || e.Name != "CUDA_ERROR_NOT_FOUND" || e.Call != "cuModuleGetFunction" {
		t.Errorf("ModuleGetFunction(nope) = %v, want cuModuleGetFunction: CUDA_ERROR_NOT_FOUND", err)
	}
	if _, err := l.MemAlloc(1 << 52); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("MemAlloc(4 PiB) = %v, want ErrOutOfMemory", err)
	}
	if os.Getenv("ACPP_CUDA_VERBOSE") != "" {
		t.Logf("ok")
	}
}

// TestContextLostRecorded: a call that returns a code which loses the
// process's CUDA state (a kernel fault) is recorded once, first error
// kept, and matches ErrContextLost; other failures are not.
func TestContextLostRecorded(t *testing.T) {
	code := uintptr(ErrorOutOfMemory)
	var l Lib
	l.addr[pMemAlloc] = purego.NewCallback(func(p, size uintptr) uintptr { return code })
	if _, err := l.MemAlloc(1); err == nil || errors.Is(err, ErrContextLost) || l.Lost() != nil {
		t.Fatalf("out of memory: err %v, Lost %v; want an error that is no context loss", err, l.Lost())
	}
	code = uintptr(ErrorIllegalAddr)
	_, err := l.MemAlloc(1)
	if !errors.Is(err, ErrContextLost) {
		t.Fatalf("CUDA_ERROR_ILLEGAL_ADDRESS: %v, want it to match ErrContextLost", err)
	}
	first := l.Lost()
	if first == nil || first.Code != ErrorIllegalAddr {
		t.Fatalf("Lost() = %v, want the illegal address error", first)
	}
	code = uintptr(ErrorLaunchFailed)
	if _, err := l.MemAlloc(1); !errors.Is(err, ErrContextLost) || l.Lost() != first {
		t.Errorf("a second loss: %v, Lost %v; want ErrContextLost and the first error kept", err, l.Lost())
	}
	for _, r := range []Result{ErrorHWStack, ErrorIllegalInstr, ErrorMisaligned, ErrorAddrSpace, ErrorInvalidPC} {
		if !r.ContextLost() || !strings.HasPrefix(fallbackNames[r], "CUDA_ERROR_") {
			t.Errorf("code %d: ContextLost %v, name %q", r, r.ContextLost(), fallbackNames[r])
		}
	}
	for _, r := range []Result{ErrorLaunchOOR, ErrorInvalidValue, ErrorNotReady, ErrorInvalidPTX} {
		if r.ContextLost() {
			t.Errorf("code %d counted as a lost context", r)
		}
	}
}
