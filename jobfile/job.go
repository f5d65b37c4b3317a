package jobfile

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Job is a parsed, validated job file.
type Job struct {
	File    string // the name given to Parse, for messages
	Version int    // 1
	Name    string // defaults to the file name without extension
	// Description is free text.
	Description string
	// Params are the job's integer params after --set overrides, resolved
	// in dependency order; integer fields and numbers may be expressions
	// over them ("n / 8").
	Params  map[string]int64
	Buffers []*Buffer // in file order
	Kernels []*KernelDecl
	Steps   []*Step
	Outputs []*Output
	// Recovery is what a cluster run does when it loses a node; empty
	// fields leave acpp-submit's flags (or their defaults) in charge.
	Recovery Recovery
}

// Recovery is the job file's recovery section.
type Recovery struct {
	// OnNodeLoss is "recover", "fail" or empty.
	OnNodeLoss string
	// Checkpoint is "auto", "off", a number of command groups, or empty.
	Checkpoint string
	Line       int // of the recovery key (0: no section)
}

// Buffer looks a buffer up by name.
func (j *Job) Buffer(name string) *Buffer {
	for _, b := range j.Buffers {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// At returns an *Error at line and path of this job, for problems found
// while running it.
func (j *Job) At(line int, path string, err error) *Error {
	return &Error{File: j.File, Line: line, Path: path, Msg: err.Error(), Err: err}
}

// Types are the element types a buffer may have, with their sizes.
var Types = map[string]int{
	"float32": 4, "float64": 8,
	"int8": 1, "int16": 2, "int32": 4, "int64": 8,
	"uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}

// Buffer declares one buffer.
type Buffer struct {
	Name     string
	Type     string // a key of Types
	Range    []int  // 1–3 extents, dimension 0 slowest
	PageSize []int  // nil: the runtime's default
	Init     *Init  // nil: uninitialised (T2)
	Line     int
	lines    fieldLines
}

// Count is the number of elements.
func (b *Buffer) Count() int {
	n := 1
	for _, e := range b.Range {
		n *= e
	}
	return n
}

// Bytes is the buffer's size in bytes.
func (b *Buffer) Bytes() int { return b.Count() * Types[b.Type] }

// Init says where a buffer's initial contents come from: exactly one of
// Value, File and Kernel is set.
type Init struct {
	Value  *Number
	File   string // path as written (relative to the job file's directory)
	Format Format // of File
	Kernel *Step  // a kernel step writing the buffer (no_init)
	Line   int
	lines  fieldLines
}

// Format is a data file format.
type Format string

// Data file formats.
const (
	FormatRaw Format = "raw" // the elements, little-endian, row-major, nothing else
	FormatNPY Format = "npy" // NumPy .npy
)

// FormatOf is the default format of a file name: npy for .npy, raw
// otherwise.
func FormatOf(file string) Format {
	if strings.HasSuffix(strings.ToLower(file), ".npy") {
		return FormatNPY
	}
	return FormatRaw
}

// Number is a number as written in the job file, converted to a buffer's
// or parameter's type only when its type is known (so 64-bit integers keep
// every digit).
type Number struct {
	Text string
}

// Encode returns n as a little-endian value of type typ (a key of Types),
// or an error that says why it does not fit.
func (n Number) Encode(typ string) ([]byte, error) {
	s := strings.ReplaceAll(n.Text, "_", "")
	switch typ {
	case "float32", "float64":
		bits := 64
		if typ == "float32" {
			bits = 32
		}
		v, err := strconv.ParseFloat(s, bits)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return nil, fmt.Errorf("%s does not fit in a %s", n.Text, typ)
			}
			return nil, fmt.Errorf("%q is not a number", n.Text)
		}
		if typ == "float32" {
			return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(v))), nil
		}
		return binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)), nil
	}
	size, ok := Types[typ]
	if !ok {
		return nil, fmt.Errorf("unknown type %q", typ)
	}
	out := make([]byte, 8)
	if strings.HasPrefix(typ, "uint") {
		v, err := strconv.ParseUint(s, 0, size*8)
		if err != nil {
			return nil, fmt.Errorf("%s is not a %s (0 to %d)", n.Text, typ, uint64(math.MaxUint64)>>(64-size*8))
		}
		binary.LittleEndian.PutUint64(out, v)
	} else {
		v, err := strconv.ParseInt(s, 0, size*8)
		if err != nil {
			lim := int64(1) << (size*8 - 1)
			return nil, fmt.Errorf("%s is not an %s (%d to %d)", n.Text, typ, -lim, lim-1)
		}
		binary.LittleEndian.PutUint64(out, uint64(v))
	}
	return out[:size], nil
}

// Mode is an accessor's access mode.
type Mode string

// Access modes.
const (
	Read      Mode = "read"
	Write     Mode = "write"
	ReadWrite Mode = "read_write"
)

// StepKind says what a step does.
type StepKind string

// Step kinds.
const (
	KernelStep StepKind = "kernel" // a named kernel over an ND range
	FillStep   StepKind = "fill"   // set a region of a buffer to a value
	CopyStep   StepKind = "copy"   // copy a region of one buffer into another
	SwapStep   StepKind = "swap"   // exchange two buffer names (host side, no data moves)
	RepeatStep StepKind = "repeat" // run steps Count times
)

// Step is one entry of a job's steps.
type Step struct {
	Kind StepKind
	Name string // optional label for traces; defaults to the kernel or kind
	Line int
	Path string // steps[2].repeat.steps[0]

	// Device pins the step to a device ("cpu:0", "cuda:1"); "" lets the
	// runtime choose.
	Device string

	// KernelStep.
	Kernel    string
	Range     []int // nil: the range of the first accessor's region
	WorkGroup []int // nil: a flat launch
	Accessors []*Accessor
	Scalars   []*Scalar
	Local     []*LocalMem
	Split     *Split

	// FillStep.
	Fill *Fill
	// CopyStep.
	Copy *Copy
	// SwapStep: the two buffer names.
	Swap [2]string
	// RepeatStep.
	Count int
	Steps []*Step

	lines fieldLines
	// invalid holds the fields given with a value that failed to decode
	// ("work_group", "scalars.n", "accessors"): that failure is reported
	// where it is, and nothing reports them as missing.
	invalid map[string]bool
	// initOf is the buffer a kernel initialisation writes ("" for a step):
	// its messages speak of init's fields (param), not a step's
	// (accessors).
	initOf string
}

// markInvalid records that field was given but failed to decode.
func (s *Step) markInvalid(field string) {
	if s.invalid == nil {
		s.invalid = map[string]bool{}
	}
	s.invalid[field] = true
}

// Label is the step's name for traces and progress: Name, else the kernel,
// else the kind.
func (s *Step) Label() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.Kind == KernelStep:
		return s.Kernel
	}
	return string(s.Kind)
}

// Accessor is one buffer access of a kernel step, bound to a kernel
// parameter.
type Accessor struct {
	Param  string // the kernel parameter it is passed as (filled in by Parse)
	Buffer string
	Mode   Mode
	Range  []int // nil: the whole buffer (from Offset)
	Offset []int // nil: zero
	NoInit bool
	// Map says how a split chunk maps to the buffer (recorded for the
	// cluster coordinator; the embedded runtime does not split): one_to_one,
	// all, fixed, neighbourhood.
	Map      string
	MapRange int // neighbourhood width
	Line     int
	Path     string
	lines    fieldLines
	badParam bool // param was given but is no valid name (reported)
}

// Scalar is a scalar kernel argument.
type Scalar struct {
	Param string
	Value Number
	Type  string // filled in by Parse when the kernel declares it
	Line  int
}

// LocalMem sizes a local-memory parameter.
type LocalMem struct {
	Param string
	Bytes int
	Line  int
}

// Split asks for the step's range to be divided across devices (recorded:
// the embedded runtime runs the step whole; the coordinator will split).
type Split struct {
	Dim     int    // the dimension to cut, default 0
	Devices string // "all" or a count
	// ChunksPerDevice cuts the range into this many chunks per device
	// (default 1). More chunks let a device compute the inside of its
	// block while the halo of the border chunk is on its way.
	ChunksPerDevice int
	// Borders cuts a chunk of this many rows (units along Dim) off each
	// side of a device's block that touches another device's, so that
	// halos cross while the interior computes (coordinator.Split.Borders).
	Borders int
	Line    int
	lines   fieldLines
}

// Region is a part of a buffer.
type Region struct {
	Buffer string
	Range  []int // nil: to the end from Offset
	Offset []int // nil: zero
	Line   int
	Path   string
	lines  fieldLines
}

// Fill sets a region to a value.
type Fill struct {
	Region
	Value Number
}

// Copy copies a region of one buffer to another of the same type; the
// destination takes the source region's extent.
type Copy struct {
	From, To Region
}

// Output writes a buffer to a file after the steps.
type Output struct {
	Buffer string
	File   string
	Format Format
	Line   int
	Path   string
	lines  fieldLines
}

// ParamKind is a job-declared kernel parameter's kind.
type ParamKind string

// Parameter kinds of job-declared kernels.
const (
	ParamPointer  ParamKind = "pointer"  // raw accessor: one device pointer
	ParamAccessor ParamKind = "accessor" // unranged accessor: pointer + buffer range
	ParamRanged   ParamKind = "ranged"   // ranged accessor: + access offset and range
	ParamScalar   ParamKind = "scalar"
	ParamLocal    ParamKind = "local"
)

// KernelDecl is a kernel the job ships as a PTX module, or as CUDA C
// source that NVRTC compiles where it runs (each node, for its GPUs).
// Exactly one of PTX and CUDA is set.
type KernelDecl struct {
	Name string
	PTX  string // path of the module, relative to the job file
	CUDA string // path of the CUDA C source, relative to the job file
	// Options are NVRTC options for CUDA ("--fmad=false", "-DTILE=16").
	Options []string
	Entry   string // defaults to Name
	Params  []ParamDecl
	Line    int
	lines   fieldLines
}

// ParamDecl declares one parameter of a job-declared kernel.
type ParamDecl struct {
	Name string
	Kind ParamKind
	Type string // element or scalar type; "" for local
	// Const: a read-only global parameter in constant space.
	Const bool
	Line  int
	lines fieldLines
}

// fieldLines maps a field's key to the line of that key in the job file,
// so that a problem found after decoding is reported at the field's own
// line, not at the line of the object that holds it (in block YAML a
// step's fields are on the lines below "- name: ...").
type fieldLines map[string]int

// at is the line of field key, or def when the field was not given.
func (l fieldLines) at(key string, def int) int {
	if n := l[key]; n > 0 {
		return n
	}
	return def
}

// LineOf is the line of one of the step's fields ("device", "kernel"),
// or the step's line when the field is not given. Problems found after
// Parse (acpp-submit's checks, a run) point at the field with it.
func (s *Step) LineOf(field string) int { return s.lines.at(field, s.Line) }

// LineOf is the line of one of init's fields ("file"), or init's line.
func (in *Init) LineOf(field string) int { return in.lines.at(field, in.Line) }

// LineOf is the line of one of the output's fields ("file"), or the
// output's line.
func (o *Output) LineOf(field string) int { return o.lines.at(field, o.Line) }

// LineOf is the line of one of the kernel declaration's fields ("ptx",
// "entry"), or the declaration's line.
func (k *KernelDecl) LineOf(field string) int { return k.lines.at(field, k.Line) }

// Walk calls f for every step in execution order, unrolling repeats (f
// sees the steps inside a repeat Count times and never a RepeatStep). It
// stops at the first error f returns.
func (j *Job) Walk(f func(s *Step) error) error { return walk(j.Steps, f) }

func walk(steps []*Step, f func(s *Step) error) error {
	for _, s := range steps {
		if s.Kind != RepeatStep {
			if err := f(s); err != nil {
				return err
			}
			continue
		}
		for range s.Count {
			if err := walk(s.Steps, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// MaxGroups bounds the command groups of a job, and the steps Walk visits
// (swaps included), with repeats unrolled: 2⁴⁰, the largest repeat count
// (a repeat of one step at its largest count is a valid job). Parse
// refuses a job with more.
const MaxGroups = 1 << 40

// CountSteps is the number of steps Walk visits that submit work (kernel,
// fill, copy): at most MaxGroups for a job Parse accepted (saturating at
// math.MaxInt for one built otherwise).
func (j *Job) CountSteps() int { return count(j.Steps) }

func count(steps []*Step) int {
	n := 0
	for _, s := range steps {
		c := 1
		switch s.Kind {
		case SwapStep:
			c = 0
		case RepeatStep:
			inner := count(s.Steps)
			if inner != 0 && s.Count > math.MaxInt/inner {
				return math.MaxInt
			}
			c = inner * s.Count
		}
		if n > math.MaxInt-c {
			return math.MaxInt
		}
		n += c
	}
	return n
}
