package nvrtc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A log as NVRTC 13 prints it for a program named "saxpy.cu".
const sampleLog = `saxpy.cu(4): error: identifier "yy" is undefined
      yy[i] = a * x[i] + y[i];
      ^

saxpy.cu(6): warning #177-D: variable "unused" was declared but never referenced
    int unused;
        ^

1 error detected in the compilation of "saxpy.cu".`

func TestMapLog(t *testing.T) {
	got := MapLog(sampleLog)
	for _, want := range []string{
		"saxpy.cu:4: error: identifier \"yy\" is undefined\n",
		"saxpy.cu:6: warning #177-D: variable",
		"      yy[i] = a * x[i] + y[i];\n", // the excerpt stays
		`1 error detected in the compilation of "saxpy.cu".`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("MapLog(sample) = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "saxpy.cu(4)") {
		t.Errorf("MapLog(sample) kept NVRTC's form: %q", got)
	}
	// A path with directories keeps them.
	if got, want := MapLog("kernels/a b.cu(12): error: x\n"), "kernels/a b.cu:12: error: x\n"; got != want {
		t.Errorf("MapLog(path) = %q, want %q", got, want)
	}
}

func TestDiagnostics(t *testing.T) {
	got := Diagnostics(sampleLog)
	want := []Diagnostic{
		{"saxpy.cu", 4, `error: identifier "yy" is undefined`},
		{"saxpy.cu", 6, `warning #177-D: variable "unused" was declared but never referenced`},
	}
	if len(got) != len(want) {
		t.Fatalf("Diagnostics(sample) = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Diagnostics(sample)[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	e := &CompileError{Name: "saxpy.cu", Log: sampleLog}
	if !strings.Contains(e.Error(), "saxpy.cu:4: error") {
		t.Errorf("CompileError.Error() = %q, want file:line", e.Error())
	}
}

func TestKeyChangesWithEachInput(t *testing.T) {
	base := Program{Source: []byte("x"), Name: "a.cu", Options: []string{"-DN=1"}}
	k0 := Key(base, 90, 13, 0)
	if Key(base, 90, 13, 0) != k0 {
		t.Fatal("Key is not deterministic")
	}
	for name, k := range map[string]string{
		"source":  Key(Program{Source: []byte("y"), Name: "a.cu", Options: []string{"-DN=1"}}, 90, 13, 0),
		"name":    Key(Program{Source: []byte("x"), Name: "b.cu", Options: []string{"-DN=1"}}, 90, 13, 0),
		"options": Key(Program{Source: []byte("x"), Name: "a.cu", Options: []string{"-DN=2"}}, 90, 13, 0),
		"split":   Key(Program{Source: []byte("x"), Name: "a.cu", Options: []string{"-DN", "=1"}}, 90, 13, 0),
		"arch":    Key(base, 80, 13, 0),
		"version": Key(base, 90, 12, 8),
		"header":  Key(Program{Source: []byte("x"), Name: "a.cu", Options: []string{"-DN=1"}, Headers: map[string][]byte{"h": nil}}, 90, 13, 0),
	} {
		if k == k0 {
			t.Errorf("Key with another %s = the base key", name)
		}
	}
}

func TestPickArch(t *testing.T) {
	sup := []int{75, 80, 86, 89, 90, 100, 120}
	for _, c := range []struct{ cc, want int }{{90, 90}, {87, 86}, {121, 120}, {75, 75}} {
		if got, err := PickArch(c.cc, sup); err != nil || got != c.want {
			t.Errorf("PickArch(%d) = %d, %v, want %d", c.cc, got, err, c.want)
		}
	}
	if _, err := PickArch(70, sup); err == nil || !strings.Contains(err.Error(), "7.5") {
		t.Errorf("PickArch(70) = %v, want an error naming 7.5", err)
	}
	if got, _ := PickArch(90, nil); got != 90 {
		t.Errorf("PickArch(90, unknown) = %d, want 90", got)
	}
}

func TestMissingLibrary(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "libnvrtc.so"))
	if !errors.Is(err, ErrNoNVRTC) {
		t.Fatalf("Open(missing) = %v, want ErrNoNVRTC", err)
	}
	for _, want := range []string{"cuda-nvrtc", "LD_LIBRARY_PATH", "CUDA_PATH", "PTX"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(missing) = %q, want it to say %q", err, want)
		}
	}
	c := NewCompiler(Config{Library: filepath.Join(t.TempDir(), "libnvrtc.so")})
	if _, err := c.Compile(Program{Source: []byte("x")}, 9, 0); !errors.Is(err, ErrNoNVRTC) {
		t.Errorf("Compile without libnvrtc = %v, want ErrNoNVRTC", err)
	}
}

func TestCandidates(t *testing.T) {
	got := Candidates("/opt/cuda")
	for _, want := range []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/opt/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so"} {
		found := false
		for _, g := range got {
			found = found || g == want
		}
		if !found {
			t.Errorf("Candidates(/opt/cuda) = %v, want %s among them", got, want)
		}
	}
}

// fakeCompiler is a Compiler whose NVRTC is a function counting its calls.
func fakeCompiler(t *testing.T, dir string, calls *int) *Compiler {
	c := NewCompiler(Config{CacheDir: dir})
	c.once.Do(func() { c.lib = &Lib{Major: 13, Minor: 0}; c.dir = dir })
	c.raw = func(_ *Lib, p Program, opts []string) ([]byte, string, error) {
		src, name := p.Source, p.Name
		*calls++
		if strings.Contains(string(src), "bad") {
			return nil, "", &CompileError{Name: name, Log: name + "(1): error: bad"}
		}
		if !strings.HasPrefix(opts[0], "--gpu-architecture=compute_") {
			t.Errorf("options = %v, want the architecture first", opts)
		}
		return []byte(".version 9.0\n// " + opts[0] + "\n// " + string(src)), "", nil
	}
	return c
}

func TestCacheHitAndCorruptEntry(t *testing.T) {
	dir := t.TempDir()
	var calls int
	c := fakeCompiler(t, dir, &calls)
	p := Program{Source: []byte("kernel"), Name: "k.cu"}
	r1, err := c.Compile(p, 9, 0)
	if err != nil || r1.Cached || calls != 1 {
		t.Fatalf("first Compile = %+v, %v after %d calls, want a compilation", r1, err, calls)
	}
	r2, err := c.Compile(p, 9, 0)
	if err != nil || !r2.Cached || calls != 1 || string(r2.PTX) != string(r1.PTX) {
		t.Fatalf("second Compile = %+v, %v after %d calls, want the cached PTX", r2, err, calls)
	}
	// A second compiler (another process) sees the entry too.
	var calls2 int
	if r, err := fakeCompiler(t, dir, &calls2).Compile(p, 9, 0); err != nil || !r.Cached || calls2 != 0 {
		t.Fatalf("Compile in a second compiler = %+v, %v after %d calls, want a hit", r, err, calls2)
	}
	path := filepath.Join(dir, r1.Key+".ptx")
	for name, corrupt := range map[string]func([]byte) []byte{
		"flipped": func(b []byte) []byte { b[len(b)-2] ^= 1; return b },
		"torn":    func(b []byte) []byte { return b[:len(b)/2] },
		"empty":   func([]byte) []byte { return nil },
		"header":  func(b []byte) []byte { return b[len(entryMagic):] },
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, corrupt(b), 0o644); err != nil {
			t.Fatal(err)
		}
		before := calls
		r, err := c.Compile(p, 9, 0)
		if err != nil || r.Cached || calls != before+1 || string(r.PTX) != string(r1.PTX) {
			t.Errorf("Compile over a %s entry = %+v, %v (%d compilations), want a fresh compilation", name, r, err, calls-before)
		}
		if r, err := c.Compile(p, 9, 0); err != nil || !r.Cached {
			t.Errorf("Compile after rewriting a %s entry = %+v, %v, want a hit", name, r, err)
		}
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 1 {
		t.Errorf("cache dir holds %d files, want 1 (no temporaries left)", len(es))
	}
	// Another architecture is another entry; an error is not cached.
	if r, err := c.Compile(p, 8, 0); err != nil || r.Cached || r.Arch != 80 || !strings.Contains(string(r.PTX), "compute_80") {
		t.Errorf("Compile for 8.0 = %+v, %v, want a fresh compilation for compute_80", r, err)
	}
	bad := Program{Source: []byte("bad"), Name: "bad.cu"}
	for i := 0; i < 2; i++ {
		var ce *CompileError
		if _, err := c.Compile(bad, 9, 0); !errors.As(err, &ce) || !strings.Contains(err.Error(), "bad.cu:1: error: bad") {
			t.Fatalf("Compile(bad) = %v, want a CompileError at bad.cu:1", err)
		}
	}
	if _, err := c.Compile(Program{Source: []byte("x"), Options: []string{"--gpu-architecture=compute_70"}}, 9, 0); err == nil {
		t.Error("Compile with an architecture option succeeded, want it refused")
	}
}

func TestCacheOff(t *testing.T) {
	var calls int
	c := fakeCompiler(t, "", &calls)
	c.dir = ""
	for i := 0; i < 2; i++ {
		if r, err := c.Compile(Program{Source: []byte("k")}, 9, 0); err != nil || r.Cached {
			t.Fatalf("Compile without a cache = %+v, %v", r, err)
		}
	}
	if calls != 2 {
		t.Errorf("%d compilations without a cache, want 2", calls)
	}
}

func FuzzCacheEntry(f *testing.F) {
	f.Add(encodeEntry([]byte(".version 9.0\n")))
	f.Add([]byte(entryMagic + "00\nx"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ptx, ok := decodeEntry(b)
		if !ok {
			return
		}
		if got := encodeEntry(ptx); string(got) != string(b) {
			t.Fatalf("encodeEntry(decodeEntry(%q)) = %q", b, got)
		}
	})
}

func FuzzMapLog(f *testing.F) {
	f.Add(sampleLog)
	f.Add("a(1): error: x\nb(x): y")
	f.Fuzz(func(t *testing.T, log string) {
		m := MapLog(log)
		if strings.Count(m, "\n") != strings.Count(log, "\n") {
			t.Fatalf("MapLog changed the number of lines: %q -> %q", log, m)
		}
		for _, d := range Diagnostics(log) {
			if d.Line < 0 || strings.Contains(d.File, "\n") {
				t.Fatalf("Diagnostics(%q) gave %+v", log, d)
			}
		}
	})
}
