package jobfile

import (
	"errors"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxFileBytes is the largest job file Parse accepts.
const MaxFileBytes = 16 << 20

// maxNodes bounds the YAML nodes Parse visits, aliases expanded, so that an
// alias bomb is an error and not a hang.
const maxNodes = 1 << 17

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

var paramRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func sortStrings(s []string) { sort.Strings(s) }

// decoder walks a YAML node tree, collecting every problem.
type decoder struct {
	file      string
	errs      Errors
	nodes     int
	params    map[string]int64 // resolved params
	overrides map[string]string
	// badParams are declared params that could not be resolved (their
	// error is reported once, where they are declared); declared lists
	// every declared param, sorted.
	badParams map[string]bool
	declared  []string
	// badBuffers and badKernels are buffers and job kernels whose
	// declaration failed (reported there): a use of one is not reported
	// again as an unknown name.
	badBuffers map[string]bool
	badKernels map[string]bool
	stepsLine  int // the line of the job's steps:
}

// errBadParam: an expression uses a param whose own definition failed
// (already reported there), so the use is not reported again.
var errBadParam = errors.New("param failed to resolve")

// param is the lookup of names in expressions outside params.
func (d *decoder) param(name string) (int64, error) {
	if v, ok := d.params[name]; ok {
		return v, nil
	}
	if d.badParams[name] {
		return 0, errBadParam
	}
	return 0, unknownParam(name, d.declared)
}

func (d *decoder) errf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errAt(line, path, format, args...)
}

// errAt reports a problem at a line.
func (d *decoder) errAt(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// resolve follows aliases and counts nodes.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.nodes++
	return n
}

func (d *decoder) tooBig() bool { return d.nodes > maxNodes }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return quoteShort(n.Value)
	}
	return "an unknown node"
}

type field struct {
	key  string
	node *yaml.Node // the value
	kn   *yaml.Node // the key
}

// linesOf is the line of each field's key.
func linesOf(fs []field) fieldLines {
	l := make(fieldLines, len(fs))
	for _, f := range fs {
		l[f.key] = f.kn.Line
	}
	return l
}

// fields checks that n is a mapping whose keys are all in allowed (no
// duplicates) and returns its entries in order.
func (d *decoder) fields(n *yaml.Node, path string, allowed ...string) ([]field, bool) {
	n = d.resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		what := "nothing"
		if n != nil {
			what = kindName(n)
		}
		d.errf(n, path, "want a mapping (key: value lines), got %s", what)
		return nil, false
	}
	var out []field
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn := d.resolve(n.Content[i])
		if kn.Kind != yaml.ScalarNode {
			d.errf(kn, path, "keys must be plain names")
			continue
		}
		k := kn.Value
		p := join(path, k)
		if seen[k] {
			d.errf(kn, p, "given twice; keep one")
			continue
		}
		seen[k] = true
		if allowed != nil && !contains(allowed, k) {
			sorted := append([]string(nil), allowed...)
			sort.Strings(sorted)
			d.errf(kn, p, "unknown field%s; known fields: %s", suggest(k, allowed), strings.Join(sorted, ", "))
			continue
		}
		out = append(out, field{k, n.Content[i+1], kn})
	}
	return out, true
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n = d.resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errf(n, path, "want a string, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) name(n *yaml.Node, path, what string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if !nameRE.MatchString(s) {
		d.errf(n, path, "%s name %q: use letters, digits, _ . - (not starting with a digit)", what, s)
		return "", false
	}
	return s, true
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	n = d.resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		v, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err == nil {
			return v, true
		}
	}
	d.errf(n, path, "want true or false, got %s", kindName(n))
	return false, false
}

func (d *decoder) integer(n *yaml.Node, path string, lo, hi int) (int, bool) {
	n = d.resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if floatOutOfRange(n.Value) {
			d.errf(n, path, "%s is out of range: want an integer from %d to %d", short(n.Value), lo, hi)
			return 0, false
		}
		v, err := evalExpr(n.Value, d.param)
		if err != nil {
			if !errors.Is(err, errBadParam) {
				d.errf(n, path, "%v", err)
			}
			return 0, false
		}
		if v < int64(lo) || v > int64(hi) {
			d.errf(n, path, "%s = %d is out of range: want %d to %d", short(n.Value), v, lo, hi)
			return 0, false
		}
		return int(v), true
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err == nil && v >= int64(lo) && v <= int64(hi) {
			return int(v), true
		}
		if err == nil || strings.Contains(err.Error(), "range") {
			d.errf(n, path, "%s is out of range: want %d to %d", short(n.Value), lo, hi)
			return 0, false
		}
	}
	d.errf(n, path, "want an integer (%d to %d), got %s", lo, hi, kindName(n))
	return 0, false
}

// floatOutOfRange: s is a number too large for a float64 (1e400), which
// YAML leaves a string: it is a number out of range, not an expression.
func floatOutOfRange(s string) bool {
	_, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	return errors.Is(err, strconv.ErrRange)
}

func (d *decoder) number(n *yaml.Node, path string) (Number, bool) {
	n = d.resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if floatOutOfRange(n.Value) {
			// Converting it to its type says it does not fit.
			return Number{Text: n.Value}, true
		}
		v, err := evalExpr(n.Value, d.param)
		if err != nil {
			if !errors.Is(err, errBadParam) {
				d.errf(n, path, "%v", err)
			}
			return Number{}, false
		}
		return Number{Text: strconv.FormatInt(v, 10)}, true
	}
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		v := n.Value
		switch strings.ToLower(v) {
		case ".inf", "+.inf":
			v = "+Inf"
		case "-.inf":
			v = "-Inf"
		case ".nan":
			v = "NaN"
		}
		return Number{Text: v}, true
	}
	d.errf(n, path, "want a number, got %s", kindName(n))
	return Number{}, false
}

// extents reads a 1–3 element list of integers ≥ lo (an integer alone is a
// 1-element list).
func (d *decoder) extents(n *yaml.Node, path string, lo int) ([]int, bool) {
	n = d.resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		v, ok := d.integer(n, path, lo, 1<<40)
		if !ok {
			return nil, false
		}
		return []int{v}, true
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) < 1 || len(n.Content) > 3 {
		d.errf(n, path, "want a list of 1 to 3 integers ≥ %d ([rows, cols]), got %s", lo, kindName(n))
		return nil, false
	}
	out := make([]int, len(n.Content))
	ok := true
	for i, c := range n.Content {
		v, good := d.integer(c, fmt.Sprintf("%s[%d]", path, i), lo, 1<<40)
		out[i], ok = v, ok && good
	}
	if !ok {
		return nil, false
	}
	return out, true
}

func (d *decoder) list(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = d.resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errf(n, path, "want a list (lines starting with -), got %s", kindName(n))
		return nil, false
	}
	return n.Content, true
}

// ---- the document ----

// paramDef is one declared param: its definition in the job file, or the
// expression --set gave it.
type paramDef struct {
	name     string
	node     *yaml.Node // the value in the job file
	override string     // --set's expression; used when set is true
	set      bool
	state    uint8 // unresolved, resolving, resolved or failed
}

const (
	paramUnresolved = iota
	paramResolving
	paramResolved
	paramFailed
)

// maxParamChain bounds how many params one param may depend on in a chain
// (a → b → c …), which bounds the resolver's recursion.
const maxParamChain = 1000

// resolveParams reads params: name → integer, or an expression over any
// other params (in any order), applies --set overrides (which replace a
// param's definition, so params computed from it follow), and resolves
// them in dependency order into d.params. A cycle is reported once, naming
// it; a param whose definition fails is left out of d.params, and uses of
// it elsewhere are not reported again.
func (d *decoder) resolveParams(n *yaml.Node) {
	d.params = map[string]int64{}
	d.badParams = map[string]bool{}
	defs := map[string]*paramDef{}
	var order []*paramDef // declaration order
	if n != nil {
		fs, ok := d.fields(n, "params")
		if ok {
			for _, f := range fs {
				if !paramRE.MatchString(f.key) {
					d.errf(f.kn, "params."+f.key, "param name %q: use letters, digits and _ (not starting with a digit)", f.key)
					continue
				}
				pd := &paramDef{name: f.key, node: f.node}
				defs[f.key] = pd
				order = append(order, pd)
				d.declared = append(d.declared, f.key)
			}
		}
	}
	sortStrings(d.declared)
	names := make([]string, 0, len(d.overrides))
	for k := range d.overrides {
		names = append(names, k)
	}
	sortStrings(names)
	for _, k := range names {
		pd := defs[k]
		if pd == nil {
			d.errs = append(d.errs, &Error{File: d.file, Path: "--set " + k, Msg: fmt.Sprintf("the job declares no param %q%s (params: %s)", k, suggest(k, d.declared), listOrNone(d.declared))})
			continue
		}
		pd.override, pd.set = d.overrides[k], true
	}
	var stack []*paramDef // params being resolved, outermost first
	var resolve func(pd *paramDef) error
	resolve = func(pd *paramDef) error {
		switch pd.state {
		case paramResolved:
			return nil
		case paramFailed:
			return errBadParam
		case paramResolving:
			// A cycle: pd is on the stack. Report it once, at pd.
			i := slices.Index(stack, pd)
			cyc := make([]string, 0, len(stack)-i+1)
			for _, q := range stack[i:] {
				cyc = append(cyc, q.name)
				q.state = paramFailed
				d.badParams[q.name] = true
			}
			cyc = append(cyc, pd.name)
			d.paramErr(pd, "cycle %s: a param cannot depend on itself, directly or through others; give one of them a value that does not use the others", strings.Join(cyc, " → "))
			return errBadParam
		}
		if len(stack) >= maxParamChain {
			pd.state = paramFailed
			d.badParams[pd.name] = true
			d.paramErr(pd, "depends on a chain of more than %d params (%s → … → %s); compute it from fewer steps", maxParamChain, stack[0].name, pd.name)
			return errBadParam
		}
		pd.state = paramResolving
		stack = append(stack, pd)
		lookup := func(name string) (int64, error) {
			dep := defs[name]
			if dep == nil {
				return 0, unknownParam(name, d.declared)
			}
			if err := resolve(dep); err != nil {
				return 0, err
			}
			return d.params[name], nil
		}
		v, err := d.paramValue(pd, lookup)
		stack = stack[:len(stack)-1]
		if pd.state == paramFailed { // in a cycle, reported
			return errBadParam
		}
		if err != nil {
			pd.state = paramFailed
			d.badParams[pd.name] = true
			if !errors.Is(err, errBadParam) {
				d.paramErr(pd, "%v", err)
			}
			return errBadParam
		}
		pd.state = paramResolved
		d.params[pd.name] = v
		return nil
	}
	for _, pd := range order {
		_ = resolve(pd) // errors are reported where they arise
	}
}

// paramValue evaluates a param's definition (its --set expression, or its
// value in the job file) with lookup for the names it uses.
func (d *decoder) paramValue(pd *paramDef, lookup func(string) (int64, error)) (int64, error) {
	if pd.set {
		return evalExpr(pd.override, lookup)
	}
	n := d.resolve(pd.node)
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		return evalExpr(n.Value, lookup)
	case n.Kind == yaml.ScalarNode && n.Tag == "!!int":
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is out of range: want %d to %d", n.Value, int64(math.MinInt64), int64(math.MaxInt64))
		}
		return v, nil
	}
	return 0, fmt.Errorf("want an integer (%d to %d), got %s", int64(math.MinInt64), int64(math.MaxInt64), kindName(n))
}

// paramErr reports a problem with a param's definition: at its line in
// the job file, or at --set when the command line gave it.
func (d *decoder) paramErr(pd *paramDef, format string, args ...any) {
	if pd.set {
		d.errs = append(d.errs, &Error{File: d.file, Path: "--set " + pd.name, Msg: fmt.Sprintf(format, args...)})
		return
	}
	d.errf(pd.node, "params."+pd.name, format, args...)
}

func (d *decoder) job(root *yaml.Node) *Job {
	j := &Job{File: d.file, Version: 1}
	base := path.Base(strings.ReplaceAll(d.file, "\\", "/"))
	j.Name = strings.TrimSuffix(base, path.Ext(base))
	fs, ok := d.fields(root, "", fieldsJob...)
	if !ok {
		return j
	}
	// params first: every other field may use them.
	var params *yaml.Node
	for _, f := range fs {
		if f.key == "params" {
			params = f.node
		}
	}
	d.resolveParams(params)
	j.Params = d.params
	have := map[string]bool{}
	for _, f := range fs {
		have[f.key] = true
		switch f.key {
		case "version":
			if v, ok := d.integer(f.node, "version", 1, 1); ok {
				j.Version = v
			}
		case "name":
			j.Name, _ = d.name(f.node, "name", "job")
		case "description":
			j.Description, _ = d.str(f.node, "description")
		case "buffers":
			j.Buffers = d.buffers(f.node)
		case "kernels":
			j.Kernels = d.kernels(f.node)
		case "steps":
			d.stepsLine = f.kn.Line
			j.Steps = d.steps(f.node, "steps")
		case "outputs":
			j.Outputs = d.outputs(f.node)
		case "recovery":
			j.Recovery = d.recovery(f.node)
		}
	}
	for _, req := range []string{"buffers", "steps"} {
		if !have[req] {
			d.errf(root, req, "missing; a job needs buffers and steps")
		}
	}
	return j
}

func (d *decoder) buffers(n *yaml.Node) []*Buffer {
	fs, ok := d.fields(n, "buffers")
	if !ok {
		return nil
	}
	var out []*Buffer
	for _, f := range fs {
		p := "buffers." + f.key
		if !nameRE.MatchString(f.key) {
			d.errf(f.kn, p, "buffer name %s: use letters, digits, _ . - (not starting with a digit)", quoteShort(f.key))
			d.badBuffers[f.key] = true
			continue
		}
		b := &Buffer{Name: f.key, Line: f.kn.Line}
		bf, ok := d.fields(f.node, p, fieldsBuffer...)
		if !ok {
			d.badBuffers[f.key] = true
			continue
		}
		b.lines = linesOf(bf)
		for _, g := range bf {
			q := join(p, g.key)
			switch g.key {
			case "type":
				if t, ok := d.str(g.node, q); ok {
					if _, known := Types[t]; !known {
						d.errf(g.node, q, "unknown element type %q%s; use one of %s", t, suggest(t, typeNames()), strings.Join(typeNames(), ", "))
					} else {
						b.Type = t
					}
				}
			case "range":
				b.Range, _ = d.extents(g.node, q, 1)
			case "page_size":
				b.PageSize, _ = d.extents(g.node, q, 1)
			case "init":
				b.Init = d.init(g.node, q, b.Name)
			}
		}
		if b.Type == "" && !hasKey(bf, "type") {
			d.errf(f.kn, p+".type", "missing; say the element type (float32, int32, ...)")
		}
		if b.Range == nil && !hasKey(bf, "range") {
			d.errf(f.kn, p+".range", "missing; say the extents ([n] or [rows, cols])")
		}
		out = append(out, b)
	}
	return out
}

func hasKey(fs []field, k string) bool {
	for _, f := range fs {
		if f.key == k {
			return true
		}
	}
	return false
}

func typeNames() []string {
	out := make([]string, 0, len(Types))
	for t := range Types {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// init reads buffer buf's init.
func (d *decoder) init(n *yaml.Node, p, buf string) *Init {
	fs, ok := d.fields(n, p, fieldsInit...)
	if !ok {
		return nil
	}
	in := &Init{Line: d.resolve(n).Line, lines: linesOf(fs)}
	var sources []string
	var fileFields, kernelFields []field
	for _, f := range fs {
		q := join(p, f.key)
		switch f.key {
		case "value":
			sources = append(sources, "value")
			if v, ok := d.number(f.node, q); ok {
				in.Value = &v
			}
		case "file":
			sources = append(sources, "file")
			if file, ok := d.str(f.node, q); ok {
				if file == "" {
					d.errf(f.node, q, "empty; name the file to read (relative to the job file's directory)")
				}
				in.File = file
			}
		case "format":
			fileFields = append(fileFields, f)
			if s, ok := d.str(f.node, q); ok {
				if s != string(FormatRaw) && s != string(FormatNPY) {
					d.errf(f.node, q, "unknown format %q; use raw or npy", s)
				}
				in.Format = Format(s)
			}
		case "kernel":
			sources = append(sources, "kernel")
			kernelFields = append(kernelFields, f)
		default:
			kernelFields = append(kernelFields, f)
		}
	}
	if len(sources) != 1 {
		d.errf(n, p, "give exactly one of value, file and kernel (got %s)", listOrNone(sources))
	}
	if in.File != "" && in.Format == "" {
		in.Format = FormatOf(in.File)
	}
	// Fields that belong to another source than the one given. Without
	// any source, which one was meant is unknown: the error above is the
	// only one.
	if len(sources) > 0 && !contains(sources, "file") {
		for _, f := range fileFields {
			d.errf(f.kn, join(p, f.key), "applies to file initialisation only")
		}
	}
	if contains(sources, "kernel") {
		s := &Step{Kind: KernelStep, Line: in.Line, Path: p, lines: linesOf(kernelFields), initOf: buf}
		for _, f := range kernelFields {
			d.kernelField(s, f, p)
		}
		in.Kernel = s
	} else if len(sources) > 0 {
		for _, f := range kernelFields {
			d.errf(f.kn, join(p, f.key), "applies to kernel initialisation only")
		}
	}
	return in
}

func (d *decoder) kernels(n *yaml.Node) []*KernelDecl {
	fs, ok := d.fields(n, "kernels")
	if !ok {
		return nil
	}
	var out []*KernelDecl
	for _, f := range fs {
		p := "kernels." + f.key
		if !nameRE.MatchString(f.key) {
			d.errf(f.kn, p, "kernel name %s: use letters, digits, _ . - (not starting with a digit)", quoteShort(f.key))
			d.badKernels[f.key] = true
			continue
		}
		k := &KernelDecl{Name: f.key, Entry: f.key, Line: f.kn.Line}
		kf, ok := d.fields(f.node, p, fieldsKernel...)
		if !ok {
			d.badKernels[f.key] = true
			continue
		}
		k.lines = linesOf(kf)
		for _, g := range kf {
			q := join(p, g.key)
			switch g.key {
			case "ptx":
				k.PTX, _ = d.str(g.node, q)
			case "cuda":
				k.CUDA, _ = d.str(g.node, q)
			case "options":
				items, _ := d.list(g.node, q)
				for i, it := range items {
					if o, ok := d.str(it, fmt.Sprintf("%s[%d]", q, i)); ok {
						if o == "" || strings.ContainsRune(o, 0) || strings.HasPrefix(o, "--gpu-architecture") || strings.HasPrefix(o, "-arch") {
							d.errf(it, fmt.Sprintf("%s[%d]", q, i), "NVRTC option %q: give a non-empty option; the architecture is each GPU's own, leave it out", o)
							continue
						}
						k.Options = append(k.Options, o)
					}
				}
			case "entry":
				k.Entry, _ = d.str(g.node, q)
			case "params":
				items, _ := d.list(g.node, q)
				for i, it := range items {
					k.Params = append(k.Params, d.paramDecl(it, fmt.Sprintf("%s[%d]", q, i)))
				}
			}
		}
		switch {
		case k.PTX == "" && k.CUDA == "" && !hasKey(kf, "ptx") && !hasKey(kf, "cuda"):
			d.errf(f.kn, p+".ptx", "missing; name the PTX module file (ptx:) or the CUDA C source file (cuda:)")
		case hasKey(kf, "ptx") && hasKey(kf, "cuda"):
			d.errAt(k.lines.at("cuda", k.Line), p+".cuda", "give ptx or cuda, not both")
		case hasKey(kf, "options") && !hasKey(kf, "cuda"):
			d.errAt(k.lines.at("options", k.Line), p+".options", "NVRTC options go with cuda: source; a ptx: module is already compiled")
		}
		if !hasKey(kf, "params") {
			d.errf(f.kn, p+".params", "missing; declare the parameters after the ND range (an empty list for none)")
		}
		out = append(out, k)
	}
	return out
}

func (d *decoder) paramDecl(n *yaml.Node, p string) ParamDecl {
	pd := ParamDecl{Line: d.resolve(n).Line}
	fs, ok := d.fields(n, p, fieldsParam...)
	if !ok {
		return pd
	}
	pd.lines = linesOf(fs)
	for _, f := range fs {
		q := join(p, f.key)
		switch f.key {
		case "name":
			pd.Name, _ = d.name(f.node, q, "parameter")
		case "kind":
			if s, ok := d.str(f.node, q); ok {
				switch k := ParamKind(s); k {
				case ParamPointer, ParamAccessor, ParamRanged, ParamScalar, ParamLocal:
					pd.Kind = k
				default:
					d.errf(f.node, q, "unknown kind %q; use pointer, accessor, ranged, scalar or local", s)
				}
			}
		case "type":
			if t, ok := d.str(f.node, q); ok {
				if _, known := Types[t]; !known {
					d.errf(f.node, q, "unknown type %q%s; use one of %s", t, suggest(t, typeNames()), strings.Join(typeNames(), ", "))
				}
				pd.Type = t
			}
		case "const":
			pd.Const, _ = d.boolean(f.node, q)
		}
	}
	if pd.Name == "" && !hasKey(fs, "name") {
		d.errf(n, p+".name", "missing")
	}
	if pd.Kind == "" && !hasKey(fs, "kind") {
		d.errf(n, p+".kind", "missing; use pointer, accessor, ranged, scalar or local")
	}
	if pd.Kind != ParamLocal && pd.Kind != "" && pd.Type == "" && !hasKey(fs, "type") {
		d.errf(n, p+".type", "missing; say the element or scalar type")
	}
	if pd.Kind == ParamLocal && pd.Type != "" {
		d.errAt(pd.lines.at("type", pd.Line), p+".type", "local memory has no type; its size is given in bytes by the step")
	}
	return pd
}

var stepKinds = []string{"kernel", "fill", "copy", "swap", "repeat"}

// The fields of each object of the format (docs/job.schema.json has the
// same; TestSchemaMatchesDecoder keeps them in step).
var (
	fieldsJob      = []string{"version", "name", "description", "params", "buffers", "kernels", "steps", "outputs", "recovery"}
	fieldsRecovery = []string{"on_node_loss", "checkpoint"}
	fieldsBuffer   = []string{"type", "range", "page_size", "init"}
	fieldsInit     = []string{"value", "file", "format", "kernel", "param", "range", "work_group", "scalars", "local"}
	fieldsKernel   = []string{"ptx", "cuda", "options", "entry", "params"}
	fieldsParam    = []string{"name", "kind", "type", "const"}
	fieldsStep     = []string{"kernel", "fill", "copy", "swap", "repeat", "name", "device", "range", "work_group", "accessors", "scalars", "local", "split"}
	fieldsAccessor = []string{"param", "buffer", "mode", "range", "offset", "no_init", "map"}
	fieldsSplit    = []string{"dim", "devices", "chunks_per_device", "borders"}
	fieldsRegion   = []string{"buffer", "range", "offset"}
	fieldsFill     = []string{"buffer", "range", "offset", "value"}
	fieldsCopy     = []string{"from", "to"}
	fieldsRepeat   = []string{"count", "steps"}
	fieldsOutput   = []string{"buffer", "file", "format"}
)

func (d *decoder) steps(n *yaml.Node, p string) []*Step {
	items, ok := d.list(n, p)
	if !ok {
		return nil
	}
	var out []*Step
	for i, it := range items {
		if d.tooBig() {
			d.errf(it, p, "job file too complex (more than %d YAML nodes with aliases expanded)", maxNodes)
			return out
		}
		if s := d.step(it, fmt.Sprintf("%s[%d]", p, i)); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (d *decoder) step(n *yaml.Node, p string) *Step {
	fs, ok := d.fields(n, p, fieldsStep...)
	if !ok {
		return nil
	}
	s := &Step{Line: d.resolve(n).Line, Path: p, lines: linesOf(fs)}
	var kinds []string
	for _, f := range fs {
		if contains(stepKinds, f.key) {
			kinds = append(kinds, f.key)
		}
	}
	if len(kinds) != 1 {
		d.errf(n, p, "give exactly one of kernel, fill, copy, swap, repeat (got %s)", listOrNone(kinds))
		return nil
	}
	s.Kind = StepKind(kinds[0])
	for _, f := range fs {
		q := join(p, f.key)
		switch f.key {
		case "name":
			s.Name, _ = d.str(f.node, q)
		case "device":
			if dev, ok := d.str(f.node, q); ok {
				if _, err := ParseDevice(dev); err != nil {
					d.errf(f.node, q, "%v", err)
				}
				s.Device = dev
			}
		case "fill":
			s.Fill = d.fill(f.node, q)
		case "copy":
			s.Copy = d.copyStep(f.node, q)
		case "swap":
			var lines [2]int
			s.Swap, lines = d.swap(f.node, q)
			s.lines["swap[0]"], s.lines["swap[1]"] = lines[0], lines[1]
		case "repeat":
			var countLine int
			s.Count, s.Steps, countLine = d.repeat(f.node, q)
			s.lines["repeat.count"] = countLine
		default:
			if s.Kind != KernelStep {
				d.errf(f.kn, q, "applies to kernel steps only")
				continue
			}
			d.kernelField(s, f, p)
		}
	}
	return s
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// kernelField reads one field of a kernel step (or kernel init).
func (d *decoder) kernelField(s *Step, f field, p string) {
	q := join(p, f.key)
	var ok bool
	switch f.key {
	case "kernel":
		s.Kernel, ok = d.name(f.node, q, "kernel")
	case "range":
		s.Range, ok = d.extents(f.node, q, 0)
	case "work_group":
		s.WorkGroup, ok = d.extents(f.node, q, 1)
	case "accessors":
		var items []*yaml.Node
		items, ok = d.list(f.node, q)
		for i, it := range items {
			if a := d.accessor(it, fmt.Sprintf("%s[%d]", q, i)); a != nil {
				s.Accessors = append(s.Accessors, a)
			} else {
				ok = false
			}
		}
	case "param":
		// kernel init: the parameter the buffer is passed as
		var name string
		name, ok = d.name(f.node, q, "parameter")
		s.Accessors = append(s.Accessors, &Accessor{Param: name, Line: f.kn.Line, Path: q, badParam: !ok})
	case "scalars":
		var fs []field
		fs, ok = d.fields(f.node, q)
		for _, g := range fs {
			if v, good := d.number(g.node, join(q, g.key)); good {
				s.Scalars = append(s.Scalars, &Scalar{Param: g.key, Value: v, Line: g.kn.Line})
			} else {
				s.markInvalid(join(f.key, g.key))
			}
		}
	case "local":
		var fs []field
		fs, ok = d.fields(f.node, q)
		for _, g := range fs {
			if v, good := d.integer(g.node, join(q, g.key), 1, 1<<30); good {
				s.Local = append(s.Local, &LocalMem{Param: g.key, Bytes: v, Line: g.kn.Line})
			} else {
				s.markInvalid(join(f.key, g.key))
			}
		}
	case "split":
		s.Split = d.split(f.node, q)
		ok = true
	}
	if !ok {
		s.markInvalid(f.key)
	}
}

func (d *decoder) accessor(n *yaml.Node, p string) *Accessor {
	fs, ok := d.fields(n, p, fieldsAccessor...)
	if !ok {
		return nil
	}
	a := &Accessor{Line: d.resolve(n).Line, Path: p, lines: linesOf(fs)}
	for _, f := range fs {
		q := join(p, f.key)
		switch f.key {
		case "param":
			var ok bool
			a.Param, ok = d.name(f.node, q, "parameter")
			a.badParam = !ok
		case "buffer":
			a.Buffer, _ = d.str(f.node, q)
		case "mode":
			if s, ok := d.str(f.node, q); ok {
				switch m := Mode(s); m {
				case Read, Write, ReadWrite:
					a.Mode = m
				default:
					d.errf(f.node, q, "unknown mode %q%s; use read, write or read_write", s, suggest(s, []string{"read", "write", "read_write"}))
				}
			}
		case "range":
			a.Range, _ = d.extents(f.node, q, 0)
		case "offset":
			a.Offset, _ = d.extents(f.node, q, 0)
		case "no_init":
			a.NoInit, _ = d.boolean(f.node, q)
		case "map":
			a.Map, a.MapRange = d.rangeMap(f.node, q)
		}
	}
	if !hasKey(fs, "buffer") {
		d.errf(n, p+".buffer", "missing; name the buffer to access")
	}
	if !hasKey(fs, "mode") {
		d.errf(n, p+".mode", "missing; use read, write or read_write")
	}
	return a
}

// rangeMap reads an accessor's split mapping: one_to_one, all, fixed, or
// {neighbourhood: k}.
func (d *decoder) rangeMap(n *yaml.Node, p string) (string, int) {
	r := d.resolve(n)
	if r.Kind == yaml.MappingNode {
		fs, _ := d.fields(r, p, "neighbourhood")
		for _, f := range fs {
			k, _ := d.integer(f.node, join(p, f.key), 0, 1<<20)
			return "neighbourhood", k
		}
		d.errf(r, p, "want one_to_one, all, fixed or {neighbourhood: k}")
		return "", 0
	}
	s, ok := d.str(r, p)
	if !ok {
		return "", 0
	}
	switch s {
	case "one_to_one", "all", "fixed":
		return s, 0
	}
	d.errf(r, p, "unknown mapping %q; use one_to_one, all, fixed or {neighbourhood: k}", s)
	return "", 0
}

func (d *decoder) split(n *yaml.Node, p string) *Split {
	r := d.resolve(n)
	sp := &Split{Devices: "all", Line: r.Line}
	if r.Kind == yaml.ScalarNode && r.Tag == "!!bool" {
		if v, _ := d.boolean(r, p); !v {
			return nil
		}
		return sp
	}
	fs, ok := d.fields(r, p, fieldsSplit...)
	if !ok {
		return nil
	}
	sp.lines = linesOf(fs)
	for _, f := range fs {
		q := join(p, f.key)
		switch f.key {
		case "dim":
			sp.Dim, _ = d.integer(f.node, q, 0, 2)
		case "devices":
			v := d.resolve(f.node)
			if v.Kind == yaml.ScalarNode && v.Value == "all" {
				sp.Devices = "all"
			} else if c, ok := d.integer(v, q, 1, 1<<16); ok {
				sp.Devices = strconv.Itoa(c)
			}
		case "chunks_per_device":
			sp.ChunksPerDevice, _ = d.integer(f.node, q, 1, 1<<12)
		case "borders":
			sp.Borders, _ = d.integer(f.node, q, 0, 1<<20)
		}
	}
	return sp
}

func (d *decoder) region(n *yaml.Node, p string, extra ...string) (Region, []field, bool) {
	fs, ok := d.fields(n, p, append(append([]string(nil), fieldsRegion...), extra...)...)
	r := Region{Line: d.resolve(n).Line, Path: p, lines: linesOf(fs)}
	if !ok {
		return r, nil, false
	}
	var rest []field
	for _, f := range fs {
		q := join(p, f.key)
		switch f.key {
		case "buffer":
			r.Buffer, _ = d.str(f.node, q)
		case "range":
			r.Range, _ = d.extents(f.node, q, 0)
		case "offset":
			r.Offset, _ = d.extents(f.node, q, 0)
		default:
			rest = append(rest, f)
		}
	}
	if !hasKey(fs, "buffer") {
		d.errf(n, p+".buffer", "missing; name the buffer")
	}
	return r, rest, true
}

func (d *decoder) fill(n *yaml.Node, p string) *Fill {
	r, rest, ok := d.region(n, p, "value") // fieldsFill
	if !ok {
		return nil
	}
	f := &Fill{Region: r}
	have := false
	for _, g := range rest {
		f.Value, _ = d.number(g.node, join(p, g.key)) // a bad number is reported there
		have = true                                   // and is not "missing"
	}
	if !have {
		d.errf(n, p+".value", "missing; say the value to fill with")
	}
	return f
}

func (d *decoder) copyStep(n *yaml.Node, p string) *Copy {
	fs, ok := d.fields(n, p, fieldsCopy...)
	if !ok {
		return nil
	}
	c := &Copy{}
	for _, f := range fs {
		q := join(p, f.key)
		r, _, _ := d.region(f.node, q)
		if f.key == "from" {
			c.From = r
		} else {
			if r.Range != nil {
				d.errAt(r.lines.at("range", r.Line), q+".range", "the destination takes the source's extent; give only offset")
			}
			c.To = r
		}
	}
	for _, k := range []string{"from", "to"} {
		if !hasKey(fs, k) {
			d.errf(n, p+"."+k, "missing; a copy needs from and to")
		}
	}
	return c
}

// swap reads the two names of a swap and the line of each.
func (d *decoder) swap(n *yaml.Node, p string) ([2]string, [2]int) {
	items, ok := d.list(n, p)
	if !ok {
		return [2]string{}, [2]int{}
	}
	if len(items) != 2 {
		d.errf(n, p, "want two buffer names [a, b], got %d", len(items))
		return [2]string{}, [2]int{}
	}
	var out [2]string
	var lines [2]int
	for i, it := range items {
		out[i], _ = d.str(it, fmt.Sprintf("%s[%d]", p, i))
		lines[i] = it.Line
	}
	return out, lines
}

// repeat reads a repeat: its count, its steps and the line of its count.
func (d *decoder) repeat(n *yaml.Node, p string) (int, []*Step, int) {
	fs, ok := d.fields(n, p, fieldsRepeat...)
	if !ok {
		return 0, nil, 0
	}
	count, countLine := 0, 0
	var steps []*Step
	for _, f := range fs {
		q := join(p, f.key)
		switch f.key {
		case "count":
			countLine = f.kn.Line
			count, _ = d.integer(f.node, q, 1, MaxGroups)
		case "steps":
			steps = d.steps(f.node, q)
		}
	}
	if !hasKey(fs, "count") {
		d.errf(n, p+".count", "missing; say how many times to repeat")
	}
	if !hasKey(fs, "steps") {
		d.errf(n, p+".steps", "missing; list the steps to repeat")
	}
	return count, steps, countLine
}

// recovery reads what a cluster run does when it loses a node.
func (d *decoder) recovery(n *yaml.Node) Recovery {
	r := Recovery{Line: n.Line}
	fs, ok := d.fields(n, "recovery", fieldsRecovery...)
	if !ok {
		return r
	}
	for _, f := range fs {
		p := "recovery." + f.key
		switch f.key {
		case "on_node_loss":
			if s, ok := d.str(f.node, p); ok {
				if s != "recover" && s != "fail" {
					d.errf(f.node, p, "%q: want recover or fail", s)
				}
				r.OnNodeLoss = s
			}
		case "checkpoint":
			if s, ok := d.str(f.node, p); ok {
				if s != "auto" && s != "off" {
					if n, err := strconv.Atoi(s); err != nil || n < 1 {
						d.errf(f.node, p, "%q: want auto, off or a number of command groups ≥ 1", s)
					}
				}
				r.Checkpoint = s
			}
		}
	}
	return r
}

func (d *decoder) outputs(n *yaml.Node) []*Output {
	items, ok := d.list(n, "outputs")
	if !ok {
		return nil
	}
	var out []*Output
	// files and dirs: the cleaned paths of the outputs' files and of the
	// directories above them, each to the first output that uses it.
	files, dirs := map[string]string{}, map[string]string{}
	for i, it := range items {
		p := fmt.Sprintf("outputs[%d]", i)
		fs, ok := d.fields(it, p, fieldsOutput...)
		if !ok {
			continue
		}
		o := &Output{Line: d.resolve(it).Line, Path: p, lines: linesOf(fs)}
		for _, f := range fs {
			q := join(p, f.key)
			switch f.key {
			case "buffer":
				o.Buffer, _ = d.str(f.node, q)
			case "file":
				var ok bool
				if o.File, ok = d.str(f.node, q); !ok {
					break
				}
				clean, problem := outputPath(o.File)
				if problem != "" {
					d.errf(f.node, q, "%s", problem)
					break
				}
				if prev, dup := files[clean]; dup {
					d.errf(f.node, q, "%s is also written by %s; give each output its own file", samePath(o.File, clean), prev)
					break
				}
				if prev, dup := dirs[clean]; dup {
					d.errf(f.node, q, "%s is a directory of the file of %s; a path cannot be both a file and a directory: rename one", quoteShort(o.File), prev)
					break
				}
				for dir := filepath.Dir(clean); dir != "."; dir = filepath.Dir(dir) {
					if prev, dup := files[dir]; dup {
						d.errf(f.node, q, "%s is inside %s, the file of %s; a path cannot be both a file and a directory: rename one", quoteShort(o.File), quoteShort(dir), prev)
						break
					}
				}
				files[clean] = p
				for dir := filepath.Dir(clean); dir != "."; dir = filepath.Dir(dir) {
					if _, seen := dirs[dir]; !seen {
						dirs[dir] = p
					}
				}
			case "format":
				if s, ok := d.str(f.node, q); ok {
					if s != string(FormatRaw) && s != string(FormatNPY) {
						d.errf(f.node, q, "unknown format %q; use raw or npy", s)
					}
					o.Format = Format(s)
				}
			}
		}
		for _, k := range []string{"buffer", "file"} {
			if !hasKey(fs, k) {
				d.errf(it, p+"."+k, "missing")
			}
		}
		if o.Format == "" {
			o.Format = FormatOf(o.File)
		}
		out = append(out, o)
	}
	return out
}

// outDirHint says where outputs go.
const outDirHint = "outputs are written under the output directory: give a path relative to it, and choose the directory with acpp-submit run --out-dir (-o)"

// outputPath checks an output's file name: a path inside the output
// directory that names a file. It returns the path cleaned (so that a.npy
// and ./a.npy compare equal), or what is wrong with it.
func outputPath(name string) (clean, problem string) {
	sep := string(filepath.Separator)
	switch {
	case name == "":
		return "", "empty; name the file to write (" + outDirHint + ")"
	case strings.ContainsRune(name, 0):
		return "", quoteShort(name) + " contains a NUL character; a file name cannot"
	case filepath.IsAbs(name) || strings.HasPrefix(name, "/") || strings.HasPrefix(name, sep):
		return "", quoteShort(name) + " is an absolute path; " + outDirHint
	}
	clean = filepath.Clean(name)
	if clean == ".." || strings.HasPrefix(clean, ".."+sep) {
		return "", quoteShort(name) + " leaves the output directory (..); " + outDirHint
	}
	if base := filepath.Base(name); strings.HasSuffix(name, "/") || strings.HasSuffix(name, sep) || base == "." || base == ".." {
		return "", quoteShort(name) + " names a directory, not a file; end it with the file's name (e.g. " + quoteShort(path.Join(filepath.ToSlash(clean), "out.npy")) + ")"
	}
	if !filepath.IsLocal(clean) { // a Windows drive or device name
		return "", quoteShort(name) + " is not a path inside the output directory; " + outDirHint
	}
	return clean, ""
}

// samePath quotes an output's file name, with its cleaned form when that
// is spelled otherwise.
func samePath(name, clean string) string {
	if name == clean {
		return quoteShort(name)
	}
	return quoteShort(name) + " (" + quoteShort(clean) + ")"
}
