package nvrtc

import (
	"errors"
	"strings"
	"testing"
)

// realCompiler loads the machine's libnvrtc or skips: these tests run on
// the GPU machine (docs/CUDA.md), where the CUDA toolkit's libnvrtc is.
func realCompiler(tb testing.TB, dir string) *Compiler {
	tb.Helper()
	c := NewCompiler(Config{CacheDir: dir})
	lib, err := c.Lib()
	if errors.Is(err, ErrNoNVRTC) {
		tb.Skipf("no libnvrtc on this machine: %v", err)
	} else if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("libnvrtc %s, version %d.%d, archs %v", lib.Path, lib.Major, lib.Minor, lib.SupportedArchs())
	return c
}

const goodSrc = `extern "C" __global__ void scale(float a, float *y, unsigned long long n) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * y[i];
}
`

// The error is on line 4 (yy is undefined).
const badSrc = `extern "C" __global__ void scale(float a, float *y, unsigned long long n) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    yy[i] = a * y[i];
}
`

func TestCompileWithNVRTC(t *testing.T) {
	c := realCompiler(t, t.TempDir())
	p := Program{Source: []byte(goodSrc), Name: "scale.cu", Options: []string{"--fmad=false"}}
	r, err := c.Compile(p, 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cached || r.Arch != 90 || !strings.Contains(string(r.PTX), ".entry scale(") || !strings.Contains(string(r.PTX), ".target sm_90") {
		t.Fatalf("Compile = cached %v arch %d, PTX %.300q; want a fresh sm_90 module with entry scale", r.Cached, r.Arch, r.PTX)
	}
	r2, err := c.Compile(p, 9, 0)
	if err != nil || !r2.Cached || string(r2.PTX) != string(r.PTX) {
		t.Fatalf("second Compile = %v, %v; want the same PTX from the cache", r2, err)
	}
	_, err = c.Compile(Program{Source: []byte(badSrc), Name: "kernels/bad.cu"}, 9, 0)
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("Compile(bad) = %v, want a *CompileError", err)
	}
	t.Logf("the error a user sees:\n%v", err)
	ds := Diagnostics(ce.Log)
	if len(ds) == 0 || ds[0].File != "kernels/bad.cu" || ds[0].Line != 4 || !strings.Contains(ds[0].Msg, "error") {
		t.Fatalf("Diagnostics = %+v, want an error at kernels/bad.cu line 4", ds)
	}
	if !strings.Contains(err.Error(), "kernels/bad.cu:4: error") || !strings.Contains(err.Error(), `"yy"`) {
		t.Errorf("Compile(bad) = %q, want kernels/bad.cu:4: error naming yy", err)
	}
}

// BenchmarkNVRTC: compiling a small kernel with NVRTC ("compile", no
// cache) against reading its PTX from the disk cache ("cached"), for
// compute_90. docs/PERFORMANCE.md has the figures.
func BenchmarkNVRTC(b *testing.B) {
	p := Program{Source: []byte(goodSrc), Name: "scale.cu", Options: []string{"--fmad=false"}}
	b.Run("compile", func(b *testing.B) {
		c := realCompiler(b, "off")
		for b.Loop() {
			if r, err := c.Compile(p, 9, 0); err != nil || r.Cached {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := realCompiler(b, b.TempDir())
		if _, err := c.Compile(p, 9, 0); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if r, err := c.Compile(p, 9, 0); err != nil || !r.Cached {
				b.Fatal(err)
			}
		}
	})
}
