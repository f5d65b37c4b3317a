package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// newTableCluster is a Cluster without memberlist: enough to drive the
// member table and the subscriptions through observe, deterministically.
func newTableCluster(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	cfg.Name = "self"
	cfg = cfg.withDefaults()
	c := &Cluster{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.mu.members = map[string]Member{}
	c.mu.subs = map[*Subscription]struct{}{}
	t.Cleanup(func() {
		c.mu.Lock()
		subs := slices.Collect(func(yield func(*Subscription) bool) {
			for s := range c.mu.subs {
				if !yield(s) {
					return
				}
			}
		})
		c.mu.Unlock()
		for _, s := range subs {
			s.Close()
		}
		c.cancel(ErrClosed)
	})
	return c
}

func node(t *testing.T, name string, m Meta) *memberlist.Node {
	t.Helper()
	m.NodeID = name
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 7946, Meta: b}
}

// collect reads events until want have arrived or a second passes.
func collect(t *testing.T, s *Subscription, stop func([]Event) bool) []Event {
	t.Helper()
	var evs []Event
	timeout := time.After(5 * time.Second)
	for !stop(evs) {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatalf("subscription closed after %d events", len(evs))
			}
			evs = append(evs, ev)
		case <-timeout:
			t.Fatalf("timed out after %d events: %+v", len(evs), evs)
		}
	}
	return evs
}

// TestSubscriptionStartsAfterSnapshot_C1: a subscription's snapshot and its
// events fit together: no event is missed or repeated, and sequence
// numbers increase by one.
func TestSubscriptionStartsAfterSnapshot_C1(t *testing.T) {
	c := newTableCluster(t, Config{})
	c.observe(EventJoin, node(t, "a", Meta{}))
	s := c.Subscribe()
	if snap := s.Snapshot(); snap.Seq != 1 || len(snap.Members) != 1 || snap.Members[0].Name != "a" {
		t.Fatalf("Snapshot() = %+v, want seq 1 with a", snap)
	}
	c.observe(EventJoin, node(t, "b", Meta{}))
	c.observe(EventUpdate, node(t, "a", Meta{QUICAddr: "127.0.0.1:9"}))
	evs := collect(t, s, func(e []Event) bool { return len(e) == 2 })
	for i, want := range []struct {
		typ  EventType
		name string
		seq  uint64
	}{{EventJoin, "b", 2}, {EventUpdate, "a", 3}} {
		if evs[i].Type != want.typ || evs[i].Member.Name != want.name || evs[i].Seq != want.seq {
			t.Errorf("event %d = %v %s seq %d, want %v %s seq %d", i, evs[i].Type, evs[i].Member.Name, evs[i].Seq, want.typ, want.name, want.seq)
		}
	}
	if m, _ := c.Member("a"); m.Meta.QUICAddr != "127.0.0.1:9" {
		t.Errorf("Member(a).Meta.QUICAddr = %q after the update", m.Meta.QUICAddr)
	}
}

// apply folds events into a view, the way a subscriber would.
func apply(view map[string]Member, seq uint64, evs []Event) (map[string]Member, uint64, error) {
	for _, ev := range evs {
		if ev.Seq <= seq {
			return nil, 0, fmt.Errorf("event seq %d not after %d", ev.Seq, seq)
		}
		if ev.Type == EventResync {
			view = map[string]Member{}
			for _, m := range ev.Snapshot.Members {
				view[m.Name] = m
			}
		} else {
			if ev.Seq != seq+1 {
				return nil, 0, fmt.Errorf("event seq %d after %d: a gap without a resync", ev.Seq, seq)
			}
			view[ev.Member.Name] = ev.Member
		}
		seq = ev.Seq
	}
	return view, seq, nil
}

// TestSlowSubscriberGetsResync_C5: a reader that does not keep up never
// blocks the caller (memberlist); its queue overflows into an EventResync
// whose snapshot, with the events after it, rebuilds exactly the current
// view, failures included.
func TestSlowSubscriberGetsResync_C5(t *testing.T) {
	c := newTableCluster(t, Config{EventBuffer: 4})
	s := c.Subscribe()
	done := make(chan struct{})
	go func() { // must finish although nobody reads
		defer close(done)
		for i := range 50 {
			name := fmt.Sprintf("n%02d", i%10)
			if i%7 == 3 {
				c.observe(EventFail, node(t, name, Meta{}))
			} else {
				c.observe(EventJoin, node(t, name, Meta{}))
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("observe blocked on a subscriber that does not read")
	}
	final := c.Members()
	evs := collect(t, s, func(e []Event) bool { return len(e) > 0 && e[len(e)-1].Seq == final.Seq })
	if st := c.Stats(); st.Resyncs != s.Resyncs() || st.Events != 50 {
		t.Errorf("Stats() = %+v, want %d resyncs and 50 events", st, s.Resyncs())
	}
	if s.Resyncs() == 0 || !slices.ContainsFunc(evs, func(e Event) bool { return e.Type == EventResync }) {
		t.Fatalf("no resync after 50 events into a queue of 4 (got %d events)", len(evs))
	}
	view, seq, err := apply(map[string]Member{}, s.Snapshot().Seq, evs)
	if err != nil {
		t.Fatal(err)
	}
	if seq != final.Seq || len(view) != len(final.Members) {
		t.Fatalf("rebuilt view: seq %d, %d members; want seq %d, %d members", seq, len(view), final.Seq, len(final.Members))
	}
	for _, m := range final.Members {
		if v := view[m.Name]; v.State != m.State {
			t.Errorf("rebuilt %s state %v, want %v", m.Name, v.State, m.State)
		}
	}
}

// TestLeaveOrFailureByLeavingFlag_C5: a departure is a leave when the
// member advertised Meta.Leaving first, and a failure otherwise.
func TestLeaveOrFailureByLeavingFlag_C5(t *testing.T) {
	c := newTableCluster(t, Config{})
	c.observe(EventJoin, node(t, "quits", Meta{}))
	c.observe(EventJoin, node(t, "crashes", Meta{}))
	c.observe(EventUpdate, node(t, "quits", Meta{Leaving: true}))
	c.observe(EventFail, node(t, "quits", Meta{Leaving: true}))
	c.observe(EventFail, node(t, "crashes", Meta{}))
	for name, want := range map[string]State{"quits": StateLeft, "crashes": StateFailed} {
		if m, ok := c.Member(name); !ok || m.State != want {
			t.Errorf("Member(%s) = %v (known %v), want %v", name, m.State, ok, want)
		}
	}
	// A rejoin makes the member alive again.
	c.observe(EventJoin, node(t, "crashes", Meta{BootID: 2}))
	if m, _ := c.Member("crashes"); m.State != StateAlive || m.Meta.BootID != 2 {
		t.Errorf("after rejoin: %v boot %d, want alive boot 2", m.State, m.Meta.BootID)
	}
}

// TestDepartedRetention: the snapshot keeps the newest departed members up
// to DepartedRetention.
func TestDepartedRetention(t *testing.T) {
	for _, tc := range []struct {
		retention int
		want      []string
	}{
		{-1, nil},
		{2, []string{"d1", "d2"}},
		{0, []string{"d0", "d1", "d2"}}, // default 256
	} {
		c := newTableCluster(t, Config{DepartedRetention: tc.retention})
		for i := range 3 {
			n := node(t, fmt.Sprintf("d%d", i), Meta{})
			c.observe(EventJoin, n)
			c.observe(EventFail, n)
		}
		c.observe(EventJoin, node(t, "alive", Meta{}))
		var got []string
		for _, m := range c.Members().Members {
			if m.State != StateAlive {
				got = append(got, m.Name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("retention %d: departed %v, want %v", tc.retention, got, tc.want)
		}
		if _, ok := c.Member("alive"); !ok {
			t.Errorf("retention %d: alive member pruned", tc.retention)
		}
	}
}

// TestConfigInUseMeansTheSame: Config() returns the configuration in use
// with defaults applied; given back, it configures the same member. A
// negative DepartedRetention (keep none) came back as 0, which means 256.
func TestConfigInUseMeansTheSame(t *testing.T) {
	for _, cfg := range []Config{
		{DepartedRetention: -1, ReconnectInterval: -1},
		{DepartedRetention: 3, EventBuffer: 7},
		{},
	} {
		cfg.Name = "self"
		once := cfg.withDefaults()
		if twice := once.withDefaults(); !reflect.DeepEqual(once, twice) {
			t.Errorf("withDefaults(%+v) = %+v, and again %+v: the config in use changes meaning when given back", cfg, once, twice)
		}
	}
	c := newTableCluster(t, Config{DepartedRetention: -1})
	if got := c.Config().DepartedRetention; got >= 0 {
		t.Errorf("Config().DepartedRetention = %d for a member keeping no departed members, want it negative (0 means 256)", got)
	}
}

// TestUnusableMetadataIsListed_C1: a member whose metadata does not decode,
// or names another node, is listed with MetaErr and is not Usable.
func TestUnusableMetadataIsListed_C1(t *testing.T) {
	c := newTableCluster(t, Config{})
	bad := &memberlist.Node{Name: "v2", Addr: net.IPv4(127, 0, 0, 2), Port: 1, Meta: []byte{2, 0}}
	c.observe(EventJoin, bad)
	liar := node(t, "liar", Meta{})
	liar.Name = "other"
	c.observe(EventJoin, liar)
	for name, want := range map[string]error{"v2": ErrMetaVersion, "other": ErrBadMeta} {
		m, ok := c.Member(name)
		if !ok || !errors.Is(m.MetaErr, want) || m.Usable() {
			t.Errorf("Member(%s): known %v, MetaErr %v, usable %v; want MetaErr matching %v", name, ok, m.MetaErr, m.Usable(), want)
		}
	}
}

// TestMemberlistLogsRouted: memberlist's log lines become debug records,
// except gossip refused for a wrong key or cluster name, which warns.
func TestMemberlistLogsRouted(t *testing.T) {
	h := &recordHandler{}
	w := &logWriter{log: slog.New(h)}
	for _, line := range []string{
		"[DEBUG] memberlist: Stream connection from=127.0.0.1:5\n",
		"[ERR] memberlist: failed to receive: No installed keys could decrypt the message from=127.0.0.1:6\n",
		"[ERR] memberlist: discarding packet with unacceptable label \"x\": from=127.0.0.1:7\n",
		"no prefix at all\n",
	} {
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	want := []slog.Level{slog.LevelDebug, slog.LevelWarn, slog.LevelWarn, slog.LevelDebug}
	if got := h.levels(); !slices.Equal(got, want) {
		t.Errorf("levels = %v, want %v", got, want)
	}
	if d := h.recs[1].detail; !strings.HasPrefix(d, "failed to receive") {
		t.Errorf("detail = %q, want the text without level and prefix", d)
	}
}

type rec struct {
	level  slog.Level
	detail string
}

type recordHandler struct {
	mu   sync.Mutex
	recs []rec
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "detail" {
			d = a.Value.String()
		}
		return true
	})
	h.recs = append(h.recs, rec{r.Level, d})
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordHandler) levels() []slog.Level {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Level
	for _, r := range h.recs {
		out = append(out, r.level)
	}
	return out
}

// TestRestartIsFailureThenJoin_C5: a member that comes back under the same
// name with a new boot ID before it was declared failed is reported as a
// departure of the old incarnation and a join of the new one.
func TestRestartIsFailureThenJoin_C5(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaving bool
		want    EventType
	}{{"crash", false, EventFail}, {"graceful", true, EventLeave}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTableCluster(t, Config{})
			c.observe(EventJoin, node(t, "r", Meta{BootID: 1, Leaving: tc.leaving}))
			s := c.Subscribe()
			c.observe(EventUpdate, node(t, "r", Meta{BootID: 1, Leaving: tc.leaving, QUICAddr: "127.0.0.1:5"})) // same incarnation
			c.observe(EventUpdate, node(t, "r", Meta{BootID: 2}))                                               // restarted
			evs := collect(t, s, func(e []Event) bool { return len(e) == 3 })
			got := []EventType{evs[0].Type, evs[1].Type, evs[2].Type}
			if want := []EventType{EventUpdate, tc.want, EventJoin}; !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			if evs[1].Member.Meta.BootID != 1 || evs[2].Member.Meta.BootID != 2 {
				t.Errorf("boot ids %d then %d, want 1 then 2", evs[1].Member.Meta.BootID, evs[2].Member.Meta.BootID)
			}
			if m, _ := c.Member("r"); m.State != StateAlive || m.Meta.BootID != 2 {
				t.Errorf("Member(r) = %v boot %d, want alive boot 2", m.State, m.Meta.BootID)
			}
		})
	}
}
