package acpp

import (
	"testing"
	"unsafe"
)

// TestGroupMemorySize (issue 3, submit → complete target): a one-accessor
// command group costs one allocation of
// handler, event and node (cgroup). Its size sets the submit path's
// allocation volume (docs/RUNTIME.md, "Submit cost"). An object this large
// with pointers carries an 8-byte allocation header, so up to 888 bytes fit
// the 896-byte size class; one more byte and every group costs 1024.
func TestGroupMemorySize(t *testing.T) {
	if n := unsafe.Sizeof(cgroup{}); n > 896-8 {
		t.Errorf("cgroup is %d bytes, over the 896-byte size class with its 8-byte header; keep rarely used fields out of Handler and exec.Node", n)
	}
}
