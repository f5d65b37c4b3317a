package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

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

// samePath reports whether a and b name one file: the same absolute
// path, or (both existing) the same file through a link.
func samePath(a, b string) bool {
	aa, aerr := filepath.Abs(a)
	bb, berr := filepath.Abs(b)
	if aerr == nil && berr == nil && aa == bb {
		return true
	}
	as, aerr := os.Stat(a)
	bs, berr := os.Stat(b)
	return aerr == nil && berr == nil && os.SameFile(as, bs)
}

// checkOutputs checks that every output of job can be written in dir
// (OutDir), and is neither the job file (jobFile) nor one of the files the
// caller writes after the run (writes: flag → path), and that none of
// those is a file the job reads (an init file, a kernel's source), before
// anything runs. An output may replace a buffer's init file: a job that
// carries its state from run to run does that on purpose.
func checkOutputs(job *jobfile.Job, jobFile, dir string, writes map[string]string) error {
	if dir == "" {
		dir = "."
	}
	flags := make([]string, 0, len(writes))
	for f := range writes {
		flags = append(flags, f)
	}
	sort.Strings(flags)
	var errs jobfile.Errors
	// A trace or DAG over a file the job reads would replace the job's
	// data or kernel with it once the run ends.
	jobDir := filepath.Dir(jobFile)
	for _, f := range flags {
		for _, s := range job.Buffers {
			if s.Init != nil && s.Init.File != "" && samePath(inDir(jobDir, s.Init.File), writes[f]) {
				errs = append(errs, job.At(s.Init.LineOf("file"), "buffers."+s.Name+".init.file", fmt.Errorf("init file of buffer %q is %s, the file of %s too: written after the run, it would replace the buffer's data; give %s another file", s.Name, writes[f], f, f)))
			}
		}
		for _, k := range job.Kernels {
			for _, src := range []struct{ key, path string }{{"ptx", k.PTX}, {"cuda", k.CUDA}} {
				if src.path != "" && samePath(inDir(jobDir, src.path), writes[f]) {
					errs = append(errs, job.At(k.LineOf(src.key), "kernels."+k.Name+"."+src.key, fmt.Errorf("source of kernel %q is %s, the file of %s too: written after the run, it would replace the kernel; give %s another file", k.Name, writes[f], f, f)))
				}
			}
		}
	}
	for _, o := range job.Outputs {
		p := o.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if jobFile != "" && samePath(p, jobFile) {
			errs = append(errs, job.At(o.LineOf("file"), o.Path+".file", fmt.Errorf("output of buffer %q is %s, the job file itself: the run would replace the job with its data; give the output another file (or pick another --out-dir)", o.Buffer, p)))
			continue
		}
		if err := canWrite(p); err != nil {
			errs = append(errs, job.At(o.LineOf("file"), o.Path+".file", fmt.Errorf("output of buffer %q: %w; pick another --out-dir", o.Buffer, err)))
		}
		for _, f := range flags {
			if samePath(p, writes[f]) {
				errs = append(errs, job.At(o.LineOf("file"), o.Path+".file", fmt.Errorf("output of buffer %q is %s, the file of %s too: one would overwrite the other; give %s another file", o.Buffer, p, f, f)))
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
