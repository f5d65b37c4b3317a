package embedded

import (
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/exec"
)

var _ engine.PageReader = (*Engine[struct{}])(nil)

// PageStates reads the page states of the engine's buffers
// (exec.Runtime.PageStates: under the planner's lock, in time that grows
// with the runs of equal page states, not with the pages), in the order
// they were made.
func (e *Engine[G]) PageStates() []engine.BufferPages {
	return pagesOf(e.rt.PageStates())
}

// Running names the groups of the planned window that run now, as
// "device: name" (exec.Runtime.Running).
func (e *Engine[G]) Running() []string { return e.rt.Running() }

// pagesOf is the executor's page states in the seam's types.
func pagesOf(in []exec.BufferPages) []engine.BufferPages {
	out := make([]engine.BufferPages, len(in))
	for i, b := range in {
		allocs := make([]engine.AllocPages, len(b.Allocs))
		for j, a := range b.Allocs {
			allocs[j] = engine.AllocPages{Mem: a.Mem, Outdated: a.Outdated, Moving: a.Moving}
		}
		out[i] = engine.BufferPages{ID: b.ID, Pages: b.Pages, Allocs: allocs}
	}
	return out
}
