// Package coordinator is a job's coordinator for a cluster of acpp-node
// agents: it runs in the client, keeps one coherence.Core for the job (the
// cluster-wide page directory, C2, and the conflict DAG, D1–D4, C4), turns
// each command group into per-node instruction streams with explicit
// dependencies (proto.Instr), and issues them ahead of time (pipelined):
// pages move peer to peer as Send/Recv pairs (C3), host data held by the
// client is uploaded once to where it is first needed, and host reads bring
// back only outdated pages.
//
// It places each command group by data locality, estimated finish time per
// device (learnt from past kernel durations, as StarPU's dmda) and the
// kernels each device can run; it splits a group across devices with range
// mappers (as Celerity does); and it turns a node lost during a job into a
// *NodeLostError naming the node and the buffer ranges lost (C5).
//
// docs/COORDINATOR.md describes the design, the measurements, and how
// acpp.Connect and acpp-submit run --cluster sit on this package.
//
// # Usage
//
//	job, err := coordinator.Open(ctx, coordinator.Config{
//		Nodes: []string{"10.0.0.1:7947", "10.0.0.2:7947"}, Credentials: creds,
//	})
//	defer job.Close(ctx)
//	a, _ := job.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: xs})
//	b, _ := job.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: ys})
//	_, err = job.Submit(ctx, coordinator.Group{
//		Kernel: "saxpy", Range: coordinator.Dims{1, 1, n},
//		Args: []coordinator.Arg{coordinator.ScalarF32(2),
//			coordinator.Acc(coordinator.Accessor{Buffer: a, Mode: coordinator.Read, Map: coordinator.OneToOne()}),
//			coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.ReadWrite, Map: coordinator.OneToOne()})},
//		Split: &coordinator.Split{},
//	})
//	out, err := job.Read(ctx, b, coordinator.Dims{}, coordinator.Dims{})
//
// # Concurrency
//
// Job methods are safe for concurrent use. A Job owns one sender goroutine
// and one completion-feed goroutine per node, and short-lived upload and
// read-back goroutines; Close stops them all and waits for them. One mutex
// (Job.mu) guards the coherence core and the job's bookkeeping; it is never
// held across network I/O.
//
// # Errors
//
// Invalid groups and buffers are refused at Submit/NewBuffer with errors
// wrapping ErrInvalid that name the field. A failure while the job runs
// (an instruction failed, a node was lost) fails the job: every later call
// returns the same error. A lost node yields a *NodeLostError (matching
// ErrNodeLost) that names the node, how it was lost and every buffer range
// with no valid copy left.
package coordinator
