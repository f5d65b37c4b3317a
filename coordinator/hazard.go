package coordinator

import (
	"slices"

	"github.com/acpp/acpp/coherence"
)

// Hazard tracking per allocation (issue 17, part 2).
//
// A node runs an instruction once the instructions it lists as
// dependencies have finished, so the coordinator must list every earlier
// instruction on the node that the new one could race with. Hazards exist
// only within one allocation: an instruction that writes pages of an
// allocation (a launch's non-read-only accessor, a recv, an upload, a copy's
// destination) waits for the pending instructions that read or wrote
// overlapping pages of it; one that reads them (a launch's read-only
// accessor, a send, a copy's source) waits for the pending writers. Each
// allocation keeps its pending accesses in an allocHazards, so what a
// chunk costs depends on the accesses to its own allocations, not on how
// many members the job has or how deep the pipeline is (the per-node
// frontiers this replaces spread one node per pipelined step, and a split
// group cost O(members × depth)).
//
// Cross-node order follows from the data: a recv's pages come from a send
// that waited for their writer on the source node. What no data path
// orders (D3 between groups on different allocations) the gates in
// issueLocked keep.

// allocRef names one allocation of a buffer.
type allocRef struct {
	buf   coherence.BufferID
	alloc coherence.AllocID
}

// pageAccess is one instruction's access to pages of an allocation.
type pageAccess struct {
	pages coherence.Box
	id    uint64 // the instruction, on the allocation's node
	write bool
}

// allocHazards are the accesses to one allocation whose instructions may
// not have finished, in issue order. An access that a later write covers
// is dropped (whatever overlaps it overlaps the writer, which waited for
// it); finished ones are dropped when seen.
type allocHazards struct {
	accs []pageAccess
	// swept is the length after the last sweep of finished accesses.
	swept int
}

// hazardsLocked is the table of an allocation in the current epoch (a
// recovery starts from empty tables: instruction IDs start again).
func (j *Job) hazardsLocked(buf coherence.BufferID, a coherence.AllocID) *allocHazards {
	k := allocRef{buf, a}
	h := j.ep.hazards[k]
	if h == nil {
		h = &allocHazards{}
		j.ep.hazards[k] = h
	}
	return h
}

// waitFor appends to deps the pending instructions on ns that an access to
// pages (a write, or a read) must wait for, and to after the groups of
// those that are launches.
func (h *allocHazards) waitFor(ns *nodeState, pages coherence.Box, write bool, deps []uint64, after *[]*groupState) []uint64 {
	keep := h.accs[:0]
	for _, a := range h.accs {
		if overlaps(a.pages, pages) {
			ref, pending := ns.instrs[a.id]
			if !pending {
				continue
			}
			if write || a.write {
				deps = append(deps, a.id)
				if ref.launch && !slices.Contains(*after, ref.g) {
					*after = append(*after, ref.g)
				}
			}
		}
		keep = append(keep, a)
	}
	h.accs = keep
	return deps
}

// record adds instruction id's access to pages. Call it after waitFor for
// every access of the instruction, so that it does not wait for itself.
func (h *allocHazards) record(ns *nodeState, pages coherence.Box, id uint64, write bool) {
	if write {
		// What the write covers of earlier accesses is ordered through it
		// from now on: drop covered accesses, and trim those it covers in
		// part down to the rest when that is one or two boxes (a chunk's
		// read of its rows and halos, after it wrote its rows, is its two
		// halo rows, which the next halo recvs cover). A trimmed access
		// can no longer make a later write of the covered part wait for
		// it, so the tables stay as small as the pending accesses that
		// no write has covered yet, however deep the pipeline.
		var split []pageAccess // second pieces of trimmed accesses
		keep := h.accs[:0]
		for _, a := range h.accs {
			if !overlaps(a.pages, pages) {
				keep = append(keep, a)
				continue
			}
			var rest [6]coherence.Box
			switch k := minus(a.pages, pages, &rest); {
			case k == 0:
			case k <= 2:
				a.pages = rest[0]
				keep = append(keep, a)
				if k == 2 {
					a.pages = rest[1]
					split = append(split, a)
				}
			default:
				keep = append(keep, a)
			}
		}
		h.accs = append(keep, split...)
	}
	h.accs = append(h.accs, pageAccess{pages: pages, id: id, write: write})
	if len(h.accs) > 2*h.swept+16 {
		keep := h.accs[:0]
		for _, a := range h.accs {
			if _, pending := ns.instrs[a.id]; pending {
				keep = append(keep, a)
			}
		}
		h.accs = keep
		h.swept = len(keep)
	}
}

// overlaps is Box.Overlaps without building the intersection.
func overlaps(a, b coherence.Box) bool {
	for d := range 3 {
		if a.Lo[d] >= b.Hi[d] || b.Lo[d] >= a.Hi[d] {
			return false
		}
	}
	return true
}

// covers reports whether box a contains box b.
func covers(a, b coherence.Box) bool {
	for d := range 3 {
		if b.Lo[d] < a.Lo[d] || b.Hi[d] > a.Hi[d] {
			return false
		}
	}
	return true
}

// minus writes box b without box c into out as disjoint boxes (slab by
// slab, as coherence.Box.Minus) and returns how many; b and c overlap.
func minus(b, c coherence.Box, out *[6]coherence.Box) int {
	n := 0
	rest := b
	for d := range 3 {
		if rest.Lo[d] < c.Lo[d] {
			p := rest
			p.Hi[d] = c.Lo[d]
			out[n] = p
			n++
			rest.Lo[d] = c.Lo[d]
		}
		if rest.Hi[d] > c.Hi[d] {
			p := rest
			p.Lo[d] = c.Hi[d]
			out[n] = p
			n++
			rest.Hi[d] = c.Hi[d]
		}
	}
	return n
}
