package jobfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/acpp/acpp/device"
	"gopkg.in/yaml.v3"
)

// KernelSource resolves kernel names; *device.Registry is one.
type KernelSource interface {
	Lookup(name string) (*device.Kernel, error)
	Names() []string
}

// kernelsWhere is a KernelSource that says where it looked (a cluster's
// nodes), for the unknown-kernel error.
type kernelsWhere interface {
	// Where completes "unknown kernel "k": ..." ("no node of the cluster
	// (n1, n2) has it").
	Where() string
}

// Options configures Parse. The zero value checks the format only.
type Options struct {
	// Kernels resolves the kernels that steps name (device.Kernels with the
	// built-ins registered); nil skips the checks that need a kernel's
	// parameters (names of kernels declared in the job are still checked).
	Kernels KernelSource
	// ParamType gives the Go type of a kernel's data parameter
	// (kernels.ParamType); nil, or false for a parameter, falls back to
	// checking element sizes only.
	ParamType func(kernel, param string) (string, bool)
	// Params override the job's params (acpp-submit run --set n=4096): an
	// integer or an expression over the job's params, which replaces the
	// param's definition before params are resolved, so params computed
	// from it follow. Naming a param the job does not declare is an error.
	Params map[string]string
}

// Parse reads a job file (YAML, or JSON, which is YAML too) and validates
// it. file names it in messages. The error, if any, is an Errors listing
// every problem found.
func Parse(file string, data []byte, opts Options) (*Job, error) {
	if len(data) > MaxFileBytes {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("job file of %d bytes is larger than %d; move data into init files", len(data), MaxFileBytes)}}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: file, Line: 1, Msg: "empty job file; see docs/JOBS.md for the format"}}
		}
		return nil, Errors{syntaxError(file, err)}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil, Errors{{File: file, Line: 1, Msg: "empty job file; see docs/JOBS.md for the format"}}
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil {
		return nil, Errors{{File: file, Line: second.Line, Msg: "more than one YAML document (---); put one job in a file"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, Errors{syntaxError(file, err)}
	}
	d := &decoder{file: file, overrides: opts.Params, badBuffers: map[string]bool{}, badKernels: map[string]bool{}}
	j := d.job(root.Content[0])
	if !d.tooBig() {
		v := &validator{j: j, d: d, opts: opts}
		v.run()
	}
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	return j, nil
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

func syntaxError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = strings.TrimSpace(strings.Replace(msg, m[0]+":", "", 1))
	}
	return &Error{File: file, Line: line, Msg: "YAML syntax: " + msg + " (check the indentation and the quotes)", Err: err}
}

// validator checks references and kernel arguments once the structure is
// read.
type validator struct {
	j     *Job
	d     *decoder
	opts  Options
	decls map[string]*KernelDecl
}

func (v *validator) errf(line int, path, format string, args ...any) {
	v.d.errs = append(v.d.errs, &Error{File: v.j.File, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) run() {
	j := v.j
	for _, b := range j.Buffers {
		p := "buffers." + b.Name
		if b.PageSize != nil && b.Range != nil && len(b.PageSize) != len(b.Range) {
			v.errf(b.lines.at("page_size", b.Line), p+".page_size", "has %d dimensions, the range %v has %d", len(b.PageSize), b.Range, len(b.Range))
		}
		if b.Range != nil && b.Type != "" {
			n := uint64(Types[b.Type])
			for _, e := range b.Range {
				// Checked before multiplying: 2^40·2^24 wrapped to 0.
				if e > 0 && n > 1<<40/uint64(e) {
					v.errf(b.lines.at("range", b.Line), p+".range", "%v of %s is more than 1 TiB", b.Range, b.Type)
					break
				}
				n *= uint64(e)
			}
		}
		if b.Init != nil && b.Init.Value != nil && b.Type != "" {
			if _, err := b.Init.Value.Encode(b.Type); err != nil {
				v.errf(b.Init.lines.at("value", b.Init.Line), p+".init.value", "%v", err)
			}
		}
	}
	v.decls = map[string]*KernelDecl{}
	for _, k := range j.Kernels {
		v.kernelDecl(k)
	}
	for _, b := range j.Buffers {
		if b.Init != nil && b.Init.Kernel != nil {
			v.initKernel(b)
		}
	}
	v.steps(j.Steps)
	switch groups, visits, over := v.unrolled(j.Steps); {
	case over:
	case groups > MaxGroups:
		v.errf(v.d.stepsLine, "steps", "the job has more than %d command groups with repeats unrolled; lower the repeat counts or split the job", MaxGroups)
	case visits > MaxGroups:
		v.errf(v.d.stepsLine, "steps", "the job runs more than %d steps (swaps included) with repeats unrolled; lower the repeat counts or split the job", MaxGroups)
	}
	for _, o := range j.Outputs {
		if o.Buffer != "" {
			v.buffer(o.lines.at("buffer", o.Line), o.Path+".buffer", o.Buffer)
		}
	}
}

// unrolled counts the command groups (kernel, fill and copy steps) and the
// steps (swaps too) that steps run with repeats unrolled. It reports the
// first repeat that runs more than MaxGroups of either, and then returns
// over: nothing more is reported.
func (v *validator) unrolled(steps []*Step) (groups, visits int, over bool) {
	for _, s := range steps {
		g, n := 1, 1
		switch s.Kind {
		case SwapStep:
			g = 0
		case RepeatStep:
			ig, in, o := v.unrolled(s.Steps)
			if o {
				return 0, 0, true
			}
			// visits ≥ groups; in > MaxGroups/Count ⟺ in·Count > MaxGroups.
			if s.Count > 0 && in > MaxGroups/s.Count {
				line, path := s.lines.at("repeat.count", s.Line), s.Path+".repeat.count"
				if ig > MaxGroups/s.Count {
					v.errf(line, path, "the job has more than %d command groups: this repeat runs %d × %d command groups with repeats unrolled; lower the counts or split the job", MaxGroups, s.Count, ig)
				} else {
					v.errf(line, path, "the job runs more than %d steps (swaps included): this repeat runs %d × %d steps with repeats unrolled; lower the counts or split the job", MaxGroups, s.Count, in)
				}
				return 0, 0, true
			}
			g, n = ig*s.Count, in*s.Count
		}
		// Each term is at most MaxGroups and a job has fewer than
		// maxNodes steps: no overflow.
		groups, visits = groups+g, visits+n
	}
	return groups, visits, false
}

func (v *validator) bufferNames() string {
	names := make([]string, len(v.j.Buffers))
	for i, b := range v.j.Buffers {
		names[i] = b.Name
	}
	if len(names) == 0 {
		return "none declared"
	}
	return strings.Join(names, ", ")
}

// buffer resolves a buffer reference or reports it (unless its
// declaration failed, which is reported there).
func (v *validator) buffer(line int, path, name string) *Buffer {
	if b := v.j.Buffer(name); b != nil {
		return b
	}
	if v.d.badBuffers[name] {
		return nil
	}
	names := make([]string, len(v.j.Buffers))
	for i, b := range v.j.Buffers {
		names[i] = b.Name
	}
	v.errf(line, path, "unknown buffer %q%s (buffers: %s)", name, suggest(name, names), v.bufferNames())
	return nil
}

// region checks that offset and range fit b and returns the range (the rest
// of the buffer from offset when rng is nil). line is the region's, lines
// its fields'.
func (v *validator) region(line int, lines fieldLines, path string, b *Buffer, off, rng []int) []int {
	if b == nil || b.Range == nil {
		return nil
	}
	dims := len(b.Range)
	if off != nil && len(off) != dims {
		v.errf(lines.at("offset", line), path+".offset", "has %d dimensions, buffer %q has %d (%v)", len(off), b.Name, dims, b.Range)
		return nil
	}
	if rng != nil && len(rng) != dims {
		v.errf(lines.at("range", line), path+".range", "has %d dimensions, buffer %q has %d (%v)", len(rng), b.Name, dims, b.Range)
		return nil
	}
	out := make([]int, dims)
	for i := range dims {
		o := 0
		if off != nil {
			o = off[i]
		}
		if rng == nil {
			out[i] = b.Range[i] - o
		} else {
			out[i] = rng[i]
		}
		if o+out[i] > b.Range[i] || out[i] < 0 {
			// At the range, or the offset, that goes too far.
			v.errf(lines.at("range", lines.at("offset", line)), path, "offset %v + range %v leaves buffer %q of range %v", orZero(off, dims), rangeOr(rng, out), b.Name, b.Range)
			return nil
		}
	}
	return out
}

func orZero(s []int, dims int) []int {
	if s == nil {
		return make([]int, dims)
	}
	return s
}

func rangeOr(a, b []int) []int {
	if a == nil {
		return b
	}
	return a
}

func (v *validator) kernelDecl(k *KernelDecl) {
	p := "kernels." + k.Name
	if v.opts.Kernels != nil {
		if _, err := v.opts.Kernels.Lookup(k.Name); err == nil {
			v.errf(k.Line, p, "a kernel called %q is already registered (built-in); give the job's kernel another name", k.Name)
		}
	}
	seen := map[string]bool{}
	for i, pd := range k.Params {
		if pd.Name != "" && seen[pd.Name] {
			v.errf(pd.lines.at("name", pd.Line), fmt.Sprintf("%s.params[%d].name", p, i), "%q is declared twice", pd.Name)
		}
		seen[pd.Name] = true
		if pd.Const && pd.Kind != ParamPointer && pd.Kind != ParamAccessor && pd.Kind != ParamRanged {
			v.errf(pd.lines.at("const", pd.Line), fmt.Sprintf("%s.params[%d].const", p, i), "only pointer and accessor parameters can be constant")
		}
	}
	v.decls[k.Name] = k
}

// DeviceParams returns a job-declared kernel's parameters as the device
// registry declares them.
func (k *KernelDecl) DeviceParams() []device.Param {
	out := make([]device.Param, len(k.Params))
	for i, pd := range k.Params {
		dp := device.Param{Name: pd.Name, ElemSize: Types[pd.Type], Space: device.Global}
		switch pd.Kind {
		case ParamPointer:
			dp.Kind = device.ArgPointer
		case ParamAccessor:
			dp.Kind = device.ArgAccessor
		case ParamRanged:
			dp.Kind = device.ArgRangedAccessor
		case ParamScalar:
			dp.Kind, dp.Space = device.ArgScalar, device.Private
		case ParamLocal:
			dp.Kind, dp.Space, dp.ElemSize = device.ArgLocal, device.Local, 0
		}
		if pd.Const {
			dp.Space = device.Constant
		}
		out[i] = dp
	}
	return out
}

// kernelParams resolves a step's kernel: its parameters and, per data
// parameter, its type when known.
func (v *validator) kernelParams(s *Step) ([]device.Param, map[string]string, bool) {
	if k, ok := v.decls[s.Kernel]; ok {
		types := map[string]string{}
		for _, pd := range k.Params {
			types[pd.Name] = pd.Type
		}
		return k.DeviceParams(), types, true
	}
	if v.opts.Kernels == nil {
		return nil, nil, false
	}
	k, err := v.opts.Kernels.Lookup(s.Kernel)
	if err != nil {
		if v.d.badKernels[s.Kernel] {
			return nil, nil, false // its declaration failed, reported there
		}
		known := v.opts.Kernels.Names()
		for n := range v.decls {
			known = append(known, n)
		}
		sort.Strings(known)
		where, hint := "", "declare it under kernels: with its PTX module"
		if w, ok := v.opts.Kernels.(kernelsWhere); ok {
			where = ": " + w.Where()
			hint += ", or run it on nodes that have it (a node of your own carries its kernels: examples/custom-node)"
		}
		v.errf(s.lines.at("kernel", s.Line), s.Path+".kernel", "unknown kernel %q%s%s (kernels: %s); %s", s.Kernel, suggest(s.Kernel, known), where, strings.Join(known, ", "), hint)
		return nil, nil, false
	}
	types := map[string]string{}
	if v.opts.ParamType != nil {
		for _, p := range k.Params {
			if t, ok := v.opts.ParamType(s.Kernel, p.Name); ok {
				types[p.Name] = t
			}
		}
	}
	return k.Params, types, true
}

func isMem(k device.ArgKind) bool {
	return k == device.ArgPointer || k == device.ArgAccessor || k == device.ArgRangedAccessor
}

// initKernel checks a buffer's kernel initialisation: a kernel step whose
// one accessor is the buffer, written whole (no_init), passed as init's
// param or the kernel's first buffer parameter. init has no accessors, so
// its messages name init's own fields (param, kernel).
func (v *validator) initKernel(b *Buffer) {
	s := b.Init.Kernel
	a := &Accessor{Buffer: b.Name, Mode: Write, NoInit: true, Line: s.Line, Path: s.Path}
	if len(s.Accessors) > 0 { // init's param
		p := s.Accessors[0]
		a.Param, a.badParam, a.lines = p.Param, p.badParam, fieldLines{"param": p.Line}
	}
	s.Accessors = []*Accessor{a}
	if s.Kernel == "" {
		return // its name failed to decode, reported there
	}
	v.kernelStep(s)
	if a.Param == "" || a.Param == "!" || a.badParam {
		return // no buffer parameter, or not the one param names: reported
	}
	if params, _, ok := v.kernelParams(s); ok {
		for _, p := range params {
			if isMem(p.Kind) && p.Name != a.Param {
				v.errf(s.lines.at("kernel", s.Line), s.Path+".kernel", "kernel %q also takes buffer parameter %q; an init kernel may take only the buffer it initialises (use a step instead)", s.Kernel, p.Name)
			}
		}
	}
}

func (v *validator) steps(steps []*Step) {
	for _, s := range steps {
		switch s.Kind {
		case KernelStep:
			v.kernelStep(s)
		case FillStep:
			if f := s.Fill; f != nil && f.Buffer != "" {
				b := v.buffer(f.lines.at("buffer", f.Line), f.Path+".buffer", f.Buffer)
				v.region(f.Line, f.lines, f.Path, b, f.Offset, f.Range)
				if b != nil && b.Type != "" && f.Value.Text != "" {
					if _, err := f.Value.Encode(b.Type); err != nil {
						v.errf(f.lines.at("value", f.Line), f.Path+".value", "%v (buffer %q holds %s)", err, b.Name, b.Type)
					}
				}
			}
		case CopyStep:
			v.copyStep(s)
		case SwapStep:
			v.swapStep(s)
		case RepeatStep:
			v.steps(s.Steps)
		}
		// device is checked by the decoder, where its line is.
	}
}

// ParseDevice reads a device name "cpu:0" or "cuda:1" ("cpu" means index 0).
func ParseDevice(s string) (device.ID, error) {
	kind, idx, found := strings.Cut(s, ":")
	id := device.ID{}
	switch kind {
	case "cpu":
		id.Kind = device.KindCPU
	case "cuda":
		id.Kind = device.KindCUDA
	default:
		return id, fmt.Errorf("unknown device %q; use cpu:N or cuda:N", s)
	}
	if found {
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 {
			return id, fmt.Errorf("device %q: the index must be a number ≥ 0", s)
		}
		id.Index = n
	}
	return id, nil
}

func (v *validator) copyStep(s *Step) {
	c := s.Copy
	if c == nil || c.From.Buffer == "" || c.To.Buffer == "" {
		return
	}
	src := v.buffer(c.From.lines.at("buffer", c.From.Line), c.From.Path+".buffer", c.From.Buffer)
	dst := v.buffer(c.To.lines.at("buffer", c.To.Line), c.To.Path+".buffer", c.To.Buffer)
	rng := v.region(c.From.Line, c.From.lines, c.From.Path, src, c.From.Offset, c.From.Range)
	if src == nil || dst == nil || rng == nil || dst.Range == nil {
		return
	}
	if src.Type != dst.Type {
		v.errf(s.Line, s.Path, "copies %s elements of %q into %s buffer %q; both must have the same type", src.Type, src.Name, dst.Type, dst.Name)
	}
	if len(src.Range) != len(dst.Range) {
		v.errf(s.Line, s.Path, "buffers %q (%v) and %q (%v) differ in dimensions", src.Name, src.Range, dst.Name, dst.Range)
		return
	}
	v.region(c.To.Line, c.To.lines, c.To.Path, dst, c.To.Offset, rng)
}

func (v *validator) swapStep(s *Step) {
	a, b := s.Swap[0], s.Swap[1]
	if a == "" || b == "" {
		return
	}
	line := s.lines.at("swap", s.Line)
	ba := v.buffer(s.lines.at("swap[0]", line), s.Path+".swap[0]", a)
	bb := v.buffer(s.lines.at("swap[1]", line), s.Path+".swap[1]", b)
	if ba == nil || bb == nil {
		return
	}
	if a == b {
		v.errf(line, s.Path+".swap", "swaps %q with itself; name two buffers", a)
		return
	}
	if ba.Type != bb.Type || fmt.Sprint(ba.Range) != fmt.Sprint(bb.Range) {
		v.errf(line, s.Path+".swap", "buffers %q (%s %v) and %q (%s %v) differ; only buffers of one type and range can swap names", a, ba.Type, ba.Range, b, bb.Type, bb.Range)
	}
}

func (v *validator) kernelStep(s *Step) {
	// Buffers and regions first: they need no kernel.
	regions := make([][]int, len(s.Accessors))
	for i, a := range s.Accessors {
		if a.Buffer == "" {
			continue
		}
		b := v.buffer(a.lines.at("buffer", a.Line), a.Path+".buffer", a.Buffer)
		regions[i] = v.region(a.Line, a.lines, a.Path, b, a.Offset, a.Range)
		if a.NoInit && a.Mode == Read {
			v.errf(a.lines.at("no_init", a.Line), a.Path+".no_init", "a read accessor cannot be no_init (it would read data it never asked for); use mode write")
		}
	}
	// A range given but invalid is reported where it is; the checks that
	// need the range are left out rather than made against a default.
	if s.Range == nil && !s.invalid["range"] {
		if len(regions) > 0 && regions[0] != nil {
			s.Range = append([]int(nil), regions[0]...)
		} else if len(s.Accessors) == 0 && !s.invalid["accessors"] {
			v.errf(s.Line, s.Path+".range", "missing; a kernel without accessors needs a range")
		}
	}
	if s.WorkGroup != nil && s.Range != nil {
		line := s.lines.at("work_group", s.Line)
		if len(s.WorkGroup) != len(s.Range) {
			v.errf(line, s.Path+".work_group", "has %d dimensions, the range %v has %d", len(s.WorkGroup), s.Range, len(s.Range))
		} else {
			for i := range s.Range {
				if s.WorkGroup[i] <= 0 || s.Range[i]%s.WorkGroup[i] != 0 {
					v.errf(line, s.Path+".work_group", "range %v is not a multiple of the work-group size %v; round the range up (the built-in grouped kernels skip items past n)", s.Range, s.WorkGroup)
					break
				}
			}
		}
	}
	if s.Split != nil && s.Range != nil && s.Split.Dim >= len(s.Range) {
		v.errf(s.Split.lines.at("dim", s.Split.Line), s.Path+".split.dim", "dimension %d of a %d-dimensional range", s.Split.Dim, len(s.Range))
	}
	if s.Kernel == "" {
		return // its name failed to decode, reported there
	}
	params, types, ok := v.kernelParams(s)
	if !ok {
		return
	}
	v.bind(s, params, types)
}

// accField is where a problem with field of accessor a is reported: its
// line and path. A kernel initialisation has no accessors: there it is
// init's param, or its kernel when param is not given.
func accField(s *Step, a *Accessor, field string) (int, string) {
	if s.initOf != "" {
		if l, ok := a.lines["param"]; ok {
			return l, s.Path + ".param"
		}
		return s.lines.at("kernel", s.Line), s.Path + ".kernel"
	}
	return a.lines.at(field, a.Line), a.Path + "." + field
}

// bind assigns accessors, scalars and local memory to the kernel's
// parameters and checks each against its declaration. A field that was
// given but failed to decode is not reported again as missing.
func (v *validator) bind(s *Step, params []device.Param, types map[string]string) {
	byName := map[string]device.Param{}
	var memNames, scalarNames, localNames []string
	for _, p := range params {
		byName[p.Name] = p
		switch {
		case isMem(p.Kind):
			memNames = append(memNames, p.Name)
		case p.Kind == device.ArgScalar:
			scalarNames = append(scalarNames, p.Name)
		case p.Kind == device.ArgLocal:
			localNames = append(localNames, p.Name)
		}
	}
	sig := signature(s.Kernel, params, types)
	bound := map[string]bool{}
	// unsure: an accessor's param is unknown (its value failed to decode,
	// or the kernel has no such parameter), so which parameters lack an
	// accessor is unknown too: the unknown name's error lists them.
	unsure := s.invalid["accessors"]
	var unknown []*Accessor
	for _, a := range s.Accessors {
		if a.badParam {
			a.Param, unsure = "!", true
			continue
		}
		if a.Param != "" {
			p, ok := byName[a.Param]
			if !ok || !isMem(p.Kind) {
				unknown = append(unknown, a)
				unsure = true
				continue
			}
			if bound[a.Param] {
				line, path := accField(s, a, "param")
				v.errf(line, path, "parameter %q of kernel %s is given twice", a.Param, s.Kernel)
			}
			bound[a.Param] = true
		}
	}
	next := 0
	for _, a := range s.Accessors {
		if a.Param != "" {
			continue
		}
		for next < len(memNames) && bound[memNames[next]] {
			next++
		}
		if next == len(memNames) {
			if s.initOf != "" {
				v.errf(s.lines.at("kernel", s.Line), s.Path+".kernel", "kernel %s takes no buffer parameter; an init kernel writes the buffer it initialises: use one that does, or init: {value: ...}", sig)
			} else {
				v.errf(a.Line, a.Path, "kernel %s takes %d buffer parameters; this accessor is one too many", sig, len(memNames))
			}
			a.Param = "!"
			continue
		}
		a.Param = memNames[next]
		bound[a.Param] = true
	}
	var unbound []string
	for _, n := range memNames {
		if !bound[n] {
			unbound = append(unbound, n)
		}
	}
	for _, a := range unknown {
		line, path := accField(s, a, "param")
		switch {
		case s.initOf != "":
			v.errf(line, path, "kernel %s has no buffer parameter %q%s; name the one the buffer is passed as (%s), or leave param out for the first", sig, a.Param, suggest(a.Param, memNames), listOrNone(memNames))
		case len(unbound) > 0:
			v.errf(line, path, "kernel %s has no buffer parameter %q%s (buffer parameters without an accessor: %s)", sig, a.Param, suggest(a.Param, unbound), strings.Join(unbound, ", "))
		default:
			v.errf(line, path, "kernel %s has no buffer parameter %q%s", sig, a.Param, suggest(a.Param, memNames))
		}
		a.Param = "!"
	}
	// A kernel initialisation binds one buffer; initKernel reports the
	// kernel's other buffer parameters in init's terms.
	if !unsure && s.initOf == "" {
		for _, n := range unbound {
			v.errf(s.lines.at("accessors", s.Line), s.Path+".accessors", "kernel %s: no accessor for buffer parameter %q; add {param: %s, buffer: ..., mode: ...}", sig, n, n)
		}
	}
	for _, a := range s.Accessors {
		p, ok := byName[a.Param]
		if !ok {
			continue
		}
		b := v.j.Buffer(a.Buffer)
		if b == nil || b.Type == "" {
			continue
		}
		if t, ok := types[p.Name]; ok && t != "" {
			if t != b.Type {
				line, path := accField(s, a, "buffer")
				v.errf(line, path, "kernel %s parameter %q takes %s, buffer %q holds %s", s.Kernel, p.Name, t, b.Name, b.Type)
			}
		} else if p.ElemSize != 0 && p.ElemSize != Types[b.Type] {
			line, path := accField(s, a, "buffer")
			v.errf(line, path, "kernel %s parameter %q takes %d-byte elements, buffer %q holds %s", s.Kernel, p.Name, p.ElemSize, b.Name, b.Type)
		}
		if p.Kind == device.ArgAccessor && (a.Range != nil || a.Offset != nil) {
			field := "range"
			if a.Range == nil {
				field = "offset"
			}
			v.errf(a.lines.at(field, a.Line), a.Path+"."+field, "parameter %q of kernel %s is an unranged accessor (the whole buffer); a ranged accessor never converts to it (V2): drop range and offset", p.Name, s.Kernel)
		}
		if p.Space == device.Constant && a.Mode != Read {
			line, path := accField(s, a, "mode")
			if s.initOf != "" {
				v.errf(line, path, "parameter %q of kernel %s is constant (read-only); an init kernel writes the buffer it initialises: use a kernel that writes it", p.Name, s.Kernel)
			} else {
				v.errf(line, path, "parameter %q of kernel %s is constant; use mode read", p.Name, s.Kernel)
			}
		}
	}
	given := map[string]bool{}
	for _, sc := range s.Scalars {
		p, ok := byName[sc.Param]
		if !ok || p.Kind != device.ArgScalar {
			v.errf(sc.Line, s.Path+".scalars."+sc.Param, "kernel %s has no scalar parameter %q%s", sig, sc.Param, suggest(sc.Param, scalarNames))
			continue
		}
		given[sc.Param] = true
		t := types[p.Name]
		if t == "" {
			t = guessType(p.ElemSize, sc.Value)
		}
		sc.Type = t
		if _, err := sc.Value.Encode(t); err != nil {
			v.errf(sc.Line, s.Path+".scalars."+sc.Param, "%v (parameter %q is %s)", err, p.Name, t)
		}
	}
	if !s.invalid["scalars"] {
		for _, n := range scalarNames {
			if !given[n] && !s.invalid["scalars."+n] {
				v.errf(s.lines.at("scalars", s.Line), s.Path+".scalars", "kernel %s: scalar %q is missing; add scalars: {%s: ...}", sig, n, n)
			}
		}
	}
	given = map[string]bool{}
	for _, l := range s.Local {
		p, ok := byName[l.Param]
		if !ok || p.Kind != device.ArgLocal {
			v.errf(l.Line, s.Path+".local."+l.Param, "kernel %s has no local-memory parameter %q%s", sig, l.Param, suggest(l.Param, localNames))
			continue
		}
		given[l.Param] = true
	}
	if !s.invalid["local"] {
		for _, n := range localNames {
			if !given[n] && !s.invalid["local."+n] {
				v.errf(s.lines.at("local", s.Line), s.Path+".local", "kernel %s: local memory %q is missing; add local: {%s: BYTES}", sig, n, n)
			}
		}
	}
	if len(localNames) > 0 && s.WorkGroup == nil && !s.invalid["work_group"] {
		v.errf(s.Line, s.Path+".work_group", "kernel %s uses work-group local memory; give work_group (e.g. [256])", s.Kernel)
	}
}

// guessType picks a scalar type for a kernel that does not declare one:
// float32/float64 for numbers with a point or exponent, int32/int64
// otherwise.
func guessType(size int, n Number) string {
	isFloat := strings.ContainsAny(n.Text, ".eEnN") && !strings.HasPrefix(n.Text, "0x")
	switch {
	case size == 8 && isFloat:
		return "float64"
	case size == 8:
		return "int64"
	case isFloat:
		return "float32"
	}
	return "int32"
}

// signature prints a kernel's parameters for messages: saxpy(a float32, x *float32, y *float32).
func signature(name string, params []device.Param, types map[string]string) string {
	parts := make([]string, len(params))
	for i, p := range params {
		t := types[p.Name]
		if t == "" && p.ElemSize != 0 {
			t = fmt.Sprintf("%d-byte", p.ElemSize)
		}
		switch p.Kind {
		case device.ArgPointer:
			parts[i] = p.Name + " *" + t
		case device.ArgAccessor:
			parts[i] = p.Name + " accessor[" + t + "]"
		case device.ArgRangedAccessor:
			parts[i] = p.Name + " ranged[" + t + "]"
		case device.ArgLocal:
			parts[i] = p.Name + " local"
		default:
			parts[i] = p.Name + " " + t
		}
	}
	return name + "(" + strings.Join(parts, ", ") + ")"
}
