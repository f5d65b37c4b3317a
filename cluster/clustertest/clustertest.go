package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/internal/testlog"
)

// Key is the gossip key of test clusters (AES-256). It is public: never use
// it outside tests.
var Key = []byte("acpp-clustertest-key-not-secret!")

// Config returns the local preset for a member named name: 127.0.0.1, a
// free port, Key, and a logger that writes to t until t ends.
func Config(t testing.TB, name string) cluster.Config {
	cfg := cluster.DefaultLocalConfig()
	cfg.Name = name
	cfg.GossipKeys = [][]byte{Key}
	cfg.Logger = Logger(t, slog.LevelInfo)
	return cfg
}

// Logger returns a logger that writes to t's output at level and above,
// and goes quiet when t ends (memberlist's handlers may still log then).
func Logger(t testing.TB, level slog.Level) *slog.Logger { return testlog.New(t, level) }

// Start starts n members named m0, m1, ... with Config, lets mod adjust
// each config (mod may be nil), joins members 1..n-1 to member 0 and waits
// until every member sees n alive members. The members are closed when t
// ends.
func Start(t testing.TB, n int, mod func(i int, cfg *cluster.Config)) []*cluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := make([]*cluster.Cluster, n)
	for i := range n {
		cfg := Config(t, fmt.Sprintf("m%d", i))
		if i > 0 {
			cfg.Join = []string{cs[0].Addr().String()}
		}
		if mod != nil {
			mod(i, &cfg)
		}
		c, err := cluster.Start(ctx, cfg)
		if err != nil {
			t.Fatalf("start member %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	WaitAlive(t, cs, n, 30*time.Second)
	return cs
}

// WaitAlive waits until each of cs sees exactly n alive members, failing t
// after timeout. It returns how long that took.
func WaitAlive(t testing.TB, cs []*cluster.Cluster, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, c := range cs {
		_, err := c.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Alive()) == n })
		if err != nil {
			for _, c := range cs {
				t.Logf("%s sees %d alive: %v", c.Name(), len(c.Members().Alive()), names(c.Members().Alive()))
			}
			t.Fatalf("members did not converge to %d alive within %v: %v", n, timeout, err)
		}
	}
	return time.Since(start)
}

// WaitState waits until c sees member name in state st, failing t after
// timeout. It returns how long that took.
func WaitState(t testing.TB, c *cluster.Cluster, name string, st cluster.State, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := c.WaitFor(ctx, func(s cluster.Snapshot) bool {
		m, ok := s.Member(name)
		return ok && m.State == st
	})
	if err != nil {
		m, ok := c.Member(name)
		t.Fatalf("%s: member %s not %v within %v (known %v, state %v): %v", c.Name(), name, st, timeout, ok, m.State, err)
	}
	return time.Since(start)
}

func names(ms []cluster.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}
