package acpp

import (
	"context"
	"fmt"
	"time"

	"github.com/acpp/acpp/internal/engine"
)

// Status is a command group's state.
type Status = engine.Status

// Command group states.
const (
	Submitted = engine.Submitted // waiting for the groups it depends on
	Running   = engine.Running   // copies or kernel under way
	Complete  = engine.Complete  // finished
	Failed    = engine.Failed    // finished with an error (Err says why)
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
	e engine.Event
}

// errZeroEvent is the error of After or DependsOn given an Event that no
// Submit returned (&Event{}): it names no group, so it cannot order one.
var errZeroEvent = fmt.Errorf("%w: After or DependsOn got an Event that no Submit returned (a zero Event); pass the *Event that Submit, Memcpy, Memset or FillUSM returned, or nil for none", ErrOption)

// Wait blocks until the group finished and returns its error (a kernel
// error or panic, a failed copy, a cancelled queue), or ctx's error if ctx
// ends first. A nil ctx is an error.
func (e *Event) Wait(ctx context.Context) error {
	if err := checkCtx(ctx, "Event.Wait"); err != nil {
		return err
	}
	return e.e.Wait(ctx)
}

// Done is closed when the group has finished.
func (e *Event) Done() <-chan struct{} { return e.e.Done() }

// Err is the group's error once it finished; nil before.
func (e *Event) Err() error { return e.e.Err() }

// Status is the group's current state.
// On a cluster queue it is Submitted until the group finished.
func (e *Event) Status() Status { return e.e.Status() }

// Timing returns the group's timestamps.
// On a cluster queue, Started is when the group's launch went to its node.
func (e *Event) Timing() Timing { return Timing(e.e.Timing()) }

// ID is the command group's submission number; groups are ordered by it
// (D3). A split group's is its first chunk's.
// On a cluster queue it is the coordinator's group ID.
func (e *Event) ID() uint64 { return e.e.ID() }

// Deps are the IDs of earlier groups this one waited for (D1–D3). For a
// split group they are those its chunks waited for, other than its own
// chunks. A cluster queue's coordinator keeps them; Deps is nil there.
func (e *Event) Deps() []uint64 { return e.e.Deps() }

// Device names the device that ran the group: "cpu:1" on a queue of local
// devices, "node/kind:index" on a cluster queue ("client" for a copy or
// fill the client did itself). A split group's are its chunks' devices,
// comma-separated without repeats: in chunk order on a local queue, in
// the order the chunks finished on a cluster queue, where it is known once
// the group finished ("" before).
func (e *Event) Device() string { return e.e.Device() }

// Chunks are the events of a split group's chunks, in chunk order, each
// with its own ID, Deps, Status and Timing (embedded queues). They are nil
// for an unsplit group and on a cluster queue.
func (e *Event) Chunks() []*Event {
	cs := e.e.Chunks()
	if len(cs) == 0 {
		return nil
	}
	out := make([]*Event, len(cs))
	for i, c := range cs {
		out[i] = &Event{c}
	}
	return out
}
