package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The seam between the API and the runtimes (docs/ARCHITECTURE.md, "One
// API, two engines"): the root package records command groups and hands
// them to an engine through internal/engine; internal/engine/embedded runs
// them on local devices, internal/engine/cluster on a cluster job.

// rootForbidden are the runtimes' machinery, which the root package
// reaches only through an engine.
var rootForbidden = map[string]string{
	module + "/coordinator":   "the cluster engine (internal/engine/cluster) drives the coordinator",
	module + "/internal/exec": "the embedded engine (internal/engine/embedded) drives the executor",
	module + "/node":          "the root package is the client API; nodes are reached through the cluster engine",
	module + "/transport":     "the root package is the client API; nodes are reached through the cluster engine",
	module + "/cluster":       "membership is the nodes' business",
	module + "/cpu":           "the embedded engine opens the devices",
	module + "/cuda":          "the embedded engine opens the devices (programs import the CUDA backend themselves)",
}

// engineOpeners: the one root file that may import each engine
// implementation, to open it (NewQueue, Connect).
var engineOpeners = map[string]string{
	module + "/internal/engine/embedded": "queue.go",
	module + "/internal/engine/cluster":  "connect.go",
}

func TestRootPackageHoldsTheAPI(t *testing.T) {
	var root *goPackage
	for _, p := range loadPackages(t) {
		if p.dir == "." {
			root = p
		}
	}
	if root == nil {
		t.Fatal("root package not found")
	}
	for ip, files := range root.imports {
		for prefix, why := range rootForbidden {
			if hasPathPrefix(ip, prefix) {
				t.Errorf("root package (%s) imports %q: %s", strings.Join(files, ","), ip, why)
			}
		}
		if want, ok := engineOpeners[ip]; ok && !slices.Equal(files, []string{want}) {
			t.Errorf("root package files %v import %q: only %s opens that engine; the rest of the package sees internal/engine", files, ip, want)
		}
	}
}

// engineRules: what each part of the seam may not import.
var engineRules = []struct {
	dir       string
	exact     bool // dir itself, not its subpackages
	forbidden map[string]string
}{
	{"internal/engine", true, map[string]string{
		module + "/coordinator":   "internal/engine is the interface both engines implement: plain data, no runtime",
		module + "/internal/exec": "internal/engine is the interface both engines implement: plain data, no runtime",
		module + "/cpu":           "internal/engine opens no devices",
		module + "/cuda":          "internal/engine opens no devices",
		module + "/node":          "internal/engine talks to no node",
		module + "/transport":     "internal/engine talks to no node",
	}},
	{"internal/engine/embedded", true, map[string]string{
		module + "/coordinator": "the embedded engine runs on local devices; the cluster engine owns the coordinator",
		module + "/transport":   "the embedded engine runs on local devices",
	}},
	{"internal/engine/cluster", true, map[string]string{
		module + "/internal/exec": "the cluster engine runs on the nodes; the embedded engine owns the executor",
		module + "/cpu":           "the cluster engine opens no local device",
		module + "/cuda":          "the cluster engine opens no local device",
	}},
	{"cmd", false, map[string]string{
		module + "/internal/exec":   "commands use the public API (acpp) or the node package, not a runtime's internals",
		module + "/internal/engine": "commands use the public API (acpp), not the engines behind it",
	}},
	{"examples", false, map[string]string{
		module + "/internal": "examples show the public API",
	}},
}

func TestEngineSeam(t *testing.T) {
	for _, p := range loadPackages(t) {
		for _, r := range engineRules {
			if r.exact && p.dir != r.dir || !r.exact && !under(p.dir, r.dir) {
				continue
			}
			for ip, files := range p.imports {
				for prefix, why := range r.forbidden {
					if hasPathPrefix(ip, prefix) {
						t.Errorf("%s (%s) imports %q: %s", p.dir, strings.Join(files, ","), ip, why)
					}
				}
			}
		}
	}
}

// coordinatorInCommands: the names of package coordinator that commands
// may use. acpp-submit runs a job through the public API (acpp.Connect);
// it configures the job's coordinator (WithCoordinator) and reads its
// group traces for the summary, but never drives a job itself.
var coordinatorInCommands = map[string]bool{
	"Config": true, "Placement": true, "PlaceAuto": true, "PlaceRoundRobin": true,
	"GroupTrace": true, "GroupID": true, "InstrTrace": true,
	// Recovery settings and what the job reports of recoveries,
	// checkpoints, joins and drains (Config.OnRecovery and the like).
	"ParseNodeLossPolicy": true, "ParseCheckpoint": true, "CheckpointString": true, "FailOnLoss": true,
	"RecoveryReport": true, "CheckpointReport": true, "NodeEvent": true,
	// The live view's read-only snapshots of the job (--ui, snapshot.go):
	// Config.Snapshots binds one; it reads, never drives.
	"Snapshotter": true, "NodeStatus": true,
}

func TestCommandsRunJobsThroughTheAPI(t *testing.T) {
	root := repoRoot(t)
	err := filepath.WalkDir(filepath.Join(root, "cmd"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		name := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == module+"/coordinator" {
				name = "coordinator"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && !coordinatorInCommands[sel.Sel.Name] && !strings.HasPrefix(sel.Sel.Name, "Err") {
				t.Errorf("%s uses coordinator.%s: commands run jobs through the public API (acpp.Connect); coordinator is for configuration and traces only", rel, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
