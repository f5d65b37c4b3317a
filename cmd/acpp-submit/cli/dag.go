package cli

import "github.com/acpp/acpp/jobfile"

// access is one region a command group touches, on one physical buffer
// (swaps rename buffers; the DAG follows the data).
type access struct {
	b      buf
	write  bool
	lo, hi [3]int // element box, padded to 3D
}

func (a access) rangeOf() []int {
	dims := len(a.b.spec().Range)
	out := make([]int, dims)
	for i := range dims {
		out[i] = a.hi[i] - a.lo[i]
	}
	return out
}

func regionOf(b buf, mode jobfile.Mode, off, rng []int) access {
	s := b.spec()
	a := access{b: b, write: mode != jobfile.Read, hi: [3]int{1, 1, 1}}
	for i := range s.Range {
		o := 0
		if off != nil {
			o = off[i]
		}
		e := s.Range[i] - o
		if rng != nil {
			e = rng[i]
		}
		a.lo[i], a.hi[i] = o, o+e
	}
	return a
}

func (a access) overlaps(b access) bool {
	for d := range 3 {
		if a.lo[d] >= b.hi[d] || b.lo[d] >= a.hi[d] {
			return false
		}
	}
	return a.lo != a.hi
}

func (a access) covers(b access) bool {
	for d := range 3 {
		if a.lo[d] > b.lo[d] || a.hi[d] < b.hi[d] {
			return false
		}
	}
	return true
}

// dag computes the job's logical dependencies from the conflict rules: two
// accesses of one buffer conflict if their regions overlap and one writes
// (D1, D2); a group follows every earlier group it conflicts with (D3).
type dag struct {
	prior map[buf][]dagAccess
}

type dagAccess struct {
	id uint64
	access
}

// add records group id's accesses and returns the groups it follows, in
// ascending order.
func (d *dag) add(id uint64, accs []access) []uint64 {
	if d.prior == nil {
		d.prior = map[buf][]dagAccess{}
	}
	seen := map[uint64]bool{}
	var deps []uint64
	for _, a := range accs {
		for _, p := range d.prior[a.b] {
			if p.id != id && (a.write || p.write) && a.overlaps(p.access) && !seen[p.id] {
				seen[p.id] = true
				deps = append(deps, p.id)
			}
		}
	}
	for _, a := range accs {
		list := d.prior[a.b]
		if a.write {
			// A write that covers an earlier access orders every later
			// conflicting access after itself, and so after that one.
			kept := list[:0]
			for _, p := range list {
				if !a.covers(p.access) {
					kept = append(kept, p)
				}
			}
			list = kept
		}
		d.prior[a.b] = append(list, dagAccess{id, a})
	}
	for i := 1; i < len(deps); i++ {
		for j := i; j > 0 && deps[j] < deps[j-1]; j-- {
			deps[j], deps[j-1] = deps[j-1], deps[j]
		}
	}
	return deps
}
