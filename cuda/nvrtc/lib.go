package nvrtc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoNVRTC is returned when libnvrtc cannot be loaded. Its text says how
// to get it: the kernel's PTX, if it has one, needs no compiler.
var ErrNoNVRTC = errors.New("nvrtc: libnvrtc not found, so CUDA C kernels cannot be compiled here; " +
	"install NVIDIA's runtime compiler (the CUDA toolkit's cuda-nvrtc package, e.g. apt-get install cuda-nvrtc-13-0, " +
	"or pip install nvidia-cuda-nvrtc) and put its lib directory on LD_LIBRARY_PATH or set CUDA_PATH; " +
	"kernels given as PTX run without it")

// ErrNotResolved: the loaded libnvrtc does not export an entry point this
// package calls (an NVRTC older than the API used).
var ErrNotResolved = errors.New("nvrtc: entry point not exported by this libnvrtc; install a newer CUDA toolkit's cuda-nvrtc")

// Status is an nvrtcResult.
type Status int32

// nvrtcResult values branched on (nvrtc.h).
const (
	Success          Status = 0
	ErrorCompilation Status = 6
)

// proc is one NVRTC entry point; the table is the complete list of foreign
// functions this package calls.
type proc struct {
	name string
	doc  string
}

type procID int

const docBase = "https://docs.nvidia.com/cuda/nvrtc/index.html"

// The NVRTC entry points, one line each (the IDs are not on any wire).
const (
	pGetErrorString procID = iota
	pVersion
	pGetNumSupportedArchs
	pGetSupportedArchs
	pCreateProgram
	pDestroyProgram
	pCompileProgram
	pGetPTXSize
	pGetPTX
	pGetProgramLogSize
	pGetProgramLog
	numProcs
)

var procs = [numProcs]proc{
	pGetErrorString:       {"nvrtcGetErrorString", docBase + "#_CPPv419nvrtcGetErrorString11nvrtcResult"},
	pVersion:              {"nvrtcVersion", docBase + "#_CPPv412nvrtcVersionPiPi"},
	pGetNumSupportedArchs: {"nvrtcGetNumSupportedArchs", docBase + "#_CPPv425nvrtcGetNumSupportedArchsPi"},
	pGetSupportedArchs:    {"nvrtcGetSupportedArchs", docBase + "#_CPPv422nvrtcGetSupportedArchsPi"},
	pCreateProgram:        {"nvrtcCreateProgram", docBase + "#_CPPv418nvrtcCreateProgramP12nvrtcProgramPKcPKciPPCKcPPCKc"},
	pDestroyProgram:       {"nvrtcDestroyProgram", docBase + "#_CPPv419nvrtcDestroyProgramP12nvrtcProgram"},
	pCompileProgram:       {"nvrtcCompileProgram", docBase + "#_CPPv419nvrtcCompileProgram12nvrtcProgramiPPCKc"},
	pGetPTXSize:           {"nvrtcGetPTXSize", docBase + "#_CPPv415nvrtcGetPTXSize12nvrtcProgramP6size_t"},
	pGetPTX:               {"nvrtcGetPTX", docBase + "#_CPPv411nvrtcGetPTX12nvrtcProgramPc"},
	pGetProgramLogSize:    {"nvrtcGetProgramLogSize", docBase + "#_CPPv422nvrtcGetProgramLogSize12nvrtcProgramP6size_t"},
	pGetProgramLog:        {"nvrtcGetProgramLog", docBase + "#_CPPv418nvrtcGetProgramLog12nvrtcProgramPc"},
}

// Lib is a loaded libnvrtc. It is safe for concurrent use (NVRTC programs
// are independent; each Compile uses its own).
type Lib struct {
	Path         string // the file that loaded
	Major, Minor int    // nvrtcVersion
	addr         [numProcs]uintptr
}

// Candidates lists where Open looks for libnvrtc when given no path, in
// order: the sonames (found through LD_LIBRARY_PATH and ld.so.cache), then
// $CUDA_PATH/lib64 and /usr/local/cuda/lib64. cudaPath is CUDA_PATH's value
// ("" for none).
func Candidates(cudaPath string) []string {
	names := []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}
	out := append([]string(nil), names...)
	for _, dir := range []string{cudaPath, "/usr/local/cuda"} {
		if dir == "" {
			continue
		}
		for _, n := range names {
			out = append(out, filepath.Join(dir, "lib64", n))
		}
	}
	return out
}

// Open loads libnvrtc from path, or, for "", from the first of
// Candidates(os.Getenv("CUDA_PATH")) that loads. It fails with an error
// wrapping ErrNoNVRTC when none does.
func Open(path string) (*Lib, error) {
	tries := []string{path}
	if path == "" {
		tries = Candidates(os.Getenv("CUDA_PATH"))
	}
	var errs []string
	for _, p := range tries {
		if runtime.GOOS != "linux" && runtime.GOOS != "freebsd" {
			errs = append(errs, runtime.GOOS+" is not supported")
			break
		}
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		l := &Lib{Path: p}
		for i := range procs {
			if a, err := purego.Dlsym(h, procs[i].name); err == nil {
				l.addr[i] = a
			}
		}
		var major, minor int32
		if err := l.call(pVersion, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))); err != nil {
			return nil, fmt.Errorf("nvrtc: %s loaded but nvrtcVersion failed: %w", p, err)
		}
		l.Major, l.Minor = int(major), int(minor)
		return l, nil
	}
	return nil, fmt.Errorf("%w (tried %s: %s)", ErrNoNVRTC, strings.Join(tries, ", "), lastOf(errs))
}

func lastOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// Error is a failed NVRTC call.
type Error struct {
	Call string
	Code Status
	Desc string // nvrtcGetErrorString
}

func (e *Error) Error() string {
	if e.Code == -1 {
		return e.Call + ": " + ErrNotResolved.Error()
	}
	return fmt.Sprintf("%s: %s (%d)", e.Call, e.Desc, int32(e.Code))
}

// Is matches ErrNotResolved.
func (e *Error) Is(target error) bool { return target == ErrNotResolved && e.Code == -1 }

//go:uintptrescapes
func (l *Lib) call(p procID, args ...uintptr) error {
	fn := l.addr[p]
	if fn == 0 {
		return &Error{Call: procs[p].name, Code: -1}
	}
	r1, _, _ := purego.SyscallN(fn, args...)
	if r := Status(int32(r1)); r != Success {
		e := &Error{Call: procs[p].name, Code: r, Desc: fmt.Sprintf("nvrtcResult %d", int32(r))}
		if a := l.addr[pGetErrorString]; a != 0 {
			if s, _, _ := purego.SyscallN(a, uintptr(r)); s != 0 {
				e.Desc = goString(s)
			}
		}
		return e
	}
	return nil
}

// SupportedArchs lists the compute capabilities this NVRTC compiles for,
// as major*10+minor, ascending; nil when the library cannot say (before
// CUDA 11.2).
func (l *Lib) SupportedArchs() []int {
	var n int32
	if l.call(pGetNumSupportedArchs, uintptr(unsafe.Pointer(&n))) != nil || n <= 0 || n > 1024 {
		return nil
	}
	a := make([]int32, n)
	if l.call(pGetSupportedArchs, uintptr(unsafe.Pointer(&a[0]))) != nil {
		return nil
	}
	out := make([]int, n)
	for i, v := range a {
		out[i] = int(v)
	}
	return out
}

// raw compiles src named name with opts and returns the PTX and the log.
// err is a *CompileError (with the log) when the source does not compile.
func (l *Lib) raw(p Program, opts []string) (ptx []byte, log string, err error) {
	src, name := p.Source, p.Name
	var prog uintptr
	csrc, cname := cstr(string(src)), cstr(name)
	hnames := sortedKeys(p.Headers)
	hold := make([]*byte, 0, 2*len(hnames))
	hs, hn := make([]uintptr, len(hnames)+1), make([]uintptr, len(hnames)+1)
	for i, n := range hnames {
		b, nb := cstr(string(p.Headers[n])), cstr(n)
		hold = append(hold, b, nb)
		hs[i], hn[i] = uintptr(unsafe.Pointer(b)), uintptr(unsafe.Pointer(nb))
	}
	if err := l.call(pCreateProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(csrc)), uintptr(unsafe.Pointer(cname)),
		uintptr(len(hnames)), uintptr(unsafe.Pointer(&hs[0])), uintptr(unsafe.Pointer(&hn[0]))); err != nil {
		return nil, "", err
	}
	runtime.KeepAlive(csrc)
	runtime.KeepAlive(cname)
	runtime.KeepAlive(hold)
	defer l.call(pDestroyProgram, uintptr(unsafe.Pointer(&prog))) //nolint:errcheck // nothing to do about it
	copts := make([]*byte, len(opts))
	ptrs := make([]uintptr, len(opts)+1)
	for i, o := range opts {
		copts[i] = cstr(o)
		ptrs[i] = uintptr(unsafe.Pointer(copts[i]))
	}
	cerr := l.call(pCompileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(copts)
	var n uintptr
	if err := l.call(pGetProgramLogSize, prog, uintptr(unsafe.Pointer(&n))); err == nil && n > 1 {
		b := make([]byte, n)
		if l.call(pGetProgramLog, prog, uintptr(unsafe.Pointer(&b[0]))) == nil {
			log = strings.TrimRight(string(b[:n-1]), "\x00\n")
		}
	}
	if cerr != nil {
		var e *Error
		if errors.As(cerr, &e) && e.Code == ErrorCompilation {
			return nil, log, &CompileError{Name: name, Log: log}
		}
		return nil, log, fmt.Errorf("nvrtc: compiling %s: %w", name, cerr)
	}
	if err := l.call(pGetPTXSize, prog, uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, log, err
	}
	if n == 0 {
		return nil, log, fmt.Errorf("nvrtc: compiling %s gave no PTX", name)
	}
	b := make([]byte, n)
	if err := l.call(pGetPTX, prog, uintptr(unsafe.Pointer(&b[0]))); err != nil {
		return nil, log, err
	}
	if b[n-1] == 0 {
		b = b[:n-1]
	}
	return b, log, nil
}

func cstr(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// goString copies a NUL-terminated C string owned by the library.
func goString(p uintptr) string {
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	var n int
	for n < 4096 && *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

func sortedKeys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
