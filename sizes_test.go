package acpp

import (
	"testing"
	"unsafe"
)

// TestGroupMemorySize (issue 3, submit → complete target): a one-accessor
// command group costs one allocation of
// handler, event and node (cgroup). Its size sets the submit path's
// allocation volume (docs/RUNTIME.md, "Submit cost"); growing it past 896
// bytes moves it to a larger size class.
func TestGroupMemorySize(t *testing.T) {
	if n := unsafe.Sizeof(cgroup{}); n > 896 {
		t.Errorf("cgroup is %d bytes, over the 896-byte size class; keep rarely used fields out of Handler and exec.Node", n)
	}
}
