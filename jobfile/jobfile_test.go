package jobfile

import (
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/kernels"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/")

func opts(t testing.TB) Options {
	if err := kernels.Register(); err != nil {
		t.Fatal(err)
	}
	return Options{Kernels: device.Kernels, ParamType: kernels.ParamType}
}

func exampleFiles(t testing.TB) []string {
	files, err := filepath.Glob("../examples/jobs/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("example job files: %v %v", files, err)
	}
	return files
}

// TestExamplesParse: the shipped example jobs are valid.
func TestExamplesParse(t *testing.T) {
	for _, f := range exampleFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(f, data, opts(t)); err != nil {
			t.Errorf("Parse(%s):\n%v", f, err)
		}
	}
}

// TestBadJobGolden_V2: a job with many mistakes gets every one reported, each
// with its line and field, in line order (testdata/bad.golden; regenerate
// with go test ./jobfile -rewrite and review the diff).
func TestBadJobGolden_V2(t *testing.T) {
	data, err := os.ReadFile("testdata/bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, perr := Parse("bad.yaml", data, opts(t))
	if !errors.Is(perr, ErrInvalid) {
		t.Fatalf("Parse(bad.yaml) = %v, want ErrInvalid", perr)
	}
	var es Errors
	if !errors.As(perr, &es) || len(es) < 20 {
		t.Fatalf("Parse(bad.yaml) gave %d errors, want every problem (≥ 20)", len(es))
	}
	got := perr.Error() + "\n"
	if *rewrite {
		os.WriteFile("testdata/bad.golden", []byte(got), 0o644)
	}
	want, err := os.ReadFile("testdata/bad.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("errors differ from testdata/bad.golden (run with -rewrite and review):\n%s", got)
	}
}

const jacobiMin = `
buffers:
  grid: {type: float32, range: [8, 8]}
  next: {type: float32, range: [8, 8]}
steps:
  - kernel: jacobi2d
    accessors:
      - {buffer: grid, mode: read}
      - {buffer: next, mode: write}
`

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // substring of the error, with the line
	}{
		{"syntax", "buffers: [\n", "t.yaml:1: YAML syntax"},
		{"empty", "", "t.yaml:1: empty job file"},
		{"not a mapping", "- 1\n", "t.yaml:1: want a mapping"},
		{"two documents", jacobiMin + "---\nbuffers: {}\n", "more than one YAML document"},
		{"missing steps", "buffers: {a: {type: float32, range: 4}}\n", "t.yaml:1: steps: missing"},
		{"missing type", "buffers: {a: {range: 4}}\nsteps: []\n", "t.yaml:1: buffers.a.type: missing"},
		{"bad range", "buffers: {a: {type: float32, range: [1, 2, 3, 4]}}\nsteps: []\n", "want a list of 1 to 3 integers"},
		{"zero extent", "buffers: {a: {type: float32, range: [0]}}\nsteps: []\n", "buffers.a.range[0]: 0 is out of range"},
		{"version", "version: 2\n" + jacobiMin, "t.yaml:1: version: 2 is out of range"},
		{"init two sources", "buffers: {a: {type: float32, range: 4, init: {value: 1, file: x.raw}}}\nsteps: []\n", "give exactly one of value, file and kernel"},
		{"unknown buffer in swap", jacobiMin + "  - swap: [grid, nxt]\n", `t.yaml:10: steps[1].swap[1]: unknown buffer "nxt" (did you mean "next"?) (buffers: grid, next)`},
		{"accessor too many", strings.Replace(jacobiMin, "mode: write}", "mode: write}\n      - {buffer: next, mode: read}", 1), "this accessor is one too many"},
		{"duplicate key", "buffers: {a: {type: float32, type: int32, range: 4}}\nsteps: []\n", "buffers.a.type: given twice"},
		{"alias bomb", aliasBomb(), "too complex"},
		{"init kernel other buffer param", "buffers: {a: {type: float32, range: 4, init: {kernel: saxpy, param: x, scalars: {a: 1}}}}\nsteps: []\n", `also takes buffer parameter "y"`},
		{"local without group", "buffers: {a: {type: float32, range: 4}, b: {type: float32, range: 1}}\nsteps:\n- kernel: reduce_sum_f32\n  range: [4]\n  scalars: {n: 4}\n  local: {scratch: 16}\n  accessors: [{buffer: a, mode: read}, {buffer: b, mode: write}]\n", "give work_group"},
		{"job kernel shadows builtin", "buffers: {}\nkernels: {saxpy: {ptx: s.ptx, params: []}}\nsteps: []\n", `already registered`},
		{"zero chunks per device", jacobiMin + "    split: {chunks_per_device: 0}\n", "steps[0].split.chunks_per_device: 0 is out of range"},
		{"job kernel ptx and cuda", "buffers: {}\nkernels: {k: {ptx: s.ptx, cuda: s.cu, params: []}}\nsteps: []\n", `kernels.k.cuda: give ptx or cuda, not both`},
		{"job kernel neither", "buffers: {}\nkernels: {k: {entry: k, params: []}}\nsteps: []\n", `kernels.k.ptx: missing; name the PTX module file (ptx:) or the CUDA C source file (cuda:)`},
		{"job kernel options with ptx", "buffers: {}\nkernels: {k: {ptx: s.ptx, options: [-O3], params: []}}\nsteps: []\n", `kernels.k.options: NVRTC options go with cuda:`},
		{"job kernel arch option", "buffers: {}\nkernels: {k: {cuda: s.cu, options: [--gpu-architecture=compute_80], params: []}}\nsteps: []\n", `kernels.k.options[0]: NVRTC option "--gpu-architecture=compute_80"`},
		{"job kernel param missing kind", "buffers: {}\nkernels: {k: {ptx: s.ptx, params: [{name: x, type: float32}]}}\nsteps: []\n", `kernels.k.params[0].kind: missing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.in), opts(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v\nwant an error containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

func aliasBomb() string {
	var b strings.Builder
	b.WriteString("buffers: {x: {type: float32, range: 1}, y: {type: float32, range: 1}}\nsteps:\n")
	b.WriteString("  - &a0 {swap: [x, y]}\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "  - &a%d {repeat: {count: 1, steps: [", i)
		for k := 0; k < 10; k++ {
			if k > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]}}\n")
	}
	return b.String()
}

// TestParseModel: what Parse builds from a job (defaults filled in).
func TestParseModel(t *testing.T) {
	in := `
name: demo
buffers:
  x: {type: float32, range: 16, init: {kernel: fill_f32, scalars: {v: 2}}}
  y: {type: float32, range: [16], init: {file: y.npy}}
  r: {type: uint64, range: [2, 2], init: {file: r.bin}}
steps:
  - kernel: saxpy
    range: [16]
    scalars: {a: 0.5}
    accessors:
      - {param: y, buffer: y, mode: read_write, map: one_to_one}
      - {buffer: x, mode: read, map: {neighbourhood: 2}}
    split: {dim: 0, devices: 2, chunks_per_device: 4, borders: 2}
  - repeat: {count: 3, steps: [{swap: [x, y]}, {fill: {buffer: r, value: 18446744073709551615}}]}
outputs:
  - {buffer: y, file: out/y.raw}
`
	j, err := Parse("demo.yaml", []byte(in), opts(t))
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "demo" || len(j.Buffers) != 3 || j.Buffers[0].Name != "x" || j.Buffers[2].Name != "r" {
		t.Fatalf("job = %+v", j)
	}
	if got := j.Buffers[0].Range; !reflect.DeepEqual(got, []int{16}) {
		t.Errorf("range 16 = %v, want [16]", got)
	}
	ik := j.Buffers[0].Init.Kernel
	if ik == nil || ik.Kernel != "fill_f32" || len(ik.Accessors) != 1 || ik.Accessors[0].Param != "out" || !ik.Accessors[0].NoInit || !reflect.DeepEqual(ik.Range, []int{16}) {
		t.Errorf("init kernel = %+v, want fill_f32 writing x as out over [16]", ik)
	}
	if f := j.Buffers[1].Init; f.File != "y.npy" || f.Format != FormatNPY {
		t.Errorf("init file = %+v, want y.npy as npy", f)
	}
	if f := j.Buffers[2].Init; f.Format != FormatRaw {
		t.Errorf("init r.bin format = %q, want raw", f.Format)
	}
	s := j.Steps[0]
	if s.Accessors[0].Param != "y" || s.Accessors[1].Param != "x" {
		t.Errorf("accessor params = %q, %q; want y (named), x (first free)", s.Accessors[0].Param, s.Accessors[1].Param)
	}
	if s.Accessors[1].Map != "neighbourhood" || s.Accessors[1].MapRange != 2 || s.Split == nil || s.Split.Devices != "2" || s.Split.ChunksPerDevice != 4 || s.Split.Borders != 2 {
		t.Errorf("split = %+v, map = %q/%d", s.Split, s.Accessors[1].Map, s.Accessors[1].MapRange)
	}
	if s.Scalars[0].Type != "float32" {
		t.Errorf("scalar a type = %q, want float32 (from kernels.ParamType)", s.Scalars[0].Type)
	}
	b, err := j.Steps[1].Steps[1].Fill.Value.Encode("uint64")
	if err != nil || b[0] != 0xff || b[7] != 0xff {
		t.Errorf("uint64 max encodes to %x, %v", b, err)
	}
	if n := j.CountSteps(); n != 4 {
		t.Errorf("CountSteps = %d, want 4 (saxpy + 3 fills; swaps submit nothing)", n)
	}
	var kinds []StepKind
	j.Walk(func(s *Step) error { kinds = append(kinds, s.Kind); return nil })
	if len(kinds) != 7 {
		t.Errorf("Walk visited %v, want 7 steps (1 + 3×2)", kinds)
	}
	if j.Outputs[0].Format != FormatRaw {
		t.Errorf("output format = %q, want raw", j.Outputs[0].Format)
	}
}

// TestJSONJob: JSON is YAML too.
func TestJSONJob(t *testing.T) {
	in := `{"buffers": {"x": {"type": "float32", "range": [4]}, "y": {"type": "float32", "range": [4]}},
 "steps": [{"kernel": "saxpy", "scalars": {"a": 2}, "accessors": [{"buffer": "x", "mode": "read"}, {"buffer": "y", "mode": "read_write"}]}]}`
	j, err := Parse("j.json", []byte(in), opts(t))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(j.Steps[0].Range, []int{4}) {
		t.Errorf("range defaults to %v, want the first accessor's [4]", j.Steps[0].Range)
	}
}

func TestNumberEncode(t *testing.T) {
	for _, tc := range []struct {
		text, typ string
		want      []byte
		err       string
	}{
		{"1", "float32", []byte{0, 0, 0x80, 0x3f}, ""},
		{"-2", "int16", []byte{0xfe, 0xff}, ""},
		{"0x10", "uint8", []byte{0x10}, ""},
		{"1_000", "int32", []byte{0xe8, 0x03, 0, 0}, ""},
		{"256", "uint8", nil, "not a uint8 (0 to 255)"},
		{"-1", "uint32", nil, "not a uint32"},
		{"1.5", "int32", nil, "not an int32"},
		{"1e39", "float32", nil, "does not fit in a float32"},
		{"+Inf", "float64", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x7f}, ""},
	} {
		got, err := Number{tc.text}.Encode(tc.typ)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Encode(%s as %s) = %v, want error %q", tc.text, tc.typ, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Encode(%s as %s) = %x, %v; want %x", tc.text, tc.typ, got, err, tc.want)
		}
	}
}

// FuzzParse: no input makes Parse panic or hang; every error names the
// file; a job that parses walks without trouble.
func FuzzParse(f *testing.F) {
	for _, name := range exampleFiles(f) {
		data, _ := os.ReadFile(name)
		f.Add(data)
	}
	data, _ := os.ReadFile("testdata/bad.yaml")
	f.Add(data)
	f.Add([]byte(jacobiMin))
	f.Add([]byte(cudaJob))
	f.Add([]byte("buffers:\n  a: {type: uint8, range: [1099511627776, 16777216]}\nsteps: []\n"))  // 2^64 bytes wrapped to 0
	f.Add([]byte("params: {a: b + 1, b: a + 1, c: a}\n" + jacobiMin))                             // a cycle, and a user of it
	f.Add([]byte("params: {n: m * 2, m: 4}\nbuffers: {x: {type: int32, range: n}}\nsteps: []\n")) // a later param
	o := opts(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		j, err := Parse("f.yaml", in, o)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Parse error %v is not a non-empty Errors", err)
			}
			for _, e := range es {
				if e.File != "f.yaml" || e.Msg == "" {
					t.Fatalf("error %+v lacks file or message", e)
				}
			}
			return
		}
		if j.CountSteps() < 0 {
			t.Fatal("negative step count")
		}
		for _, b := range j.Buffers {
			size := big.NewInt(int64(Types[b.Type]))
			for _, e := range b.Range {
				size.Mul(size, big.NewInt(int64(e)))
			}
			if size.Cmp(big.NewInt(1<<40)) > 0 || size.Int64() != int64(b.Bytes()) {
				t.Fatalf("buffer %s %s %v of %v bytes accepted (Bytes %d)", b.Name, b.Type, b.Range, size, b.Bytes())
			}
		}
		for _, s := range j.Steps {
			_ = s.Label()
		}
	})
}

func TestEvalInt(t *testing.T) {
	params := map[string]int64{"n": 1024, "wg": 256, "neg": -3}
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"n", 1024, ""},
		{"n / 8", 128, ""},
		{"n / wg * 2 + 1", 9, ""},
		{"(n + 1) * 2", 2050, ""},
		{"-neg % 2", 1, ""},
		{"1_000 - 1", 999, ""},
		{"nn", 0, `unknown param "nn" (did you mean "n"?) (params: n, neg, wg)`},
		{"n / (wg - 256)", 0, "divides by zero"},
		{"9223372036854775807 + 1", 0, "overflows"},
		{"4294967296 * 4294967296", 0, "overflows"},
		{"n +", 0, "ends early"},
		{"(n", 0, "missing )"},
		{"n n", 0, "unexpected"},
		{"2.5", 0, "unexpected"},
	} {
		got, err := evalInt(tc.in, params)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("evalInt(%q) = %d, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("evalInt(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestParams: params make sizes expressions; --set overrides them (params
// computed from an overridden one follow it); an override of an undeclared
// param or a bad expression is reported with the field.
func TestParams(t *testing.T) {
	in := "params: {n: 64, half: n / 2}\nbuffers:\n  a: {type: float32, range: [n, half], page_size: [half / 4, half]}\nsteps:\n  - repeat: {count: half, steps: [{fill: {buffer: a, value: n * 2}}]}\n"
	j, err := Parse("p.yaml", []byte(in), Options{Params: map[string]string{"n": "128"}})
	if err != nil {
		t.Fatal(err)
	}
	if b := j.Buffers[0]; !reflect.DeepEqual(b.Range, []int{128, 64}) || !reflect.DeepEqual(b.PageSize, []int{16, 64}) {
		t.Errorf("range %v page %v, want [128 64] [16 64] (half follows the override of n)", b.Range, b.PageSize)
	}
	if j.Steps[0].Count != 64 || j.Steps[0].Steps[0].Fill.Value.Text != "256" {
		t.Errorf("count %d value %q, want 64 and 256", j.Steps[0].Count, j.Steps[0].Steps[0].Fill.Value.Text)
	}
	if want := map[string]int64{"n": 128, "half": 64}; !reflect.DeepEqual(j.Params, want) {
		t.Errorf("Params = %v, want %v", j.Params, want)
	}
	_, err = Parse("p.yaml", []byte(in), Options{Params: map[string]string{"m": "1"}})
	if err == nil || !strings.Contains(err.Error(), `p.yaml: --set m: the job declares no param "m" (did you mean "n"?)`) {
		t.Errorf("override of an undeclared param: %v", err)
	}
	_, err = Parse("p.yaml", []byte(strings.Replace(in, "[n, half]", "[n, hlaf]", 1)), Options{})
	if err == nil || !strings.Contains(err.Error(), `p.yaml:3: buffers.a.range[1]: unknown param "hlaf" (did you mean "half"?)`) {
		t.Errorf("typo in an expression: %v", err)
	}
	_, err = Parse("p.yaml", []byte(strings.Replace(in, "n: 64", "n: -64", 1)), Options{})
	if err == nil || !strings.Contains(err.Error(), "range[0]: n = -64 is out of range") {
		t.Errorf("negative extent from a param: %v", err)
	}
}

// BenchmarkParse parses and validates the Jacobi example (with the kernel
// registry), the work acpp-submit does before running a job.
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("../examples/jobs/jacobi.yaml")
	if err != nil {
		b.Fatal(err)
	}
	o := opts(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("jacobi.yaml", data, o); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParamsDependencyOrder: a param may use any other param, declared
// before or after it; they resolve in dependency order.
func TestParamsDependencyOrder(t *testing.T) {
	in := "params:\n  a: b + 1\n  b: c * 2\n  c: 3\n  d: a + c\nbuffers:\n  x: {type: float32, range: [d]}\nsteps: []\n"
	j, err := Parse("p.yaml", []byte(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 7, "b": 6, "c": 3, "d": 10}; !reflect.DeepEqual(j.Params, want) {
		t.Errorf("Params = %v, want %v", j.Params, want)
	}
	if r := j.Buffers[0].Range; !reflect.DeepEqual(r, []int{10}) {
		t.Errorf("range %v, want [10]", r)
	}
	// An override of c reaches a, b and d.
	j, err = Parse("p.yaml", []byte(in), Options{Params: map[string]string{"c": "c_default", "c_default": "1"}})
	if err == nil || !strings.Contains(err.Error(), `--set c_default: the job declares no param "c_default"`) {
		t.Fatalf("override of an undeclared param: %v", err)
	}
	j, err = Parse("p.yaml", []byte(in), Options{Params: map[string]string{"c": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 3, "b": 2, "c": 1, "d": 4}; !reflect.DeepEqual(j.Params, want) {
		t.Errorf("Params with --set c=1 = %v, want %v", j.Params, want)
	}
}

// TestParamErrors: a cycle is named once, at the param where it closes,
// and nothing that uses its params is reported again; an undeclared name
// keeps the unknown-param text with suggestions, listing every declared
// param.
func TestParamErrors(t *testing.T) {
	chain := func(n int) string {
		var b strings.Builder
		b.WriteString("params:\n")
		for i := range n {
			fmt.Fprintf(&b, "  p%d: p%d + 1\n", i, i+1)
		}
		fmt.Fprintf(&b, "  p%d: 0\n", n)
		b.WriteString("buffers: {}\nsteps: []\n")
		return b.String()
	}
	for _, tc := range []struct {
		name string
		in   string
		set  map[string]string
		want []string // the errors, in order
	}{
		{"two-param cycle", "params: {a: b + 1, b: a + 1}\nbuffers: {}\nsteps: []\n", nil, []string{
			"t.yaml:1: params.a: cycle a → b → a: a param cannot depend on itself, directly or through others; give one of them a value that does not use the others"}},
		{"self", "params:\n  n: 4\n  a: a * 2\nbuffers: {}\nsteps: []\n", nil, []string{
			"t.yaml:3: params.a: cycle a → a: a param cannot depend on itself"}},
		{"cycle with users", "params:\n  x: a * 2\n  a: b\n  b: c\n  c: (a)\nbuffers:\n  buf: {type: float32, range: [x, b]}\nsteps: []\n", nil, []string{
			"t.yaml:3: params.a: cycle a → b → c → a:"}},
		{"undeclared", "params:\n  a: c + 1\n  b: 2\nbuffers: {}\nsteps: []\n", nil, []string{
			`t.yaml:2: params.a: unknown param "c" (did you mean "a"?) (params: a, b)`}},
		{"undeclared near a later param", "params:\n  m: nn + 1\n  n: 4\nbuffers: {}\nsteps: []\n", nil, []string{
			`t.yaml:2: params.m: unknown param "nn" (did you mean "n"?) (params: m, n)`}},
		{"failed param used elsewhere", "params:\n  a: 1 / 0\n  b: a + 1\nbuffers:\n  buf: {type: float32, range: [b]}\nsteps: []\n", nil, []string{
			`t.yaml:2: params.a: expression "1 / 0" divides by zero`}},
		{"use of an undeclared name", "params: {n: 4}\nbuffers:\n  buf: {type: float32, range: [m]}\nsteps: []\n", nil, []string{
			`t.yaml:3: buffers.buf.range[0]: unknown param "m" (did you mean "n"?) (params: n)`}},
		{"cycle through --set", "params: {n: 64, half: n / 2}\nbuffers: {}\nsteps: []\n", map[string]string{"n": "half * 2"}, []string{
			"t.yaml: --set n: cycle n → half → n:"}},
		{"chain too long", chain(maxParamChain + 1), nil, []string{
			"params.p1000: depends on a chain of more than 1000 params (p0 → … → p1000)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.in), Options{Params: tc.set})
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Parse = %v, want Errors", err)
			}
			if len(es) != len(tc.want) {
				t.Fatalf("Parse gave %d errors, want %d:\n%v", len(es), len(tc.want), err)
			}
			for i, e := range es {
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("error %d = %q\nwant it to contain %q", i, e.Error(), tc.want[i])
				}
			}
		})
	}
	// A long chain within the bound resolves.
	j, err := Parse("t.yaml", []byte(chain(maxParamChain-1)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Params["p0"] != maxParamChain-1 {
		t.Errorf("p0 = %d, want %d", j.Params["p0"], maxParamChain-1)
	}
}

// cudaJob declares a kernel as CUDA C source with NVRTC options.
const cudaJob = `buffers:
  x: {type: float32, range: 8, init: {value: 1}}
kernels:
  scale_cu:
    cuda: kernels/scale.cu
    options: [--fmad=false, -DK=2]
    entry: scale
    params:
      - {name: a, kind: scalar, type: float32}
      - {name: x, kind: pointer, type: float32}
steps:
  - kernel: scale_cu
    range: [8]
    scalars: {a: 2}
    accessors: [{buffer: x, mode: read_write}]
`

// TestJobKernelCUDASource: a kernels: entry may name CUDA C source
// (cuda:) with NVRTC options instead of a PTX module.
func TestJobKernelCUDASource(t *testing.T) {
	j, err := Parse("t.yaml", []byte(cudaJob), opts(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Kernels) != 1 {
		t.Fatalf("Kernels = %+v, want one", j.Kernels)
	}
	k := j.Kernels[0]
	if k.Name != "scale_cu" || k.CUDA != "kernels/scale.cu" || k.PTX != "" || k.Entry != "scale" || len(k.Params) != 2 ||
		len(k.Options) != 2 || k.Options[0] != "--fmad=false" || k.Options[1] != "-DK=2" || k.Line != 4 {
		t.Errorf("Kernels[0] = %+v, want scale_cu from kernels/scale.cu with two options at line 4", k)
	}
}
