package cuda

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/cuda/nvrtc"
	"github.com/acpp/acpp/device"
)

// Kernels given as CUDA C (device.Kernel.CUDA) are compiled here, on the
// machine and for the GPU that runs them: the first launch on a device
// compiles the source with NVRTC for the device's compute capability (or
// reads the PTX from NVRTC's disk cache), and the device then treats the
// result as the kernel's PTX. A device keeps what it compiled, keyed like
// PTX modules by the identity of the source's bytes (moduleKey), until
// UnloadModule is called with those bytes.

// sourceKey is one compiled program: the source's identity and what else
// changes the PTX.
type sourceKey struct {
	src  moduleKey
	file string
	opts string
}

// compiled is a program's PTX on one device and the kernels derived from
// it (each original kernel with PTX set), by the original kernel.
type compiled struct {
	ptx     []byte
	kernels map[*device.Kernel]*device.Kernel
}

func (d *Device) nvrtc() *nvrtc.Compiler {
	if d.cfg.NVRTC != nil {
		return d.cfg.NVRTC
	}
	return nvrtc.Default
}

var _ device.KernelPreparer = (*Device)(nil)

// PrepareKernel implements device.KernelPreparer: it compiles k.CUDA for
// this GPU (or reads it from the disk cache) and checks that the PTX has
// the entry, taking k.Params. Kernels with PTX, or no CUDA, need nothing.
func (d *Device) PrepareKernel(k *device.Kernel) error {
	if k.PTX != nil || k.CUDA == nil {
		return nil
	}
	ptx, err := d.compile(k)
	if err != nil {
		return err
	}
	es, err := kernels.Entries(ptx)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Name == k.CUDA.Entry {
			return kernels.CheckLayout(k.Name, e, k.Params)
		}
	}
	return fmt.Errorf("%w: kernel %q: no entry %q in its PTX", device.ErrNoImplementation, k.Name, k.CUDA.Entry) // compile checked it
}

// compile compiles k.CUDA for this device and checks that the PTX has the
// entry.
func (d *Device) compile(k *device.Kernel) ([]byte, error) {
	c := k.CUDA
	file := sourceFile(k)
	start := time.Now()
	r, err := d.nvrtc().Compile(nvrtc.Program{Source: c.Source, Name: file, Options: c.Options,
		Headers: map[string][]byte{"acpp.cuh": kernels.Header}}, d.attrs.Major, d.attrs.Minor)
	if errors.Is(err, nvrtc.ErrNoNVRTC) {
		return nil, fmt.Errorf("%w: kernel %q is CUDA C and %s cannot compile it: %w", device.ErrNoImplementation, k.Name, d.info.ID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("kernel %q for %s: %w", k.Name, d.info.ID, err)
	}
	d.cfg.Logger.Info("cuda c kernel ready", "device", d.info.ID, "kernel", k.Name, "file", file,
		"arch", fmt.Sprintf("compute_%d", r.Arch), "cached", r.Cached, "took", time.Since(start))
	if r.Log != "" {
		d.cfg.Logger.Warn("nvrtc warnings", "kernel", k.Name, "log", r.Log)
	}
	es, err := kernels.Entries(r.PTX)
	if err != nil {
		return nil, fmt.Errorf("kernel %q: the PTX NVRTC made of %s: %w", k.Name, file, err)
	}
	if !slices.ContainsFunc(es, func(e kernels.Entry) bool { return e.Name == c.Entry }) {
		names := make([]string, len(es))
		for i, e := range es {
			names[i] = e.Name
		}
		return nil, fmt.Errorf("%w: kernel %q: %s defines no kernel %q (its PTX has %v); declare it extern \"C\" __global__ so that its name is not mangled",
			device.ErrNoImplementation, k.Name, file, c.Entry, names)
	}
	return r.PTX, nil
}

func sourceFile(k *device.Kernel) string {
	if k.CUDA.File != "" {
		return k.CUDA.File
	}
	return k.Name + ".cu"
}

// fromSource returns k with its PTX compiled from k.CUDA for this device.
// It runs on the launching goroutine and may take as long as a compilation
// (tens to hundreds of milliseconds) the first time.
func (d *Device) fromSource(k *device.Kernel) (*device.Kernel, error) {
	c := k.CUDA
	key := sourceKey{src: moduleKey{unsafe.SliceData(c.Source), len(c.Source)}, file: sourceFile(k), opts: strings.Join(c.Options, "\x00")}
	d.srcMu.Lock()
	defer d.srcMu.Unlock()
	if d.sources == nil {
		d.sources = map[sourceKey]*compiled{}
	}
	p := d.sources[key]
	if p == nil {
		ptx, err := d.compile(k)
		if err != nil {
			return nil, err
		}
		p = &compiled{ptx: ptx, kernels: map[*device.Kernel]*device.Kernel{}}
		d.sources[key] = p
	}
	dk := p.kernels[k]
	if dk == nil {
		kk := *k
		kk.PTX = &device.PTX{Module: p.ptx, Entry: c.Entry}
		dk = &kk
		p.kernels[k] = dk
	}
	return dk, nil
}

// forgetSource drops every program compiled from the source whose bytes
// are src and returns the keys of their PTX modules, for unloading.
func (d *Device) forgetSource(src moduleKey) []moduleKey {
	d.srcMu.Lock()
	defer d.srcMu.Unlock()
	var out []moduleKey
	for k, p := range d.sources {
		if k.src == src {
			pk := moduleKey{unsafe.SliceData(p.ptx), len(p.ptx)}
			entryCache.Delete(pk)
			out = append(out, pk)
			delete(d.sources, k)
		}
	}
	return out
}
