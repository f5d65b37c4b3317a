package coordinator

import (
	"sync"

	"github.com/acpp/acpp/coherence"
)

// Snapshotter lets a live view (package liveview, through acpp-submit
// run --ui) read a job while it runs, read-only: set Config.Snapshots to
// one, and Open binds it to the job. Its methods are safe for concurrent
// use; before Open has bound it they report nothing.
type Snapshotter struct {
	mu sync.Mutex // guards j
	j  *Job
}

func (s *Snapshotter) bind(j *Job) {
	s.mu.Lock()
	s.j = j
	s.mu.Unlock()
}

func (s *Snapshotter) job() *Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.j
}

// JobSnapshot is a job at one moment.
type JobSnapshot struct {
	Nodes   []NodeStatus
	Devices []Device
	// Groups and Completed count the coordinator's command groups (the
	// chunks of split groups count one each).
	Groups, Completed int
	// Running names the groups issued to a node and not finished, as
	// "node/kind:index: kernel": the running frontier of the job's DAG.
	Running []string
	Buffers []BufferPages
}

// BufferPages is a buffer's page states per allocation.
type BufferPages struct {
	ID   coherence.BufferID
	Name string // the name the buffer was made with, if any
	// Pages is the page grid's size per dimension.
	Pages  coherence.Dims
	Allocs []AllocPages
}

// AllocPages is one allocation of a buffer: "client" or "node/mN".
type AllocPages struct {
	Name string
	// Outdated are the page boxes not up to date there as planned (the
	// core records a group's effects when it is submitted, C2); Moving
	// those that live groups are bringing there from another node and
	// that have not arrived yet (two live groups may bring the same
	// pages: Moving may overlap itself).
	Outdated, Moving []coherence.Box
}

// Snapshot reads the job, or reports false before the job is open. With
// pages it also reads every buffer's page states: the cost grows with the
// runs of equal page states and the live groups, not with the pages, and
// it holds the job's lock meanwhile (a live view asks at most a few times
// a second).
func (s *Snapshotter) Snapshot(pages bool) (JobSnapshot, bool) {
	j := s.job()
	if j == nil {
		return JobSnapshot{}, false
	}
	out := JobSnapshot{Nodes: j.Nodes(), Devices: j.Devices()}
	j.mu.Lock()
	defer j.mu.Unlock()
	out.Groups, out.Completed = j.stats.Groups, j.stats.Completed
	for _, g := range j.live {
		if !g.finished && !g.issued.IsZero() && g.dev >= 0 && g.dev < len(j.devices) {
			out.Running = append(out.Running, j.devices[g.dev].String()+": "+g.kernel)
		}
	}
	if !pages {
		return out, true
	}
	// The boxes being brought in, per buffer and destination.
	type key struct {
		b coherence.BufferID
		a coherence.AllocID
	}
	moving := map[key][]coherence.Box{}
	for _, g := range j.live {
		if g.finished {
			continue
		}
		for _, r := range g.recvs {
			k := key{r.buf, r.dst}
			moving[k] = append(moving[k], r.pages...)
		}
	}
	for _, info := range j.core.Buffers() {
		bp := BufferPages{ID: info.ID, Pages: info.Geometry.Pages()}
		if b := j.bufs[info.ID]; b != nil {
			bp.Name = b.name
		}
		all := info.Geometry.All()
		for _, a := range info.Allocations {
			outdated, err := j.core.Outdated(info.ID, a.Alloc, all)
			if err != nil {
				continue
			}
			bp.Allocs = append(bp.Allocs, AllocPages{Name: j.allocName(a.Alloc), Outdated: outdated,
				Moving: moving[key{info.ID, a.Alloc}]})
		}
		out.Buffers = append(out.Buffers, bp)
	}
	return out, true
}
