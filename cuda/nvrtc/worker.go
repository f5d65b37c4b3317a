package nvrtc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Worker runs compilations in processes of their own, so that a source
// that crashes NVRTC, or makes it run or grow without bound, costs that
// process and not the caller. A node compiles the CUDA C that jobs ship to
// it this way: NVRTC runs inside whatever process calls it, and one job's
// source must not take the node down (docs/NODE.md).
type Worker struct {
	// Command starts a worker: the program and its arguments. The process
	// reads one request on its standard input and writes the result on
	// its standard output: it calls ServeWorker (acpp-node's hidden
	// `nvrtc-worker` command does).
	Command []string
	// Timeout bounds one compilation; past it the process is killed and
	// Compile fails saying so. 0 means DefaultWorkerTimeout.
	Timeout time.Duration
	// MaxProcs bounds the workers running at once; 0 means 4. Compile
	// calls beyond it wait for one to finish.
	MaxProcs int
	// MaxMemory bounds a worker's address space (RLIMIT_AS, where the
	// system has it); 0 means DefaultWorkerMemory. A compilation that
	// needs more fails in the worker.
	MaxMemory uint64

	slots chan struct{}
}

// DefaultWorkerTimeout is how long a worker may compile one program.
const DefaultWorkerTimeout = 2 * time.Minute

// DefaultWorkerMemory is the address space a worker may use: NVRTC
// compiles a kernel in well under 1 GiB.
const DefaultWorkerMemory = 8 << 30

// maxWorkerReply bounds what a worker may write back (PTX and log): more
// than any real module, less than a worker gone wrong could make the
// caller hold.
const maxWorkerReply = 256 << 20

// workerRequest is what the caller writes to a worker.
type workerRequest struct {
	Library string   // the libnvrtc the caller loaded
	Program Program  // the source, its name, options and headers
	Options []string // the options Compile passes (architecture first)
	// MaxMemory is the address space the worker limits itself to (0:
	// none).
	MaxMemory uint64
}

// workerReply is what a worker writes back.
type workerReply struct {
	PTX          []byte
	Log          string
	CompileError bool   // the source does not compile: Log says why
	Err          string // any other failure
}

// UseWorker makes c compile in processes w starts; cache look-ups stay in
// the caller. Call it before the first Compile. A zero Command turns
// workers off again.
func (c *Compiler) UseWorker(w Worker) error {
	if len(w.Command) == 0 {
		c.worker.Store(nil)
		return nil
	}
	if w.Timeout < 0 || w.MaxProcs < 0 {
		return fmt.Errorf("nvrtc: Worker.Timeout %v and MaxProcs %d must be ≥ 0 (0: the defaults)", w.Timeout, w.MaxProcs)
	}
	if w.Timeout == 0 {
		w.Timeout = DefaultWorkerTimeout
	}
	if w.MaxProcs == 0 {
		w.MaxProcs = 4
	}
	if w.MaxMemory == 0 {
		w.MaxMemory = DefaultWorkerMemory
	}
	w.slots = make(chan struct{}, w.MaxProcs)
	c.worker.Store(&w)
	return nil
}

// compile runs one compilation in a worker process.
func (w *Worker) compile(lib *Lib, p Program, opts []string) ([]byte, string, error) {
	req, err := json.Marshal(workerRequest{Library: lib.Path, Program: p, Options: opts, MaxMemory: w.MaxMemory})
	if err != nil {
		return nil, "", fmt.Errorf("nvrtc: encode the worker's request: %w", err)
	}
	w.slots <- struct{}{}
	defer func() { <-w.slots }()
	// Pdeathsig follows the thread that started the child: keep this one
	// until the child is gone, so that no thread exit kills it early.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, cancel := context.WithTimeout(context.Background(), w.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.Command[0], w.Command[1:]...)
	cmd.SysProcAttr = workerAttr() // dies with its parent, where the system allows
	cmd.WaitDelay = time.Second    // a killed worker's pipes do not hold Run
	cmd.Stdin = bytes.NewReader(req)
	out := &capped{max: maxWorkerReply}
	errOut := &capped{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, errOut
	runErr := cmd.Run()
	switch {
	case runErr != nil && ctx.Err() != nil:
		return nil, "", fmt.Errorf("nvrtc: compiling %s took longer than %v; its compiler process was killed (simplify the source, or ship PTX)", p.Name, w.Timeout)
	case runErr != nil:
		why := runErr.Error()
		var ee *exec.ExitError
		if errors.As(runErr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				why = fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
				if ws.Signal() == syscall.SIGKILL {
					why += ": out of memory?"
				}
			}
		}
		return nil, "", fmt.Errorf("nvrtc: the compiler process for %s failed: %s%s", p.Name, why, firstLines(errOut.String()))
	case out.over: // as the worker finished, not before
		return nil, "", fmt.Errorf("nvrtc: the compiler process for %s wrote more than %d MiB", p.Name, maxWorkerReply>>20)
	}
	var rep workerReply
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, "", fmt.Errorf("nvrtc: the compiler process for %s answered no result (%v)%s", p.Name, err, firstLines(errOut.String()))
	}
	switch {
	case rep.CompileError:
		return nil, rep.Log, &CompileError{Name: p.Name, Log: rep.Log}
	case rep.Err != "":
		return nil, rep.Log, errors.New(rep.Err)
	}
	return rep.PTX, rep.Log, nil
}

// firstLines is a worker's standard error for an error message: ": " and its
// first lines (a crash's signal and where), or "".
func firstLines(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if lines := strings.Split(s, "\n"); len(lines) > 3 {
		s = strings.Join(lines[:3], "\n")
	}
	return ": " + s
}

// capped is a writer that keeps at most max bytes and remembers it was
// offered more. It takes (and drops) everything it is given, so that the
// worker is not stopped by a broken pipe mid-write. The buffer is a field,
// not embedded: an embedded bytes.Buffer's ReadFrom would let io.Copy
// (exec.Cmd's) bypass Write and the cap.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.max - c.buf.Len(); n > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

func (c *capped) Bytes() []byte  { return c.buf.Bytes() }
func (c *capped) String() string { return c.buf.String() }

// ServeWorker is a worker process's side of Worker: it reads one request
// from r, compiles it and writes the result to w. It makes the process the
// first the kernel's out-of-memory killer picks (oom_score_adj 1000, where
// Linux allows it), so that a source that makes NVRTC grow without bound
// costs the worker, not its parent.
func ServeWorker(r io.Reader, w io.Writer) error {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0) // best effort
	return serveWorker(r, w, func(req workerRequest) ([]byte, string, error) {
		lib, err := Open(req.Library)
		if err != nil {
			return nil, "", err
		}
		return lib.raw(req.Program, req.Options)
	})
}

// serveWorker is ServeWorker with its compiler: NVRTC, or the tests'.
func serveWorker(r io.Reader, w io.Writer, compile func(workerRequest) ([]byte, string, error)) error {
	b, err := io.ReadAll(io.LimitReader(r, maxWorkerReply))
	if err != nil {
		return fmt.Errorf("nvrtc worker: read the request: %w", err)
	}
	var req workerRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return fmt.Errorf("nvrtc worker: the request is no worker request (%v); this command is started by a node, not by hand", err)
	}
	if req.MaxMemory > 0 {
		limitMemory(req.MaxMemory)
	}
	var rep workerReply
	rep.PTX, rep.Log, err = compile(req)
	var ce *CompileError
	switch {
	case errors.As(err, &ce):
		rep.CompileError, rep.Log = true, ce.Log
	case err != nil:
		rep.Err = err.Error()
	}
	return json.NewEncoder(w).Encode(rep)
}
