package cluster

import (
	"context"
	"math/rand/v2"
	"time"
)

// reconnectLoop periodically tries to reach a failed member, or the Join
// addresses when this member is alone, until Close. memberlist keeps
// gossiping to failed members only for GossipToTheDeadTime; after a longer
// partition both sides have written each other off and nothing would merge
// them again. (serf does the same with its reconnect loop.)
func (c *Cluster) reconnectLoop(stop <-chan struct{}) {
	defer close(c.reconnectDone)
	// Jitter the period so members do not try in lockstep.
	period := c.cfg.ReconnectInterval
	t := time.NewTimer(jitter(period))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		c.reconnectOnce(stop)
		t.Reset(jitter(period))
	}
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// reconnectFor is how long a failed member is retried (serf's default
// reconnect timeout): long enough for any repair, short enough that a
// decommissioned machine is not dialled forever.
const reconnectFor = 24 * time.Hour

// reconnectOnce makes one attempt, bounded by Timing.TCPTimeout.
func (c *Cluster) reconnectOnce(stop <-chan struct{}) {
	var target, why string
	c.mu.Lock()
	var failed []Member
	alive := 0
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
		target, why = m.Addr.String(), "reconnect to failed member "+m.Name
	case alive <= 1 && len(c.cfg.Join) > 0:
		target, why = c.cfg.Join[rand.N(len(c.cfg.Join))], "rejoin while alone"
	default:
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	n, err := c.Join(ctx, target)
	if n > 0 {
		c.log.Info("reconnected", "addr", target, "reason", why)
	} else {
		c.log.Debug("reconnect failed", "addr", target, "reason", why, "error", err)
	}
}
