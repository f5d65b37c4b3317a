package cluster

import "github.com/acpp/acpp/internal/engine"

var _ engine.PageReader = (*Engine[struct{}])(nil)

// PageStates reads the page states of the job's buffers as its
// coordinator plans them (coordinator.Snapshotter: under the job's lock,
// in time that grows with the runs of equal page states and the live
// groups, not with the pages), in the order they were made. The
// allocations are "client" (this process's copy) and "node/mN"; pages
// being transferred are those that live groups bring from another node
// and that have not arrived.
func (e *Engine[G]) PageStates() []engine.BufferPages {
	js, ok := e.snaps.Snapshot(true)
	if !ok {
		return nil
	}
	out := make([]engine.BufferPages, len(js.Buffers))
	for i, b := range js.Buffers {
		allocs := make([]engine.AllocPages, len(b.Allocs))
		for j, a := range b.Allocs {
			allocs[j] = engine.AllocPages{Mem: a.Name, Outdated: a.Outdated, Moving: a.Moving}
		}
		// The job's buffer IDs are the engine's (NewBuffer).
		out[i] = engine.BufferPages{ID: b.ID, Name: b.Name, Pages: b.Pages, Allocs: allocs}
	}
	return out
}

// Running names the groups issued to a node and not finished, as
// "node/kind:index: kernel".
func (e *Engine[G]) Running() []string {
	js, ok := e.snaps.Snapshot(false)
	if !ok {
		return nil
	}
	return js.Running
}
