package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// RegisterKernels ships PTX kernels, and kernels given as CUDA C source
// (device.Kernel.CUDA, compiled by each node for its own GPUs with NVRTC;
// docs/CUDA.md), to the job's nodes (proto.MsgJobKernels)
// so that its groups can launch them by name like the kernels of the
// nodes' own registries. Each node registers them for this job only (no
// other job or client sees them, C6) and drops them when the job closes.
//
// Only PTX travels: a kernel without PTX, or with a Go implementation
// (which cannot leave this process), is refused with ErrInvalid; Go
// kernels are built into acpp-node. The kernels go to every node of the
// job with a device that runs PTX (a CUDA device), and only those devices
// are offered to placement for them; with no such device RegisterKernels
// fails with ErrNoDevice, naming the kernels and the job's devices. A
// node refuses a name its own registry has, a module without the entry,
// or parameters that do not match the entry; the error names the node and
// the kernel. Register a kernel before the first group that uses it.
//
// Placement and argument kinds follow the kernel's declaration: this
// process's registry's (device.Kernels) when it has the kernel — a kernel
// registered there too must be the same declaration — or else the shipped
// one, so a PTX-only kernel is offered only to the PTX devices of the
// nodes that registered it, also on nodes with CPU devices too.
func (j *Job) RegisterKernels(ctx context.Context, ks ...device.Kernel) error {
	if len(ks) == 0 {
		return nil
	}
	specs := make([]proto.KernelSpec, len(ks))
	names := make([]string, len(ks))
	var errs []error
	for i := range ks {
		k := &ks[i]
		names[i] = k.Name
		specs[i] = kernelSpec(k)
		switch {
		case k.PTX == nil && k.CUDA == nil:
			errs = append(errs, fmt.Errorf("kernel %q has no PTX or CUDA C source: only those travel to nodes", k.Name))
			continue
		case k.Go != nil:
			errs = append(errs, fmt.Errorf("kernel %q has a Go implementation, which cannot travel to nodes: ship it without (PTX only), or build it into acpp-node", k.Name))
			continue
		}
		if err := (&proto.JobKernels{Kernels: specs[i : i+1]}).Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if pk, err := device.Kernels.Lookup(k.Name); err == nil && !sameDecl(pk, k) {
			errs = append(errs, fmt.Errorf("this process's registry has another kernel %q, which the job would place and lay out arguments by: rename one of them", k.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	targets, all := j.ptxNodes()
	if len(targets) == 0 {
		return fmt.Errorf("%w: kernels %s are PTX only, and none of this job's devices (%s) runs PTX; add a node with a CUDA device, or widen Config.Devices",
			ErrNoDevice, strings.Join(names, ", "), strings.Join(all, ", "))
	}
	errs = make([]error, len(targets))
	var wg sync.WaitGroup
	for i, ns := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ns.nj.RegisterKernels(ctx, specs...); err != nil {
				errs[i] = fmt.Errorf("register kernels %s on node %s: %w", strings.Join(names, ", "), ns.name, err)
				return
			}
			j.mu.Lock()
			defer j.mu.Unlock()
			// Copy on write: the inventory's list is read under j.mu only,
			// but its backing array came from the decoder.
			ks := slices.Clone(ns.inv.Kernels)
			decls := slices.Clone(ns.inv.KernelDecls)
			for i, n := range names {
				if !slices.Contains(ks, n) {
					ks = append(ks, n)
				}
				if len(decls) > 0 && !slices.ContainsFunc(decls, func(d proto.KernelDecl) bool { return d.Name == n }) {
					// Shipped as PTX or CUDA C: the node runs it on its GPUs.
					decls = append(decls, proto.KernelDecl{Name: n, Params: specs[i].Params, Forms: []string{device.FormPTX.String()}})
				}
			}
			ns.inv.Kernels, ns.inv.KernelDecls = ks, decls
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	j.mu.Lock()
	if j.shipped == nil {
		j.shipped = map[string]*device.Kernel{}
	}
	for i := range ks {
		k := ks[i]
		j.shipped[k.Name] = &k
	}
	j.mu.Unlock()
	j.log.Info("job kernels registered", "kernels", names, "nodes", len(targets))
	return nil
}

// kernel is the kernel the job launches under name: this process's
// registry's, or one the job shipped (RegisterKernels), for its
// parameters and the forms placement matches against devices; else a
// node's own kernel as the node declares it (parameters only).
func (j *Job) kernel(name string) (*device.Kernel, error) {
	k, err := j.localKernel(name)
	if err == nil {
		return k, nil
	}
	// A node's own kernel (its binary registers it): its declaration,
	// without an implementation here, lays out the arguments.
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, ns := range j.nodes {
		if decl, ok := nodeDecl(ns, name); ok && decl != nil && !ns.lost {
			return &device.Kernel{Name: name, Params: proto.Params(decl.Params)}, nil
		}
	}
	return nil, err
}

// localKernel is the kernel this process knows under name: registered
// here, or shipped to this job.
func (j *Job) localKernel(name string) (*device.Kernel, error) {
	k, err := device.Kernels.Lookup(name)
	if err == nil {
		return k, nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if sk, ok := j.shipped[name]; ok {
		return sk, nil
	}
	return nil, err
}

// ShipKernel makes the kernel that this process's registry has under
// name (device.Kernels) available on the job's nodes: a no-op when every
// node of the job that could run it has it already (in its own registry,
// or shipped earlier), or when it is not a PTX-only kernel of this
// process; else RegisterKernels of that kernel. acpp-submit calls it
// before each group, for the kernels a job file declares (registered in
// its process under names unique to their content).
func (j *Job) ShipKernel(ctx context.Context, name string) error {
	k, err := device.Kernels.Lookup(name)
	if err != nil || (k.PTX == nil && k.CUDA == nil) || k.Go != nil {
		return nil
	}
	targets, all := j.ptxNodes()
	if len(targets) == 0 {
		return fmt.Errorf("%w: kernel %q is PTX only, and none of this job's devices (%s) runs PTX; add a node with a CUDA device, or widen the device selection",
			ErrNoDevice, name, strings.Join(all, ", "))
	}
	j.mu.Lock()
	lacking := slices.ContainsFunc(targets, func(ns *nodeState) bool {
		return len(ns.inv.Kernels) > 0 && !slices.Contains(ns.inv.Kernels, name)
	})
	j.mu.Unlock()
	if !lacking {
		return nil
	}
	return j.RegisterKernels(ctx, *k)
}

// ptxNodes lists the job's nodes (not lost) with a device of the job that
// runs PTX, in job order, and names all of the job's devices.
func (j *Job) ptxNodes() (targets []*nodeState, all []string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, d := range j.devices {
		all = append(all, d.String())
		if !d.lost && !d.node.lost && slices.Contains(d.Forms, device.FormPTX.String()) && !slices.Contains(targets, d.node) {
			targets = append(targets, d.node)
		}
	}
	return targets, all
}

// kernelSpec is k's wire form: its PTX when it has one, else its CUDA C
// source, which each node compiles for its own GPUs.
func kernelSpec(k *device.Kernel) proto.KernelSpec {
	s := proto.KernelSpec{Name: k.Name}
	if k.PTX != nil {
		s.PTX, s.Entry = k.PTX.Module, k.PTX.Entry
	} else if k.CUDA != nil {
		s.CUDA, s.Entry, s.File, s.Options = k.CUDA.Source, k.CUDA.Entry, k.CUDA.File, k.CUDA.Options
	}
	s.Params = proto.ParamsOf(k.Params)
	return s
}

// sameDecl reports whether a and b declare the same PTX (or CUDA C)
// kernel.
func sameDecl(a, b *device.Kernel) bool {
	if a.Name != b.Name || !slices.Equal(a.Params, b.Params) || a.Go != nil {
		return false
	}
	switch {
	case a.PTX != nil && b.PTX != nil:
		return a.PTX.Entry == b.PTX.Entry && string(a.PTX.Module) == string(b.PTX.Module)
	case a.PTX == nil && b.PTX == nil && a.CUDA != nil && b.CUDA != nil:
		return a.CUDA.Entry == b.CUDA.Entry && a.CUDA.File == b.CUDA.File && slices.Equal(a.CUDA.Options, b.CUDA.Options) &&
			string(a.CUDA.Source) == string(b.CUDA.Source)
	}
	return false
}
