package nvrtc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Program is CUDA C source to compile.
type Program struct {
	// Source is the CUDA C text. Kernels meant to be launched by name must
	// be declared extern "C" so that their PTX entry is their plain name.
	Source []byte
	// Name is the file name shown in compile errors ("saxpy.cu" or a path
	// relative to the job file); "" means "kernel.cu".
	Name string
	// Options are extra NVRTC options ("-use_fast_math", "-DN=4", ...).
	// --gpu-architecture is added by Compile; do not pass it.
	Options []string
	// Headers are files the source may #include "name", by name.
	Headers map[string][]byte
}

// Result is a compiled program.
type Result struct {
	PTX []byte
	// Arch is the compute capability compiled for (major*10+minor).
	Arch int
	// Cached: PTX came from the disk cache; no compilation ran.
	Cached bool
	// Log is the compiler's log (warnings), already mapped (MapLog).
	Log string
	// Key is the cache key (hex SHA-256).
	Key string
}

// CompileError is a program that NVRTC rejected. Error() is the mapped log:
// one "file:line: error: ..." per diagnostic, with NVRTC's source excerpt.
type CompileError struct {
	Name string // Program.Name
	Log  string // NVRTC's log as it gave it
}

func (e *CompileError) Error() string {
	m := strings.TrimSpace(MapLog(e.Log))
	if m == "" {
		m = "(no log)"
	}
	return fmt.Sprintf("nvrtc: %s does not compile:\n%s", e.Name, m)
}

// logLine matches NVRTC's diagnostic prefix "name(line): " at the start of a
// line. The name may contain anything but a newline or "(".
var logLine = regexp.MustCompile(`(?m)^([^\n(]+)\((\d+)\): `)

// MapLog rewrites NVRTC's "name(line): error: ..." diagnostics as
// "name:line: error: ...", leaving other lines (source excerpts, carets,
// the summary) as they are.
func MapLog(log string) string {
	return logLine.ReplaceAllString(log, "$1:$2: ")
}

// Diagnostic is one located message of a log.
type Diagnostic struct {
	File string
	Line int
	Msg  string // "error: ..." or "warning: ..."
}

// Diagnostics parses the located messages of an NVRTC log.
func Diagnostics(log string) []Diagnostic {
	var out []Diagnostic
	for _, l := range strings.Split(log, "\n") {
		m := logLine.FindStringSubmatchIndex(l)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(l[m[4]:m[5]])
		if err != nil {
			continue
		}
		out = append(out, Diagnostic{File: l[m[2]:m[3]], Line: n, Msg: l[m[1]:]})
	}
	return out
}

// Config configures a Compiler. The zero value loads libnvrtc from the
// usual places (Open("")) and caches under os.UserCacheDir()/acpp/nvrtc.
type Config struct {
	// Library is libnvrtc's path; "" searches Candidates.
	Library string
	// CacheDir holds compiled PTX; "" means os.UserCacheDir()/acpp/nvrtc
	// (when that cannot be found, nothing is cached). "off" disables the cache.
	CacheDir string
}

// Compiler compiles programs and caches their PTX on disk. It loads
// libnvrtc on first use and is safe for concurrent use.
type Compiler struct {
	cfg  Config
	once sync.Once
	lib  *Lib
	err  error
	dir  string
	// raw runs NVRTC; tests replace it to count compilations without a
	// library.
	raw func(l *Lib, p Program, opts []string) ([]byte, string, error)
	// worker, when set (UseWorker), runs compilations in processes of
	// their own instead of raw.
	worker atomic.Pointer[Worker]
}

// NewCompiler returns a compiler; nothing is loaded until Compile.
func NewCompiler(cfg Config) *Compiler { return &Compiler{cfg: cfg, raw: (*Lib).raw} }

// Default is the process's compiler with the zero Config (the CUDA backend
// uses it).
var Default = NewCompiler(Config{})

// Lib returns the loaded library, loading it on first call.
func (c *Compiler) Lib() (*Lib, error) {
	c.once.Do(func() {
		c.lib, c.err = Open(c.cfg.Library)
		switch c.cfg.CacheDir {
		case "off":
		case "":
			if d, err := os.UserCacheDir(); err == nil {
				c.dir = filepath.Join(d, "acpp", "nvrtc")
			}
		default:
			c.dir = c.cfg.CacheDir
		}
	})
	return c.lib, c.err
}

// CacheDir is where compiled PTX is kept ("" when not cached); valid after
// the first Compile or Lib call.
func (c *Compiler) CacheDir() string { c.Lib(); return c.dir } //nolint:errcheck // only the dir is asked for

// PickArch returns the architecture to compile for on a GPU of compute
// capability cc (major*10+minor): cc itself when supported is nil (unknown)
// or lists it, else the newest supported one below it. It fails when the
// GPU is older than every supported architecture.
func PickArch(cc int, supported []int) (int, error) {
	if len(supported) == 0 {
		return cc, nil
	}
	best := 0
	for _, a := range supported {
		if a <= cc && a > best {
			best = a
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("nvrtc: this NVRTC compiles for compute capabilities %d.%d and newer, the GPU has %d.%d; use an older CUDA toolkit's NVRTC or ship PTX",
			supported[0]/10, supported[0]%10, cc/10, cc%10)
	}
	return best, nil
}

// Key is the cache key of p compiled for arch by NVRTC major.minor.
func Key(p Program, arch, major, minor int) string {
	h := sha256.New()
	fmt.Fprintf(h, "acpp-nvrtc-v1\x00%d.%d\x00compute_%d\x00%s\x00%d\x00", major, minor, arch, p.Name, len(p.Options))
	for _, o := range p.Options {
		fmt.Fprintf(h, "%d:%s\x00", len(o), o)
	}
	for _, n := range sortedKeys(p.Headers) {
		fmt.Fprintf(h, "h%d:%s\x00%d:", len(n), n, len(p.Headers[n]))
		h.Write(p.Headers[n])
	}
	h.Write(p.Source)
	return hex.EncodeToString(h.Sum(nil))
}

// Compile compiles p for a GPU of compute capability major.minor, from the
// disk cache when it holds the same source, name, options, architecture
// and NVRTC version.
func (c *Compiler) Compile(p Program, major, minor int) (*Result, error) {
	if p.Name == "" {
		p.Name = "kernel.cu"
	}
	for _, o := range p.Options {
		if strings.HasPrefix(o, "--gpu-architecture") || strings.HasPrefix(o, "-arch") {
			return nil, fmt.Errorf("nvrtc: option %q: the architecture is the GPU's; leave it out", o)
		}
	}
	lib, err := c.Lib()
	if err != nil {
		return nil, err
	}
	arch, err := PickArch(major*10+minor, lib.SupportedArchs())
	if err != nil {
		return nil, err
	}
	key := Key(p, arch, lib.Major, lib.Minor)
	if ptx, ok := c.load(key); ok {
		return &Result{PTX: ptx, Arch: arch, Cached: true, Key: key}, nil
	}
	opts := append([]string{fmt.Sprintf("--gpu-architecture=compute_%d", arch)}, p.Options...)
	run := c.raw
	if w := c.worker.Load(); w != nil {
		run = w.compile
	}
	ptx, log, err := run(lib, p, opts)
	if err != nil {
		return nil, err
	}
	c.store(key, ptx) // a cache that cannot be written only costs time
	return &Result{PTX: ptx, Arch: arch, Log: MapLog(log), Key: key}, nil
}

// Cache entries: a header line with the PTX's SHA-256, then the PTX.
const entryMagic = "// acpp nvrtc cache sha256="

func (c *Compiler) path(key string) string { return filepath.Join(c.dir, key+".ptx") }

// load reads a cache entry; a missing or corrupt one is a miss.
func (c *Compiler) load(key string) ([]byte, bool) {
	if c.dir == "" {
		return nil, false
	}
	b, err := os.ReadFile(c.path(key))
	if err != nil {
		return nil, false
	}
	return decodeEntry(b)
}

func decodeEntry(b []byte) ([]byte, bool) {
	head, ptx, ok := bytes.Cut(b, []byte("\n"))
	if !ok || !bytes.HasPrefix(head, []byte(entryMagic)) || len(ptx) == 0 {
		return nil, false
	}
	sum := sha256.Sum256(ptx)
	if string(head[len(entryMagic):]) != hex.EncodeToString(sum[:]) {
		return nil, false
	}
	return ptx, true
}

func encodeEntry(ptx []byte) []byte {
	sum := sha256.Sum256(ptx)
	out := make([]byte, 0, len(entryMagic)+65+len(ptx))
	out = append(out, entryMagic...)
	out = append(out, hex.EncodeToString(sum[:])...)
	out = append(out, '\n')
	return append(out, ptx...)
}

// store writes an entry atomically: a temporary file renamed into place.
func (c *Compiler) store(key string, ptx []byte) error {
	if c.dir == "" {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, key+".*.tmp")
	if err != nil {
		return err
	}
	_, werr := f.Write(encodeEntry(ptx))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), c.path(key)); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
