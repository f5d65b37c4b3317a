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
// iteration order. docs/COHERENCE.md describes the model, the representation
// and the measured costs.
//
// # Usage
//
//	c := coherence.New(coherence.Config{})
//	geo, _ := coherence.NewGeometry(coherence.Dims{1, 4096, 4096}, 4, coherence.Dims{})
//	_ = c.AddBuffer(coherence.BufferSpec{ID: 1, Geometry: geo}) // no HostData: uninitialised
//	pages, _ := geo.PageRange(coherence.Dims{0, 0, 0}, geo.Range)
//	step, err := c.Submit(coherence.CommandGroup{
//		ID: 1,
//		Accesses: []coherence.Access{{Buffer: 1, Pages: pages, Mode: coherence.Write,
//			Discard: true, Target: coherence.AllocID{Node: 0, Mem: 1}}},
//	})
//	// wait for step.Deps, create step.Allocate, run step.Copies, then the kernel.
//	c.Complete(1)
//
// Submit records a group's effects at once, as if it had run, so the caller
// can plan ahead; the returned Deps make that safe (conflicts D1–D3, in-flight
// copies of earlier groups). An allocation that an earlier, incomplete group
// creates is listed in the later group's Allocate too rather than ordering
// the two, so the caller allocates idempotently. Release and LoseNode cover
// explicit release (B1) and node loss (C5).
//
// # Errors
//
// Errors wrap the sentinels declared in api.go (match with errors.Is) and
// name what was wrong and what to do. A call that fails changes nothing;
// Submit's ErrLostPages comes with Step.Lost listing the pages.
//
// # Concurrency
//
// A Core is not safe for concurrent use; its owner (one loop goroutine)
// serialises calls, as raft's RawNode expects.
package coherence
