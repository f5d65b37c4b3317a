package exec

import "testing"

// A window of nodes that run one at a time reuses its array: put and
// remove allocate nothing once it has one, and a drained window still
// finds the next node.
func TestNodeWindowOneAtATimeAllocatesNothing(t *testing.T) {
	var w nodeWindow
	n := &Node{Seq: 1}
	w.put(n)
	w.remove(n.Seq)
	if allocs := testing.AllocsPerRun(100, func() {
		n.Seq++
		w.put(n)
		if w.get(n.Seq) != n || w.get(n.Seq-1) != nil {
			t.Fatal("the window lost a node or kept a removed one")
		}
		w.remove(n.Seq)
	}); allocs != 0 {
		t.Errorf("%v allocations per put and remove, want 0", allocs)
	}
	if w.get(n.Seq) != nil {
		t.Error("a removed node is still in the window")
	}
}
