package coherence

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
