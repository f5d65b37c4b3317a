package cluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// reconnectFor is how long a failed member is retried (serf's default
// reconnect timeout): long enough for any repair, short enough that a
// decommissioned machine is not dialled forever.
const reconnectFor = 24 * time.Hour

// Prompt rejoins (rejoinFast): for rejoinFastFor after this member finds
// itself alone, or after a member departs, the maintenance loop tries again
// every rejoinFastEvery instead of every ReconnectInterval. A node restarted
// on its old address (the common case: a deploy, a crash and a restart by
// systemd) is then back in the cluster within about a second on both sides,
// whichever of them knows the other's address.
const (
	rejoinFastEvery = time.Second
	rejoinFastFor   = time.Minute // as long as acpp-node's default --join-retry
)

// maintain runs until stop, doing three repairs that memberlist leaves to
// its user (serf does the first two):
//
//   - reconnect: every ReconnectInterval (jittered) it tries one random
//     failed member, or the Join addresses when this member is alone.
//     memberlist gossips to failed members only for GossipToTheDeadTime;
//     after a longer partition both sides have written each other off and
//     nothing else would merge them again.
//   - rejoin promptly: every second for the first minute after this member
//     is alone (at start too: its Join list may hold only addresses that
//     were not up yet, or its own) it joins every Join address; for the
//     first minute after a member departs (failed or left) it tries one
//     such member's address every second. A restarted member comes back
//     at its old address.
//   - announce: when a peer still believes this member's name lives at
//     another address (this process restarted at a new address before its
//     old incarnation was declared failed), peers refuse it, and nobody
//     would tell them about the new address until a push/pull happens to
//     pick it. It then pushes its state to a random peer every
//     ProbeInterval until the old incarnation must have been declared
//     failed everywhere.
//
// A negative ReconnectInterval turns off the first two.
func (c *Cluster) maintain(stop <-chan struct{}) {
	defer close(c.maintainDone)
	var reconnect, fast <-chan time.Time
	var rt *time.Timer
	if c.cfg.ReconnectInterval > 0 {
		rt = time.NewTimer(jitter(c.cfg.ReconnectInterval))
		defer rt.Stop()
		reconnect = rt.C
		ft := time.NewTicker(min(rejoinFastEvery, c.cfg.ReconnectInterval))
		defer ft.Stop()
		fast = ft.C
	}
	var fs fastState
	fs.aloneSince = time.Now()
	for {
		select {
		case <-stop:
			return
		case <-reconnect:
			c.reconnectOnce(stop)
			rt.Reset(jitter(c.cfg.ReconnectInterval))
		case now := <-fast:
			c.rejoinFast(stop, now, &fs)
		case <-c.conflict:
			if !c.announce(stop) {
				return
			}
		}
	}
}

// fastState is what rejoinFast remembers between rounds (owned by the
// maintenance loop).
type fastState struct {
	aloneSince time.Time // zero while this member has company
	keyWarned  bool      // a Join address refused our key: said once
}

// rejoinFast is one round of the prompt rejoins (see maintain): the Join
// addresses while this member has been alone for less than rejoinFastFor,
// and one random member that departed less than rejoinFastFor ago.
func (c *Cluster) rejoinFast(stop <-chan struct{}, now time.Time, fs *fastState) {
	var recent []Member
	alive := 0
	c.mu.Lock()
	for _, m := range c.mu.members {
		switch m.State {
		case StateAlive:
			alive++
		case StateFailed, StateLeft:
			if !m.Local && now.Sub(m.Since) < rejoinFastFor {
				recent = append(recent, m)
			}
		}
	}
	c.mu.Unlock()
	if alive > 1 {
		fs.aloneSince = time.Time{}
	} else if fs.aloneSince.IsZero() {
		fs.aloneSince = now
	}
	var addrs []string
	if alive <= 1 && now.Sub(fs.aloneSince) < rejoinFastFor {
		self := c.Addr().String()
		for _, a := range c.cfg.Join {
			if a != self { // our own address answers, and changes nothing
				addrs = append(addrs, a)
			}
		}
	}
	var departed Member
	if len(recent) > 0 {
		departed = recent[rand.N(len(recent))]
		addrs = append(addrs, departed.Addr.String())
	}
	if len(addrs) == 0 {
		return
	}
	_, err := c.joinAll(stop, addrs...)
	if after := len(c.Members().Alive()); after > alive {
		switch {
		case alive <= 1:
			c.log.Info("rejoined the cluster", "members", after)
		default:
			c.log.Info("reconnected to a departed member", "member", departed.Name, "addr", departed.Addr.String())
		}
	}
	if errors.Is(err, ErrGossipKey) && !fs.keyWarned {
		fs.keyWarned = true
		c.log.Warn("a member refuses this node's gossip key: the two have different keys (docs/CLUSTER.md, key rotation)", "error", err)
	}
}

// announce pushes this member's state to a random peer every ProbeInterval
// until the old incarnation must have been declared failed everywhere
// (twice the detection bound after the last conflict seen). It returns
// false when stop closed.
func (c *Cluster) announce(stop <-chan struct{}) bool {
	c.log.Info("peers know this node's name at another address (an earlier incarnation): announcing this one until they accept it")
	window := 2 * c.cfg.FailureDetectionTimeout(max(c.Stats().Alive, 2))
	until := time.Now().Add(window)
	for time.Now().Before(until) {
		c.announceOnce(stop)
		t := time.NewTimer(c.cfg.Timing.ProbeInterval)
		select {
		case <-stop:
			t.Stop()
			return false
		case <-t.C:
		}
		select {
		case <-c.conflict: // seen again: extend the window
			until = time.Now().Add(window)
		default:
		}
	}
	return true
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// reconnectOnce makes one reconnect attempt, bounded by Timing.TCPTimeout.
func (c *Cluster) reconnectOnce(stop <-chan struct{}) {
	var failed []Member
	alive := 0
	c.mu.Lock()
	for _, m := range c.mu.members {
		switch m.State {
		case StateFailed:
			if time.Since(m.Since) < reconnectFor {
				failed = append(failed, m)
			}
		case StateAlive:
			alive++
		}
	}
	c.mu.Unlock()
	switch {
	case len(failed) > 0:
		m := failed[rand.N(len(failed))]
		if c.joinFromLoop(stop, m.Addr.String()) {
			c.log.Info("reconnected to a failed member", "member", m.Name, "addr", m.Addr.String())
		}
	case alive <= 1 && len(c.cfg.Join) > 0:
		addr := c.cfg.Join[rand.N(len(c.cfg.Join))]
		if c.joinFromLoop(stop, addr) {
			c.log.Info("rejoined while alone", "addr", addr)
		}
	}
}

// announceOnce pushes this member's state to one random live peer.
func (c *Cluster) announceOnce(stop <-chan struct{}) {
	var peers []Member
	c.mu.Lock()
	for _, m := range c.mu.members {
		if m.State == StateAlive && !m.Local {
			peers = append(peers, m)
		}
	}
	c.mu.Unlock()
	if len(peers) == 0 {
		return
	}
	m := peers[rand.N(len(peers))]
	c.joinFromLoop(stop, m.Addr.String())
}

// joinFromLoop joins addr (a push/pull state exchange), giving up when stop
// closes. It reports whether it got through.
func (c *Cluster) joinFromLoop(stop <-chan struct{}, addr string) bool {
	n, _ := c.joinAll(stop, addr)
	return n > 0
}

// joinAll joins addrs at once, quietly (failures are logged at debug
// level), giving up when stop closes.
func (c *Cluster) joinAll(stop <-chan struct{}, addrs ...string) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	n, err := c.join(ctx, false, addrs...)
	if err != nil {
		c.log.Debug("state exchange failed", "addrs", addrs, "error", err)
	}
	return n, err
}
