package node

import (
	"strings"
	"testing"
)

// TestCheckShippedSource: a node compiles a shipped CUDA C source only if
// it includes nothing but acpp.cuh and its NVRTC options name no files:
// otherwise a job could read the node's files back through the
// compiler's error messages.
func TestCheckShippedSource(t *testing.T) {
	const body = "extern \"C\" __global__ void k(float *x) { x[0] = 1; }\n"
	for _, c := range []struct {
		name string
		src  string
		opts []string
		want string // "" means accepted
	}{
		{"plain", body, nil, ""},
		{"acpp.cuh", "#include \"acpp.cuh\"\n  #include <acpp.cuh>\r\n" + body, []string{"--fmad=false", "-DN=4", "-UX", "-std=c++17", "--use_fast_math", "-lineinfo", "--maxrregcount=32"}, ""},
		{"another header", "#include \"/etc/shadow\"\n" + body, nil, `word "include" on line 1`},
		{"spaced directive", "#  include <cstdio>\n" + body, nil, `"include"`},
		{"spliced", "#inc\\\nlude \"/etc/passwd\"\n" + body, nil, `"include" on line 1`},
		{"spliced CRLF", "#inc\\\r\nlude \"/etc/passwd\"\n" + body, nil, `"include"`},
		{"trigraph splice", "#inc??/\nlude \"/etc/passwd\"\n" + body, nil, `"include"`},
		{"digraph", "%:include \"/etc/passwd\"\n" + body, nil, `"include"`},
		{"has_include", body + "#if __has_include(\"/root/.ssh/id_rsa\")\n#endif\n", nil, `"include" on line 2`},
		{"import", "#import \"x\"\n" + body, nil, `"import"`},
		{"embed", "const char d[] = {\n#embed \"/etc/passwd\"\n};\n", nil, `"embed" on line 2`},
		{"acpp.cuh with a tail", "#include \"acpp.cuh\" // and /etc/passwd\n" + body, nil, `"include"`},
		{"include path", body, []string{"-I/etc"}, `option "-I/etc"`},
		{"include path long", body, []string{"--include-path=/etc"}, `"--include-path=/etc"`},
		{"pre-include", body, []string{"--pre-include=/etc/passwd"}, "--pre-include"},
		{"time file", body, []string{"--time=/tmp/x"}, "--time"},
		{"pch", body, []string{"--use-pch=/tmp/x.pch"}, "--use-pch"},
		{"empty -D", body, []string{"-D"}, `option "-D"`},
		{"unknown", body, []string{"--frobnicate"}, "--frobnicate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkShippedSource([]byte(c.src), c.opts)
			if c.want == "" {
				if err != nil {
					t.Fatalf("checkShippedSource = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkShippedSource = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// FuzzShippedSource: no source panics the check, and an accepted one has
// no include, import or embed anywhere once its lines are joined, except
// in the two allowed #include lines.
func FuzzShippedSource(f *testing.F) {
	f.Add([]byte("#include \"acpp.cuh\"\nextern \"C\" __global__ void k() {}\n"))
	f.Add([]byte("#inc\\\nlude \"x\"\n"))
	f.Add([]byte("%:include <x>\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		if checkShippedSource(src, nil) != nil {
			return
		}
		joined := strings.NewReplacer("\\\r\n", "", "\\\n", "", "??/\r\n", "", "??/\n", "").Replace(string(src))
		joined = strings.ReplaceAll(joined, "#include \"acpp.cuh\"", "")
		joined = strings.ReplaceAll(joined, "#include <acpp.cuh>", "")
		for _, w := range includeWords {
			if strings.Contains(joined, w) {
				t.Fatalf("accepted %q, which has %q", src, w)
			}
		}
	})
}
