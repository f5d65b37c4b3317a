package device

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Form is a kind of kernel implementation.
type Form uint8

// Kernel forms.
const (
	// FormGo is a Go function run in process (the CPU backend, fakes).
	FormGo Form = iota + 1
	// FormPTX is a PTX module entry point (the CUDA backend), given as PTX
	// or as CUDA C source compiled to PTX at run time (Kernel.CUDA).
	FormPTX
)

func (f Form) String() string {
	switch f {
	case FormGo:
		return "go"
	case FormPTX:
		return "ptx"
	}
	return fmt.Sprintf("form(%d)", uint8(f))
}

// NDRange is a launch's index space, dimension 2 fastest (a 1D range n is
// {1, 1, n}). With Local all zero the launch is flat: the backend splits
// Global as it likes. Otherwise Global must be a multiple of Local in every
// dimension, and work-items of one group share local memory and barriers.
type NDRange struct {
	Global [3]int
	Local  [3]int
	Offset [3]int // added to every global id
	// Dims is the number of dimensions the program used (1–3), for APIs
	// that report ids in the program's order; backends ignore it.
	Dims int
}

// Grouped reports whether the launch has work-groups.
func (r NDRange) Grouped() bool { return r.Local != [3]int{} }

// Validate checks the extents.
func (r NDRange) Validate() error {
	for d := 0; d < 3; d++ {
		if r.Global[d] < 0 {
			return fmt.Errorf("%w: global range %v has a negative extent", ErrBadOp, r.Global)
		}
		if r.Grouped() && (r.Local[d] <= 0 || r.Global[d]%r.Local[d] != 0) {
			return fmt.Errorf("%w: global range %v is not a multiple of the work-group size %v", ErrBadOp, r.Global, r.Local)
		}
	}
	return nil
}

// Work is what a Go kernel implementation gets for one chunk of a flat launch
// or one work-group of a grouped launch. A Work is only valid during the
// call.
type Work struct {
	Range NDRange
	// Lo and Hi bound the global ids of the items to run (without
	// Range.Offset): a chunk of a flat launch, the group's items of a grouped
	// one.
	Lo, Hi [3]int
	// Group is the work-group id (grouped launches).
	Group [3]int
	// Args are the launch's arguments as validated.
	Args []Arg
	// Data[i] is the host-visible memory of pointer or accessor argument i,
	// starting at its Offset; nil for other arguments.
	Data [][]byte
	// Local[i] is this group's local memory for ArgLocal argument i (A3).
	Local [][]byte
}

// GoFunc is a Go kernel implementation. It runs the items of w; grouped
// kernels run phases over the group's items with a barrier between them.
// A panic becomes the launch's error (ErrKernelPanic).
type GoFunc func(w *Work)

// PTX is a CUDA kernel implementation.
type PTX struct {
	// Module is the PTX text (or a cubin image).
	Module []byte
	// Entry is the kernel's entry point name in Module.
	Entry string
}

// CUDA is a CUDA kernel given as CUDA C source. The CUDA backend compiles
// it to PTX at run time with NVRTC (cuda/nvrtc) for each GPU's
// architecture, on the machine that runs it, and caches the PTX on disk;
// a machine without libnvrtc refuses the launch with an error saying how
// to install it. It counts as FormPTX: a device that runs PTX runs it.
type CUDA struct {
	// Source is the CUDA C text. The entry must be declared
	// extern "C" __global__ so that its PTX entry is its plain name.
	Source []byte
	// Entry is the kernel's function name.
	Entry string
	// File names the source in compile errors ("saxpy.cu:4: error: ...");
	// "" means the kernel's name with ".cu".
	File string
	// Options are extra NVRTC options ("-use_fast_math", "-DTILE=16");
	// the architecture is the GPU's and must not be given.
	Options []string
}

// Kernel is a named kernel with its parameters and one implementation per
// backend (like a StarPU codelet).
type Kernel struct {
	Name   string
	Params []Param
	// Go runs the kernel on the CPU backend; nil means none.
	Go GoFunc
	// PTX runs it on CUDA; nil means none.
	PTX *PTX
	// CUDA runs it on CUDA from source when PTX is nil (PTX wins when
	// both are set); nil means none.
	CUDA *CUDA
	// Check, when set, refuses a launch the kernel cannot compute as
	// documented (a work-group size it does not support, too little
	// local memory) with an error that says what to pass. Backends call
	// it (CheckLaunch) before running the kernel, and the API when the
	// group is submitted, so such a launch fails instead of computing
	// something else. It must not keep args.
	Check func(nd NDRange, args []Arg) error
}

// CheckLaunch runs the kernel's Check on a launch of it; nil when the
// launch has no named kernel or the kernel no Check.
func CheckLaunch(k *Kernel, nd NDRange, args []Arg) error {
	if k == nil || k.Check == nil {
		return nil
	}
	if err := k.Check(nd, args); err != nil {
		return fmt.Errorf("%w: kernel %q: %w", ErrBadArg, k.Name, err)
	}
	return nil
}

// Has reports whether k has an implementation in form f.
func (k *Kernel) Has(f Form) bool {
	switch f {
	case FormGo:
		return k.Go != nil
	case FormPTX:
		return k.PTX != nil || k.CUDA != nil
	}
	return false
}

// LaunchOp runs a kernel. Exactly one of Kernel and Func is set: Kernel for
// a named kernel (Args already validated against Kernel.Params), Func for an
// ad-hoc Go closure (CPU only; devices without FormGo return
// ErrNoImplementation).
type LaunchOp struct {
	Name   string // for errors and traces
	Kernel *Kernel
	Func   GoFunc
	Range  NDRange
	Args   []Arg
}

// Op is one unit of device work: CopyOp, FillOp or LaunchOp.
type Op interface{ isOp() }

func (CopyOp) isOp()   {}
func (FillOp) isOp()   {}
func (LaunchOp) isOp() {}

// Registry holds named kernels. It is safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	m  map[string]*Kernel // guarded by mu
}

// ErrDuplicateKernel: a kernel of that name is already registered; pick
// another name.
var ErrDuplicateKernel = errors.New("device: kernel already registered")

// ErrUnknownKernel: no kernel of that name is registered; register it first.
var ErrUnknownKernel = errors.New("device: no kernel registered under that name")

// Register adds k. The name must be new and k must have at least one
// implementation.
func (r *Registry) Register(k Kernel) error {
	if k.Name == "" {
		return fmt.Errorf("device: kernel without a name; set Kernel.Name")
	}
	if k.Go == nil && k.PTX == nil && k.CUDA == nil {
		return fmt.Errorf("device: kernel %q has no implementation; set Go, PTX and/or CUDA", k.Name)
	}
	if k.CUDA != nil && (len(k.CUDA.Source) == 0 || k.CUDA.Entry == "") {
		return fmt.Errorf("device: kernel %q: CUDA needs Source and Entry (its extern \"C\" __global__ function)", k.Name)
	}
	for i, p := range k.Params {
		if p.Kind < ArgPointer || p.Kind > ArgScalar || p.Space < Generic || p.Space > Constant {
			return fmt.Errorf("device: kernel %q parameter %d (%s): kind %s / space %s unknown", k.Name, i, p.Name, p.Kind, p.Space)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[k.Name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateKernel, k.Name)
	}
	if r.m == nil {
		r.m = map[string]*Kernel{}
	}
	kk := k
	r.m[k.Name] = &kk
	return nil
}

// Lookup returns the kernel registered under name.
func (r *Registry) Lookup(name string) (*Kernel, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.m[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKernel, name)
	}
	return k, nil
}

// Names lists the registered kernels, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.m))
	for n := range r.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Kernels is the process-wide registry that the runtime looks kernels up in.
var Kernels = &Registry{}

// Register adds k to Kernels.
func Register(k Kernel) error { return Kernels.Register(k) }

// MustRegister is Register for init functions: it panics on error.
func MustRegister(k Kernel) {
	if err := Register(k); err != nil {
		panic(err)
	}
}

var backends struct {
	mu sync.Mutex
	m  map[Kind]Backend // guarded by mu
}

// RegisterBackend makes a backend's devices available to every queue opened
// afterwards. A backend registers itself once, from an init function;
// registering a kind twice replaces the earlier one.
func RegisterBackend(b Backend) {
	backends.mu.Lock()
	defer backends.mu.Unlock()
	if backends.m == nil {
		backends.m = map[Kind]Backend{}
	}
	backends.m[b.Kind] = b
}

// Backends lists the registered backends, sorted by kind.
func Backends() []Backend {
	backends.mu.Lock()
	defer backends.mu.Unlock()
	out := make([]Backend, 0, len(backends.m))
	for _, b := range backends.m {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}
