package acpp

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// The compile-time promises of the accessor API (V2): a read accessor has
// no way to write that compiles. The method-set tests
// (TestConversionRulesInMethodSets_V2_V3) see only method names; these
// type-check programs a user could write, against this package's export
// data, so a conversion between struct types with identical fields (which
// Go allows), a slice handed out, or a promoted method is caught too.

// exportData is the export data of this package and its dependencies, from
// go list (built once per test binary, cached by the go command).
var exportData = sync.OnceValues(func() (map[string]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			m[path] = file
		}
	}
	return m, sc.Err()
})

// typeCheck type-checks body as the body of a user's function with h, b
// (a float32 buffer), r and o (a range and an offset) and ctx in scope, and
// returns the type errors.
func typeCheck(t *testing.T, body string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build export data:", err)
	}
	exports, err := exportData()
	if err != nil {
		t.Fatal(err)
	}
	src := `package user

import (
	"context"

	acpp "github.com/acpp/acpp"
)

func f(ctx context.Context, h *acpp.Handler, b *acpp.Buffer[float32], r acpp.Range, o acpp.ID) {
` + body + `
}
`
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "user.go", src, 0)
	if err != nil {
		t.Fatalf("snippet does not parse: %v\n%s", err, body)
	}
	var errs []string
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			f, ok := exports[path]
			if !ok {
				return nil, fmt.Errorf("no export data for %q", path)
			}
			return os.Open(f)
		}),
		Error: func(err error) { errs = append(errs, err.Error()) },
	}
	conf.Check("user", fset, []*ast.File{file}, nil)
	return errs
}

func TestReadAccessorsCannotWrite_V2(t *testing.T) {
	// Each writes through a read accessor, or turns one into a writable
	// one; none may compile. want is part of the type checker's message.
	for _, tc := range []struct{ name, body, want string }{
		{"unranged: no slice", `acpp.Read(h, b).Slice()[0] = 1`, "no field or method Slice"},
		{"unranged: no Set", `acpp.Read(h, b).Set(0, 1)`, "no field or method Set"},
		{"unranged: no Set2", `acpp.Read(h, b).Set2(0, 0, 1)`, "no field or method Set2"},
		{"unranged: no Set3", `acpp.Read(h, b).Set3(0, 0, 0, 1)`, "no field or method Set3"},
		{"unranged: no Ptr", `*acpp.Read(h, b).Ptr(0) = 1`, "no field or method Ptr"},
		{"unranged: no conversion to writable", `acpp.Unranged[float32](acpp.Read(h, b)).Set(0, 1)`, "cannot convert"},
		{"unranged: not a GlobalPtr", `acpp.GlobalOf(acpp.Read(h, b)).Set(0, 1)`, "does not match"},
		{"unranged: data pointer unexported", `acpp.Read(h, b).p[0] = 1`, "unexported"},
		{"unranged from ReadOnly", `acpp.ReadWrite(h, b).ReadOnly().Set(0, 1)`, "no field or method Set"},
		{"unranged to raw", `acpp.Read(h, b).Raw().Set(0, 1)`, "no field or method Set"},
		{"unranged to ranged", `acpp.Read(h, b).Ranged().Set(0, 1)`, "no field or method Set"},
		{"ranged: no Set", `acpp.ReadRange(h, b, r, o).Set(0, 1)`, "no field or method Set"},
		{"ranged: no slice", `acpp.ReadRange(h, b, r, o).Slice()[0] = 1`, "no field or method Slice"},
		{"ranged: no conversion to writable", `acpp.Ranged[float32](acpp.ReadRange(h, b, r, o)).Set(0, 1)`, "cannot convert"},
		{"ranged: data pointer unexported", `acpp.ReadRange(h, b, r, o).p[0] = 1`, "unexported"},
		{"raw: no Set", `acpp.ReadRaw(h, b).Set(0, 1)`, "no field or method Set"},
		{"raw: no Ptr", `*acpp.ReadRaw(h, b).Ptr(0) = 1`, "no field or method Ptr"},
		{"raw: no conversion to writable", `acpp.Raw[float32](acpp.ReadRaw(h, b)).Set(0, 1)`, "cannot convert"},
		{"raw from ReadOnly", `acpp.WriteRaw(h, b).ReadOnly().Set(0, 1)`, "no field or method Set"},
		{"placeholder: Require is read-only", `acpp.ReadPlaceholder(b).Require(h).Set(0, 1)`, "no field or method Set"},
		{"placeholder: no conversion to writable", `acpp.Placeholder[float32](acpp.ReadPlaceholder(b)).Require(h).Set(0, 1)`, "cannot convert"},
		{"ranged placeholder: Require is read-only", `acpp.ReadPlaceholderRange(b, r, o).Require(h).Set(0, 1)`, "no field or method Set"},
		{"ranged placeholder: no conversion to writable", `acpp.RangedPlaceholder[float32](acpp.ReadPlaceholderRange(b, r, o)).Require(h).Set(0, 1)`, "cannot convert"},
		{"host read: no Set", `ha, _ := acpp.HostRead(ctx, b); ha.Set(0, 1)`, "no field or method Set"},
		{"host read: no Set2", `ha, _ := acpp.HostRead(ctx, b); ha.Set2(0, 0, 1)`, "no field or method Set2"},
		{"host read: no slice", `ha, _ := acpp.HostRead(ctx, b); ha.Slice()[0] = 1`, "no field or method Slice"},
		{"host read: no CopyFrom", `ha, _ := acpp.HostRead(ctx, b); ha.CopyFrom(nil)`, "no field or method CopyFrom"},
		{"host read: no conversion to writable", `ha, _ := acpp.HostRead(ctx, b); (*acpp.HostAccessor[float32])(ha).Set(0, 1)`, "cannot convert"},
		{"host read: data unexported", `ha, _ := acpp.HostRead(ctx, b); ha.p[0] = 1`, "unexported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := typeCheck(t, tc.body)
			if len(errs) == 0 {
				t.Fatalf("compiles, want a type error (%q): %s", tc.want, tc.body)
			}
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Errorf("type errors %q, want one containing %q: %s", errs, tc.want, tc.body)
			}
		})
	}
}

// The harness itself: what a read accessor offers, and writing through a
// writable one, compile.
func TestReadAccessorsCompile_V2(t *testing.T) {
	body := `
	a := acpp.Read(h, b)
	s := a.At(0) + a.At2(0, 0) + a.At3(0, 0, 0)
	for i, v := range a.All() {
		s += float32(i) + v
	}
	for v := range a.Values() {
		s += v
	}
	c := a.Copy()
	c[0] = s // a copy is the caller's
	_ = a.CopyTo(c)
	g := acpp.ReadRange(h, b, r, o)
	for v := range g.Values() {
		s += v
	}
	_ = g.CopyTo(c) + len(g.Copy())
	_ = acpp.ReadRaw(h, b).At(0) + acpp.ReadPlaceholder(b).Require(h).At(0) + acpp.ReadPlaceholderRange(b, r, o).Require(h).At(0)
	w := acpp.Write(h, b)
	w.Slice()[0] = s
	w.Set(0, w.ReadOnly().At(0))
	acpp.WriteRaw(h, b).Set(0, s)
	hr, _ := acpp.HostRead(ctx, b, acpp.Within(o, r))
	_ = hr.At(0) + hr.At2(0, 0) + hr.At3(0, 0, 0) + float32(hr.CopyTo(c)+len(hr.Copy()))
	for i, v := range hr.All() {
		s += float32(i) + v
	}
	hr.Close()
	hw, _ := acpp.HostAccess(ctx, b, acpp.ModeReadWrite)
	hw.Slice()[0] = s
	hw.Set(1, hw.At(0))
	_ = hw.CopyFrom(c)
	hw.Close()
`
	if errs := typeCheck(t, body); len(errs) != 0 {
		t.Fatalf("reading through read accessors does not compile: %q", errs)
	}
}
