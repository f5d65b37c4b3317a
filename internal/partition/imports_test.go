package partition

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// partition is pure: its non-test files import only the standard library
// and coherence (for Dims), so the coordinator and the embedded runtime
// can both use it without importing each other.
func TestImportsStayPure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if path != "github.com/acpp/acpp/coherence" && strings.Contains(first, ".") {
				t.Errorf("%s imports %s: partition imports only the standard library and coherence", name, path)
			}
		}
	}
	if n == 0 {
		t.Fatal("no source files found: run the test in the package directory")
	}
}
