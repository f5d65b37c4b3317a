package coherence

import (
	"slices"
	"testing"
	"unsafe"
)

// TestReaderLogBranches_D1: reader lists are shared append-only logs. A
// region reached again after a later reader appended to its log (through a
// segment that reader did not cover) must copy, not append: each page's
// writer waits for exactly the readers of that page (D1).
func TestReaderLogBranches_D1(t *testing.T) {
	c, _ := newCore1D(t, 2, true)
	mustSubmit(t, c, 1, acc(Write, host0, span1(0, 2)))
	mustSubmit(t, c, 2, acc(Read, host0, span1(0, 2))) // one region over both pages
	mustSubmit(t, c, 3, acc(Read, host0, span1(0, 1))) // appends in place
	mustSubmit(t, c, 4, acc(Read, host0, span1(1, 2))) // same old region: must copy
	mustSubmit(t, c, 5, acc(Read, host0, span1(0, 2))) // both branches
	for _, tc := range []struct {
		id    CGID
		pages Box
		want  []CGID
	}{
		{6, span1(0, 1), []CGID{2, 3, 5}},
		{7, span1(1, 2), []CGID{2, 4, 5}},
	} {
		if st := mustSubmit(t, c, tc.id, acc(Write, host0, tc.pages)); !slices.Equal(st.Deps, tc.want) {
			t.Errorf("writer %d of %v: deps %v, want %v", tc.id, tc.pages, st.Deps, tc.want)
		}
	}
}

// TestReaderLogDropsCompleted_D3: a long stream of readers with one or two
// in flight keeps a short reader list (completed readers are dropped when the
// log fills), and a writer after it waits only for the live readers.
func TestReaderLogDropsCompleted_D3(t *testing.T) {
	c, _ := newCore1D(t, 1, true)
	const n = 5000
	for i := CGID(1); i <= n; i++ {
		mustSubmit(t, c, i, acc(Read, host0, span1(0, 1)))
		if i > 2 {
			c.Complete(i - 2)
		}
	}
	var longest int
	c.bufs[1].conf.visit(0, 1, func(_, _ int, r *region) {
		if r != nil {
			longest = max(longest, len(r.readers), cap(r.rlog.ids))
		}
	})
	if longest > 16 {
		t.Errorf("reader list of %d entries after %d readers with 2 live; want it bounded", longest, n)
	}
	if st := mustSubmit(t, c, n+1, acc(Write, host0, span1(0, 1))); !slices.Equal(st.Deps, []CGID{n - 1, n}) {
		t.Errorf("writer deps %v, want [%d %d]", st.Deps, n-1, n)
	}
}

// TestRegionSize: the region a write or read leaves is one 128-byte
// allocation per access (the allocation volume of Submit; docs/COHERENCE.md).
func TestRegionSize(t *testing.T) {
	if n := unsafe.Sizeof(region{}); n > 128 {
		t.Errorf("region is %d bytes; keep it within the 128-byte size class", n)
	}
}
