package coherence

import "slices"

// liveSet answers "is command group id still incomplete?" in a few
// nanoseconds from a compact bitmap, so the conflict tracker can store plain
// CGIDs and test them without chasing pointers or hashing. IDs strictly
// increase; the bitmap covers [base, base+64·len(words)), and its all-done
// prefix is dropped as groups complete, so its size follows the span of live
// IDs. IDs far beyond the bitmap (callers with sparse IDs) go to a map.
type liveSet struct {
	base  CGID
	words []uint64
	far   map[CGID]struct{}
}

// maxSpan bounds the bitmap (bits) before IDs spill into the map.
const maxSpan = 1 << 22

func (s *liveSet) add(id CGID) {
	if len(s.words) == 0 {
		// Empty (every earlier group completed): restart the bitmap at id.
		s.base = id &^ 63
	}
	if id < s.base {
		panic("coherence: liveSet.add below a live group (IDs must increase)")
	}
	off := id - s.base
	if off >= maxSpan {
		if s.far == nil {
			s.far = map[CGID]struct{}{}
		}
		s.far[id] = struct{}{}
		return
	}
	w := int(off >> 6)
	for len(s.words) <= w {
		s.words = append(s.words, 0)
	}
	s.words[w] |= 1 << (off & 63)
}

func (s *liveSet) has(id CGID) bool {
	if id >= s.base {
		if off := id - s.base; off < CGID(len(s.words))<<6 {
			if s.words[off>>6]&(1<<(off&63)) != 0 {
				return true
			}
		}
	}
	if len(s.far) == 0 {
		return false
	}
	_, ok := s.far[id]
	return ok
}

func (s *liveSet) remove(id CGID) {
	if id >= s.base {
		if off := id - s.base; off < CGID(len(s.words))<<6 {
			s.words[off>>6] &^= 1 << (off & 63)
		}
	}
	delete(s.far, id)
	// Drop the all-done prefix; compact the backing array now and then.
	i := 0
	for i < len(s.words) && s.words[i] == 0 {
		i++
	}
	if i > 0 {
		s.base += CGID(i) << 6
		s.words = s.words[i:]
		if cap(s.words) > 64 && len(s.words) < cap(s.words)/4 {
			s.words = append([]uint64(nil), s.words...)
		}
	}
}

// infoTable maps the IDs of incomplete groups to what the core remembers of
// them. Like liveSet it is a window over the span of live IDs (a slice
// indexed by ID − base, nil for absent IDs) with a map for IDs far beyond it,
// so the per-group insert, lookup and delete cost no hashing.
type infoTable struct {
	base CGID
	win  []*cgInfo
	far  map[CGID]*cgInfo
	n    int
}

// maxIdleInfoWindow is the largest array an empty window keeps for its
// next put.
const maxIdleInfoWindow = 256

// maxInfoSpan bounds the window (entries) before IDs go to the map.
const maxInfoSpan = 1 << 16

// put adds info for id, which must be larger than every ID in the table.
func (t *infoTable) put(id CGID, info *cgInfo) {
	t.n++
	if len(t.win) == 0 {
		t.base = id
	}
	if off := id - t.base; off < maxInfoSpan {
		for CGID(len(t.win)) < off {
			t.win = append(t.win, nil)
		}
		t.win = append(t.win, info)
		return
	}
	if t.far == nil {
		t.far = map[CGID]*cgInfo{}
	}
	t.far[id] = info
}

func (t *infoTable) get(id CGID) *cgInfo {
	if id >= t.base && id-t.base < CGID(len(t.win)) {
		return t.win[id-t.base]
	}
	if len(t.far) == 0 {
		return nil
	}
	return t.far[id]
}

// remove deletes id and returns its info (nil if absent).
func (t *infoTable) remove(id CGID) *cgInfo {
	if id >= t.base && id-t.base < CGID(len(t.win)) {
		i := id - t.base
		info := t.win[i]
		if info == nil {
			return nil
		}
		t.n--
		t.win[i] = nil
		// Drop the all-done prefix; compact the backing array now and then.
		k := 0
		for k < len(t.win) && t.win[k] == nil {
			k++
		}
		switch {
		case k == len(t.win):
			// Nothing left: the next put reuses a small array (no
			// allocation per group when groups complete one at a time);
			// a large one goes.
			t.win = t.win[:0]
			if cap(t.win) > maxIdleInfoWindow {
				t.win = nil
			}
		case k > 0:
			t.base += CGID(k)
			t.win = t.win[k:]
			if cap(t.win) > 64 && len(t.win) < cap(t.win)/4 {
				t.win = append([]*cgInfo(nil), t.win...)
			}
		}
		return info
	}
	info, ok := t.far[id]
	if !ok {
		return nil
	}
	t.n--
	delete(t.far, id)
	return info
}

// len is the number of entries.
func (t *infoTable) len() int { return t.n }

// each calls fn for every entry: the window in ID order, then the far
// entries in ID order.
func (t *infoTable) each(fn func(id CGID, info *cgInfo)) {
	for i, info := range t.win {
		if info != nil {
			fn(t.base+CGID(i), info)
		}
	}
	if len(t.far) == 0 {
		return
	}
	ids := make([]CGID, 0, len(t.far))
	for id := range t.far {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fn(id, t.far[id])
	}
}
