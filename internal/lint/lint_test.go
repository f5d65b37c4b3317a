package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

// goPackage is one directory of Go source: its non-test files' imports and
// how many of them carry a package comment.
type goPackage struct {
	dir      string // relative to the module root, slash-separated
	imports  map[string][]string
	docFiles []string
	files    int
}

func loadPackages(t *testing.T) []*goPackage {
	t.Helper()
	root := repoRoot(t)
	byDir := map[string]*goPackage{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		p := byDir[rel]
		if p == nil {
			p = &goPackage{dir: rel, imports: map[string][]string{}}
			byDir[rel] = p
		}
		p.files++
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			p.docFiles = append(p.docFiles, name)
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			p.imports[ip] = append(p.imports[ip], name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	out := make([]*goPackage, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, byDir[d])
	}
	return out
}

// TestPackageComments: every package has exactly one package comment, so
// `go doc` shows what it is and no two files disagree about it.
func TestPackageComments(t *testing.T) {
	for _, p := range loadPackages(t) {
		if len(p.docFiles) != 1 {
			t.Errorf("package %s: %d files with a package comment %v, want exactly 1 (put it in doc.go)", p.dir, len(p.docFiles), p.docFiles)
		}
	}
}

// boundary says which imports a package tree may not use, and why.
type boundary struct {
	dirPrefix string            // package dirs this applies to ("coherence" covers coherence/...)
	forbidden map[string]string // import path prefix → reason
}

const module = "github.com/acpp/acpp"

var boundaries = []boundary{
	{"coherence", map[string]string{
		"os":                  "coherence is pure: no I/O",
		"net":                 "coherence is pure: no I/O",
		"time":                "coherence is pure: time is an input",
		"math/rand":           "coherence is deterministic",
		"context":             "the pure core takes no context",
		"log":                 "the pure core does not log; it returns what happened",
		"sync":                "the pure core is owned by one goroutine",
		module + "/transport": "coherence never imports transport",
		module + "/node":      "coherence never imports node",
		module + "/cpu":       "coherence never imports backends",
		module + "/cuda":      "coherence never imports backends",
		module + "/cluster":   "coherence never imports cluster",
	}},
	{"cpu", map[string]string{module + "/coherence": "backends never import the scheduler's core"}},
	{"cuda", map[string]string{module + "/coherence": "backends never import the scheduler's core"}},
}

// wrapOwners: third-party libraries wrapped at the edge, and the only package
// tree allowed to import each.
var wrapOwners = map[string]string{
	"github.com/hashicorp/memberlist":   "cluster",
	"github.com/quic-go/quic-go":        "transport",
	"github.com/vmihailenco/msgpack/v5": "transport",
}

func under(dir, prefix string) bool { return dir == prefix || strings.HasPrefix(dir, prefix+"/") }

func hasPathPrefix(ip, prefix string) bool { return ip == prefix || strings.HasPrefix(ip, prefix+"/") }

// TestLayerBoundaries enforces docs/ARCHITECTURE.md's import rules.
func TestLayerBoundaries(t *testing.T) {
	for _, p := range loadPackages(t) {
		for ip, files := range p.imports {
			for _, b := range boundaries {
				if !under(p.dir, b.dirPrefix) {
					continue
				}
				for prefix, why := range b.forbidden {
					if hasPathPrefix(ip, prefix) {
						t.Errorf("%s (%s) imports %q: %s", p.dir, strings.Join(files, ","), ip, why)
					}
				}
			}
			for lib, owner := range wrapOwners {
				if hasPathPrefix(ip, lib) && !under(p.dir, owner) && !under(p.dir, "internal/bench") {
					t.Errorf("%s (%s) imports %q: only %s/ may, other packages see our own types", p.dir, strings.Join(files, ","), ip, owner)
				}
			}
		}
	}
}
