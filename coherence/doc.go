// Package coherence is the pure core of acpp: page geometry, per-allocation page
// states, transfer plans and conflict ordering for buffers, on one machine and
// across a cluster.
//
// It performs no I/O, starts no goroutines, reads no clock and logs nothing.
// Inputs go in (buffers, command groups with their accesses, completions, lost
// nodes) and plans come out (DAG edges, allocations to make, page copies with
// their sources, pages with no valid copy left). The caller — the embedded
// runtime or a job's coordinator — executes the plans and reports completions.
// Given the same inputs it returns the same outputs: nothing depends on map
// iteration order.
//
// # Usage
//
//	c := coherence.New(coherence.Config{})
//	geo, _ := coherence.NewGeometry(coherence.Dims{1, 4096, 4096}, 4, coherence.Dims{})
//	_ = c.AddBuffer(coherence.BufferSpec{ID: 1, Geometry: geo}) // no HostData: uninitialised
//	step, err := c.Submit(coherence.CommandGroup{
//		ID: 1,
//		Accesses: []coherence.Access{{Buffer: 1, Pages: geo.All(), Mode: coherence.Write,
//			Discard: true, Target: coherence.AllocID{Node: 0, Mem: 1}}},
//	})
//	// run step.Allocate, then step.Copies, after step.Deps; then the kernel.
//	c.Complete(1)
//
// # Concurrency
//
// A Core is not safe for concurrent use; its owner (one loop goroutine)
// serialises calls, as raft's RawNode expects.
package coherence
