package cluster

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// State is a member's state as this member knows it.
type State uint8

// Member states. memberlist's "suspect" state is not surfaced: a suspect
// member is Alive until it refutes the suspicion or is declared Failed.
const (
	// StateAlive: the member answers probes (or has not yet been found
	// silent).
	StateAlive State = iota + 1
	// StateLeft: the member left gracefully (Leave). Its work was drained.
	StateLeft
	// StateFailed: the member stopped answering and was declared dead by
	// failure detection (crash, kill, network cut, Close without Leave).
	StateFailed
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateLeft:
		return "left"
	case StateFailed:
		return "failed"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Member is one member of the cluster as this member sees it. A Member is a
// value: it does not change after it was handed out.
type Member struct {
	// Name is the member's unique name, its node ID.
	Name string
	// Addr is the member's gossip address (what to pass to Join).
	Addr  netip.AddrPort
	State State
	// Meta is the member's decoded metadata; the zero Meta when MetaErr is
	// set.
	Meta Meta
	// MetaErr is why Meta could not be decoded (ErrBadMeta, ErrMetaVersion):
	// such a member is listed but cannot be used; it usually runs another
	// acpp version.
	MetaErr error
	// Local is true for this member itself.
	Local bool
	// Since is when this member observed the last change of State or Meta
	// (local clock).
	Since time.Time
}

// Usable reports whether the member is alive and advertised valid metadata.
func (m Member) Usable() bool { return m.State == StateAlive && m.MetaErr == nil }

func (m Member) clone() Member {
	m.Meta = m.Meta.Clone()
	return m
}

// Snapshot is a consistent view of the membership: every member with its
// state and metadata as of one moment. Departed members (left or failed)
// are kept, up to Config.DepartedRetention.
type Snapshot struct {
	// Seq is the sequence number of the last event applied to this view.
	// Events with a larger Seq happened after it.
	Seq uint64
	// Members are sorted by Name.
	Members []Member
}

// Member looks a member up by name.
func (s Snapshot) Member(name string) (Member, bool) {
	i, ok := slices.BinarySearchFunc(s.Members, name, func(m Member, n string) int { return strings.Compare(m.Name, n) })
	if !ok {
		return Member{}, false
	}
	return s.Members[i], true
}

// Alive returns the members in StateAlive, sorted by name.
func (s Snapshot) Alive() []Member {
	var out []Member
	for _, m := range s.Members {
		if m.State == StateAlive {
			out = append(out, m)
		}
	}
	return out
}

// EventType says what changed.
type EventType uint8

// Event types.
const (
	// EventJoin: a member joined (or rejoined after it left or failed).
	EventJoin EventType = iota + 1
	// EventUpdate: a live member changed its metadata or address.
	EventUpdate
	// EventLeave: a member left gracefully.
	EventLeave
	// EventFail: a member was declared failed by failure detection.
	EventFail
	// EventResync: the subscriber fell behind and events were dropped; the
	// event carries a full Snapshot to rebuild its view from.
	EventResync
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	case EventResync:
		return "resync"
	}
	return "event(" + strconv.Itoa(int(t)) + ")"
}

// Event is one change of the membership.
type Event struct {
	Type EventType
	// Seq numbers the events of this Cluster: 1, 2, 3, ... A subscriber sees
	// them in order; after an EventResync, Seq jumps.
	Seq uint64
	// Member is the member after the change (not set for EventResync).
	Member Member
	// Snapshot is the full view, for EventResync only.
	Snapshot *Snapshot
}

// Subscription delivers membership events in order, starting right after
// its initial snapshot: Snapshot().Seq + 1 is the first event it delivers,
// so a reader that applies the events to the snapshot never misses one or
// sees one twice.
//
// Delivery never blocks memberlist. Each subscription queues up to
// Config.EventBuffer events; when a reader falls that far behind, the queued
// events are dropped and replaced by a single EventResync carrying a fresh
// snapshot, and later events queue behind it. A reader that handles
// EventResync by replacing its view loses nothing but intermediate states
// (a member that failed is still in the snapshot as StateFailed).
//
// # Concurrency
//
// A goroutine owned by the subscription moves events from its queue to
// Events(). Close stops it and waits for it; Events() is closed then, and
// also when the Cluster is closed.
type Subscription struct {
	c       *Cluster
	initial Snapshot
	ch      chan Event
	limit   int

	// mu guards the queue; enqueue holds the cluster's mu too (lock order:
	// Cluster.mu, then Subscription.mu).
	mu      sync.Mutex
	queue   []Event
	resyncs uint64

	wake      chan struct{} // capacity 1: "the queue is not empty"
	done      chan struct{} // closed by Close
	stopped   chan struct{} // closed by run on exit
	closeOnce sync.Once
}

// Snapshot returns the membership as of the subscription's start.
func (s *Subscription) Snapshot() Snapshot { return s.initial }

// Events returns the channel of events. It is closed when the subscription
// or the Cluster is closed.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Resyncs counts the times the reader fell behind and queued events were
// replaced by an EventResync.
func (s *Subscription) Resyncs() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resyncs
}

// Close stops delivery and waits for the delivering goroutine to exit.
// Events() is closed afterwards. Calling it twice is safe.
func (s *Subscription) Close() {
	s.closeOnce.Do(func() {
		s.c.unsubscribe(s)
		close(s.done)
	})
	<-s.stopped
}

// enqueueLocked queues ev for delivery; snap makes the resync snapshot when
// the queue is full. The caller holds the cluster's mu. It never blocks. It
// reports whether the queue overflowed.
func (s *Subscription) enqueueLocked(ev Event, snap func() Snapshot) (overflow bool) {
	s.mu.Lock()
	if len(s.queue) >= s.limit {
		overflow = true
		sn := snap()
		// snap already includes ev: it replaces the queue.
		clear(s.queue)
		s.queue = append(s.queue[:0], Event{Type: EventResync, Seq: sn.Seq, Snapshot: &sn})
		s.resyncs++
	} else {
		s.queue = append(s.queue, ev)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return overflow
}

// run delivers queued events until Close.
func (s *Subscription) run() {
	defer close(s.stopped)
	defer close(s.ch)
	for {
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
		for {
			s.mu.Lock()
			if len(s.queue) == 0 {
				s.mu.Unlock()
				break
			}
			ev := s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
			if len(s.queue) == 0 {
				s.queue = s.queue[:0:0] // let the backing array go
			}
			s.mu.Unlock()
			select {
			case s.ch <- ev:
			case <-s.done:
				return
			}
		}
	}
}
