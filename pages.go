package acpp

import (
	"errors"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/internal/engine"
)

// BufferID names a buffer within its queue (Buffer.ID, BufferPages.ID).
// IDs count from 1 in the order a queue made its buffers and are never
// reused.
type BufferID = coherence.BufferID

// PageBox is a box of pages, from Lo to Hi exclusive, in coherence order:
// dimension 2 is the fastest, and a buffer of fewer dimensions has its
// pages along the last ones (a 1D buffer's along dimension 2, with Lo[0] =
// Lo[1] = 0 and Hi[0] = Hi[1] = 1).
type PageBox = coherence.Box

// BufferPages is one buffer's page states: where each of its pages is up to
// date (P2), per allocation.
type BufferPages struct {
	ID BufferID
	// Name is the name the queue's engine knows the buffer by: "" on a
	// queue of local devices, the job's name for it (often "") on a
	// cluster queue.
	Name string
	// Pages is the page grid's size per dimension, in PageBox's order
	// (a 1D buffer of n pages: {1, 1, n}).
	Pages [3]int
	// Allocs are the buffer's allocations, those made so far (B5).
	Allocs []AllocPages
}

// AllocPages is one allocation of a buffer.
type AllocPages struct {
	// Memory names the memory as Transfer does: "host" or a device's
	// ("cuda:0") on a queue of local devices; "client" (this process) or
	// "node/mN" (memory N of a node) on a cluster queue.
	Memory string
	// Outdated are the boxes of pages not up to date here, disjoint. Valid
	// means valid as planned: the runtime records a command group's
	// effects when it plans the group, so a page can show up to date here
	// while the copy or kernel that makes it so still runs.
	Outdated []PageBox
	// Moving are the boxes of pages that running command groups are
	// bringing here; they may overlap each other and Outdated.
	Moving []PageBox
}

// ErrNoPageStates: the queue's engine cannot show its page states. Both
// engines of this package can (NewQueue, Connect); the error stays for
// engines that cannot.
var ErrNoPageStates = errors.New("acpp: this queue's engine does not show page states")

// ID names the buffer in its queue (BufferPages.ID); a view (Reshape,
// Reinterpret) has the ID of the buffer it views.
func (b *Buffer[T]) ID() BufferID { return b.st.id }

// PageStates reads where each open buffer of the queue is up to date,
// buffers in the order they were made: for a live view of the program's
// buffers (package liveview) or a test. It only reads. It holds the
// planner's lock (a cluster queue's: the job's) while it reads, for a time
// that grows with the runs of equal page states, not with the pages
// (about 0.1 ms for two buffers of 2^24 pages in a few runs each), so ask
// a few times a second, not per command group.
//
// It returns ErrClosed once the queue is closed, and ErrNoPageStates from
// an engine that has none to show.
func (q *Queue) PageStates() ([]BufferPages, error) {
	if q == nil {
		return nil, errNilQueue("PageStates")
	}
	r, err := q.pageReader()
	if err != nil {
		return nil, err
	}
	in := r.PageStates()
	out := make([]BufferPages, len(in))
	for i, b := range in {
		allocs := make([]AllocPages, len(b.Allocs))
		for j, a := range b.Allocs {
			allocs[j] = AllocPages{Memory: a.Mem, Outdated: a.Outdated, Moving: a.Moving}
		}
		out[i] = BufferPages{ID: b.ID, Name: b.Name, Pages: b.Pages, Allocs: allocs}
	}
	return out, nil
}

// RunningGroups names the command groups running now: the running
// frontier of the queue's DAG, one entry per group (a split group's chunks
// one each), as "device: group" ("cpu:1: jacobi", "host: …" for host
// tasks; on a cluster queue the groups issued to a node and not finished,
// "node/kind:index: kernel"). It only reads; errors as for PageStates.
func (q *Queue) RunningGroups() ([]string, error) {
	if q == nil {
		return nil, errNilQueue("RunningGroups")
	}
	r, err := q.pageReader()
	if err != nil {
		return nil, err
	}
	return r.Running(), nil
}

func (q *Queue) pageReader() (engine.PageReader, error) {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	r, ok := q.eng.(engine.PageReader)
	if !ok {
		return nil, ErrNoPageStates
	}
	return r, nil
}
