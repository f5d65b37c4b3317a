package exec

import (
	"maps"
	"slices"

	"github.com/acpp/acpp/coherence"
)

// BufferPages is a buffer's page states per memory, for a live view.
type BufferPages struct {
	ID coherence.BufferID
	// Pages is the page grid's size per dimension.
	Pages  coherence.Dims
	Allocs []AllocPages
}

// AllocPages is one allocation of a buffer.
type AllocPages struct {
	// Mem names the memory as MemName does ("host", "cuda:0").
	Mem string
	// Outdated are the page boxes not up to date there as planned (the
	// core records a group's effects when it is planned); Moving those
	// that the copies of running groups bring there (they may overlap).
	Outdated, Moving []coherence.Box
}

// PageStates reads every buffer's page states, read-only. It holds the
// planner's lock meanwhile; the cost grows with the runs of equal page
// states, not with the pages (a live view asks a few times a second).
func (rt *Runtime) PageStates() []BufferPages {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	// The copies of the running groups of the planned window.
	type key struct {
		b coherence.BufferID
		a coherence.AllocID
	}
	moving := map[key][]coherence.Box{}
	for _, n := range rt.nodes.win {
		if n == nil || !n.planned.Load() || n.plan == nil || n.state.Load() != int32(Running) {
			continue
		}
		for _, c := range n.plan.Copies {
			k := key{c.Buffer, c.Dst}
			moving[k] = append(moving[k], c.Boxes...)
		}
	}
	ids := slices.Sorted(maps.Keys(rt.bufs))
	out := make([]BufferPages, 0, len(ids))
	for _, id := range ids {
		geo := rt.bufs[id].geo
		bp := BufferPages{ID: id, Pages: geo.Pages()}
		all := geo.All()
		for _, a := range rt.core.Allocations(id) {
			outdated, err := rt.core.Outdated(id, a, all)
			if err != nil {
				continue
			}
			bp.Allocs = append(bp.Allocs, AllocPages{Mem: rt.MemName(a.Mem), Outdated: outdated, Moving: moving[key{id, a}]})
		}
		out = append(out, bp)
	}
	return out
}

// Running names the groups of the planned window that run now, each as
// "device: name" ("host" for host tasks): the running frontier of the
// DAG, for a live view. It holds the planner's lock while it reads the
// window.
func (rt *Runtime) Running() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []string
	for _, n := range rt.nodes.win {
		if n == nil || n.state.Load() != int32(Running) {
			continue
		}
		dev := "host"
		if n.g.Device != nil {
			dev = n.g.Device.Info().ID.String()
		}
		out = append(out, dev+": "+n.g.Name)
	}
	return out
}
