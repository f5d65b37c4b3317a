package liveview

import "github.com/acpp/acpp/internal/engine/embedded"

// EmbeddedBuffers are the page grids of the first embedded engine open in
// this process (acpp-submit run opens one), as its coherence core plans
// them, with the pages that the copies of its running groups bring in
// as being transferred; name names the i-th buffer in the order the
// engine made them.
//
// The public API keeps its engine to itself; this reads the engine's
// registry (embedded.PageStates) so that a command needs no engine
// internals of its own.
func EmbeddedBuffers(name func(i int) string) []Buffer {
	all := embedded.PageStates()
	if len(all) == 0 {
		return nil
	}
	var out []Buffer
	for i, b := range all[0] {
		lb := NewBuffer(name(i), b.Pages)
		for _, a := range b.Allocs {
			lb.AddAlloc(a.Mem, a.Outdated, a.Moving)
		}
		out = append(out, lb)
	}
	return out
}

// EmbeddedRunning is the running frontier of the first embedded engine
// open in this process: its running groups counted per device and name
// (Frontier's form).
func EmbeddedRunning() []string { return Frontier(embedded.Running()) }
