package cuda

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
)

// moduleKey identifies a PTX module by the identity of its bytes (the
// address of the first byte and the length). The key's pointer keeps the
// bytes alive while a cache holds it, so another module can never land at
// a cached address; UnloadModule drops the key.
type moduleKey struct {
	p *byte
	n int
}

// module is a loaded PTX module (owner-only).
type module struct {
	mod     driver.Module
	entries map[string]kernels.Entry
	fns     map[string]*function
}

// function is one entry point, checked once per kernel declaration.
type function struct {
	fn        driver.Function
	checked   map[string]bool // kernel names whose Params matched the entry
	maxShared int             // dynamic shared memory the function is allowed
	// hint is the built-in kernel's launch shape (kernels.LaunchFor), nil
	// for every other entry.
	hint *kernels.Launch
}

// checkLaunch validates a launch on the caller's goroutine, before it is
// queued: an implementation for CUDA, a launchable range, arguments that
// match their declaration (A2, via device.ValidateArgs), pointers whose real
// space matches what the argument claims, and memory this GPU's kernels can
// reach. It returns the converted arguments.
func (d *Device) checkLaunch(o device.LaunchOp) ([]device.Arg, error) {
	if o.Kernel == nil {
		return nil, fmt.Errorf("%w: %s runs named PTX kernels only; launch %q on a CPU device", device.ErrNoImplementation, d.info.ID, o.Name)
	}
	k := o.Kernel
	if k.PTX == nil || len(k.PTX.Module) == 0 || k.PTX.Entry == "" {
		return nil, fmt.Errorf("%w: kernel %q has no PTX; register one (device.PTX{Module, Entry}, or CUDA C source as device.CUDA{Source, Entry}) to run it on %s", device.ErrNoImplementation, k.Name, d.info.ID)
	}
	if err := o.Range.Validate(); err != nil {
		return nil, err
	}
	if _, err := launchGeometry(o.Range, d.attrs.MaxThreadsPerBlock); err != nil {
		return nil, fmt.Errorf("kernel %q: %w", k.Name, err)
	}
	if err := checkEntry(k); err != nil {
		return nil, err
	}
	args, err := device.ValidateArgs(k, o.Args, d.attrs.MaxSharedPerBlockOptin)
	if err != nil {
		return nil, err
	}
	if err := device.CheckLaunch(k, o.Range, args); err != nil {
		return nil, err
	}
	for i, a := range args {
		bad := func(format string, v ...any) error {
			return &device.ArgError{Kernel: k.Name, Index: i, Param: k.Params[i].Name, Reason: fmt.Sprintf(format, v...)}
		}
		switch a.Kind {
		case device.ArgLocal:
			if !o.Range.Grouped() {
				return nil, bad("local memory needs work-groups; set NDRange.Local")
			}
		case device.ArgPointer, device.ArgAccessor, device.ArgRangedAccessor:
			real := a.Mem.Space()
			if real != a.Space && !device.ImplicitlyConverts(real, a.Space) {
				return nil, bad("the argument claims %s space, but its memory is %s %s memory of %s", a.Space, real, a.Mem.Kind, a.Mem.Device)
			}
			if _, err := d.kernelAddr(a.Mem); err != nil {
				return nil, bad("%v", err)
			}
		}
	}
	return args, nil
}

// prepared is a launch's parameter buffer, packed on the caller's goroutine
// (Enqueue), so that the owner, which issues every launch of the device one
// after another, only looks its function up, works out the grid and calls
// the driver.
type prepared struct {
	params []byte
	shared int
}

// prepareLaunch packs a checked launch's arguments.
func (d *Device) prepareLaunch(o device.LaunchOp, args []device.Arg) (*prepared, error) {
	params, shared, err := packArgs(o.Kernel, o.Range, args, d.kernelAddr)
	if err != nil {
		return nil, err
	}
	return &prepared{params: params, shared: shared}, nil
}

// execLaunch starts a kernel on the owner thread.
func (d *Device) execLaunch(t task, o device.LaunchOp) error {
	r, err := d.resolveLaunch(t, o)
	if err != nil {
		return err
	}
	s := d.stream(t.queue)
	if !r.empty {
		if err := d.launch(s, &r.sig); err != nil {
			return err
		}
	}
	d.issued(s, completion{done: t.done})
	return nil
}

// resolveLaunch makes a launch ready for the driver on the owner thread:
// its packed parameters (packed by Enqueue already, as a rule), its
// function (the module loaded on first use), the shared memory it may use,
// and its grid.
func (d *Device) resolveLaunch(t task, o device.LaunchOp) (resolved, error) {
	p := t.launch
	if p == nil {
		args := t.args
		if args == nil && len(o.Args) > 0 {
			var err error
			if args, err = d.checkLaunch(o); err != nil {
				return resolved{}, err
			}
		}
		var err error
		if p, err = d.prepareLaunch(o, args); err != nil {
			return resolved{}, err
		}
	}
	f, err := d.function(o.Kernel)
	if err != nil {
		return resolved{}, err
	}
	if o.Range.Global[0] == 0 || o.Range.Global[1] == 0 || o.Range.Global[2] == 0 {
		return resolved{empty: true}, nil
	}
	if p.shared > f.maxShared {
		if p.shared > d.attrs.MaxSharedPerBlockOptin {
			return resolved{}, fmt.Errorf("%w: kernel %q needs %d bytes of local memory per work-group, %s has %d", device.ErrBadOp, o.Kernel.Name, p.shared, d.info.ID, d.attrs.MaxSharedPerBlockOptin)
		}
		if err := d.lib.FuncSetAttribute(f.fn, driver.FuncAttrMaxDynamicShared, p.shared); err != nil {
			return resolved{}, fmt.Errorf("kernel %q: allowing %d bytes of dynamic shared memory: %w", o.Kernel.Name, p.shared, err)
		}
		f.maxShared = p.shared
	}
	// The grid with the function's launch hint: checkLaunch's (which
	// validated the range) without one, a few times smaller with one.
	g, err := hintedGeometry(o.Range, d.attrs.MaxThreadsPerBlock, f.hint)
	if err != nil {
		return resolved{}, fmt.Errorf("kernel %q: %w", o.Kernel.Name, err)
	}
	return resolved{sig: launchSig{fn: f.fn, grid: g.Grid, block: g.Block, shared: uint32(p.shared), params: p.params, name: o.Kernel.Name}}, nil
}

// launch is one cuLaunchKernel of sig on stream s.
func (d *Device) launch(s int, sig *launchSig) error {
	c := driver.LaunchConfig{Grid: sig.grid, Block: sig.block, SharedBytes: sig.shared, Stream: d.streams[s]}
	if err := d.lib.LaunchKernel(sig.fn, &c, sig.params); err != nil {
		return fmt.Errorf("kernel %q on %s: %w", sig.name, d.info.ID, err)
	}
	return nil
}

// function loads (once) the kernel's module and entry, and checks (once per
// kernel name) that the entry takes the declared arguments.
func (d *Device) function(k *device.Kernel) (*function, error) {
	key := moduleKey{unsafe.SliceData(k.PTX.Module), len(k.PTX.Module)}
	m := d.funcs[key]
	if m == nil {
		entries, err := kernels.Entries(k.PTX.Module)
		if err != nil {
			return nil, fmt.Errorf("kernel %q: %w", k.Name, err)
		}
		mod, err := d.lib.ModuleLoadData(k.PTX.Module)
		if err != nil {
			return nil, fmt.Errorf("kernel %q: loading its PTX on %s: %w", k.Name, d.info.ID, err)
		}
		m = &module{mod: mod, entries: map[string]kernels.Entry{}, fns: map[string]*function{}}
		for _, e := range entries {
			m.entries[e.Name] = e
		}
		d.funcs[key] = m
	}
	f := m.fns[k.PTX.Entry]
	if f == nil {
		e, ok := m.entries[k.PTX.Entry]
		if !ok {
			names := make([]string, 0, len(m.entries))
			for n := range m.entries {
				names = append(names, n)
			}
			return nil, fmt.Errorf("%w: kernel %q: PTX module has no entry %q (it has %v)", device.ErrNoImplementation, k.Name, k.PTX.Entry, names)
		}
		fn, err := d.lib.ModuleGetFunction(m.mod, e.Name)
		if err != nil {
			return nil, fmt.Errorf("kernel %q: %w", k.Name, err)
		}
		f = &function{fn: fn, checked: map[string]bool{}, maxShared: d.attrs.MaxSharedPerBlock}
		if l, ok := kernels.LaunchFor(k.PTX); ok {
			f.hint = &l
		}
		m.fns[k.PTX.Entry] = f
	}
	if !f.checked[k.Name] {
		if err := kernels.CheckLayout(k.Name, m.entries[k.PTX.Entry], k.Params); err != nil {
			return nil, err
		}
		f.checked[k.Name] = true
	}
	return f, nil
}

var _ device.ModuleUnloader = (*Device)(nil)

// UnloadModule implements device.ModuleUnloader: it drops the module loaded
// from exactly mod (same data pointer and length) from the device's cache,
// with the functions taken from it, and calls cuModuleUnload on the owner
// thread, in the device's context. It forgets mod's parsed entries
// (entryCache) too. A module never loaded here is a no-op. The caller
// guarantees that no launch from mod is queued or running (the driver does
// not wait for them); it waits for the owner goroutine.
func (d *Device) UnloadModule(mod []byte) error {
	if len(mod) == 0 {
		return nil
	}
	key := moduleKey{unsafe.SliceData(mod), len(mod)}
	entryCache.Delete(key)
	keys := append([]moduleKey{key}, d.forgetSource(key)...)
	return d.Do(func(*Thread) error {
		var errs []error
		for _, k := range keys {
			errs = append(errs, d.unloadModule(k))
		}
		return errors.Join(errs...)
	})
}

// unloadModule runs on the owner thread.
func (d *Device) unloadModule(key moduleKey) error {
	m := d.funcs[key]
	if m == nil {
		return nil
	}
	delete(d.funcs, key)
	if d.graphs != nil {
		d.graphs.clear(d) // graphs may launch the module's functions
	}
	if err := d.lib.ModuleUnload(m.mod); err != nil {
		return fmt.Errorf("%s: unloading a PTX module of %d bytes: %w", d.info.ID, key.n, err)
	}
	return nil
}

// entryCache holds the parsed entry points of every PTX module seen, by
// module identity, so Enqueue can check a launch's layout without the GPU.
// UnloadModule deletes a module's entry.
var entryCache sync.Map // moduleKey → map[string]kernels.Entry

// checkEntry verifies, before a launch is queued, that the kernel's PTX has
// its entry and that the entry takes the ND range and the declared
// parameters (kernels.CheckLayout names the first argument that differs).
func checkEntry(k *device.Kernel) error {
	key := moduleKey{unsafe.SliceData(k.PTX.Module), len(k.PTX.Module)}
	v, ok := entryCache.Load(key)
	if !ok {
		es, err := kernels.Entries(k.PTX.Module)
		if err != nil {
			return fmt.Errorf("kernel %q: %w", k.Name, err)
		}
		m := make(map[string]kernels.Entry, len(es))
		for _, e := range es {
			m[e.Name] = e
		}
		v, _ = entryCache.LoadOrStore(key, m)
	}
	entries := v.(map[string]kernels.Entry)
	e, ok := entries[k.PTX.Entry]
	if !ok {
		names := make([]string, 0, len(entries))
		for n := range entries {
			names = append(names, n)
		}
		sort.Strings(names)
		return fmt.Errorf("%w: kernel %q: its PTX module has no entry %q (entries: %v)", device.ErrNoImplementation, k.Name, k.PTX.Entry, names)
	}
	return kernels.CheckLayout(k.Name, e, k.Params)
}
