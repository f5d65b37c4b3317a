package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/acpp/acpp/jobfile"
)

// canWrite reports why path cannot be written later, or nil: its
// directory exists (it is created, as the write would) and takes a new
// file, and path is no directory. A run checks its outputs, trace and DAG
// before it starts, so that an hour's job does not end in "permission
// denied" with its results lost.
func canWrite(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory; name a file", path)
	} else if err == nil {
		// It exists: opening it for writing (without truncating) is what
		// the write will need, whatever its directory allows.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("%s cannot be written: %w", path, errors.Unwrap(err))
		}
		return f.Close()
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".acpp-write-check-*")
	if err != nil {
		return fmt.Errorf("%s cannot be written: %w", path, errors.Unwrap(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// checkOutputs checks that every output of job can be written in dir
// (OutDir), before anything runs.
func checkOutputs(job *jobfile.Job, dir string) error {
	if dir == "" {
		dir = "."
	}
	var errs jobfile.Errors
	for _, o := range job.Outputs {
		p := o.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := canWrite(p); err != nil {
			errs = append(errs, job.At(o.LineOf("file"), o.Path+".file", fmt.Errorf("output of buffer %q: %w; pick another --out-dir", o.Buffer, err)))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
