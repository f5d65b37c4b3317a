package cli

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagsTakeEffectOrFail: a flag given where it cannot take effect is
// refused, naming it, with exit 2 (usage), and a bad value is refused
// naming its flag before anything connects; variables only supply
// defaults, so a set one never refuses a command that does not use it.
// Each row failed before: the flag was accepted and ignored, overruled by
// another without a word, or its error named something else.
func TestFlagsTakeEffectOrFail(t *testing.T) {
	job := writeJob(t, "small.yaml", smallJob)
	out := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		err  string // in stderr
	}{
		// --credentials and --client without --cluster were ignored: the
		// job ran on this machine.
		{"run credentials without cluster", []string{"run", "-o", out, "--credentials", "creds", job}, nil, 2, "--credentials name the credentials for a cluster: give --cluster ADDR"},
		{"run client without cluster", []string{"run", "-o", out, "--client", "alice", job}, nil, 2, "--client name the credentials for a cluster"},
		{"check both without cluster", []string{"check", "--credentials", "creds", "--client", "alice", job}, nil, 2, "--credentials and --client name the credentials"},
		{"kernels client without cluster", []string{"kernels", "--client", "alice"}, nil, 2, "--client name the credentials for a cluster"},
		// The variables are defaults: set, they refuse nothing.
		{"variables without cluster", []string{"run", "-o", out, "-q", job}, map[string]string{"ACPP_CREDENTIALS": "creds", "ACPP_CLIENT": "alice"}, 0, ""},
		{"kernels with variables", []string{"kernels"}, map[string]string{"ACPP_CLIENT": "alice"}, 0, ""},
		// A bad --kinds was found only after the credentials loaded and
		// the cluster answered (here: a missing credentials file, exit 1).
		{"bad kind before connecting", []string{"run", "--cluster", "127.0.0.1:1", "--client", "alice", "--credentials", "/nonexistent", "--kinds", "gpu", job}, nil, 2, `--kinds: device: unknown device kind "gpu"`},
		// A list flag given empty ("--cluster $ADDR" with ADDR unset) was
		// as if not given: the job ran on this machine, or on every node.
		// A repeated address failed after connecting, as "cluster
		// unreachable" naming the Go API's Nodes[1].
		{"cluster twice", []string{"run", "--cluster", "127.0.0.1:1, 127.0.0.1:1", "--client", "alice", "--credentials", "/nonexistent", job}, nil, 2, "--cluster lists 127.0.0.1:1 twice: give each node's address once"},
		{"empty cluster", []string{"run", "-o", out, "--cluster", "", job}, nil, 2, "--cluster is empty: give the QUIC address"},
		{"blank cluster", []string{"kernels", "--cluster", " ,"}, nil, 2, "--cluster is empty"},
		{"empty nodes", []string{"run", "--cluster", "127.0.0.1:1", "--client", "alice", "--nodes", "", job}, nil, 2, "--nodes is empty: give at least one node name"},
		{"empty kinds", []string{"run", "--cluster", "127.0.0.1:1", "--client", "alice", "--kinds", " ", job}, nil, 2, "--kinds is empty"},
		{"empty variable", []string{"run", "-o", out, "-q", job}, map[string]string{"ACPP_CLUSTER": "", "ACPP_NODES": " "}, 0, ""},
		// A string flag with a default, given empty, was taken as the
		// default (--credentials "": /etc/acpp, not the one before it).
		{"empty placement", []string{"run", "--cluster", "127.0.0.1:1", "--client", "alice", "--placement", "", job}, nil, 2, `--placement is empty: give a value, or leave the flag out for its default, "auto"`},
		{"empty credentials", []string{"status", "--cluster", "127.0.0.1:1", "--client", "alice", "--credentials", ""}, nil, 2, `--credentials is empty`},
		{"empty max-bytes", []string{"check", "--max-bytes", "", job}, nil, 2, `--max-bytes is empty`},
		{"empty out-dir", []string{"run", "-o", "", job}, nil, 2, `--out-dir is empty`},
		{"empty trace is none", []string{"run", "-q", "-o", out, "--trace", "", job}, nil, 0, ""},
		// A --ui that is no address failed the run with exit 1 after
		// checking the job, as a failed job does.
		{"ui without port", []string{"run", "-q", "-o", out, "--ui", "garbage", job}, nil, 2, `--ui "garbage" is not host:port`},
		{"ui port beyond 65535", []string{"run", "-q", "-o", out, "--ui", "127.0.0.1:99999", job}, nil, 2, "a port in 0–65535"},
		{"ui any port", []string{"run", "-q", "-o", out, "--ui", "127.0.0.1:0", job}, nil, 0, ""},
		// check and run --device matching no local device named the Go
		// API ("import the backend", which this command has done), not
		// the flag and what the machine has.
		{"check device none", []string{"check", "--device", "cpu:3", job}, nil, 1, "--device cpu:3: this machine has no such device: it has cpu:0"},
		{"check device kind none", []string{"check", "--device", "cuda", "--device", "cpu:5", job}, nil, 1, "--device cuda,cpu:5: this machine has no such device: it has cpu:0"},
		{"run device none", []string{"run", "-o", out, "--device", "cuda:7", job}, nil, 1, "--device cuda:7: this machine has no such device: it has cpu:0"},
		// --quiet silently won over --progress always, and --verbose's
		// log was printed under --quiet.
		{"quiet and progress always", []string{"run", "-o", out, "-q", "--progress", "always", job}, nil, 2, "--quiet prints nothing but errors, --progress always"},
		{"quiet and verbose", []string{"run", "-o", out, "-q", "-v", job}, nil, 2, "--quiet prints nothing but errors, --verbose"},
		{"quiet and progress never", []string{"run", "-o", out, "-q", "--progress", "never", job}, nil, 0, ""},
		// An unknown command with --help printed the root's help, exit 0.
		{"unknown command with help", []string{"bench", "--help"}, nil, 2, `unknown command "bench"`},
		{"unknown command with flags", []string{"frob", "-h", "x"}, nil, 2, `unknown command "frob"`},
		{"help command", []string{"help", "run"}, nil, 0, ""},
		{"help of no command", []string{"help", "bench"}, nil, 2, `unknown help topic "bench"`},
		// A command's flag before the command: the flag is what is
		// wrong (it said unknown command "run").
		{"flag before its command", []string{"-q", "run", job}, nil, 2, "unknown shorthand flag: 'q'"},
		// A --set the job cannot take is the command line's mistake (it
		// exited 1, as a broken job file does).
		{"set of no param", []string{"run", "-o", out, "--set", "nope=3", job}, nil, 2, `--set nope: the job declares no param "nope"`},
		{"check set of no param", []string{"check", "--set", "nope=3", job}, nil, 2, `--set nope: the job declares no param "nope"`},
		// A param set twice took the last value without a word.
		{"set twice", []string{"run", "-o", out, "--set", "n=3", "--set", "n=4", job}, nil, 2, "param n is given twice (n=3, then n=4): give it once"},
		{"check set twice in one", []string{"check", "--set", "n=3,n=3", job}, nil, 2, "param n is given twice"},
		{"set of no value", []string{"check", "--set", "n", job}, nil, 2, `"n" is not name=value`},
		{"completion command", []string{"completion", "bash"}, nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string { return tc.env[k] }
			code := Main(context.Background(), tc.args, Env{Stdout: &stdout, Stderr: &stderr, Getenv: getenv})
			if code != tc.code || !strings.Contains(stderr.String(), tc.err) {
				t.Errorf("Main(%q) with %v = %d, stderr %q; want %d, stderr with %q", tc.args, tc.env, code, stderr.String(), tc.code, tc.err)
			}
			if tc.code == 0 && stderr.Len() > 0 && strings.Contains(stderr.String(), "acpp-submit:") {
				t.Errorf("Main(%q) succeeded but printed an error: %q", tc.args, stderr.String())
			}
		})
	}
}

// TestUnwritablePathsRefusedBeforeRunning: an output, --trace or --dag
// path that cannot be written fails the run before any step runs (it
// failed once the whole job had run, its results lost), naming the output
// or the flag; a directory given as a file is refused too.
func TestUnwritablePathsRefusedBeforeRunning(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	job := "../../../examples/jobs/saxpy.yaml"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--out-dir", filepath.Join(file, "out")}, 1, `outputs[0].file: output of buffer "y": mkdir ` + file + ": not a directory"},
		{[]string{"--out-dir", dir, "--trace", filepath.Join(file, "t.json")}, 2, "--trace: mkdir " + file},
		{[]string{"--out-dir", dir, "--dag", dir}, 2, "--dag: " + dir + " is a directory"},
	} {
		code, out, errs := runMain(append(append([]string{"run", "--set", "n=64"}, tc.args...), job)...)
		if code != tc.code || !strings.Contains(errs, tc.want) || strings.Contains(out, "command groups in") {
			t.Errorf("run %v: exit %d\n%s%s\nwant exit %d before running, with %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
}

// TestTraceAndDAGOverwriteNothing: --trace and --dag are written after
// the run over whatever is at their paths: one naming an output of the
// job, the other, or the job file itself replaced it without a word (the
// trace took saxpy.npy's place). Each is refused before anything runs,
// and nothing is written.
func TestTraceAndDAGOverwriteNothing(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../../examples/jobs/saxpy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(dir, "saxpy.yaml")
	if err := os.WriteFile(job, src, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--trace", filepath.Join(out, "saxpy.npy")}, 1, `outputs[0].file: output of buffer "y" is ` + filepath.Join(out, "saxpy.npy") + ", the file of --trace too"},
		{[]string{"--dag", filepath.Join(dir, "out", ".", "saxpy.npy")}, 1, "the file of --dag too"},
		{[]string{"--trace", filepath.Join(dir, "same"), "--dag", filepath.Join(dir, "same")}, 2, "--trace and --dag both name"},
		{[]string{"--dag", job}, 2, "--dag " + job + " is the job file"},
	} {
		code, stdout, errs := runMain(append(append([]string{"run", "--set", "n=64", "-o", out}, tc.args...), job)...)
		if code != tc.code || !strings.Contains(errs, tc.want) || strings.Contains(stdout, "command groups in") {
			t.Errorf("run %v: exit %d\n%s%s\nwant exit %d before running, with %q", tc.args, code, stdout, errs, tc.code, tc.want)
		}
	}
	if got, err := os.ReadFile(job); err != nil || !bytes.Equal(got, src) {
		t.Errorf("the job file changed (%v)", err)
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		t.Errorf("a refused run wrote %s", e.Name())
	}
	if _, err := os.Stat(filepath.Join(dir, "same")); err == nil {
		t.Error("a refused run wrote the trace")
	}
	// Distinct files still work.
	code, stdout, errs := runMain("run", "-q", "--set", "n=64", "-o", out, "--trace", filepath.Join(dir, "t.json"), "--dag", filepath.Join(dir, "d.dot"), job)
	if code != 0 {
		t.Fatalf("run with distinct files: exit %d\n%s%s", code, stdout, errs)
	}
}

// TestOutputOverJobFileRefused: an output whose file is the job file
// itself is refused at its line before the run (the run replaced the job
// with the buffer's data); one over a buffer's init file is allowed (a job
// that carries its state from run to run).
func TestOutputOverJobFileRefused(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../../examples/jobs/saxpy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src = bytes.Replace(src, []byte("file: saxpy.npy"), []byte("file: saxpy.yaml, format: raw"), 1)
	job := filepath.Join(dir, "saxpy.yaml")
	if err := os.WriteFile(job, src, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, errs := runMain("run", "-q", "--set", "n=64", "-o", dir, job)
	if code != 1 || !strings.Contains(errs, "outputs[0].file") || !strings.Contains(errs, "the job file itself") {
		t.Errorf("output over the job file: exit %d\n%s%s\nwant exit 1 naming outputs[0].file and the job file", code, stdout, errs)
	}
	if got, err := os.ReadFile(job); err != nil || !bytes.Equal(got, src) {
		t.Errorf("the job file changed (%v)", err)
	}
	// The same job with another output directory writes saxpy.yaml there.
	out := filepath.Join(dir, "out")
	if code, stdout, errs := runMain("run", "-q", "--set", "n=64", "-o", out, job); code != 0 {
		t.Fatalf("output of the same name in another directory: exit %d\n%s%s", code, stdout, errs)
	}
}

// TestLogLinesSaidElsewhereDropped: without --verbose, run's log leaves
// out the coordinator's records that run prints in its own words (the
// job's error; the recovery lines), which came out twice; other warnings
// stay, and --verbose keeps everything.
func TestLogLinesSaidElsewhereDropped(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		var b bytes.Buffer
		log := slog.New(saidElsewhere{slog.NewTextHandler(&b, nil), verbose}).With("job", 7)
		log.Error("job failed", "error", "boom")
		log.Warn("node lost: recovering", "node", "n3")
		log.Warn("a selected node is not in the job", "node", "n9")
		out := b.String()
		if got, want := strings.Contains(out, "job failed") || strings.Contains(out, "node lost"), verbose; got != want {
			t.Errorf("verbose %v: the records said elsewhere printed: %v\n%s", verbose, got, out)
		}
		if !strings.Contains(out, "a selected node is not in the job") || !strings.Contains(out, "job=7") {
			t.Errorf("verbose %v: another warning was dropped\n%s", verbose, out)
		}
	}
}

// A job's PTX or CUDA C file larger than a node takes (12 MiB), or one
// that never ends (/dev/zero), is refused at its line without reading it
// all: check read /dev/zero until memory ran out.
func TestKernelFileSizeBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.ptx")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 13<<20); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, "/dev/zero"} {
		job := filepath.Join(dir, "j.yaml")
		src := "version: 1\nname: kz\nbuffers:\n  y: {type: float32, range: 16}\nkernels:\n  k:\n    ptx: " + path + "\n    params:\n      - {name: y, kind: pointer, type: float32}\nsteps:\n  - kernel: k\n    range: 16\n    accessors:\n      - {param: y, buffer: y, mode: read_write}\n"
		if err := os.WriteFile(job, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs := runMain("check", job)
		if code != 1 || !strings.Contains(errs, "j.yaml:7: kernels.k.ptx: "+path+" is larger than 12 MiB") {
			t.Errorf("check with ptx: %s: exit %d\n%s", path, code, errs)
		}
	}
}

// A job kernel's name so long that its registered form (name@12 hex
// digits) passes what nodes take (128 bytes) is refused by check, not
// when the job is shipped to a cluster.
func TestJobKernelNameFitsNodes(t *testing.T) {
	dir := t.TempDir()
	ptx := filepath.Join(dir, "k.ptx")
	os.WriteFile(ptx, []byte(".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry k(.param .align 8 .b8 nd[48], .param .u64 y)\n{ret;}\n"), 0o644)
	for _, n := range []int{115, 116} {
		name := strings.Repeat("k", n)
		src := "version: 1\nname: kn\nbuffers:\n  y: {type: float32, range: 16}\nkernels:\n  " + name + ":\n    ptx: k.ptx\n    entry: k\n    params:\n      - {name: y, kind: pointer, type: float32}\n" +
			"steps:\n  - kernel: " + name + "\n    range: 16\n    accessors:\n      - {param: y, buffer: y, mode: read_write}\n"
		job := filepath.Join(dir, "j.yaml")
		os.WriteFile(job, []byte(src), 0o644)
		_, _, errs := runMain("check", job)
		tooLong := strings.Contains(errs, "the kernel's name is 116 bytes; at most 115")
		if tooLong != (n == 116) {
			t.Errorf("a %d-byte kernel name: %s", n, errs)
		}
	}
}

// TestTraceAndDAGSpareTheJobsInputs: --trace and --dag are written after
// the run over whatever is at their paths; one naming a buffer's init file
// or a kernel's source replaced the job's input with the trace or the DAG
// without a word (outputs, the job file and each other were refused, the
// files the job reads were not). Each is refused before the run, at the
// line that names the file, and nothing is written.
func TestTraceAndDAGSpareTheJobsInputs(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../../examples/jobs/saxpy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src = bytes.Replace(src, []byte("init: {value: 0.5}"), []byte("init: {file: y.raw}"), 1)
	job := filepath.Join(dir, "saxpy.yaml")
	if err := os.WriteFile(job, src, 0o644); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64*4)
	init := filepath.Join(dir, "y.raw")
	if err := os.WriteFile(init, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--trace", "--dag"} {
		code, stdout, errs := runMain("run", "--set", "n=64", "-o", filepath.Join(dir, "out"), flag, init, job)
		if code != 1 || !strings.Contains(errs, "buffers.y.init.file") || !strings.Contains(errs, "the file of "+flag+" too") || strings.Contains(stdout, "command groups in") {
			t.Errorf("run %s over the init file: exit %d\n%s%s\nwant exit 1 before running, at buffers.y.init.file", flag, code, stdout, errs)
		}
		if got, err := os.ReadFile(init); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("run %s over the init file replaced it (%d bytes, %v)", flag, len(got), err)
		}
	}
	// A kernel's CUDA C source, named relative to the job file.
	cu, err := os.ReadFile("../../../examples/jobs/kernels/saxpy_sq.cu")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "kernels"), 0o755); err != nil {
		t.Fatal(err)
	}
	cuPath := filepath.Join(dir, "kernels", "saxpy_sq.cu")
	if err := os.WriteFile(cuPath, cu, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err = os.ReadFile("../../../examples/jobs/cuda_source.yaml")
	if err != nil {
		t.Fatal(err)
	}
	job = filepath.Join(dir, "cuda_source.yaml")
	if err := os.WriteFile(job, src, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, errs := runMain("run", "--set", "n=64", "-o", filepath.Join(dir, "out"), "--dag", cuPath, job)
	if code != 1 || !strings.Contains(errs, "kernels.saxpy_sq.cuda") || !strings.Contains(errs, "the file of --dag too") {
		t.Errorf("run --dag over the kernel's source: exit %d\n%s%s\nwant exit 1 before running, at kernels.saxpy_sq.cuda", code, stdout, errs)
	}
	if got, err := os.ReadFile(cuPath); err != nil || !bytes.Equal(got, cu) {
		t.Errorf("run --dag over the kernel's source replaced it (%d bytes, %v)", len(got), err)
	}
}
