package cluster

import (
	"context"
	"math/rand/v2"
	"time"
)

// reconnectFor is how long a failed member is retried (serf's default
// reconnect timeout): long enough for any repair, short enough that a
// decommissioned machine is not dialled forever.
const reconnectFor = 24 * time.Hour

// maintain runs until stop, doing two repairs that memberlist leaves to its
// user (serf does the same):
//
//   - reconnect: every ReconnectInterval (jittered) it tries one random
//     failed member, or the Join addresses when this member is alone.
//     memberlist gossips to failed members only for GossipToTheDeadTime;
//     after a longer partition both sides have written each other off and
//     nothing else would merge them again.
//   - announce: when a peer still believes this member's name lives at
//     another address (this process restarted at a new address before its
//     old incarnation was declared failed), peers refuse it, and nobody
//     would tell them about the new address until a push/pull happens to
//     pick it. It then pushes its state to a random peer every
//     ProbeInterval until the old incarnation must have been declared
//     failed everywhere.
func (c *Cluster) maintain(stop <-chan struct{}) {
	defer close(c.maintainDone)
	var reconnect <-chan time.Time
	var rt *time.Timer
	if c.cfg.ReconnectInterval > 0 {
		rt = time.NewTimer(jitter(c.cfg.ReconnectInterval))
		defer rt.Stop()
		reconnect = rt.C
	}
	for {
		select {
		case <-stop:
			return
		case <-reconnect:
			c.reconnectOnce(stop)
			rt.Reset(jitter(c.cfg.ReconnectInterval))
		case <-c.conflict:
			if !c.announce(stop) {
				return
			}
		}
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	n, err := c.Join(ctx, addr)
	if n == 0 {
		c.log.Debug("state exchange failed", "addr", addr, "error", err)
	}
	return n > 0
}
