// Package jobfile is the job file format of acpp-submit: a YAML (or JSON)
// document that declares buffers, the command groups to run on them and the
// buffers to write out. It parses, validates and describes a job; running it
// is the caller's business (cmd/acpp-submit runs it on the embedded runtime).
// docs/JOBS.md describes the format with examples; docs/job.schema.json is its
// JSON Schema.
//
// # Usage
//
//	data, _ := os.ReadFile("jacobi.yaml")
//	job, err := jobfile.Parse("jacobi.yaml", data, jobfile.Options{Kernels: device.Kernels})
//	if err != nil {
//		fmt.Fprintln(os.Stderr, err) // every problem, one per line, with file:line: field:
//	}
//	for _, b := range job.Buffers { ... }
//	job.Walk(func(s *jobfile.Step) error { ... }) // steps in execution order, repeats unrolled
//
// # Errors
//
// Parse reports every problem it finds at once, as an *Errors: a list of
// *Error, each with the file, the line and the field path
// ("jacobi.yaml:14: steps[1].accessors[0].buffer: unknown buffer "grdi"
// (buffers: grid, next)"). Errors matches ErrInvalid. Problems found later,
// while a job runs (a missing input file, a .npy of the wrong shape), are
// reported with the same file:line: path: prefix by At.
package jobfile
