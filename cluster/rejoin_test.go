package cluster_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/cluster/clustertest"
)

// freeAddr returns 127.0.0.1:port with a port that was free a moment ago
// (a tiny race with other processes).
func freeAddr(t *testing.T) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return fmt.Sprintf("127.0.0.1:%d", port), port
}

// TestJoinOwnAddressThenRejoinPromptly_C1: every member may get the same
// Join list, its own address included. The first member up joins only
// itself: it starts a new cluster at once instead of waiting JoinRetry, and
// joins the others within about a second when they come up, even one that
// does not know it (started without Join), not a ReconnectInterval later.
func TestJoinOwnAddressThenRejoinPromptly_C1(t *testing.T) {
	aAddr, aPort := freeAddr(t)
	bAddr, bPort := freeAddr(t)
	cfg := clustertest.Config(t, "a")
	cfg.BindPort = aPort
	cfg.Join = []string{aAddr, bAddr}
	cfg.JoinRetry = 20 * time.Second
	start := time.Now()
	a, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Skipf("start on %s: %v", aAddr, err)
	}
	defer a.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Start with only its own address up took %v; want it to start a new cluster at once", d)
	}
	if n := len(a.Members().Alive()); n != 1 {
		t.Fatalf("a sees %d alive members, want 1", n)
	}
	bcfg := clustertest.Config(t, "b")
	bcfg.BindPort = bPort
	b, err := cluster.Start(ctxT(t), bcfg) // knows nobody
	if err != nil {
		t.Skipf("start on %s: %v", bAddr, err)
	}
	defer b.Close()
	d := clustertest.WaitAlive(t, []*cluster.Cluster{a, b}, 2, 5*time.Second) // ReconnectInterval is 30s
	t.Logf("a joined b %v after b started", d)
}

// TestRestartedMemberRejoinedPromptly_C5: a member restarted on its old
// address without Join (the first node of a cluster, which was started
// without one) is merged again by the others within about a second of
// seeing it go, whether it left (SIGTERM) or failed (SIGKILL). Before, a
// member that left was never retried and a failed one only every
// ReconnectInterval (30 s).
func TestRestartedMemberRejoinedPromptly_C5(t *testing.T) {
	for _, leave := range []bool{true, false} {
		name := "failed"
		if leave {
			name = "left"
		}
		t.Run(name, func(t *testing.T) {
			cs := clustertest.Start(t, 3, func(i int, cfg *cluster.Config) {
				// Only the rejoin may merge the sides: no gossip to the dead.
				cfg.Timing.GossipToTheDeadTime = time.Millisecond
			})
			port := int(cs[0].Addr().Port())
			want := cluster.StateFailed
			if leave {
				want = cluster.StateLeft
				if err := cs[0].Leave(ctxT(t)); err != nil {
					t.Fatal(err)
				}
			}
			cs[0].Close()
			for _, c := range cs[1:] {
				clustertest.WaitState(t, c, cs[0].Name(), want, 10*time.Second)
			}
			cfg := clustertest.Config(t, cs[0].Name())
			cfg.BindPort = port
			cfg.Timing.GossipToTheDeadTime = time.Millisecond
			cfg.ReconnectInterval = -1 // only the others reconnect
			re, err := cluster.Start(ctxT(t), cfg)
			if err != nil {
				t.Skipf("restart on port %d: %v", port, err)
			}
			defer re.Close()
			d := clustertest.WaitAlive(t, []*cluster.Cluster{re, cs[1], cs[2]}, 3, 5*time.Second)
			t.Logf("restarted member merged %v after its start", d)
		})
	}
}

// TestWrongKeyEndsJoinRetryAtOnce_C6: a member whose key the cluster
// refuses does not retry for JoinRetry (a key does not change by waiting):
// Start fails at once with ErrGossipKey, also when its own address is in
// its Join list (which alone would let it start a new cluster).
func TestWrongKeyEndsJoinRetryAtOnce_C6(t *testing.T) {
	cs := clustertest.Start(t, 1, nil)
	selfAddr, selfPort := freeAddr(t)
	cfg := clustertest.Config(t, "intruder")
	cfg.GossipKeys = [][]byte{[]byte("another-key-of-32-bytes-length!!")}
	cfg.BindPort = selfPort
	cfg.Join = []string{selfAddr, cs[0].Addr().String()}
	cfg.JoinRetry = 30 * time.Second
	start := time.Now()
	c, err := cluster.Start(ctxT(t), cfg)
	if err == nil {
		c.Close()
		t.Fatal("Start with a wrong key succeeded")
	}
	if !errors.Is(err, cluster.ErrGossipKey) || !errors.Is(err, cluster.ErrJoin) {
		t.Errorf("Start with a wrong key: %v; want ErrGossipKey and ErrJoin", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Start with a wrong key failed after %v; want at once, not after JoinRetry", d)
	}
	t.Logf("error: %v", err)
}

// TestListenErrorNamesAddress: a gossip port in use is a *ListenError
// naming the address (acpp-node names its flag from it).
func TestListenErrorNamesAddress(t *testing.T) {
	cs := clustertest.Start(t, 1, nil)
	cfg := clustertest.Config(t, "twin")
	cfg.BindPort = int(cs[0].Addr().Port())
	c, err := cluster.Start(ctxT(t), cfg)
	if err == nil {
		c.Close()
		t.Fatal("Start on a port in use succeeded")
	}
	var le *cluster.ListenError
	if !errors.As(err, &le) || le.Addr != cs[0].Addr().String() || le.Advertise {
		t.Errorf("Start on a port in use: %v (%T); want a *ListenError for %s", err, err, cs[0].Addr())
	}
}
