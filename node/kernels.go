package node

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/acpp/acpp/credentials"
	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// A job's own kernels (MsgJobKernels). A job file may declare kernels as
// PTX modules, or as CUDA C source that the node compiles for its GPUs
// (checkSourceKernel), that the node's registry (device.Kernels) does not have; the
// job's client ships them, and the node registers them for that job only:
// the job's launches look them up before the node's registry, no other
// job sees them (C6), and they are dropped when the job closes; their
// modules leave the devices with the last job that holds them (modules).

// Bounds of one job's kernels on a node.
const (
	maxJobKernels     = 256
	maxJobKernelBytes = 64 << 20
	// idlePoll is how often a closed job whose instructions still run
	// looks again whether they ended, besides each completion (a few
	// paths free a job without one; see releaseWhenFreed).
	idlePoll = 100 * time.Millisecond
)

// maxModuleCache bounds the bytes of PTX modules a node holds for its jobs
// (see modules). A variable so that tests can lower it.
var maxModuleCache = 256 << 20

// jobKernels is one job's kernels: by name, and their modules' size.
type jobKernels struct {
	m     map[string]*device.Kernel
	bytes int
}

// shipped holds the kernels of every open job that registered some, by job
// (not by job ID: a job reopened under the same ID starts with none). The
// job struct is another file's; keeping the table here leaves it alone. An
// entry goes when its job's context ends: the job closed (by its client,
// its lease, a drain) or the node did; its modules are released once the
// job's instructions have all finished (releaseWhenFreed).
var shipped struct {
	mu sync.RWMutex
	m  map[*job]*jobKernels // guarded by mu
}

// modules interns job PTX modules by node and content, counting the kernel
// registrations that hold each (one per kernel of a job, until the job has
// closed and its instructions have finished). Jobs of one node that ship
// the same module share one copy. When the last holder lets go, the module
// leaves the table and every device of the node that loaded it unloads it
// (device.ModuleUnloader), so a long-running node returns to its baseline
// after its jobs end (B1).
//
// Backends key loaded modules by the slice's address and length
// (cuda/launch.go, moduleKey), so an unload must never hit a slice that a
// live job may still launch from. Two things ensure it: a module is
// unloaded only when no job holds it any more and the holders' instructions
// have ended, and it is dropped from the table in the same step, so a job
// that ships the same text afterwards gets a fresh copy at another address
// (a different key) even while the old one is being unloaded. A module
// whose last holder went with the node's shutdown is only dropped: the
// devices close, and their modules with them, right after.
var modules struct {
	mu    sync.Mutex
	m     map[internKey]*internedModule // guarded by mu
	bytes map[*Node]int                 // guarded by mu; a node's entry goes at zero
}

type internKey struct {
	n   *Node
	sum [32]byte
}

type internedModule struct {
	data []byte
	refs int // kernel registrations holding data
}

// intern returns n's copy of mod, adding it if new, and counts one more
// holder of it; each successful call needs one release.
func intern(n *Node, mod []byte) ([]byte, error) {
	key := internKey{n, sha256.Sum256(mod)}
	modules.mu.Lock()
	defer modules.mu.Unlock()
	if m, ok := modules.m[key]; ok {
		m.refs++
		return m.data, nil
	}
	if held := modules.bytes[n]; held+len(mod) > maxModuleCache {
		return nil, reply(proto.CodeTooLarge, "node %s already holds %d bytes of PTX modules for its jobs, its limit is %d; close jobs or use fewer distinct modules",
			n.cfg.Name, held, maxModuleCache)
	}
	if modules.m == nil {
		modules.m = map[internKey]*internedModule{}
		modules.bytes = map[*Node]int{}
	}
	c := slices.Clone(mod)
	modules.m[key] = &internedModule{data: c, refs: 1}
	modules.bytes[n] += len(c)
	return c, nil
}

// release lets go of one hold on each of mods (n's copies, as intern
// returned them) and returns those that nobody holds any more, which have
// left the table.
func release(n *Node, mods [][]byte) [][]byte {
	modules.mu.Lock()
	defer modules.mu.Unlock()
	var gone [][]byte
	for _, mod := range mods {
		key := internKey{n, sha256.Sum256(mod)}
		m, ok := modules.m[key]
		if !ok || unsafe.SliceData(m.data) != unsafe.SliceData(mod) {
			panic(fmt.Sprintf("node: releasing a PTX module of %d bytes that node %s does not hold", len(mod), n.cfg.Name))
		}
		if m.refs--; m.refs > 0 {
			continue
		}
		delete(modules.m, key)
		if modules.bytes[n] -= len(m.data); modules.bytes[n] == 0 {
			delete(modules.bytes, n)
		}
		gone = append(gone, m.data)
	}
	return gone
}

// releaseModules releases mods (release) and, if unload, has every device
// of the node that loads modules unload those nobody holds any more. The
// caller guarantees that no instruction of the holders runs (the contract
// of device.ModuleUnloader). It blocks on the devices: call it on a node
// goroutine, holding no lock.
func (n *Node) releaseModules(mods [][]byte, unload bool) {
	gone := release(n, mods)
	if len(gone) == 0 || !unload || n.devs == nil {
		return
	}
	for _, dev := range n.devs.all {
		u, ok := dev.(device.ModuleUnloader)
		if !ok {
			continue
		}
		for _, mod := range gone {
			if err := u.UnloadModule(mod); err != nil && !errors.Is(err, device.ErrClosed) {
				n.log.Warn("unloading a job's PTX module failed", "device", dev.Info().ID, "bytes", len(mod), "error", err)
			}
		}
	}
	n.log.Debug("job modules unloaded", "modules", len(gone))
}

// releaseWhenFreed releases the modules of closed job j's kernels once the
// job's instructions have all finished: j.freed, set where the job frees
// its allocations (freeIfIdleLocked, node/job.go), says so. It wakes at
// each completion (j.changed) and every idlePoll, since a Recv that gets
// armed after the close frees the job without a completion. If the node
// stops first, it only releases: the devices are about to close.
func (j *job) releaseWhenFreed(mods [][]byte) {
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	for {
		j.mu.Lock()
		freed, changed := j.freed, j.changed
		j.mu.Unlock()
		if freed {
			j.n.releaseModules(mods, true)
			return
		}
		select {
		case <-changed:
		case <-t.C:
		case <-j.n.ctx.Done():
			j.n.releaseModules(mods, false)
			return
		}
	}
}

// handleJobKernels registers a request's kernels for the job, all of them
// or none.
func (n *Node) handleJobKernels(_ context.Context, from credentials.Identity, req *proto.JobKernels) (*proto.JobKernelsRegistered, error) {
	j, err := n.jobFor(from, req.Job)
	if err != nil {
		return nil, err
	}
	if n.draining.Load() {
		return nil, reply(proto.CodeDraining, "node %s is shutting down and takes no new kernels; schedule on another node", n.cfg.Name)
	}
	if err := req.Validate(); err != nil {
		return nil, reply(proto.CodeMalformed, "%v", err)
	}
	j.touch()
	ks := make([]device.Kernel, len(req.Kernels))
	for i := range req.Kernels {
		if ks[i], err = n.checkKernel(&req.Kernels[i]); err != nil {
			return nil, err
		}
	}
	return j.addKernels(ks)
}

// checkKernel turns a shipped kernel into a device.Kernel after checking
// that its name is free in the node's registry and that its module has
// the entry, taking the declared parameters (kernels.CheckLayout).
func (n *Node) checkKernel(s *proto.KernelSpec) (device.Kernel, error) {
	if _, err := device.Kernels.Lookup(s.Name); err == nil {
		return device.Kernel{}, reply(proto.CodeKernelExists, "kernel %q is in node %s's own registry; a job's kernel may not replace it: rename the job's kernel", s.Name, n.cfg.Name)
	}
	params := make([]device.Param, len(s.Params))
	for i, p := range s.Params {
		params[i] = device.Param{Name: p.Name, Kind: device.ArgKind(p.Kind), Space: device.AddrSpace(p.Space), ElemSize: int(p.ElemSize)}
	}
	if len(s.CUDA) > 0 {
		return n.checkSourceKernel(s, params)
	}
	entries, err := ptxlib.Entries(s.PTX)
	if err != nil {
		return device.Kernel{}, reply(proto.CodeMalformed, "kernel %q: its PTX module does not parse: %v", s.Name, err)
	}
	if len(entries) == 0 {
		return device.Kernel{}, reply(proto.CodeMalformed, "kernel %q: its module of %d bytes has no .entry; ship PTX text (not a cubin) that defines entry %q", s.Name, len(s.PTX), s.Entry)
	}
	var names []string
	for _, e := range entries {
		if e.Name == s.Entry {
			if err := ptxlib.CheckLayout(s.Name, e, params); err != nil {
				return device.Kernel{}, reply(proto.CodeMalformed, "kernel %q: its declared parameters do not match entry %q: %v", s.Name, s.Entry, err)
			}
			return device.Kernel{Name: s.Name, Params: params, PTX: &device.PTX{Module: s.PTX, Entry: s.Entry}}, nil
		}
		names = append(names, e.Name)
	}
	sort.Strings(names)
	return device.Kernel{}, reply(proto.CodeMalformed, "kernel %q: entry %q is not in its PTX module (entries: %s)", s.Name, s.Entry, strings.Join(names, ", "))
}

// checkSourceKernel turns a kernel shipped as CUDA C into a
// device.Kernel after compiling it for each of the node's GPUs
// (device.KernelPreparer; NVRTC's disk cache makes GPUs of one
// architecture after the first, and later jobs, cheap), so that a compile
// error reaches the client at registration, at file:line of its source.
// A node without GPUs registers the kernel without compiling it: no
// device of it can launch it, and placement offers it none.
func (n *Node) checkSourceKernel(s *proto.KernelSpec, params []device.Param) (device.Kernel, error) {
	if err := checkShippedSource(s.CUDA, s.Options); err != nil {
		return device.Kernel{}, reply(proto.CodeMalformed, "kernel %q: %v", s.Name, err)
	}
	opts := append(slices.Clone(s.Options), "--no-source-include")
	k := device.Kernel{Name: s.Name, Params: params, CUDA: &device.CUDA{Source: s.CUDA, Entry: s.Entry, File: s.File, Options: opts}}
	if n.devs == nil {
		return k, nil
	}
	for _, dev := range n.devs.all {
		p, ok := dev.(device.KernelPreparer)
		if !ok || !dev.Info().Caps.Runs(device.FormPTX) {
			continue
		}
		if err := p.PrepareKernel(&k); err != nil {
			return device.Kernel{}, reply(proto.CodeMalformed, "kernel %q on node %s: %v", s.Name, n.cfg.Name, err)
		}
	}
	return k, nil
}

// A shipped CUDA C source is compiled on the node, and NVRTC's errors go
// back to the client: a source that included one of the node's files
// (#include "/etc/shadow") would read it back to the client in the
// compiler's messages, and some NVRTC options read or write files
// (--pre-include, --use-pch, --time=FILE). So a node compiles a shipped
// source only if it includes nothing but "acpp.cuh" (which the backend
// provides) and takes options from nvrtcOptions; it also passes
// --no-source-include. The check is on words, not on a full
// preprocessor: after line splices are joined (backslash, or the ??/
// trigraph, before a newline), the words include, import and embed may
// appear only in the lines #include "acpp.cuh" and #include <acpp.cuh>.
// That refuses some harmless sources (an identifier named include_count,
// the word in a comment) and every way to name a file to the
// preprocessor: directives, the %: digraph, __has_include. The message
// says how to rewrite.
var includeWords = []string{"include", "import", "embed"}

// nvrtcOptions are the NVRTC options a shipped source may use (the name
// before any "="; -D and -U take their argument joined). None reads or
// writes a file.
var nvrtcOptions = map[string]bool{
	"-G": true, "--device-debug": true, "-lineinfo": true, "--generate-line-info": true,
	"-dopt": true, "--dopt": true, "-maxrregcount": true, "--maxrregcount": true,
	"-ftz": true, "--ftz": true, "-prec-sqrt": true, "--prec-sqrt": true, "-prec-div": true, "--prec-div": true,
	"-fmad": true, "--fmad": true, "-use_fast_math": true, "--use_fast_math": true,
	"-extra-device-vectorization": true, "--extra-device-vectorization": true,
	"--define-macro": true, "--undefine-macro": true, "-std": true, "--std": true,
	"-builtin-move-forward": true, "--builtin-move-forward": true, "-builtin-initializer-list": true, "--builtin-initializer-list": true,
	"-w": true, "--disable-warnings": true, "-restrict": true, "--restrict": true,
	"-default-device": true, "--device-as-default-execution-space": true,
	"--display-error-number": true, "--no-display-error-number": true,
	"--diag-error": true, "--diag-suppress": true, "--diag-warn": true,
	"-no-source-include": true, "--no-source-include": true, "--modify-stack-limit": true,
}

// checkShippedSource applies the rules above.
func checkShippedSource(src []byte, opts []string) error {
	for _, o := range opts {
		name, _, _ := strings.Cut(o, "=")
		if (strings.HasPrefix(o, "-D") || strings.HasPrefix(o, "-U")) && len(o) > 2 && !strings.HasPrefix(o, "--") {
			continue
		}
		if !nvrtcOptions[name] {
			return fmt.Errorf("NVRTC option %q is not one a node compiles with (it may name files, or is unknown); use -D, -U, -std, --fmad, --use_fast_math, --ftz, --prec-div, --prec-sqrt, -lineinfo, --maxrregcount and the like", o)
		}
	}
	text := strings.NewReplacer("\\\r\n", "", "\\\n", "", "??/\r\n", "", "??/\n", "").Replace(string(src))
	for i, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if t == `#include "acpp.cuh"` || t == "#include <acpp.cuh>" {
			continue
		}
		for _, w := range includeWords {
			if strings.Contains(line, w) {
				return fmt.Errorf("the CUDA C source has the word %q on line %d (after joining continued lines): a node compiles a shipped source only if it includes nothing but \"acpp.cuh\" (the node's files are not the job's); paste other headers into the source, and rename identifiers or reword comments that contain %q", w, i+1, w)
			}
		}
	}
	return nil
}

// module is the bytes a job kernel's module is interned and unloaded by:
// its PTX, or its CUDA C source (the CUDA backend keys what it compiled
// from a source by the source's bytes, cuda/source.go).
func module(k *device.Kernel) []byte {
	if k.PTX != nil {
		return k.PTX.Module
	}
	return k.CUDA.Source
}

// withModule returns k with its module replaced by mod (the interned copy).
func withModule(k device.Kernel, mod []byte) device.Kernel {
	if k.PTX != nil {
		k.PTX = &device.PTX{Module: mod, Entry: k.PTX.Entry}
	} else {
		c := *k.CUDA
		c.Source = mod
		k.CUDA = &c
	}
	return k
}

// sameKernel reports whether a and b declare the same kernel.
func sameKernel(a, b *device.Kernel) bool {
	if a.Name != b.Name || !slices.Equal(a.Params, b.Params) {
		return false
	}
	switch {
	case a.PTX != nil && b.PTX != nil:
		return a.PTX.Entry == b.PTX.Entry && string(a.PTX.Module) == string(b.PTX.Module)
	case a.CUDA != nil && b.CUDA != nil:
		return a.CUDA.Entry == b.CUDA.Entry && a.CUDA.File == b.CUDA.File && slices.Equal(a.CUDA.Options, b.CUDA.Options) &&
			string(a.CUDA.Source) == string(b.CUDA.Source)
	}
	return false
}

// addKernels registers checked kernels for j. A kernel the job already has
// under the same name and declaration is accepted again (a retried
// request); a different one under that name is refused.
func (j *job) addKernels(ks []device.Kernel) (*proto.JobKernelsRegistered, error) {
	node := j.n.cfg.Name
	shipped.mu.Lock()
	defer shipped.mu.Unlock()
	if j.ctx.Err() != nil {
		return nil, reply(proto.CodeNoJob, "job %d closed on node %s while its kernels arrived", j.id, node)
	}
	set := shipped.m[j]
	if set == nil {
		set = &jobKernels{m: map[string]*device.Kernel{}}
	}
	var add []device.Kernel
	count, bytes := len(set.m), set.bytes
	for _, k := range ks {
		if old := set.m[k.Name]; old != nil {
			if !sameKernel(old, &k) {
				return nil, reply(proto.CodeKernelExists, "job %d already has a different kernel %q on node %s; give the new one another name", j.id, k.Name, node)
			}
			continue
		}
		add = append(add, k)
		count++
		bytes += len(module(&k))
	}
	if count > maxJobKernels || bytes > maxJobKernelBytes {
		return nil, reply(proto.CodeTooLarge, "job %d would have %d kernels with %d bytes of modules on node %s, at most %d kernels and %d bytes",
			j.id, count, bytes, node, maxJobKernels, maxJobKernelBytes)
	}
	for i := range add {
		mod, err := intern(j.n, module(&add[i]))
		if err != nil {
			held := make([][]byte, i)
			for h := range held {
				held[h] = module(&add[h])
			}
			// Never launched: nothing to unload.
			release(j.n, held)
			return nil, err
		}
		add[i] = withModule(add[i], mod)
	}
	for i := range add {
		set.m[add[i].Name] = &add[i]
	}
	set.bytes = bytes
	if shipped.m[j] == nil {
		if shipped.m == nil {
			shipped.m = map[*job]*jobKernels{}
		}
		shipped.m[j] = set
		context.AfterFunc(j.ctx, func() {
			shipped.mu.Lock()
			set := shipped.m[j]
			delete(shipped.m, j)
			shipped.mu.Unlock()
			if set == nil {
				return
			}
			mods := make([][]byte, 0, len(set.m))
			for _, k := range set.m {
				mods = append(mods, module(k))
			}
			j.n.goFunc(func() { j.releaseWhenFreed(mods) })
		})
	}
	if len(add) > 0 {
		j.n.log.Info("job kernels registered", "job", jobID(j.id), "kernels", len(add), "total", len(set.m), "bytes", set.bytes)
	}
	return &proto.JobKernelsRegistered{Kernels: len(set.m), Bytes: uint64(set.bytes)}, nil
}

// kernel is the kernel a launch on dev names: the job's own (MsgJobKernels)
// first, then the node's registry. It refuses a kernel that has no
// implementation dev runs (a PTX kernel on a CPU device), naming both,
// before anything is queued.
func (j *job) kernel(name string, dev device.Device) (*device.Kernel, error) {
	var k *device.Kernel
	shipped.mu.RLock()
	if set := shipped.m[j]; set != nil {
		k = set.m[name]
	}
	shipped.mu.RUnlock()
	if k == nil {
		var err error
		if k, err = device.Kernels.Lookup(name); err != nil {
			return nil, fmt.Errorf("%w on node %s (nor has job %d registered one)", err, j.n.cfg.Name, j.id)
		}
	}
	info := dev.Info()
	if forms := info.Caps.KernelForms; len(forms) > 0 && !slices.ContainsFunc(forms, k.Has) {
		var has []string
		for _, f := range []device.Form{device.FormGo, device.FormPTX} {
			if k.Has(f) {
				has = append(has, f.String())
			}
		}
		return nil, fmt.Errorf("%w: kernel %q is implemented in %s only, and device %s of node %s runs %v kernels; run it on a device of another kind",
			device.ErrNoImplementation, name, strings.Join(has, ", "), info.ID, j.n.cfg.Name, forms)
	}
	return k, nil
}

// jobKernelNames lists j's own kernels, sorted (tests, logs).
func (j *job) jobKernelNames() []string {
	shipped.mu.RLock()
	defer shipped.mu.RUnlock()
	set := shipped.m[j]
	if set == nil {
		return nil
	}
	out := make([]string, 0, len(set.m))
	for n := range set.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
