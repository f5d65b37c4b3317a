// Package node is the acpp-node agent: it manages the machine's devices,
// joins the cluster (cluster/), serves jobs over QUIC (transport/), and
// executes each job's instructions (proto.Instr) with their explicit
// dependencies: allocations, local box copies, fills, kernel launches, page
// sends to peers and page receives from peers or from the job's client.
//
// # Usage
//
//	cfg := node.DefaultConfig()
//	cfg.Name, cfg.CredentialsDir = "n1", "/etc/acpp"
//	cfg.Join = []string{"10.0.0.1:7946"}
//	err := node.Run(ctx, cfg) // until ctx ends, then drains and leaves
//
// or, to hold the node and inspect it (tests): n, err := node.Start(ctx, cfg);
// defer n.Close(); n.Drain(ctx).
//
// # Instructions and dependencies
//
// A job's coordinator submits batches of instructions ahead of time
// (pipelined). An instruction runs once every dependency has completed; if
// one failed, it fails with proto.CodeDepFailed without running. Remote
// dependencies are InstrRecv instructions: they complete when the peer's
// pages have landed in the allocation, so the node never asks the
// coordinator whether data has arrived. Pages that arrive before their Recv
// is ready (submitted, its dependencies done, its allocation made) are
// staged in host memory (counted against the job's memory limit) and copied
// in when it is. Incoming pages are matched to Recvs by sender, job,
// buffer, memory and box list, in submission order. docs/NODE.md has the
// full set.
//
// # Isolation, leases, limits
//
// A job belongs to the client identity that opened it: no other client can
// submit to it, wait on it or read its buffers, and instructions address
// only the job's own allocations. A job whose client has not been heard
// from for its lease is closed and everything it held is freed. Allocations
// count against a per-job and a per-node limit; an allocation that exceeds
// one fails that instruction with proto.CodeMemoryLimit.
//
// # Node loss (C5)
//
// The node subscribes to membership events. When a peer fails or leaves,
// every Recv still waiting for its pages and every Send to it fails with a
// *NodeLostError naming it (proto.CodeNodeLost), within memberlist's failure
// detection time; dependents fail in turn. Nothing waits forever.
//
// # Concurrency
//
// A Node owns its goroutines (membership watcher, lease reaper, HTTP server,
// page sends, allocations) and Close stops and waits for them. Each job's
// state is guarded by its own mutex, never held across a device call or
// network I/O; device completions arrive on device goroutines and only
// record results and start ready work.
//
// # Errors
//
// Start validates the whole Config at once. Request handlers answer with
// *proto.ErrorReply codes CodeNoJob, CodeNotOwner, CodeBadInstr and
// CodeDraining; failed instructions carry a proto.InstrError.
package node
