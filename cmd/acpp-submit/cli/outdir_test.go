package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOutputsStayInOutDir: an output path that would write outside -o
// (absolute, leaving it with ..) or that names no file is refused before
// the job runs, with the line and what to do, and nothing is written.
func TestOutputsStayInOutDir(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	job := filepath.Join(dir, "j.yaml")
	for _, tc := range []struct{ file, want string }{
		{"../up.npy", "leaves the output directory (..); outputs are written under the output directory: give a path relative to it, and choose the directory with acpp-submit run --out-dir (-o)"},
		{filepath.Join(dir, "abs.npy"), "is an absolute path; outputs are written under the output directory"},
		{"", "empty; name the file to write"},
		{"sub/", `"sub/" names a directory, not a file`},
	} {
		text := "buffers:\n  a: {type: float32, range: [4], init: {value: 1}}\nsteps: []\noutputs:\n  - {buffer: a, file: " + strconv.Quote(tc.file) + "}\n"
		if err := os.WriteFile(job, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Run(context.Background(), Config{JobFile: job, OutDir: out, Devices: []string{"cpu"}})
		if err == nil || !strings.Contains(err.Error(), "j.yaml:5: outputs[0].file: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run with output %q: %v\nwant j.yaml:5: outputs[0].file: ... %s", tc.file, err, tc.want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "j.yaml" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the refused runs left %v in %s, want only j.yaml", names, dir)
	}
}

// TestCheckErrorsAtTheFieldsLine: what check finds past the job file's
// own validation (files, devices) points at the field's line, in block
// YAML too, not at the line of the object that holds it.
func TestCheckErrorsAtTheFieldsLine(t *testing.T) {
	files := writeJob(t, "f.yaml", `buffers:
  v:
    type: float32
    range: [4]
    init:
      format: raw
      file: nope.raw
kernels:
  kk:
    params: []
    ptx: missing.ptx
steps: []
`)
	devices := writeJob(t, "d.yaml", `buffers:
  a: {type: float32, range: [4]}
steps:
  - name: one
    kernel: fill_f32
    scalars: {v: 1}
    accessors: [{buffer: a, mode: write}]
    device: cpu:7
`)
	for _, tc := range []struct {
		job  string
		want []string
	}{
		{files, []string{"f.yaml:7: buffers.v.init.file: ", "f.yaml:11: kernels.kk.ptx: "}},
		{devices, []string{"d.yaml:8: steps[0].device: no device cpu:7 here"}},
	} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), []string{"check", "--device", "cpu", tc.job}, Env{Stdout: &out, Stderr: &errb}); code != 1 {
			t.Fatalf("check %s: exit %d, want 1\n%s%s", tc.job, code, out.String(), errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("check stderr lacks %q:\n%s", w, errb.String())
			}
		}
	}
}
