package jobfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// parseErrors parses in as t.yaml with the kernel registry and returns
// every error's text; nil when it parses.
func parseErrors(t *testing.T, in string) []string {
	t.Helper()
	_, err := Parse("t.yaml", []byte(in), opts(t))
	if err == nil {
		return nil
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Parse = %v, want Errors", err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

// checkErrors: got has exactly len(want) errors and error i contains
// want[i].
func checkErrors(t *testing.T, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(got[i], want[i])
	}
	if !ok {
		t.Errorf("Parse errors:\n  %s\nwant %d errors containing, in order:\n  %s", strings.Join(got, "\n  "), len(want), strings.Join(want, "\n  "))
	}
}

// TestOutputPaths: an output's file is a path inside --out-dir that names
// a file; two outputs are the same file when their cleaned paths are.
func TestOutputPaths(t *testing.T) {
	job := func(files ...string) string {
		var b strings.Builder
		b.WriteString("buffers: {a: {type: float32, range: 4}}\nsteps: []\noutputs:\n")
		for _, f := range files {
			fmt.Fprintf(&b, "  - {buffer: a, file: %q}\n", f)
		}
		return b.String()
	}
	const outDir = "outputs are written under the output directory: give a path relative to it, and choose the directory with acpp-submit run --out-dir (-o)"
	for _, tc := range []struct {
		name  string
		files []string
		want  []string
	}{
		{"relative", []string{"a.npy", "sub/b.raw", "c/../d.npy", "./e.npy", "sub/f.npy"}, nil},
		{"absolute", []string{"/abs/x.npy"}, []string{`t.yaml:4: outputs[0].file: "/abs/x.npy" is an absolute path; ` + outDir}},
		{"parent", []string{"../up.npy"}, []string{`t.yaml:4: outputs[0].file: "../up.npy" leaves the output directory (..); ` + outDir}},
		{"parent after a directory", []string{"sub/../../up.npy"}, []string{`t.yaml:4: outputs[0].file: "sub/../../up.npy" leaves the output directory (..)`}},
		{"empty", []string{""}, []string{`t.yaml:4: outputs[0].file: empty; name the file to write (` + outDir + ")"}},
		{"trailing slash", []string{"sub/"}, []string{`t.yaml:4: outputs[0].file: "sub/" names a directory, not a file; end it with the file's name (e.g. "sub/out.npy")`}},
		{"dot", []string{"."}, []string{`t.yaml:4: outputs[0].file: "." names a directory, not a file`}},
		{"dot dot inside", []string{"sub/.."}, []string{`t.yaml:4: outputs[0].file: "sub/.." names a directory, not a file`}},
		{"same file spelled twice", []string{"a.npy", "./a.npy"}, []string{`t.yaml:5: outputs[1].file: "./a.npy" ("a.npy") is also written by outputs[0]; give each output its own file`}},
		{"same file through a directory", []string{"sub/x.npy", "sub/../sub//x.npy"}, []string{`t.yaml:5: outputs[1].file: "sub/../sub//x.npy" ("sub/x.npy") is also written by outputs[0]`}},
		{"same spelling", []string{"a.npy", "a.npy"}, []string{`t.yaml:5: outputs[1].file: "a.npy" is also written by outputs[0]; give each output its own file`}},
		{"file, then a file inside it", []string{"a", "a/b.npy"}, []string{`t.yaml:5: outputs[1].file: "a/b.npy" is inside "a", the file of outputs[0]; a path cannot be both a file and a directory: rename one`}},
		{"file inside, then the directory as a file", []string{"a/b/c.npy", "a/b"}, []string{`t.yaml:5: outputs[1].file: "a/b" is a directory of the file of outputs[0]; a path cannot be both a file and a directory: rename one`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, parseErrors(t, job(tc.files...)), tc.want)
		})
	}
	j, err := Parse("t.yaml", []byte(job("./sub/../e.npy")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := j.Outputs[0]; o.File != "./sub/../e.npy" || o.Format != FormatNPY {
		t.Errorf("output = %+v, want the file as written, npy", o)
	}
}

// TestNoFollowOnErrors: a field given with a bad value is reported once,
// where it is; nothing reports it missing, and a failed declaration is not
// reported again where it is used (docs/JOBS.md: "reported once").
func TestNoFollowOnErrors(t *testing.T) {
	const reduce = "buffers: {a: {type: float32, range: 256}, p: {type: float32, range: 1}}\nsteps:\n  - kernel: reduce_sum_f32\n    range: [256]\n" +
		"    work_group: WG\n    scalars: {n: 256}\n    local: {scratch: LOCAL}\n    accessors: [{buffer: a, mode: read}, {buffer: p, mode: write}]\n"
	reduceWith := func(wg, local string) string {
		return strings.NewReplacer("WG", wg, "LOCAL", local).Replace(reduce)
	}
	const saxpy = "buffers: {x: {type: float32, range: 4}, y: {type: float32, range: 4}}\nsteps:\n  - kernel: saxpy\n"
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"valid", reduceWith("[64]", "256"), nil},
		{"local memory out of range", reduceWith("[64]", "0"),
			[]string{"t.yaml:7: steps[0].local.scratch: 0 is out of range: want 1 to 1073741824"}},
		{"local memory not a mapping", strings.Replace(reduceWith("[64]", "256"), "local: {scratch: 256}", "local: [256]", 1),
			[]string{"t.yaml:7: steps[0].local: want a mapping"}},
		{"work-group size out of range", reduceWith("0", "256"),
			[]string{"t.yaml:5: steps[0].work_group: 0 is out of range: want 1 to 1099511627776"}},
		{"scalar not a number", saxpy + "    scalars: {a: \"x\"}\n    accessors: [{buffer: x, mode: read}, {buffer: y, mode: read_write}]\n",
			[]string{`t.yaml:4: steps[0].scalars.a: unknown param "x"`}},
		{"scalars not a mapping", saxpy + "    scalars: [1]\n    accessors: [{buffer: x, mode: read}, {buffer: y, mode: read_write}]\n",
			[]string{"t.yaml:4: steps[0].scalars: want a mapping"}},
		{"accessors not a list", saxpy + "    range: [4]\n    scalars: {a: 1}\n    accessors: 7\n",
			[]string{"t.yaml:6: steps[0].accessors: want a list"}},
		{"accessor not a mapping", saxpy + "    scalars: {a: 1}\n    accessors: [{buffer: x, mode: read}, 7]\n",
			[]string{"t.yaml:5: steps[0].accessors[1]: want a mapping"}},
		{"accessor param not a name", saxpy + "    scalars: {a: 1}\n    accessors: [{buffer: x, mode: read}, {param: 1y, buffer: y, mode: read_write}]\n",
			[]string{`t.yaml:5: steps[0].accessors[1].param: parameter name "1y"`}},
		{"accessor param unknown", saxpy + "    scalars: {a: 1}\n    accessors: [{buffer: x, mode: read}, {param: z, buffer: y, mode: read_write}]\n",
			[]string{`t.yaml:5: steps[0].accessors[1].param: kernel saxpy(a float32, x *float32, y *float32) has no buffer parameter "z" (did you mean "y"?) (buffer parameters without an accessor: y)`}},
		{"range not extents", saxpy + "    range: [0.5]\n    scalars: {a: 1}\n    accessors: [{buffer: x, mode: read}, {buffer: y, mode: read_write}]\n",
			[]string{`t.yaml:4: steps[0].range[0]: want an integer`}},
		{"range not extents, no accessors", "buffers: {}\nsteps:\n  - kernel: empty\n    range: x y\n",
			[]string{`t.yaml:4: steps[0].range: unknown param "x"`}},
		{"kernel name not a name", "buffers: {x: {type: float32, range: 4}}\nsteps:\n  - kernel: 9s\n    accessors: [{buffer: xx, mode: read}]\n",
			[]string{`t.yaml:3: steps[0].kernel: kernel name "9s"`, `t.yaml:4: steps[0].accessors[0].buffer: unknown buffer "xx" (did you mean "x"?)`}},
		{"failed buffer declaration", "buffers: {a: 5, b: {type: float32, range: 4}}\nsteps:\n  - fill: {buffer: a, value: 1}\n  - swap: [a, b]\noutputs: [{buffer: a, file: a.npy}]\n",
			[]string{"t.yaml:1: buffers.a: want a mapping"}},
		{"buffer name not a name", "buffers: {1a: {type: float32, range: 4}}\nsteps:\n  - fill: {buffer: 1a, value: 1}\n",
			[]string{`t.yaml:1: buffers.1a: buffer name "1a"`}},
		{"failed kernel declaration", "buffers: {}\nkernels: {k: 7}\nsteps:\n  - kernel: k\n    range: [1]\n",
			[]string{"t.yaml:2: kernels.k: want a mapping"}},
		{"init param unknown", "buffers:\n  b: {type: float32, range: 4, init: {kernel: fill_f32, param: nope, scalars: {v: 1}}}\nsteps: []\n",
			[]string{`t.yaml:2: buffers.b.init.param: kernel fill_f32(out accessor[float32], v float32) has no buffer parameter "nope"; name the one the buffer is passed as (out), or leave param out for the first`}},
		{"init param unknown, scalar missing", "buffers:\n  b: {type: float32, range: 4, init: {kernel: fill_f32, param: nope}}\nsteps: []\n",
			[]string{`t.yaml:2: buffers.b.init.param: kernel fill_f32(out accessor[float32], v float32) has no buffer parameter "nope"`,
				`t.yaml:2: buffers.b.init.scalars: kernel fill_f32(out accessor[float32], v float32): scalar "v" is missing; add scalars: {v: ...}`}},
		{"init param not a name", "buffers:\n  b: {type: float32, range: 4, init: {kernel: saxpy, param: 1x, scalars: {a: 1}}}\nsteps: []\n",
			[]string{`t.yaml:2: buffers.b.init.param: parameter name "1x"`}},
		{"init kernel without buffer parameters", "buffers:\n  b: {type: float32, range: 4, init: {kernel: spin, scalars: {cycles: 1}}}\nsteps: []\n",
			[]string{`t.yaml:2: buffers.b.init.kernel: kernel spin(cycles uint64) takes no buffer parameter; an init kernel writes the buffer it initialises: use one that does, or init: {value: ...}`}},
		{"init kernel of another type", "buffers:\n  b: {type: int32, range: 4, init: {kernel: fill_f32, scalars: {v: 1}}}\nsteps: []\n",
			[]string{`t.yaml:2: buffers.b.init.kernel: kernel fill_f32 parameter "out" takes float32, buffer "b" holds int32`}},
		{"init kernel with two buffers", "buffers:\n  b: {type: float32, range: 4, init: {kernel: saxpy, param: x, scalars: {a: 1}}}\nsteps: []\n",
			[]string{`t.yaml:2: buffers.b.init.kernel: kernel "saxpy" also takes buffer parameter "y"; an init kernel may take only the buffer it initialises (use a step instead)`}},
		{"init without a source", "buffers:\n  b: {type: float32, range: 4, init: {format: raw, scalars: {v: 1}}}\nsteps: []\n",
			[]string{`t.yaml:2: buffers.b.init: give exactly one of value, file and kernel (got none)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseErrors(t, tc.in)
			checkErrors(t, got, tc.want)
			for _, e := range got {
				if strings.Contains(e, ".init") && initAccessors.MatchString(e) {
					t.Errorf("an init error speaks of accessors, which init has not: %s", e)
				}
			}
		})
	}
}

// initAccessors finds a message that speaks of a step's accessors.
var initAccessors = regexp.MustCompile(`accessors|this accessor|no accessor|accessor for`)

// TestErrorsAtTheFieldsLine: in block YAML, where an object's fields are on
// the lines below its first, each problem is reported at its field's own
// line (docs/JOBS.md: "with the line and the field").
func TestErrorsAtTheFieldsLine(t *testing.T) {
	in := `buffers:
  a:
    type: float32
    range: [8]
    page_size: [4, 4]
  f:
    type: float32
    range: [8]
    init:
      kernel: fill_f32
      scalars: {v: 1}
      format: raw
  big:
    type: float64
    range:
      - 1048576
      - 1048576
kernels:
  k:
    ptx: k.ptx
    options: [-O3]
    params:
      - name: x
        kind: scalar
        type: float32
        const: true
      - name: x
        kind: local
        type: float32
steps:
  - name: one
    kernel: fill_f32
    scalars: {v: 1}
    accessors: [{buffer: a, mode: write}]
    device: gpu:0
  - name: unknown kernel
    range: [8]
    kernel: saxpi
  - name: grouped
    kernel: reduce_sum_f32
    range: [8]
    split:
      devices: all
      dim: 1
    work_group:
      - 3
    local: {scratch: 4}
    accessors:
      - mode: read
        no_init: true
        param: partial
        buffer: a
    scalars:
      m: 2
  - name: ranged
    kernel: jacobi2d
    accessors:
      - buffer: a
        mode: read
        offset: [1]
      - mode: write
        buffer: aa
  - name: swap
    swap:
      - a
      - b
  - name: fill
    fill:
      buffer: a
      value: -1e60
      offset: [4]
      range: [5]
  - name: copy
    copy:
      from: {buffer: a}
      to:
        buffer: a
        range: [8]
  - name: repeat
    repeat:
      steps: [{fill: {buffer: a, value: 1}}]
      count: 0
outputs:
  - buffer: a
    file: a.npy
  - format: raw
    buffer: b
    file: a.npy
`
	want := []string{
		"t.yaml:5: buffers.a.page_size: has 2 dimensions",
		"t.yaml:12: buffers.f.init.format: applies to file initialisation only",
		"t.yaml:15: buffers.big.range: [1048576 1048576] of float64 is more than 1 TiB",
		"t.yaml:21: kernels.k.options: NVRTC options go with cuda:",
		"t.yaml:26: kernels.k.params[0].const: only pointer and accessor parameters can be constant",
		"t.yaml:27: kernels.k.params[1].name: \"x\" is declared twice",
		"t.yaml:29: kernels.k.params[1].type: local memory has no type",
		"t.yaml:35: steps[0].device: unknown device \"gpu:0\"",
		"t.yaml:38: steps[1].kernel: unknown kernel \"saxpi\"",
		"t.yaml:44: steps[2].split.dim: dimension 1 of a 1-dimensional range",
		"t.yaml:45: steps[2].work_group: range [8] is not a multiple of the work-group size [3]",
		"t.yaml:48: steps[2].accessors: kernel reduce_sum_f32(in *float32, partial *float32, n uint64, scratch local): no accessor for buffer parameter \"in\"",
		"t.yaml:50: steps[2].accessors[0].no_init: a read accessor cannot be no_init",
		"t.yaml:53: steps[2].scalars: kernel reduce_sum_f32(in *float32, partial *float32, n uint64, scratch local): scalar \"n\" is missing",
		"t.yaml:54: steps[2].scalars.m: kernel reduce_sum_f32(in *float32, partial *float32, n uint64, scratch local) has no scalar parameter \"m\"",
		"t.yaml:60: steps[3].accessors[0].offset: parameter \"in\" of kernel jacobi2d is an unranged accessor",
		"t.yaml:62: steps[3].accessors[1].buffer: unknown buffer \"aa\"",
		"t.yaml:66: steps[4].swap[1]: unknown buffer \"b\"",
		"t.yaml:70: steps[5].fill.value: -1e60 does not fit in a float32",
		"t.yaml:72: steps[5].fill: offset [4] + range [5] leaves buffer \"a\" of range [8]",
		"t.yaml:78: steps[6].copy.to.range: the destination takes the source's extent",
		"t.yaml:82: steps[7].repeat.count: 0 is out of range",
		"t.yaml:87: outputs[1].buffer: unknown buffer \"b\"",
		"t.yaml:88: outputs[1].file: \"a.npy\" is also written by outputs[0]",
	}
	checkErrors(t, parseErrors(t, in), want)
}

// TestLongExpressions: huge expressions, as a 16 MiB job file may hold, are
// refused with a message of a line that quotes about 80 bytes of them.
func TestLongExpressions(t *testing.T) {
	for _, tc := range []struct{ name, expr, want string }{
		{"parentheses", strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000), "nests too deep"},
		{"minus signs", strings.Repeat("-", 1000000) + "1", "nests too deep"},
		{"digits", strings.Repeat("9", 100000), "is out of range"},
		{"digits in an expression", "1 + " + strings.Repeat("9", 100000), "is not a 64-bit integer"},
		{"name", strings.Repeat("n", 100000), "unknown param"},
		{"trailing", "1 " + strings.Repeat("x", 100000), "unexpected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fmt.Sprintf("params: {n: 1}\nbuffers:\n  a: {type: float32, range: %q}\nsteps: []\n", tc.expr)
			got := parseErrors(t, in)
			if len(got) != 1 || !strings.Contains(got[0], tc.want) || !strings.Contains(got[0], "…") || len(got[0]) > 400 {
				t.Errorf("Parse errors (%d bytes) = %.600q, want one short error containing %q and an ellipsis", len(strings.Join(got, "")), got, tc.want)
			}
		})
	}
}

// TestRepeatGroupCap: repeats multiply; a job of more than MaxGroups
// command groups (or steps, swaps included) is refused, naming the repeat
// that goes past it, instead of counting to a saturated MaxInt.
func TestRepeatGroupCap(t *testing.T) {
	head := "buffers: {a: {type: float32, range: 4}, b: {type: float32, range: 4}}\nsteps:\n"
	for _, tc := range []struct {
		name, steps string
		groups      int
		want        []string
	}{
		{"at the cap", "  - repeat: {count: 1099511627776, steps: [{fill: {buffer: a, value: 1}}]}\n", MaxGroups, nil},
		{"nested", "  - repeat:\n      count: 1099511627776\n      steps:\n        - repeat: {count: \"1099511627776\", steps: [{fill: {buffer: a, value: 1}}]}\n", 0,
			[]string{"t.yaml:4: steps[0].repeat.count: the job has more than 1099511627776 command groups: this repeat runs 1099511627776 × 1099511627776 command groups with repeats unrolled; lower the counts or split the job"}},
		{"two steps in a repeat", "  - repeat: {count: 1099511627776, steps: [{fill: {buffer: a, value: 1}}, {fill: {buffer: a, value: 2}}]}\n", 0,
			[]string{"t.yaml:3: steps[0].repeat.count: the job has more than 1099511627776 command groups: this repeat runs 1099511627776 × 2 command groups"}},
		{"swaps", "  - repeat: {count: 1099511627776, steps: [{repeat: {count: 2, steps: [{swap: [a, b]}]}}]}\n", 0,
			[]string{"t.yaml:3: steps[0].repeat.count: the job runs more than 1099511627776 steps (swaps included): this repeat runs 1099511627776 × 2 steps with repeats unrolled; lower the counts or split the job"}},
		{"swaps and groups", "  - repeat: {count: 1099511627776, steps: [{swap: [a, b]}, {fill: {buffer: a, value: 1}}]}\n", 0,
			[]string{"t.yaml:3: steps[0].repeat.count: the job runs more than 1099511627776 steps (swaps included): this repeat runs 1099511627776 × 2 steps"}},
		{"siblings", "  - repeat: {count: 1099511627776, steps: [{fill: {buffer: a, value: 1}}]}\n  - fill: {buffer: a, value: 1}\n", 0,
			[]string{"t.yaml:2: steps: the job has more than 1099511627776 command groups with repeats unrolled; lower the repeat counts or split the job"}},
		{"sibling swaps", "  - repeat: {count: 1099511627776, steps: [{fill: {buffer: a, value: 1}}]}\n  - swap: [a, b]\n", 0,
			[]string{"t.yaml:2: steps: the job runs more than 1099511627776 steps (swaps included) with repeats unrolled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := head + tc.steps
			checkErrors(t, parseErrors(t, in), tc.want)
			if tc.want == nil {
				j, err := Parse("t.yaml", []byte(in), Options{})
				if err != nil {
					t.Fatal(err)
				}
				if n := j.CountSteps(); n != tc.groups {
					t.Errorf("CountSteps = %d, want %d", n, tc.groups)
				}
			}
		})
	}
}

// TestNumberOutOfRange: a number too large for a float64, which YAML
// leaves a string, is a number that does not fit, not an expression.
func TestNumberOutOfRange(t *testing.T) {
	in := `buffers:
  d: {type: float64, range: 4, init: {value: 1e400}}
  i: {type: int32, range: 4}
steps:
  - fill: {buffer: d, value: -1e400}
  - fill: {buffer: i, value: 1e400}
  - kernel: saxpy
    scalars: {a: 1E+400}
    accessors: [{buffer: x, mode: read}, {buffer: x, mode: read_write}]
  - kernel: empty
    range: [1e400]
`
	checkErrors(t, parseErrors(t, strings.Replace(in, "i: {type", "x: {type: float32, range: 4}\n  i: {type", 1)), []string{
		"t.yaml:2: buffers.d.init.value: 1e400 does not fit in a float64",
		"t.yaml:6: steps[0].fill.value: -1e400 does not fit in a float64 (buffer \"d\" holds float64)",
		"t.yaml:7: steps[1].fill.value: 1e400 is not an int32",
		"t.yaml:9: steps[2].scalars.a: 1E+400 does not fit in a float32 (parameter \"a\" is float32)",
		"t.yaml:12: steps[3].range[0]: 1e400 is out of range: want an integer from 0 to 1099511627776",
	})
}

// TestInitFieldsThatApply: init's format goes with file only, as its
// scalars go with kernel only; file names a file.
func TestInitFieldsThatApply(t *testing.T) {
	for _, tc := range []struct{ name, init, want string }{
		{"format with file", "{file: x.bin, format: raw}", ""},
		{"format with kernel", "{kernel: fill_f32, scalars: {v: 1}, format: raw}", "t.yaml:1: buffers.a.init.format: applies to file initialisation only"},
		{"format with value", "{value: 1, format: raw}", "t.yaml:1: buffers.a.init.format: applies to file initialisation only"},
		{"scalars with value", "{value: 1, scalars: {v: 1}}", "t.yaml:1: buffers.a.init.scalars: applies to kernel initialisation only"},
		{"empty file", `{file: ""}`, "t.yaml:1: buffers.a.init.file: empty; name the file to read (relative to the job file's directory)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			checkErrors(t, parseErrors(t, "buffers: {a: {type: float32, range: 4, init: "+tc.init+"}}\nsteps: []\n"), want)
		})
	}
}

// TestNameRulesDocumented: docs/JOBS.md and docs/job.schema.json state the
// rules the decoder applies to names: params are letters, digits and _
// (they are used in expressions, where - is minus); buffers, kernels and
// kernel parameters may also use . and -.
func TestNameRulesDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/job.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Params struct {
				PropertyNames struct {
					Pattern string `json:"pattern"`
				} `json:"propertyNames"`
			} `json:"params"`
		} `json:"properties"`
		Defs struct {
			Name struct {
				Pattern string `json:"pattern"`
			} `json:"name"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	if got := schema.Properties.Params.PropertyNames.Pattern; got != paramRE.String() {
		t.Errorf("schema params names: %q, the decoder %q", got, paramRE.String())
	}
	if got := schema.Defs.Name.Pattern; got != nameRE.String() {
		t.Errorf("schema names: %q, the decoder %q", got, nameRE.String())
	}
	doc, err := os.ReadFile("../docs/JOBS.md")
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile("(?m)^Names of buffers, kernels and kernel parameters are letters, digits, `_ . -`.*\n.*params.*letters, digits and `_`")
	if !rule.Match(doc) {
		t.Errorf("docs/JOBS.md does not state the name rules: buffers, kernels and kernel parameters `_ . -`; params letters, digits and `_`")
	}
	for _, tc := range []struct{ in, want string }{
		{"params: {a.b: 1}\nbuffers: {}\nsteps: []\n", `params.a.b: param name "a.b": use letters, digits and _`},
		{"params: {a-b: 1}\nbuffers: {}\nsteps: []\n", `params.a-b: param name "a-b"`},
		{"buffers: {a.b-c: {type: float32, range: 1}}\nkernels: {k.1-x: {ptx: k.ptx, params: [{name: p.q-r, kind: scalar, type: int32}]}}\nsteps: []\n", ""},
	} {
		var want []string
		if tc.want != "" {
			want = []string{tc.want}
		}
		checkErrors(t, parseErrors(t, tc.in), want)
	}
}

// TestSizeLimitsAtTheEdge: the numbers docs/JOBS.md gives for the format,
// at the limit and one past it: a job file of MaxFileBytes, a buffer of
// exactly 1 TiB ("the largest buffer the format allows") and one element
// more, an extent or a repeat count of 2⁴⁰ and 2⁴⁰+1, 1–3 extents.
func TestSizeLimitsAtTheEdge(t *testing.T) {
	job := "buffers:\n  a: {type: float32, range: 4}\nsteps:\n  - fill: {buffer: a, value: 1}\n"
	pad := func(n int) []byte {
		b := []byte(job + "#")
		for len(b) < n {
			b = append(b, 'x')
		}
		return b
	}
	if _, err := Parse("t.yaml", pad(MaxFileBytes), Options{}); err != nil {
		t.Errorf("job file of MaxFileBytes: %v", err)
	}
	if _, err := Parse("t.yaml", pad(MaxFileBytes+1), Options{}); err == nil || !strings.Contains(err.Error(), "is larger than 16777216") {
		t.Errorf("job file of MaxFileBytes+1: %v, want larger than 16777216", err)
	}
	for _, tc := range []struct {
		name, buffers, steps string
		want                 string // "" for valid
	}{
		{"1 TiB of float32", "{type: float32, range: [268435456, 1024]}", "", ""},
		{"1 TiB of uint8, one extent", "{type: uint8, range: 1099511627776}", "", ""},
		{"1 TiB + 1 element", "{type: uint8, range: [2, 549755813889]}", "", "t.yaml:2: buffers.a.range: [2 549755813889] of uint8 is more than 1 TiB"},
		{"1 TiB + 1 float32", "{type: float32, range: [274877906945]}", "", "t.yaml:2: buffers.a.range: [274877906945] of float32 is more than 1 TiB"},
		{"extent 2^40+1", "{type: uint8, range: [1099511627777]}", "", "t.yaml:2: buffers.a.range[0]: 1099511627777 is out of range: want 1 to 1099511627776"},
		// 2^40 · 2^24 bytes wrapped to 0 and passed the bound (found in the
		// fuzz campaign, as in jobfile/npy).
		{"size wrapping to 0", "{type: uint8, range: [1099511627776, 16777216]}", "", "t.yaml:2: buffers.a.range: [1099511627776 16777216] of uint8 is more than 1 TiB"},
		{"four extents", "{type: uint8, range: [2, 2, 2, 2]}", "", "t.yaml:2: buffers.a.range: want a list of 1 to 3 integers"},
		{"extent 0", "{type: uint8, range: [4, 0]}", "", "t.yaml:2: buffers.a.range[1]: 0 is out of range: want 1 to 1099511627776"},
		{"repeat 2^40+1", "{type: uint8, range: 4}", "  - repeat: {count: 1099511627777, steps: [{fill: {buffer: a, value: 1}}]}\n",
			"t.yaml:4: steps[0].repeat.count: 1099511627777 is out of range: want 1 to 1099511627776"},
		{"repeat 0", "{type: uint8, range: 4}", "  - repeat: {count: 0, steps: [{fill: {buffer: a, value: 1}}]}\n",
			"t.yaml:4: steps[0].repeat.count: 0 is out of range: want 1 to 1099511627776"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := tc.steps
			if steps == "" {
				steps = "  - fill: {buffer: a, value: 1}\n"
			}
			_, err := Parse("t.yaml", []byte("buffers:\n  a: "+tc.buffers+"\nsteps:\n"+steps), Options{})
			if tc.want == "" {
				if err != nil {
					t.Errorf("Parse = %v, want valid", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
}
