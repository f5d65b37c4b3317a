package acpp

import (
	"context"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/internal/exec"
)

type releaseReq = exec.ReleaseReq

func execGroup(name string, acc []coherence.Access) exec.Group {
	return exec.Group{Name: name, Accesses: acc}
}

// Status is a command group's state.
type Status = exec.State

// Command group states.
const (
	Submitted = exec.Submitted // waiting for the groups it depends on
	Running   = exec.Running   // copies or kernel under way
	Complete  = exec.Complete  // finished
	Failed    = exec.Failed    // finished with an error (Err says why)
)

// Timing says when a command group was submitted, started (its
// dependencies done) and ended. Unreached times are zero.
type Timing struct {
	Submitted, Started, Ended time.Time
}

// Duration is the time from start to end (0 until it ended).
func (t Timing) Duration() time.Duration {
	if t.Ended.IsZero() {
		return 0
	}
	return t.Ended.Sub(t.Started)
}

// Event is the handle of a submitted command group.
type Event struct {
	n *exec.Node
	c *clusterEvent // an event of a cluster queue (then n is nil)
}

// Wait blocks until the group finished and returns its error (a kernel
// error or panic, a failed copy, a cancelled queue), or ctx's error if ctx
// ends first.
func (e *Event) Wait(ctx context.Context) error {
	if e.c != nil {
		return e.c.wait(ctx)
	}
	return e.n.Wait(ctx)
}

// Done is closed when the group has finished.
func (e *Event) Done() <-chan struct{} {
	if e.c != nil {
		return e.c.done
	}
	return e.n.Done()
}

// Err is the group's error once it finished; nil before.
func (e *Event) Err() error {
	if e.c != nil {
		_, err := e.c.state()
		return err
	}
	return e.n.Err()
}

// Status is the group's current state.
func (e *Event) Status() Status {
	if e.c != nil {
		s, _ := e.c.state()
		return s
	}
	return e.n.State()
}

// Timing returns the group's timestamps.
// On a cluster queue, Started is when the group's launch went to its node.
func (e *Event) Timing() Timing {
	if e.c != nil {
		return e.c.timing()
	}
	s, st, en := e.n.Times()
	return Timing{s, st, en}
}

// ID is the command group's submission number; groups are ordered by it
// (D3).
// On a cluster queue it is the coordinator's group ID.
func (e *Event) ID() uint64 {
	if e.c != nil {
		return uint64(e.c.ids[0])
	}
	return uint64(e.n.ID)
}

// Deps are the IDs of earlier groups this one waited for (D1–D3). For a
// split group they are those its chunks waited for, other than its own
// chunks. A cluster queue's coordinator keeps them; Deps is nil there.
func (e *Event) Deps() []uint64 {
	if e.c != nil {
		return e.c.deps()
	}
	d := e.n.Deps()
	out := make([]uint64, len(d))
	for i, x := range d {
		out[i] = uint64(x)
	}
	return out
}

// Chunks are the events of a split group's chunks, in chunk order, each
// with its own ID, Deps, Status and Timing (embedded queues). They are nil
// for an unsplit group and on a cluster queue.
func (e *Event) Chunks() []*Event {
	if e.c == nil || len(e.c.chunks) == 0 {
		return nil
	}
	out := make([]*Event, len(e.c.chunks))
	for i, n := range e.c.chunks {
		out[i] = &Event{n: n}
	}
	return out
}
