package nvrtc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// workerEnv makes the test binary a fake worker (TestMain): the value
// says how it behaves.
const workerEnv = "ACPP_NVRTC_TEST_WORKER"

func TestMain(m *testing.M) {
	switch os.Getenv(workerEnv) {
	case "":
		goleak.VerifyTestMain(m) // every goroutine a test starts (a worker's pipes, its reaper) stops with it
	case "ok": // compiles as fakeCompiler does: "bad" in the source is a compile error
		err := serveWorker(os.Stdin, os.Stdout, func(req workerRequest) ([]byte, string, error) {
			if strings.Contains(string(req.Program.Source), "bad") {
				return nil, "", &CompileError{Name: req.Program.Name, Log: req.Program.Name + "(1): error: bad"}
			}
			return []byte(".version 9.0\n// " + req.Options[0] + " in pid " + strings.Repeat("x", 1) + "\n// " + string(req.Program.Source)), "a warning", nil
		})
		if err != nil {
			os.Exit(3)
		}
	case "grow": // a compilation that keeps allocating, as a source can make NVRTC do
		err := serveWorker(os.Stdin, os.Stdout, func(req workerRequest) ([]byte, string, error) {
			var keep [][]byte
			for i := 0; i < 64; i++ { // 4 GiB in all, touched
				b := make([]byte, 64<<20)
				for j := range b {
					b[j] = byte(j)
				}
				keep = append(keep, b)
			}
			return nil, fmt.Sprint(len(keep)), errors.New("grew 4 GiB and was not stopped")
		})
		if err != nil {
			os.Exit(3)
		}
	case "hang":
		time.Sleep(time.Hour)
	case "crash": // as NVRTC crashing would: Go's handler reports the signal and exits 2
		os.Stderr.WriteString("SIGSEGV: segmentation violation\nPC=0x7f00 m=0 sigcode=1\n\ngoroutine 1 [running]:\n")
		os.Exit(2)
	case "oom": // as the out-of-memory killer would
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "garbage":
		os.Stdout.WriteString("not json")
	}
	os.Exit(0)
}

// workerCompiler is fakeCompiler compiling in worker processes of the
// test binary that behave as mode says.
func workerCompiler(t *testing.T, mode string, timeout time.Duration) *Compiler {
	t.Helper()
	calls := 0
	c := fakeCompiler(t, t.TempDir(), &calls)
	t.Setenv(workerEnv, mode) // the child inherits it; this process has passed TestMain
	if err := c.UseWorker(Worker{Command: []string{os.Args[0]}, Timeout: timeout}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if calls != 0 {
			t.Errorf("the in-process compiler ran %d times; every compilation belongs in a worker", calls)
		}
	})
	return c
}

// TestWorkerCompiles: with a Worker, compilations run in processes of
// their own (the caller's compiler is never called), compile errors come
// back as *CompileError with the log, and the cache still serves repeats
// without a process.
func TestWorkerCompiles(t *testing.T) {
	c := workerCompiler(t, "ok", time.Minute)
	r, err := c.Compile(Program{Source: []byte("good"), Name: "k.cu"}, 9, 0)
	if err != nil || !strings.Contains(string(r.PTX), "compute_90") || !strings.Contains(string(r.PTX), "good") || r.Log != "a warning" {
		t.Fatalf("Compile through a worker = %+v, %v", r, err)
	}
	t.Setenv(workerEnv, "crash") // a cache hit starts no worker
	if r2, err := c.Compile(Program{Source: []byte("good"), Name: "k.cu"}, 9, 0); err != nil || !r2.Cached {
		t.Fatalf("second Compile = %+v, %v; want a cache hit", r2, err)
	}
	t.Setenv(workerEnv, "ok")
	_, err = c.Compile(Program{Source: []byte("bad"), Name: "k.cu"}, 9, 0)
	var ce *CompileError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "k.cu:1: error: bad") {
		t.Errorf("a compile error through a worker = %v, want *CompileError at k.cu:1", err)
	}
}

// TestWorkerFailuresStayInTheWorker: a compiler that hangs is killed at
// the timeout, one that crashes or answers nonsense fails the Compile
// with a message saying so; the caller goes on either way.
func TestWorkerFailuresStayInTheWorker(t *testing.T) {
	for _, tc := range []struct {
		mode, want string
		timeout    time.Duration
	}{
		{"hang", "took longer than 1s; its compiler process was killed", time.Second},
		{"crash", "failed: exit status 2: SIGSEGV: segmentation violation", time.Minute},
		{"oom", "failed: killed by signal 9 (killed): out of memory?", time.Minute},
		{"garbage", "answered no result", time.Minute},
	} {
		c := workerCompiler(t, tc.mode, tc.timeout)
		start := time.Now()
		_, err := c.Compile(Program{Source: []byte("good " + tc.mode), Name: "k.cu"}, 9, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Compile = %v, want an error containing %q", tc.mode, err, tc.want)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%s: Compile took %v", tc.mode, d)
		}
	}
	// A worker that grows past its MaxMemory dies, not the caller.
	c := workerCompiler(t, "grow", time.Minute)
	w := c.worker.Load()
	w.MaxMemory = 1 << 30
	if _, err := c.Compile(Program{Source: []byte("good grow"), Name: "k.cu"}, 9, 0); err == nil || !strings.Contains(err.Error(), "the compiler process for k.cu failed") {
		t.Errorf("grow past MaxMemory: Compile = %v, want the worker's failure", err)
	} else {
		t.Logf("grow past MaxMemory: %v", err)
	}
	if err := NewCompiler(Config{}).UseWorker(Worker{Command: []string{"x"}, Timeout: -1}); err == nil {
		t.Error("UseWorker with a negative Timeout: nil error")
	}
}

// FuzzServeWorker: whatever a worker reads, it answers or fails with an
// error; it never panics.
func FuzzServeWorker(f *testing.F) {
	f.Add([]byte(`{"Library":"x","Program":{"Source":"Zm9v","Name":"k.cu"},"Options":["--gpu-architecture=compute_90"]}`))
	f.Add([]byte(`{"Program":{"Headers":{"a.h":"eA=="}}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out strings.Builder
		err := serveWorker(strings.NewReader(string(b)), &out, func(req workerRequest) ([]byte, string, error) {
			return req.Program.Source, "", nil
		})
		if err == nil && !strings.HasPrefix(out.String(), "{") {
			t.Errorf("served %q with no reply", b)
		}
	})
}

// capped keeps at most max bytes of a child's output however exec copies
// it (io.Copy used an embedded bytes.Buffer's ReadFrom and bypassed the
// cap), says it was offered more, and never breaks the child's pipe.
func TestCappedBoundsChildOutput(t *testing.T) {
	out := &capped{max: 1000}
	cmd := exec.Command("head", "-c", "1000000", "/dev/zero")
	cmd.Stdout = out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the child failed (a broken pipe?): %v", err)
	}
	if len(out.Bytes()) != 1000 || !out.over {
		t.Errorf("kept %d bytes, over %v; want 1000 and true", len(out.Bytes()), out.over)
	}
}
