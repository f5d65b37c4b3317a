package proto

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/acpp/acpp/device"
)

// This file holds the message that ships a job's own kernels to a node: a
// job file (or a program) may declare kernels as PTX modules, which the
// nodes' registries do not have. The node registers them for that job only
// (C6: no other job or client sees or calls them) and drops them when the
// job closes. docs/NODE.md describes the request.

// Job kernel messages. A block of their own, away from node.go's list, so
// that the two lists cannot collide as they grow.
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	// MsgJobKernels registers kernels for one job on a node: body
	// [JobKernels], reply [JobKernelsRegistered]. All of a request's
	// kernels are registered, or none.
	MsgJobKernels MsgType = MsgFirstApp + 16 + iota
)

// Error codes of MsgJobKernels replies (application codes).
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	// CodeKernelExists: a kernel of that name is already in the node's
	// own registry, or the job registered a different kernel under it.
	// Pick another name.
	CodeKernelExists ErrorCode = CodeFirstApp + 200 + iota
)

func init() {
	appNames[MsgJobKernels] = "MsgJobKernels"
}

// Bounds of MsgJobKernels. A request is one frame, and frames are at most
// 16 MiB by default (transport.Config.MaxFrameSize): the modules of one
// request together stay below MaxKernelModule, which leaves room for the
// rest; a client splits larger sets over several requests.
const (
	// MaxKernelModule bounds one PTX module, and the modules of one
	// request together, in bytes.
	MaxKernelModule = 12 << 20
	// MaxKernelsPerRequest bounds the kernels of one request.
	MaxKernelsPerRequest = 64
	// MaxKernelName bounds a kernel's, an entry's and a parameter's name,
	// in bytes.
	MaxKernelName = 128
	// MaxKernelParams bounds a kernel's parameters (a launch takes at most
	// 256 arguments, see Instr.Validate).
	MaxKernelParams = 256
	// MaxParamElemSize bounds a parameter's element or scalar size.
	MaxParamElemSize = 1 << 16
)

// Numeric bounds of KernelParam.Kind and Space: the values of
// device.ArgKind (ArgPointer … ArgScalar) and device.AddrSpace (Generic …
// Constant); proto does not import device, node/ checks that they agree.
const (
	MaxParamKind  = 5
	MaxParamSpace = 7
)

// JobKernels registers kernels for job Job on the receiving node.
type JobKernels struct {
	Job     uint64       `msgpack:"j"`
	Kernels []KernelSpec `msgpack:"k"`
}

// KernelSpec is one kernel a job ships: its name, its parameters as
// device.Kernel declares them (without the implicit ND range), and its
// implementation: PTX, or CUDA C source that each node compiles for its
// own GPUs with NVRTC (exactly one of PTX and CUDA).
type KernelSpec struct {
	// Name is what Launch.Kernel calls it: 1 to MaxKernelName bytes of
	// letters, digits and _ . - @ :, starting with a letter or _.
	Name   string        `msgpack:"n"`
	Params []KernelParam `msgpack:"p,omitempty"`
	// PTX is the module's text (not a cubin: the node parses its entry
	// points to check Entry and Params before accepting it).
	PTX []byte `msgpack:"m"`
	// Entry is the kernel's entry point in PTX (a PTX identifier); for
	// CUDA, its extern "C" __global__ function.
	Entry string `msgpack:"e"`
	// CUDA is CUDA C source (instead of PTX). The node compiles it with
	// NVRTC for each of its GPUs when the kernels are registered; a
	// compile error comes back at File:line.
	CUDA []byte `msgpack:"c,omitempty"`
	// File names CUDA in compile errors (at most MaxKernelName bytes).
	File string `msgpack:"f,omitempty"`
	// Options are NVRTC options for CUDA (at most MaxKernelParams, each at
	// most MaxKernelName bytes).
	Options []string `msgpack:"o,omitempty"`
}

// Module is the kernel's implementation's bytes: PTX or CUDA C source.
func (k *KernelSpec) Module() []byte {
	if len(k.CUDA) > 0 {
		return k.CUDA
	}
	return k.PTX
}

// KernelParam is one declared parameter (device.Param). Kind and Space
// take the numeric values of device.ArgKind and device.AddrSpace.
type KernelParam struct {
	Name     string `msgpack:"n,omitempty"`
	Kind     uint8  `msgpack:"k"`
	Space    uint8  `msgpack:"s"`
	ElemSize uint32 `msgpack:"e,omitempty"`
}

// ParamsOf is the wire form of a kernel's parameters.
func ParamsOf(ps []device.Param) []KernelParam {
	out := make([]KernelParam, len(ps))
	for i, p := range ps {
		out[i] = KernelParam{Name: p.Name, Kind: uint8(p.Kind), Space: uint8(p.Space), ElemSize: uint32(p.ElemSize)}
	}
	return out
}

// Params is the declaration the wire form ps stands for.
func Params(ps []KernelParam) []device.Param {
	out := make([]device.Param, len(ps))
	for i, p := range ps {
		out[i] = device.Param{Name: p.Name, Kind: device.ArgKind(p.Kind), Space: device.AddrSpace(p.Space), ElemSize: int(p.ElemSize)}
	}
	return out
}

// JobKernelsRegistered is the reply to MsgJobKernels.
type JobKernelsRegistered struct {
	// Kernels is the number of kernels the job now has on the node, and
	// Bytes the size of their modules.
	Kernels int    `msgpack:"k"`
	Bytes   uint64 `msgpack:"b"`
}

// ValidKernelName reports whether s may name a shipped kernel.
func ValidKernelName(s string) bool {
	if s == "" || len(s) > MaxKernelName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '.' || c == '-' || c == '@' || c == ':'):
		default:
			return false
		}
	}
	return true
}

// validEntry reports whether s is a PTX identifier: a letter, _ , $ or %
// followed by letters, digits, _ and $ (PTX ISA, "Identifiers").
func validEntry(s string) bool {
	if s == "" || len(s) > MaxKernelName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || c == '$' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case c == '%' && i == 0:
		case i > 0 && '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return true
}

// Validate checks the request's bounds and names, so that a node can
// refuse a malformed one before parsing any module. It wraps ErrMalformed
// and names the kernel and the field.
func (r *JobKernels) Validate() error {
	if len(r.Kernels) == 0 {
		return fmt.Errorf("%w: job kernels request carries no kernels", ErrMalformed)
	}
	if len(r.Kernels) > MaxKernelsPerRequest {
		return fmt.Errorf("%w: %d kernels in one request, at most %d; send them in several", ErrMalformed, len(r.Kernels), MaxKernelsPerRequest)
	}
	total := 0
	seen := make(map[string]bool, len(r.Kernels))
	for i := range r.Kernels {
		if err := r.Kernels[i].validate(); err != nil {
			return fmt.Errorf("%w: kernel %d: %w", ErrMalformed, i, err)
		}
		if seen[r.Kernels[i].Name] {
			return fmt.Errorf("%w: kernel %d: %q is in the request twice", ErrMalformed, i, r.Kernels[i].Name)
		}
		seen[r.Kernels[i].Name] = true
		total += len(r.Kernels[i].Module())
	}
	if total > MaxKernelModule {
		return fmt.Errorf("%w: the request's modules are %d bytes together, at most %d; send them in several requests", ErrMalformed, total, MaxKernelModule)
	}
	return nil
}

func (k *KernelSpec) validate() error {
	if !ValidKernelName(k.Name) {
		return fmt.Errorf("name %.40q is not 1 to %d bytes of letters, digits and _ . - @ : starting with a letter or _", k.Name, MaxKernelName)
	}
	if !validEntry(k.Entry) {
		return fmt.Errorf("%q: entry %.40q is not a PTX identifier (at most %d bytes)", k.Name, k.Entry, MaxKernelName)
	}
	switch {
	case len(k.PTX) > 0 && len(k.CUDA) > 0:
		return fmt.Errorf("%q: both PTX and CUDA C source; ship one", k.Name)
	case len(k.CUDA) > 0:
		if len(k.CUDA) > MaxKernelModule {
			return fmt.Errorf("%q: CUDA C source of %d bytes, at most %d", k.Name, len(k.CUDA), MaxKernelModule)
		}
		if len(k.File) > MaxKernelName || !utf8.ValidString(k.File) || strings.ContainsAny(k.File, "\x00\n(") {
			return fmt.Errorf("%q: file name %.40q is not UTF-8 of at most %d bytes without NUL, newline or (", k.Name, k.File, MaxKernelName)
		}
		if len(k.Options) > MaxKernelParams {
			return fmt.Errorf("%q: %d NVRTC options, at most %d", k.Name, len(k.Options), MaxKernelParams)
		}
		for i, o := range k.Options {
			if len(o) > MaxKernelName || !utf8.ValidString(o) || strings.ContainsRune(o, 0) {
				return fmt.Errorf("%q: NVRTC option %d is not UTF-8 of at most %d bytes without NUL", k.Name, i, MaxKernelName)
			}
		}
	case len(k.PTX) == 0:
		return fmt.Errorf("%q: empty PTX module", k.Name)
	case len(k.PTX) > MaxKernelModule:
		return fmt.Errorf("%q: PTX module of %d bytes, at most %d", k.Name, len(k.PTX), MaxKernelModule)
	case k.File != "" || len(k.Options) > 0:
		return fmt.Errorf("%q: File and Options belong to CUDA C source, and the kernel ships PTX", k.Name)
	}
	if len(k.Params) > MaxKernelParams {
		return fmt.Errorf("%q: %d parameters, at most %d", k.Name, len(k.Params), MaxKernelParams)
	}
	for i, p := range k.Params {
		if len(p.Name) > MaxKernelName || !utf8.ValidString(p.Name) {
			return fmt.Errorf("%q: parameter %d: name is not UTF-8 of at most %d bytes", k.Name, i, MaxKernelName)
		}
		if p.Kind < 1 || p.Kind > MaxParamKind {
			return fmt.Errorf("%q: parameter %d (%s): kind %d, want 1..%d", k.Name, i, p.Name, p.Kind, MaxParamKind)
		}
		if p.Space < 1 || p.Space > MaxParamSpace {
			return fmt.Errorf("%q: parameter %d (%s): address space %d, want 1..%d", k.Name, i, p.Name, p.Space, MaxParamSpace)
		}
		if p.ElemSize > MaxParamElemSize {
			return fmt.Errorf("%q: parameter %d (%s): element size %d, at most %d", k.Name, i, p.Name, p.ElemSize, MaxParamElemSize)
		}
	}
	return nil
}
