package node_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/proto"
)

// srcDevice is a PTX device that "compiles" CUDA C like the CUDA backend
// does (device.KernelPreparer): a source containing "#error" fails at
// line 2 of its file; any other source runs as the emulated saxpy. It
// records what it prepared and which modules it was told to unload.
type srcDevice struct {
	*ptxDevice
	mu       sync.Mutex
	prepared []string // guarded by mu: kernel names
	unloaded [][]byte // guarded by mu
}

func (d *srcDevice) PrepareKernel(k *device.Kernel) error {
	d.mu.Lock()
	d.prepared = append(d.prepared, k.Name)
	d.mu.Unlock()
	if k.CUDA != nil && bytes.Contains(k.CUDA.Source, []byte("#error")) {
		return &fakeCompileError{k.CUDA.File + ":2: error: #error directive"}
	}
	return nil
}

type fakeCompileError struct{ s string }

func (e *fakeCompileError) Error() string { return "nvrtc: does not compile:\n" + e.s }

func (d *srcDevice) Enqueue(q int, op device.Op, done func(error)) error {
	if l, ok := op.(device.LaunchOp); ok && l.Kernel != nil && l.Kernel.PTX == nil && l.Kernel.CUDA != nil {
		k := *l.Kernel
		k.PTX = &device.PTX{Module: k.CUDA.Source, Entry: k.CUDA.Entry}
		l.Kernel = &k
		op = l
	}
	return d.ptxDevice.Enqueue(q, op, done)
}

func (d *srcDevice) UnloadModule(mod []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unloaded = append(d.unloaded, mod)
	return nil
}

func (d *srcDevice) state() (prepared []string, unloaded [][]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.prepared...), append([][]byte(nil), d.unloaded...)
}

// TestJobKernelsCUDASource: a job ships a kernel as CUDA C source
// (proto.KernelSpec.CUDA); the node prepares (compiles) it on each of its
// PTX devices when it is registered, launches it, and unloads it by its
// source when the job ends; a source that does not compile is refused at
// registration with the compiler's file:line.
func TestJobKernelsCUDASource(t *testing.T) {
	dev := &srcDevice{ptxDevice: newPTXDevice()}
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.ExtraDevices = []device.Device{dev} })
	c := startClient(t, credDir, "alice", nodes...)
	mem, ok := memOf(t, c, "n0", "fake:0")
	if !ok {
		t.Fatal("n0 has no fake:0")
	}
	spec := saxpySpec("job.saxpy_cu")
	src := []byte("#include \"acpp.cuh\"\nextern \"C\" __global__ void saxpy(acpp_nd nd, float a, const float *x, float *y) {}\n")
	spec.PTX, spec.CUDA, spec.File, spec.Options = nil, src, "kernels/saxpy.cu", []string{"--fmad=false"}

	j := openJob(t, c, "n0", 1)
	got, err := j.RegisterKernels(testCtx(t), spec)
	if err != nil || got.Kernels != 1 || got.Bytes != uint64(len(src)) {
		t.Fatalf("RegisterKernels(CUDA C) = %+v, %v; want 1 kernel of %d bytes", got, err, len(src))
	}
	if p, _ := dev.state(); len(p) != 1 || p[0] != "job.saxpy_cu" {
		t.Fatalf("device prepared %v at registration, want [job.saxpy_cu]", p)
	}
	if _, err := j.RegisterKernels(testCtx(t), spec); err != nil {
		t.Fatalf("registering the same CUDA C kernel again = %v, want nil (a retry)", err)
	}
	other := spec
	other.Options = []string{"-use_fast_math"}
	if _, err := j.RegisterKernels(testCtx(t), other); err == nil || !strings.Contains(err.Error(), "different kernel") {
		t.Fatalf("registering other options under the same name = %v, want a refusal", err)
	}
	const n = 64
	if msg := launchErr(t, j, saxpyJob(t, j, mem, "job.saxpy_cu", "fake:0", n)); msg != "" {
		t.Fatalf("launch of the CUDA C kernel failed: %s", msg)
	}
	out := make([]byte, 4*n)
	if err := j.ReadBack(testCtx(t), 6, []uint64{5}, 2, mem, [3]uint64{1, 1, n}, 4, []proto.Box{{Hi: [3]uint64{1, 1, n}}}, out); err != nil {
		t.Fatal(err)
	}
	if want := bytes.Repeat(f32(5), n); !bytes.Equal(out, want) {
		t.Fatalf("y after 3*x+y = %v…, want 5 everywhere", out[:8])
	}
	if ls := dev.launches(); len(ls) != 1 || ls[0].CUDA == nil || !bytes.Equal(ls[0].CUDA.Source, src) || ls[0].CUDA.File != "kernels/saxpy.cu" {
		t.Fatalf("device saw launches %+v, want job.saxpy_cu with the shipped source", ls)
	}

	bad := spec
	bad.Name, bad.CUDA = "job.bad", []byte("// line 1\n#error no\n")
	_, err = j.RegisterKernels(testCtx(t), bad)
	// "kernels/saxpy.cu:2: error" from the fake; a real NVRTC (on a GPU
	// machine, for cuda:0) says "kernels/saxpy.cu:2: catastrophic error".
	if err == nil || !strings.Contains(err.Error(), "kernels/saxpy.cu:2: ") || !strings.Contains(err.Error(), "error") || !strings.Contains(err.Error(), "job.bad") {
		t.Fatalf("RegisterKernels(bad source) = %v, want the compile error at kernels/saxpy.cu:2", err)
	}

	if err := j.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, un := dev.state()
		if len(un) == 1 && bytes.Equal(un[0], src) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the job closed the device unloaded %d modules, want the source once", len(un))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
