package lint

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryPackage: docs/ARCHITECTURE.md's table of
// packages names every package directory of the tree (as `dir` or
// `dir/`; examples/ covers its programs), and every folder its first
// column names exists.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	var missing []string
	for _, p := range loadPackages(t) {
		if p.dir == "." || strings.HasPrefix(p.dir, "examples/") {
			continue // the root row is "/"; examples/ has a row of its own
		}
		if !strings.Contains(text, "`"+p.dir+"`") && !strings.Contains(text, "`"+p.dir+"/`") {
			missing = append(missing, p.dir)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/ARCHITECTURE.md names no row for %s; add one to its table of packages", strings.Join(missing, ", "))
	}
	cell := regexp.MustCompile("`([a-z][a-z0-9/_-]*)`")
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line[1:], "|", 2)[0]
		first = regexp.MustCompile("package `[a-z]+`").ReplaceAllString(first, "") // the root row: `/` (package `acpp`)
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			dir := strings.TrimSuffix(m[1], "/")
			if fi, err := os.Stat(filepath.Join(root, dir)); err != nil || !fi.IsDir() {
				t.Errorf("docs/ARCHITECTURE.md names folder %q, which is not in the tree", m[1])
			}
		}
	}
}

// TestTestingCountsFuzzTargets: the number of fuzz targets docs/TESTING.md
// gives is the number of Fuzz functions in the tree's tests.
func TestTestingCountsFuzzTargets(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "TESTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`has a fuzz target: (\d+) in all`).FindSubmatch(doc)
	if m == nil {
		t.Fatal(`docs/TESTING.md no longer says "has a fuzz target: N in all"; update this test`)
	}
	want, _ := strconv.Atoi(string(m[1]))
	fuzz := regexp.MustCompile(`(?m)^func (Fuzz\w*)\(\w+ \*testing\.F\)`)
	var names []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, f := range fuzz.FindAllSubmatch(src, -1) {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			names = append(names, filepath.ToSlash(rel)+"."+string(f[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != want {
		sort.Strings(names)
		t.Errorf("docs/TESTING.md says %d fuzz targets; the tests have %d: %s", want, len(names), strings.Join(names, ", "))
	}
}

// TestDependenciesListsEveryModule: docs/DEPENDENCIES.md has a row for
// every module go.mod requires directly, and none for a module it does
// not require.
func TestDependenciesListsEveryModule(t *testing.T) {
	root := repoRoot(t)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "DEPENDENCIES.md"))
	if err != nil {
		t.Fatal(err)
	}
	direct := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(\S+) v\S+\s*$`).FindAllSubmatch(mod, -1) {
		direct[string(m[1])] = true // lines with "// indirect" do not match
	}
	if len(direct) == 0 {
		t.Fatal("no direct requirement found in go.mod; update this test")
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([a-z0-9.]+\.[a-z]+/[^ |]+)`).FindAllSubmatch(doc, -1) {
		rows[string(m[1])] = true
	}
	for m := range direct {
		if !rows[m] {
			t.Errorf("go.mod requires %s; docs/DEPENDENCIES.md has no row for it", m)
		}
	}
	for r := range rows {
		if !direct[r] {
			t.Errorf("docs/DEPENDENCIES.md has a row for %s, which go.mod does not require directly", r)
		}
	}
}
