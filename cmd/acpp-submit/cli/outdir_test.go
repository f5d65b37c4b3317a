package cli

import (
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
