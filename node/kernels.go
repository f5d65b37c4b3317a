package node

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/acpp/acpp/credentials"
	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// A job's own kernels (MsgJobKernels). A job file may declare kernels as
// PTX modules that the node's registry (device.Kernels) does not have; the
// job's client ships them, and the node registers them for that job only:
// the job's launches look them up before the node's registry, no other
// job sees them (C6), and they are dropped when the job closes.

// Bounds of one job's kernels on a node.
const (
	maxJobKernels     = 256
	maxJobKernelBytes = 64 << 20
	// maxModuleCache bounds the PTX modules the node keeps for the life
	// of the process (see modules).
	maxModuleCache = 256 << 20
)

// jobKernels is one job's kernels: by name, and their modules' size.
type jobKernels struct {
	m     map[string]*device.Kernel
	bytes int
}

// shipped holds the kernels of every open job that registered some, by job
// (not by job ID: a job reopened under the same ID starts with none). The
// job struct is another file's; keeping the table here leaves it alone. An
// entry goes when its job's context ends: the job closed (by its client,
// its lease, a drain) or the node did.
var shipped struct {
	mu sync.RWMutex
	m  map[*job]*jobKernels // guarded by mu
}

// modules interns job PTX modules by content for the life of the process.
// The CUDA backend keeps a loaded module per module slice (cuda/launch.go,
// moduleKey: its address and length) and never unloads it; were a closed
// job's module freed, a later job's module could be allocated at the same
// address with the same length and run the old code. One live copy per
// content rules that out, and jobs that ship the same module share it. The
// cost is that the node keeps every distinct module it was sent, at most
// maxModuleCache bytes; past that it refuses new ones until it restarts.
var modules struct {
	mu    sync.Mutex
	m     map[[32]byte][]byte // guarded by mu
	bytes int                 // guarded by mu
}

// intern returns the process's copy of mod, adding it if new.
func intern(mod []byte, node string) ([]byte, error) {
	sum := sha256.Sum256(mod)
	modules.mu.Lock()
	defer modules.mu.Unlock()
	if m, ok := modules.m[sum]; ok {
		return m, nil
	}
	if modules.bytes+len(mod) > maxModuleCache {
		return nil, reply(proto.CodeTooLarge, "node %s already keeps %d bytes of job PTX modules, its limit is %d (modules stay loaded on the GPUs for the node's life); restart the node or use fewer distinct modules",
			node, modules.bytes, maxModuleCache)
	}
	if modules.m == nil {
		modules.m = map[[32]byte][]byte{}
	}
	c := slices.Clone(mod)
	modules.m[sum] = c
	modules.bytes += len(c)
	return c, nil
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

// sameKernel reports whether a and b declare the same kernel.
func sameKernel(a, b *device.Kernel) bool {
	return a.Name == b.Name && slices.Equal(a.Params, b.Params) && a.PTX != nil && b.PTX != nil &&
		a.PTX.Entry == b.PTX.Entry && string(a.PTX.Module) == string(b.PTX.Module)
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
		bytes += len(k.PTX.Module)
	}
	if count > maxJobKernels || bytes > maxJobKernelBytes {
		return nil, reply(proto.CodeTooLarge, "job %d would have %d kernels with %d bytes of modules on node %s, at most %d kernels and %d bytes",
			j.id, count, bytes, node, maxJobKernels, maxJobKernelBytes)
	}
	for i := range add {
		mod, err := intern(add[i].PTX.Module, node)
		if err != nil {
			return nil, err
		}
		add[i].PTX = &device.PTX{Module: mod, Entry: add[i].PTX.Entry}
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
			delete(shipped.m, j)
			shipped.mu.Unlock()
		})
	}
	if len(add) > 0 {
		j.n.log.Info("job kernels registered", "job", j.id, "kernels", len(add), "total", len(set.m), "bytes", set.bytes)
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
