// Package cli is acpp-submit: its commands (cobra), the runner that executes
// a job file (Run) on the embedded runtime or on a cluster of acpp-node
// agents, the cluster tables (Nodes, Status), and the reports it writes —
// the summary, a Chrome/Perfetto trace and the DAG in Graphviz DOT.
//
// A job runs through the public API only. The runner (run.go) holds the
// job's semantics once and drives one engine (engine.go) over an
// *acpp.Queue: acpp.NewQueue's for this machine's devices, acpp.Connect's
// for a cluster (--cluster). Buffers are acpp buffers of the job's element
// type (buffers.go); steps become command groups with Fill, Copy, Launch
// or LaunchND (split with SplitWith); outputs are written from HostRead.
// What is cluster-specific (cluster.go) is finding the members (Dial), the
// Connect options, and the coordinator's trace of each group
// (coordinator.GroupTrace, through WithCoordinator's OnGroupDone), which
// times the groups by the nodes' clocks and gives the summary's cluster
// figures and the trace's transfers; package coordinator is used for
// those configuration and trace types only.
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
// queue over the local devices or the cluster, creates the buffers (file
// data is used in place embedded, uploaded from by a cluster; value and
// kernel initialisations are command groups), then walks
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
