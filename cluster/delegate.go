package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate receives memberlist's callbacks. memberlist calls the event
// methods with its node lock held and the others on its packet loop: none
// of them may block or call back into memberlist. They decode, update the
// member table under Cluster.mu and queue events for the subscriptions'
// goroutines.
type delegate struct{ c *Cluster }

// NodeMeta returns this member's encoded metadata (at most MetaMaxSize
// bytes, which is memberlist's limit).
func (d *delegate) NodeMeta(limit int) []byte {
	b := *d.c.metaBytes.Load()
	if len(b) > limit { // cannot happen: Encode enforces MetaMaxSize
		return nil
	}
	return b
}

// acpp sends no user messages over gossip; node traffic goes over QUIC.
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.c.observe(EventJoin, n) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.c.observe(EventUpdate, n) }

// NotifyLeave cannot rely on n.State: memberlist v0.7 never sets it (the
// state lives in a shadowing field of its private nodeState;
// hashicorp/memberlist#293). observe tells a leave from a failure by the
// Leaving flag the member advertised before it left.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.c.observe(EventFail, n) }

// NotifyConflict: two addresses claim one name; memberlist keeps the one it
// knew. When the name is ours, a peer still knows our previous incarnation
// (we restarted at a new address): the maintenance loop announces us until
// that one is declared failed. Otherwise two processes share a name.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name == d.c.cfg.Name {
		select {
		case d.c.conflict <- struct{}{}:
		default:
		}
		return
	}
	d.c.log.Warn("member name conflict: two nodes use one name; give each node a unique name",
		"member", existing.Name, "addr", addrPort(existing.Addr, existing.Port).String(),
		"other_addr", addrPort(other.Addr, other.Port).String())
}

// observe applies one memberlist event to the member table and queues it
// for every subscription. It never blocks.
func (c *Cluster) observe(t EventType, n *memberlist.Node) {
	m := Member{
		Name:  n.Name,
		Addr:  addrPort(n.Addr, n.Port),
		Local: n.Name == c.cfg.Name,
		Since: time.Now(),
	}
	m.State = StateAlive
	if t == EventFail {
		m.State = StateFailed
	}
	m.Meta, m.MetaErr = DecodeMeta(n.Meta)
	if m.MetaErr == nil && m.Meta.NodeID != n.Name {
		m.MetaErr = fmt.Errorf("%w: node id %q differs from the member name %q", ErrBadMeta, m.Meta.NodeID, n.Name)
		m.Meta = Meta{}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return // memberlist's timers may fire after Shutdown
	}
	prev, had := c.mu.members[n.Name]
	if t == EventFail && (m.Meta.Leaving || (had && prev.Meta.Leaving) || (m.Local && c.left.Load())) {
		t, m.State = EventLeave, StateLeft
	}
	// A member that restarts under the same name before its old
	// incarnation was declared failed reappears to memberlist as an update
	// with a new boot ID. For everyone above this package it is a departure
	// (its allocations are gone, C5) followed by a join.
	if t == EventUpdate && had && prev.State == StateAlive && prev.MetaErr == nil && m.MetaErr == nil &&
		prev.Meta.BootID != m.Meta.BootID {
		old := prev
		old.Since = m.Since
		if old.Meta.Leaving {
			old.State = StateLeft
			c.applyLocked(EventLeave, old)
		} else {
			old.State = StateFailed
			c.applyLocked(EventFail, old)
		}
		t = EventJoin
	}
	c.applyLocked(t, m)
}

// applyLocked records m in the member table and queues the event for every
// subscription.
func (c *Cluster) applyLocked(t EventType, m Member) {
	if prev, had := c.mu.members[m.Name]; had && prev.State != StateAlive && m.State == StateAlive {
		c.mu.departed = slices.DeleteFunc(c.mu.departed, func(s string) bool { return s == m.Name })
	}
	c.mu.members[m.Name] = m
	if m.State != StateAlive {
		c.mu.departed = append(c.mu.departed, m.Name)
		c.pruneDepartedLocked()
	}
	c.mu.seq++
	ev := Event{Type: t, Seq: c.mu.seq, Member: m}
	for s := range c.mu.subs {
		ev := ev
		ev.Member = m.clone()
		if s.enqueueLocked(ev, c.snapshotLocked) {
			c.mu.resyncs++
		}
	}
}

// pruneDepartedLocked forgets the oldest departed members beyond
// Config.DepartedRetention.
func (c *Cluster) pruneDepartedLocked() {
	for len(c.mu.departed) > max(c.cfg.DepartedRetention, 0) {
		name := c.mu.departed[0]
		c.mu.departed = c.mu.departed[1:]
		if m, ok := c.mu.members[name]; ok && m.State != StateAlive && !slices.Contains(c.mu.departed, name) {
			delete(c.mu.members, name)
		}
	}
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

func joinAddr(ip net.IP, port uint16) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

// KeyFingerprint names a gossip key in logs without revealing it: the first
// 8 hex digits of its SHA-256.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// logWriter turns memberlist's log lines ("[LEVEL] memberlist: text") into
// slog records at debug level. Lines that say gossip could not be
// decrypted or carried another cluster's label are warnings: they mean a
// member with a wrong key or cluster name (C6) is knocking.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	lvl := ""
	if strings.HasPrefix(line, "[") {
		if i := strings.IndexByte(line, ']'); i > 0 {
			lvl, line = line[1:i], strings.TrimSpace(line[i+1:])
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	level := slog.LevelDebug
	// `unacceptable label ""` is also what an empty connection (a peer
	// that gave up before writing) looks like: not a warning.
	if gossipRefused(line) && !strings.Contains(line, `label "":`) {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, "memberlist", "level_ml", lvl, "detail", line)
	}
	return len(p), nil
}

func gossipRefused(line string) bool {
	l := strings.ToLower(line)
	for _, s := range []string{
		"could decrypt",
		"decrypt packet failed",
		"unacceptable label",
		"encryption is not configured",
		"remote state is not encrypted",
	} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
