// Package cli is acpp-submit: its commands (cobra), the runner that executes
// a job file (Run) on the embedded runtime or on a cluster of acpp-node
// agents (through package coordinator), the cluster tables (Nodes, Status),
// and the reports it writes — the summary, a Chrome/Perfetto trace and the
// DAG in Graphviz DOT.
//
// The runner holds the job's semantics once and drives an engine (engine.go):
// embeddedEngine submits to an acpp.Queue, clusterEngine to a
// coordinator.Job (cluster.go).
//
// # Usage
//
//	res, err := cli.Run(ctx, cli.Config{JobFile: "examples/jobs/jacobi.yaml", OutDir: dir})
//	fmt.Print(res.Summary())
//
// # How a job runs
//
// Run parses and validates the job (package jobfile) against the kernel
// registry with the built-in library registered (package kernels), opens a
// queue over the local devices, creates the buffers (file data is used in
// place; value and kernel initialisations are command groups), then walks
// the steps in order, unrolling repeats, and submits one command group per
// kernel, fill or copy step; swap steps only exchange two names. It keeps up
// to Config.Window groups in flight ahead of the oldest unfinished one (the
// runtime orders them by their accessors; Run only bounds memory), waits for
// each in submission order to drive the progress display, and reads the
// outputs back when all are done. It tallies busy time per device and step;
// with Config.Record it also keeps a record per group (timing, accesses, the
// logical dependencies from the accessors' conflict rules) for the trace
// (Result.WriteTrace) and the DAG (Result.WriteDAG).
//
// # Errors
//
// Problems in the job file are jobfile.Errors (every one, with file:line).
// Problems found while running — an input file of the wrong shape, a kernel
// that fails — are *jobfile.Error values naming the line and field of the
// step or buffer concerned. A cluster that cannot be reached or used is
// ErrCluster; flag mistakes are usage errors (exit code 2).
package cli
