package coherence

import (
	"testing"

	"pgregory.net/rapid"
)

// TestLiveSetAgainstMap: dense and sparse (far) IDs, random completions.
func TestLiveSetAgainstMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s liveSet
		ref := map[CGID]bool{}
		var ids []CGID
		next := CGID(rapid.Uint64Range(0, 1000).Draw(t, "start"))
		for range rapid.IntRange(1, 120).Draw(t, "steps") {
			if rapid.IntRange(0, 2).Draw(t, "op") > 0 || len(ids) == 0 {
				gap := CGID(rapid.SampledFrom([]uint64{1, 1, 1, 2, 63, 64, 200, maxSpan + 5}).Draw(t, "gap"))
				next += gap
				s.add(next)
				ref[next] = true
				ids = append(ids, next)
			} else {
				id := rapid.SampledFrom(ids).Draw(t, "complete")
				s.remove(id)
				delete(ref, id)
			}
			for _, id := range ids {
				if s.has(id) != ref[id] {
					t.Fatalf("has(%d) = %v, want %v", id, s.has(id), ref[id])
				}
			}
			if s.has(next+1) || (next > 0 && !ref[next-1] && s.has(next-1)) {
				t.Fatalf("has() true for an ID never added")
			}
		}
	})
}

// TestInfoTableAgainstMap: the live-group table against a map, with dense
// and far IDs and completions in any order (D3: completed groups leave it).
func TestInfoTableAgainstMap_D3(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tb infoTable
		ref := map[CGID]*cgInfo{}
		var ids []CGID
		next := CGID(rapid.Uint64Range(0, 1000).Draw(t, "start"))
		for range rapid.IntRange(1, 120).Draw(t, "steps") {
			if rapid.IntRange(0, 2).Draw(t, "op") > 0 || len(ids) == 0 {
				next += CGID(rapid.SampledFrom([]uint64{1, 1, 1, 2, 63, 200, maxInfoSpan + 5}).Draw(t, "gap"))
				info := &cgInfo{id: next}
				tb.put(next, info)
				ref[next] = info
				ids = append(ids, next)
			} else {
				id := rapid.SampledFrom(ids).Draw(t, "complete")
				if got := tb.remove(id); got != ref[id] {
					t.Fatalf("remove(%d) = %v, want %v", id, got, ref[id])
				}
				delete(ref, id)
			}
			for _, id := range ids {
				if tb.get(id) != ref[id] {
					t.Fatalf("get(%d) = %v, want %v", id, tb.get(id), ref[id])
				}
			}
			if tb.len() != len(ref) || tb.get(next+1) != nil {
				t.Fatalf("len %d, want %d (or an ID never added is present)", tb.len(), len(ref))
			}
		}
	})
}

// Groups that complete one at a time reuse the table's array: put and
// remove allocate nothing once it has one.
func TestInfoTableOneAtATimeAllocatesNothing(t *testing.T) {
	var tb infoTable
	info := &cgInfo{}
	id := CGID(1)
	tb.put(id, info)
	tb.remove(id)
	if n := testing.AllocsPerRun(100, func() {
		id++
		tb.put(id, info)
		if tb.remove(id) != info {
			t.Fatal("remove lost the info")
		}
	}); n != 0 {
		t.Errorf("%v allocations per put and remove, want 0", n)
	}
}
