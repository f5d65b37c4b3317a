package embedded

import (
	"slices"
	"sync"

	"github.com/acpp/acpp/internal/exec"
)

// BufferPages is a buffer's page states per memory (exec.Runtime.PageStates).
type BufferPages = exec.BufferPages

// open is every engine of this process that is open, for PageStates: the
// public API keeps its engine to itself, and a live view (acpp-submit run
// --ui) reads page states without an API of its own for them.
var open struct {
	mu  sync.Mutex // guards rts
	rts []*exec.Runtime
}

func register(rt *exec.Runtime) {
	open.mu.Lock()
	open.rts = append(open.rts, rt)
	open.mu.Unlock()
}

func unregister(rt *exec.Runtime) {
	open.mu.Lock()
	open.rts = slices.DeleteFunc(open.rts, func(r *exec.Runtime) bool { return r == rt })
	open.mu.Unlock()
}

// PageStates reads the page states of every buffer of every embedded
// engine open in this process (acpp-submit opens one), in the order the
// engines were opened; read-only.
func PageStates() [][]BufferPages {
	open.mu.Lock()
	rts := slices.Clone(open.rts)
	open.mu.Unlock()
	out := make([][]BufferPages, len(rts))
	for i, rt := range rts {
		out[i] = rt.PageStates()
	}
	return out
}

// Running names the groups running now in the first embedded engine open
// in this process (exec.Runtime.Running), or nil.
func Running() []string {
	open.mu.Lock()
	var rt *exec.Runtime
	if len(open.rts) > 0 {
		rt = open.rts[0]
	}
	open.mu.Unlock()
	if rt == nil {
		return nil
	}
	return rt.Running()
}
