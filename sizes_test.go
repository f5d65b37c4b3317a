package acpp

import (
	"testing"

	"github.com/acpp/acpp/internal/engine/embedded"
)

// TestGroupMemorySize (issue 3, submit → complete target; issue 12): a
// one-accessor command group on the embedded engine costs one allocation
// of handler, event, record and the executor's node (Engine.NewGroup). Its
// size sets the submit path's allocation volume (docs/RUNTIME.md, "Submit
// cost"; docs/PERFORMANCE.md). An object this large with pointers carries
// an 8-byte allocation header, so up to 888 bytes fit the 896-byte size
// class; one more byte and every group costs 1024 (measured 2026-11-25:
// 5-10% more per group, docs/PERFORMANCE.md). Rarely used state lives
// outside it (handlerExtras, engine.Binding, a split's mappers).
func TestGroupMemorySize(t *testing.T) {
	if n := embedded.GroupBytes[cgroup](); n > 896-8 {
		t.Errorf("a command group's memory is %d bytes, over the 896-byte size class with its 8-byte header; keep rarely used fields out of Handler, req, engine.Group and exec.Node", n)
	}
}
