package cuda

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/acpp/acpp/cuda/nvrtc"
	"github.com/acpp/acpp/device"
)

// A kernel of the user's, in CUDA C, with its Go twin: y = a*x + y*y.
const saxpySqSrc = `// saxpy_sq: y[i] = a*x[i] + y[i]*y[i]
#include "acpp.cuh"

extern "C" __global__ void saxpy_sq(acpp_nd nd, float a, const float *x, float *y) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  u64 i = id[2] + nd.offset[2];
  y[i] = a * x[i] + y[i] * y[i];
}
`

func saxpySqGo(a float32, x, y []float32) []float32 {
	out := make([]float32, len(y))
	for i := range y {
		out[i] = float32(a*x[i]) + float32(y[i]*y[i])
	}
	return out
}

var saxpySqParams = []device.Param{
	{Name: "a", Kind: device.ArgScalar, Space: device.Private, ElemSize: 4},
	{Name: "x", Kind: device.ArgPointer, Space: device.Global, ElemSize: 4},
	{Name: "y", Kind: device.ArgPointer, Space: device.Global, ElemSize: 4},
}

// TestCUDACSourceMatchesGo_NVRTC: a kernel given as CUDA C source
// (device.Kernel.CUDA) is compiled by NVRTC for the GPU on its first
// launch, runs, and matches its Go implementation bit for bit; a second
// device (a new process's compiler on the same cache) loads it from the
// disk cache without compiling; a compile error names file:line of the
// user's source; a kernel whose name C++ mangled is refused with the fix.
func TestCUDACSourceMatchesGo_NVRTC(t *testing.T) {
	cache := t.TempDir()
	comp := nvrtc.NewCompiler(nvrtc.Config{CacheDir: cache})
	var logs bytes.Buffer
	devs := openGPUs(t, Config{NVRTC: comp, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	d := devs[0]
	if _, err := comp.Lib(); errors.Is(err, nvrtc.ErrNoNVRTC) {
		t.Skipf("GPU but no libnvrtc: %v", err)
	}
	k := &device.Kernel{Name: "saxpy_sq", Params: saxpySqParams, CUDA: &device.CUDA{
		Source: []byte(saxpySqSrc), Entry: "saxpy_sq", File: "saxpy_sq.cu", Options: []string{"--fmad=false"}}}
	if !k.Has(device.FormPTX) || !d.Info().Caps.RunsKernel(k) {
		t.Fatalf("a CUDA C kernel does not count as runnable on %s", d.info.ID)
	}
	r := rand.New(rand.NewPCG(3, 4))
	n := 1<<20 + 5
	a := float32(0.75)
	run := func(d *Device, k *device.Kernel) {
		t.Helper()
		xb, yb := randFloats(r, n), randFloats(r, n)
		x, y := upload(t, d, xb), upload(t, d, yb)
		if err := do(t, d, 1, device.LaunchOp{Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, n}},
			Args: []device.Arg{scalarF32(a), ptrArg(x, 4), ptrArg(y, 4)}}); err != nil {
			t.Fatal(err)
		}
		sameBits(t, "y", f32s(download(t, d, y)), saxpySqGo(a, f32s(xb), f32s(yb)))
	}
	run(d, k)
	run(d, k) // the device's own PTX, no compiler call
	if got := strings.Count(logs.String(), "cuda c kernel ready"); got != 1 || !strings.Contains(logs.String(), "cached=false") {
		t.Fatalf("after two launches the log says:\n%s\nwant one compilation", logs.String())
	}

	// Another process: a new compiler on the same cache, a freshly opened
	// device. Its first launch reads the PTX from disk.
	for _, d := range devs {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	logs.Reset()
	d2 := openGPUs(t, Config{NVRTC: nvrtc.NewCompiler(nvrtc.Config{CacheDir: cache}), Logger: slog.New(slog.NewTextHandler(&logs, nil))})[0]
	run(d2, k)
	if !strings.Contains(logs.String(), "cached=true") {
		t.Fatalf("second process's first launch logged:\n%s\nwant cached=true (no compilation)", logs.String())
	}
	t.Logf("%s", logs.String())

	// Unloading the source drops the module; the next launch loads it again.
	if err := d2.UnloadModule(k.CUDA.Source); err != nil {
		t.Fatal(err)
	}
	run(d2, k)

	t.Run("compile error at file:line", func(t *testing.T) {
		bad := strings.Replace(saxpySqSrc, "y[i] = a * x[i]", "y[i] = a * xx[i]", 1)
		kb := &device.Kernel{Name: "bad", Params: saxpySqParams, CUDA: &device.CUDA{Source: []byte(bad), Entry: "saxpy_sq", File: "kernels/bad.cu"}}
		m := mustAlloc(t, d2, device.MemDevice, 64)
		err := d2.Enqueue(0, device.LaunchOp{Kernel: kb, Range: device.NDRange{Global: [3]int{1, 1, 4}},
			Args: []device.Arg{scalarF32(1), ptrArg(m, 4), ptrArg(m, 4)}}, func(error) {})
		var ce *nvrtc.CompileError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "kernels/bad.cu:8: error") {
			t.Fatalf("Enqueue(bad) = %v, want a compile error at kernels/bad.cu:8", err)
		}
		t.Logf("%v", err)
	})
	t.Run("mangled name", func(t *testing.T) {
		src := strings.Replace(saxpySqSrc, `extern "C" `, "", 1)
		km := &device.Kernel{Name: "mangled", Params: saxpySqParams, CUDA: &device.CUDA{Source: []byte(src), Entry: "saxpy_sq"}}
		m := mustAlloc(t, d2, device.MemDevice, 64)
		err := d2.Enqueue(0, device.LaunchOp{Kernel: km, Range: device.NDRange{Global: [3]int{1, 1, 4}},
			Args: []device.Arg{scalarF32(1), ptrArg(m, 4), ptrArg(m, 4)}}, func(error) {})
		if !errors.Is(err, device.ErrNoImplementation) || !strings.Contains(err.Error(), `extern "C"`) {
			t.Fatalf("Enqueue(mangled) = %v, want ErrNoImplementation saying extern \"C\"", err)
		}
	})
}

// TestCUDACSourceWithoutNVRTC: on a GPU machine whose libnvrtc is missing,
// a CUDA C kernel is refused with how to install it, and a PTX kernel
// still runs.
func TestCUDACSourceWithoutNVRTC(t *testing.T) {
	d := openGPUs(t, Config{NVRTC: nvrtc.NewCompiler(nvrtc.Config{Library: "/nonexistent/libnvrtc.so"})})[0]
	m := mustAlloc(t, d, device.MemDevice, 64)
	k := &device.Kernel{Name: "saxpy_sq", Params: saxpySqParams, CUDA: &device.CUDA{Source: []byte(saxpySqSrc), Entry: "saxpy_sq"}}
	err := d.Enqueue(0, device.LaunchOp{Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, 4}},
		Args: []device.Arg{scalarF32(1), ptrArg(m, 4), ptrArg(m, 4)}}, func(error) {})
	if !errors.Is(err, nvrtc.ErrNoNVRTC) || !errors.Is(err, device.ErrNoImplementation) || !strings.Contains(err.Error(), "cuda-nvrtc") {
		t.Fatalf("Enqueue without libnvrtc = %v, want ErrNoNVRTC saying how to install it", err)
	}
	if err := do(t, d, 0, device.LaunchOp{Kernel: builtin(t, "saxpy"), Range: device.NDRange{Global: [3]int{1, 1, 4}},
		Args: []device.Arg{scalarF32(1), ptrArg(m, 4), ptrArg(m, 4)}}); err != nil {
		t.Fatalf("a PTX kernel without libnvrtc: %v", err)
	}
}

// BenchmarkCUDACFirstLaunch: the first launch of a CUDA C kernel on a
// device, through Enqueue to completion, when NVRTC compiles it
// ("compile": no disk cache), when the PTX comes from the disk cache
// ("cached": what a second run, or a second node on the host, pays), and
// for the same kernel shipped as PTX ("ptx": module load and launch only,
// the baseline). Each iteration launches a fresh copy of the source (a new
// module to the device) and unloads it afterwards.
func BenchmarkCUDACFirstLaunch(b *testing.B) {
	cache := b.TempDir()
	warm := nvrtc.NewCompiler(nvrtc.Config{CacheDir: cache})
	d := openGPUs(b, Config{NVRTC: warm})[0]
	if _, err := warm.Lib(); err != nil {
		b.Skip(err)
	}
	m := mustAlloc(b, d, device.MemDevice, 4*1024)
	args := []device.Arg{scalarF32(1), ptrArg(m, 4), ptrArg(m, 4)}
	base := &device.Kernel{Name: "saxpy_sq", Params: saxpySqParams, CUDA: &device.CUDA{
		Source: []byte(saxpySqSrc), Entry: "saxpy_sq", File: "saxpy_sq.cu", Options: []string{"--fmad=false"}}}
	compiled, err := d.fromSource(base) // fills the disk cache
	if err != nil {
		b.Fatal(err)
	}
	launch := func(b *testing.B, d *Device, k *device.Kernel, mod []byte) {
		if err := do(b, d, 0, device.LaunchOp{Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, 1024}}, Args: args}); err != nil {
			b.Fatal(err)
		}
		if err := d.UnloadModule(mod); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		dir  string
	}{{"compile", "off"}, {"cached", cache}} {
		b.Run(c.name, func(b *testing.B) {
			d.cfg.NVRTC = nvrtc.NewCompiler(nvrtc.Config{CacheDir: c.dir})
			if _, err := d.cfg.NVRTC.Lib(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				k := *base
				cu := *base.CUDA
				cu.Source = []byte(saxpySqSrc)
				k.CUDA = &cu
				launch(b, d, &k, cu.Source)
			}
		})
	}
	b.Run("ptx", func(b *testing.B) {
		for b.Loop() {
			k := *compiled
			k.PTX = &device.PTX{Module: bytes.Clone(compiled.PTX.Module), Entry: "saxpy_sq"}
			launch(b, d, &k, k.PTX.Module)
		}
	})
}
