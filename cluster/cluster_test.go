package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/cluster/clustertest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// devicesOf gives member i a distinct device summary.
func devicesOf(i int) []cluster.DeviceSummary {
	ds := []cluster.DeviceSummary{{Kind: cluster.DeviceCPU, Count: 1, MemBytes: uint64(i+1) << 30, Unified: true}}
	if i > 0 {
		ds = append(ds, cluster.DeviceSummary{Kind: cluster.DeviceCUDA, Count: uint32(i), MemBytes: uint64(i) * 80 << 30})
	}
	return ds
}

// TestThreeNodesSeeEachOthersDevices_C1: three members join by naming one
// member, and each sees every member alive with its devices, QUIC address,
// protocol version and boot ID.
func TestThreeNodesSeeEachOthersDevices_C1(t *testing.T) {
	cs := clustertest.Start(t, 3, func(i int, cfg *cluster.Config) {
		cfg.Devices = devicesOf(i)
		cfg.QUICAddr = "127.0.0.1:" + []string{"7001", "7002", "7003"}[i]
		cfg.ProtocolVersion = 1
	})
	for _, c := range cs {
		snap := c.Members()
		if len(snap.Members) != 3 {
			t.Fatalf("%s: Members() has %d members, want 3", c.Name(), len(snap.Members))
		}
		if !slices.IsSortedFunc(snap.Members, func(a, b cluster.Member) int { return cmpStr(a.Name, b.Name) }) {
			t.Errorf("%s: snapshot not sorted by name", c.Name())
		}
		for i, other := range cs {
			m, ok := snap.Member(other.Name())
			if !ok {
				t.Fatalf("%s does not see %s", c.Name(), other.Name())
			}
			if m.State != cluster.StateAlive || m.MetaErr != nil || !m.Usable() {
				t.Errorf("%s sees %s state %v meta error %v, want alive and usable", c.Name(), m.Name, m.State, m.MetaErr)
			}
			if !slices.Equal(m.Meta.Devices, devicesOf(i)) {
				t.Errorf("%s sees %s devices %+v, want %+v", c.Name(), m.Name, m.Meta.Devices, devicesOf(i))
			}
			if want := other.LocalMeta(); m.Meta.QUICAddr != want.QUICAddr || m.Meta.BootID != want.BootID || m.Meta.ProtocolVersion != 1 {
				t.Errorf("%s sees %s meta %+v, want %+v", c.Name(), m.Name, m.Meta, want)
			}
			if m.Addr != other.Addr() {
				t.Errorf("%s sees %s at %v, want %v", c.Name(), m.Name, m.Addr, other.Addr())
			}
			if m.Local != (c == other) {
				t.Errorf("%s sees %s Local=%v", c.Name(), m.Name, m.Local)
			}
		}
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestSilentMemberDetectedAsFailed_C5: a member that closes without leaving
// is declared failed (not left) by the others within the configured
// detection time, and the subscription says so with EventFail.
func TestSilentMemberDetectedAsFailed_C5(t *testing.T) {
	cs := clustertest.Start(t, 3, nil)
	sub := cs[0].Subscribe()
	defer sub.Close()
	victim := cs[2].Name()
	bound := cs[0].Config().FailureDetectionTimeout(3)

	start := time.Now()
	cs[2].Close()
	var got cluster.Event
	deadline := time.After(bound + time.Second) // slack for a loaded CI machine
wait:
	for {
		select {
		case ev := <-sub.Events():
			if ev.Member.Name == victim && (ev.Type == cluster.EventFail || ev.Type == cluster.EventLeave) {
				got = ev
				break wait
			}
		case <-deadline:
			t.Fatalf("%s not detected as failed within %v (bound %v + 1s slack)", victim, time.Since(start), bound)
		}
	}
	elapsed := time.Since(start)
	t.Logf("failure detected after %v (bound %v)", elapsed, bound)
	if got.Type != cluster.EventFail || got.Member.State != cluster.StateFailed {
		t.Fatalf("event %v state %v, want fail/failed: a silent member is a failure, not a leave", got.Type, got.Member.State)
	}
	// The other survivor agrees, and the snapshot keeps the failed member.
	clustertest.WaitState(t, cs[1], victim, cluster.StateFailed, bound+time.Second)
	if m, ok := cs[0].Members().Member(victim); !ok || m.State != cluster.StateFailed {
		t.Errorf("snapshot: %s known=%v state %v, want failed", victim, ok, m.State)
	}
	if n := len(cs[0].Members().Alive()); n != 2 {
		t.Errorf("alive members = %d, want 2", n)
	}
	if st := cs[0].Stats(); st.Alive != 2 || st.Failed != 1 || st.Left != 0 || st.Events < 4 {
		t.Errorf("Stats() = %+v, want 2 alive, 1 failed, at least 4 events", st)
	}
}

// TestGracefulLeaveSeenAsLeave_C1: Leave then Close is seen as a leave, not
// a failure.
func TestGracefulLeaveSeenAsLeave_C1(t *testing.T) {
	cs := clustertest.Start(t, 3, nil)
	sub := cs[0].Subscribe()
	defer sub.Close()
	leaver := cs[1].Name()
	if err := cs[1].Leave(ctxT(t)); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := cs[1].Leave(ctxT(t)); err != nil {
		t.Fatalf("second Leave: %v, want nil (no-op)", err)
	}
	if _, err := cs[1].Join(ctxT(t), cs[0].Addr().String()); !errors.Is(err, cluster.ErrLeft) {
		t.Errorf("Join after Leave: %v, want ErrLeft", err)
	}
	cs[1].Close()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-sub.Events():
			if ev.Member.Name != leaver {
				continue
			}
			if ev.Type == cluster.EventUpdate {
				if !ev.Member.Meta.Leaving {
					t.Errorf("update before the leave without Meta.Leaving: %+v", ev.Member.Meta)
				}
				continue
			}
			if ev.Type != cluster.EventLeave || ev.Member.State != cluster.StateLeft {
				t.Fatalf("event %v state %v, want leave/left", ev.Type, ev.Member.State)
			}
			clustertest.WaitState(t, cs[2], leaver, cluster.StateLeft, 5*time.Second)
			return
		case <-timeout:
			t.Fatal("no leave event within 10s")
		}
	}
}

// TestUpdateDevicesPropagates_C1: a member that changes its devices is
// seen with the new summary, through an EventUpdate.
func TestUpdateDevicesPropagates_C1(t *testing.T) {
	cs := clustertest.Start(t, 2, nil)
	sub := cs[1].Subscribe()
	defer sub.Close()
	want := []cluster.DeviceSummary{{Kind: cluster.DeviceCUDA, Count: 2, MemBytes: 160 << 30}}
	if err := cs[0].UpdateDevices(ctxT(t), want); err != nil {
		t.Fatalf("UpdateDevices: %v", err)
	}
	if got := cs[0].LocalMeta().Devices; !slices.Equal(got, want) {
		t.Errorf("LocalMeta().Devices = %+v, want %+v", got, want)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-sub.Events():
			if ev.Type == cluster.EventUpdate && ev.Member.Name == cs[0].Name() {
				if !slices.Equal(ev.Member.Meta.Devices, want) {
					t.Fatalf("update carries %+v, want %+v", ev.Member.Meta.Devices, want)
				}
				if m, _ := cs[1].Member(cs[0].Name()); !slices.Equal(m.Meta.Devices, want) {
					t.Fatalf("Member() = %+v, want %+v", m.Meta.Devices, want)
				}
				return
			}
		case <-timeout:
			t.Fatal("no update event within 10s")
		}
	}
}

// TestMetaOver512BytesRefused_C1: metadata that does not fit memberlist's
// 512 bytes is refused at Start and at UpdateNode, and an update that fails
// leaves the advertised metadata as it was.
func TestMetaOver512BytesRefused_C1(t *testing.T) {
	many := make([]cluster.DeviceSummary, cluster.MaxDeviceKinds)
	for i := range many {
		many[i] = cluster.DeviceSummary{Kind: cluster.DeviceKind(i + 1), Count: 1 << 31, MemBytes: 1 << 63}
	}
	long := "h" + string(make([]byte, 0)) // built below
	for len(long) < 240 {
		long += "x"
	}
	cfg := clustertest.Config(t, "big")
	cfg.Devices = many
	cfg.QUICAddr = long + ":7000"
	_, err := cluster.Start(ctxT(t), cfg)
	if !errors.Is(err, cluster.ErrInvalidConfig) || !errors.Is(err, cluster.ErrMetaTooLarge) {
		t.Fatalf("Start with oversized metadata: %v, want ErrInvalidConfig and ErrMetaTooLarge", err)
	}

	c, err := cluster.Start(ctxT(t), clustertest.Config(t, "small"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := c.LocalMeta()
	err = c.UpdateNode(ctxT(t), func(m *cluster.Meta) {
		m.Devices = many
		m.QUICAddr = long + ":7000"
	})
	if !errors.Is(err, cluster.ErrMetaTooLarge) {
		t.Fatalf("UpdateNode oversized: %v, want ErrMetaTooLarge", err)
	}
	if after := c.LocalMeta(); after.QUICAddr != before.QUICAddr || len(after.Devices) != len(before.Devices) {
		t.Errorf("metadata changed by a refused update: %+v", after)
	}
	if err := c.UpdateNode(ctxT(t), func(m *cluster.Meta) { m.NodeID = "other" }); !errors.Is(err, cluster.ErrBadMeta) {
		t.Errorf("UpdateNode changing NodeID: %v, want ErrBadMeta", err)
	}
}

// TestWrongGossipKeyCannotJoin_C6: a member with another key, or with no
// encryption, cannot join an encrypted cluster: Join fails with an error
// that names the address and the key, and the cluster never lists it.
func TestWrongGossipKeyCannotJoin_C6(t *testing.T) {
	cs := clustertest.Start(t, 2, nil)
	for _, tc := range []struct {
		name string
		mod  func(cfg *cluster.Config)
		key  bool // the refusal is told apart as ErrGossipKey
	}{
		{"wrong-key", func(cfg *cluster.Config) { cfg.GossipKeys = [][]byte{[]byte("another-key-of-32-bytes-length!!")} }, true},
		{"no-encryption", func(cfg *cluster.Config) { cfg.GossipKeys = nil; cfg.InsecureNoEncryption = true }, true},
		// Another cluster name is a connection closed by the peer (EOF):
		// not distinguishable from a peer that went away.
		{"other-cluster-name", func(cfg *cluster.Config) { cfg.ClusterName = "other" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clustertest.Config(t, "intruder-"+tc.name)
			tc.mod(&cfg)
			c, err := cluster.Start(ctxT(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			addr := cs[0].Addr().String()
			n, err := c.Join(ctxT(t), addr)
			var je *cluster.JoinError
			if n != 0 || !errors.As(err, &je) || !errors.Is(err, cluster.ErrJoin) {
				t.Fatalf("Join = %d, %v; want 0 and a *JoinError", n, err)
			}
			if len(je.Failed) != 1 || je.Failed[0].Addr != addr {
				t.Errorf("JoinError.Failed = %+v, want the one address %s", je.Failed, addr)
			}
			if got := errors.Is(err, cluster.ErrGossipKey); got != tc.key {
				t.Errorf("errors.Is(%v, ErrGossipKey) = %v, want %v", err, got, tc.key)
			}
			t.Logf("join error: %v", err)
			// Give gossip a few rounds: the intruder must never appear.
			time.Sleep(5 * cs[0].Config().Timing.ProbeInterval)
			for _, m := range cs {
				if _, ok := m.Member(cfg.Name); ok {
					t.Errorf("%s lists the intruder %s", m.Name(), cfg.Name)
				}
			}
			if len(c.Members().Alive()) != 1 {
				t.Errorf("intruder sees %d members, want only itself", len(c.Members().Alive()))
			}
		})
	}
}

// TestEncryptionRequired_C6: a config without keys is refused unless
// encryption is explicitly disabled.
func TestEncryptionRequired_C6(t *testing.T) {
	cfg := cluster.DefaultLocalConfig()
	cfg.Name = "n"
	_, err := cluster.Start(ctxT(t), cfg)
	if !errors.Is(err, cluster.ErrInvalidConfig) {
		t.Fatalf("Start without keys: %v, want ErrInvalidConfig", err)
	}
	cfg.InsecureNoEncryption = true
	c, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("Start with InsecureNoEncryption: %v", err)
	}
	defer c.Close()
	if _, err := c.Keys(); !errors.Is(err, cluster.ErrEncryptionDisabled) {
		t.Errorf("Keys() on an unencrypted member: %v, want ErrEncryptionDisabled", err)
	}
	if err := c.InstallKey(clustertest.Key); !errors.Is(err, cluster.ErrEncryptionDisabled) {
		t.Errorf("InstallKey on an unencrypted member: %v, want ErrEncryptionDisabled", err)
	}
}

// TestKeyRotation_C6 follows docs/CLUSTER.md's rotation on a running
// cluster: install the new key everywhere, make it primary everywhere,
// remove the old one everywhere. Afterwards a member with only the new key
// joins, and one with only the old key cannot.
func TestKeyRotation_C6(t *testing.T) {
	cs := clustertest.Start(t, 3, nil)
	oldKey := clustertest.Key
	newKey := []byte("rotated-gossip-key-32-bytes-long")
	steps := [][][]byte{{oldKey, newKey}, {newKey, oldKey}, {newKey}}
	for i, keys := range steps {
		for _, c := range cs {
			if err := c.SetKeys(keys); err != nil {
				t.Fatalf("step %d: %s SetKeys: %v", i+1, c.Name(), err)
			}
		}
	}
	for _, c := range cs {
		keys, err := c.Keys()
		if err != nil || len(keys) != 1 || string(keys[0]) != string(newKey) {
			t.Fatalf("%s keys after rotation: %d keys, err %v; want only the new key", c.Name(), len(keys), err)
		}
	}
	// The cluster kept gossiping throughout: nobody was declared failed.
	for _, c := range cs {
		if n := len(c.Members().Alive()); n != 3 {
			t.Fatalf("%s sees %d alive after rotation, want 3", c.Name(), n)
		}
	}
	join := func(name string, key []byte) error {
		cfg := clustertest.Config(t, name)
		cfg.GossipKeys = [][]byte{key}
		cfg.Join = []string{cs[1].Addr().String()}
		c, err := cluster.Start(ctxT(t), cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := join("new-key", newKey); err != nil {
		t.Errorf("member with the new key: %v", err)
	}
	if err := join("old-key", oldKey); !errors.Is(err, cluster.ErrJoin) {
		t.Errorf("member with the old key: %v, want ErrJoin", err)
	}
}

// TestKeyOperationsRefuseBadInput_C6: key methods check their input and
// the primary-key rule.
func TestKeyOperationsRefuseBadInput_C6(t *testing.T) {
	c, err := cluster.Start(ctxT(t), clustertest.Config(t, "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := []byte("0123456789abcdef")
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"install short key", func() error { return c.InstallKey([]byte("short")) }},
		{"use unknown key", func() error { return c.UseKey(other) }},
		{"remove primary", func() error { return c.RemoveKey(clustertest.Key) }},
		{"set no keys", func() error { return c.SetKeys(nil) }},
		{"set bad key", func() error { return c.SetKeys([][]byte{{1, 2}}) }},
	} {
		if err := tc.op(); !errors.Is(err, cluster.ErrKey) {
			t.Errorf("%s: %v, want ErrKey", tc.name, err)
		}
	}
	if err := c.InstallKey(other); err != nil {
		t.Fatalf("InstallKey: %v", err)
	}
	if err := c.RemoveKey(other); err != nil {
		t.Fatalf("RemoveKey of a secondary key: %v", err)
	}
}

// TestJoinErrorNamesFailedAddresses_C1: Join reports each address that
// failed, even when another succeeded.
func TestJoinErrorNamesFailedAddresses_C1(t *testing.T) {
	cs := clustertest.Start(t, 2, nil)
	cfg := clustertest.Config(t, "joiner")
	cfg.Timing.TCPTimeout = time.Second
	c, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dead := "127.0.0.1:1" // nothing listens on port 1
	n, err := c.Join(ctxT(t), dead, cs[0].Addr().String())
	var je *cluster.JoinError
	if n != 1 || !errors.As(err, &je) || len(je.Failed) != 1 || je.Failed[0].Addr != dead || je.Joined != 1 {
		t.Fatalf("Join = %d, %v; want 1 joined and %s failed", n, err, dead)
	}
	if _, err := c.Join(ctxT(t)); !errors.Is(err, cluster.ErrJoin) {
		t.Errorf("Join with no address: %v, want ErrJoin", err)
	}
	clustertest.WaitAlive(t, []*cluster.Cluster{c, cs[0], cs[1]}, 3, 10*time.Second)
}

// TestCloseIsIdempotentAndFinal: Close twice is safe; calls after Close
// fail with ErrClosed; subscriptions end; Context is cancelled with
// ErrClosed as cause.
func TestCloseIsIdempotentAndFinal(t *testing.T) {
	c, err := cluster.Start(ctxT(t), clustertest.Config(t, "x"))
	if err != nil {
		t.Fatal(err)
	}
	sub := c.Subscribe()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, ok := <-sub.Events(); ok {
		t.Error("subscription still open after Close")
	}
	sub.Close()
	if !errors.Is(context.Cause(c.Context()), cluster.ErrClosed) {
		t.Errorf("Context cause = %v, want ErrClosed", context.Cause(c.Context()))
	}
	if _, err := c.Join(ctxT(t), "127.0.0.1:1"); !errors.Is(err, cluster.ErrClosed) {
		t.Errorf("Join after Close: %v, want ErrClosed", err)
	}
	if err := c.Leave(ctxT(t)); !errors.Is(err, cluster.ErrClosed) {
		t.Errorf("Leave after Close: %v, want ErrClosed", err)
	}
	if err := c.UpdateDevices(ctxT(t), nil); !errors.Is(err, cluster.ErrClosed) {
		t.Errorf("UpdateDevices after Close: %v, want ErrClosed", err)
	}
	s2 := c.Subscribe()
	if _, ok := <-s2.Events(); ok {
		t.Error("Subscribe after Close gave an open subscription")
	}
	s2.Close()
}

// TestRestartedMemberSeenAsNewIncarnation_C5: a member that crashes and
// restarts under the same name and address, faster than failure detection,
// is reported as a failure of the old boot and a join of the new one, so
// nobody mistakes the new process for the old one (whose allocations are
// gone).
func TestRestartedMemberSeenAsNewIncarnation_C5(t *testing.T) {
	cs := clustertest.Start(t, 3, nil)
	sub := cs[0].Subscribe()
	defer sub.Close()
	oldBoot := cs[2].LocalMeta().BootID
	port := int(cs[2].Addr().Port())
	cs[2].Close()
	cfg := clustertest.Config(t, cs[2].Name())
	cfg.BindPort = port
	cfg.Join = []string{cs[0].Addr().String()}
	re, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("restart on port %d: %v", port, err)
	}
	defer re.Close()
	newBoot := re.LocalMeta().BootID
	var sawOld bool
	// Generous: once, under the whole suite's load on two cores, the new
	// boot had not been seen after 15 s (refutation gossip lost; the
	// failed member's address is retried every second meanwhile).
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-sub.Events():
			if ev.Member.Name != re.Name() {
				continue
			}
			switch {
			case ev.Type == cluster.EventFail && ev.Member.Meta.BootID == oldBoot:
				sawOld = true
			case ev.Type == cluster.EventJoin && ev.Member.Meta.BootID == newBoot:
				if !sawOld {
					t.Fatal("join of the new boot before the failure of the old one")
				}
				return
			case ev.Member.Meta.BootID == newBoot && ev.Type != cluster.EventUpdate:
				t.Fatalf("new boot arrived as %v, want join", ev.Type)
			}
		case <-timeout:
			m, _ := cs[0].Member(re.Name())
			t.Fatalf("restart not reported within 30s (failure seen: %v; member now %v boot %d, old boot %d, new boot %d)", sawOld, m.State, m.Meta.BootID, oldBoot, newBoot)
		}
	}
}

// TestJoinHonoursContext: Join returns when its context ends, even if the
// address accepts the connection and never answers; Close then waits for
// the abandoned attempt, which TCPTimeout bounds.
func TestJoinHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn) // never answer
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-acceptDone
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()

	cfg := clustertest.Config(t, "patient")
	cfg.Timing.TCPTimeout = time.Second
	c, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	n, err := c.Join(ctx, ln.Addr().String())
	if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join = %d, %v; want 0, context.DeadlineExceeded", n, err)
	}
	if d := time.Since(start); d > 700*time.Millisecond {
		t.Errorf("Join returned after %v, want about the context's 100ms", d)
	}
	start = time.Now()
	c.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v, want at most about TCPTimeout (1s)", d)
	}
}

// TestCloseStopsGoroutines: after Close, no goroutine of a member is left
// once memberlist's handlers have ended (goleak retries for a while).
func TestCloseStopsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cs := make([]*cluster.Cluster, 3)
	for i := range cs {
		cfg := clustertest.Config(t, fmt.Sprintf("g%d", i))
		if i > 0 {
			cfg.Join = []string{cs[0].Addr().String()}
		}
		c, err := cluster.Start(ctxT(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	clustertest.WaitAlive(t, cs, 3, 10*time.Second)
	subs := []*cluster.Subscription{cs[0].Subscribe(), cs[1].Subscribe()}
	subs[0].Close()
	if err := cs[1].Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		c.Close()
	}
}

// TestStartOnBusyPortFails: a gossip port that is taken is a clear error,
// and the failed Start leaves nothing running.
func TestStartOnBusyPortFails(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := cluster.Start(ctxT(t), clustertest.Config(t, "first"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := clustertest.Config(t, "second")
	cfg.BindPort = int(c.Addr().Port())
	_, err = cluster.Start(ctxT(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "pick a free BindPort") {
		t.Fatalf("Start on a busy port: %v, want an error that says to pick a free BindPort", err)
	}
}

// TestWaitFor_C1: WaitFor returns once the condition holds, and honours
// its context and Close.
func TestWaitFor_C1(t *testing.T) {
	cs := clustertest.Start(t, 2, nil)
	done := make(chan error, 1)
	go func() {
		snap, err := cs[0].WaitFor(ctxT(t), func(s cluster.Snapshot) bool {
			m, ok := s.Member("late")
			return ok && m.State == cluster.StateAlive
		})
		if err == nil && len(snap.Alive()) != 3 {
			err = fmt.Errorf("snapshot has %d alive, want 3", len(snap.Alive()))
		}
		done <- err
	}()
	cfg := clustertest.Config(t, "late")
	cfg.Join = []string{cs[1].Addr().String()}
	late, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitFor: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitFor did not return after the member joined")
	}

	never := func(cluster.Snapshot) bool { return false }
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := cs[0].WaitFor(ctx, never); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitFor past its deadline: %v, want DeadlineExceeded", err)
	}
	go func() { time.Sleep(50 * time.Millisecond); late.Close() }()
	if _, err := late.WaitFor(context.Background(), never); !errors.Is(err, cluster.ErrClosed) {
		t.Errorf("WaitFor on a closed cluster: %v, want ErrClosed", err)
	}
}

// TestJoinRetryWaitsForSeed_C1: a member started before its seed keeps
// trying for JoinRetry and joins once the seed is up; without JoinRetry it
// fails at once.
func TestJoinRetryWaitsForSeed_C1(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // the seed will bind it (a tiny race with other processes)
	seedAddr := fmt.Sprintf("127.0.0.1:%d", port)

	cfg := clustertest.Config(t, "early")
	cfg.Join = []string{seedAddr}
	if _, err := cluster.Start(ctxT(t), cfg); !errors.Is(err, cluster.ErrJoin) {
		t.Fatalf("Start before the seed without JoinRetry: %v, want ErrJoin", err)
	}

	cfg.JoinRetry = 10 * time.Second
	type result struct {
		c   *cluster.Cluster
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := cluster.Start(ctxT(t), cfg)
		res <- result{c, err}
	}()
	time.Sleep(300 * time.Millisecond)
	seedCfg := clustertest.Config(t, "seed")
	seedCfg.BindPort = port
	seed, err := cluster.Start(ctxT(t), seedCfg)
	if err != nil {
		t.Skipf("seed could not bind port %d (taken meanwhile): %v", port, err)
	}
	defer seed.Close()
	r := <-res
	if r.err != nil {
		t.Fatalf("Start with JoinRetry: %v", r.err)
	}
	defer r.c.Close()
	clustertest.WaitAlive(t, []*cluster.Cluster{seed, r.c}, 2, 5*time.Second)
}

// TestReconnectHealsPartition_C5: when the two sides of a partition have
// written each other off (here: a member restarted alone on its old
// address, and the other side declared it failed), the reconnect loop
// merges them again.
func TestReconnectHealsPartition_C5(t *testing.T) {
	cs := clustertest.Start(t, 2, func(i int, cfg *cluster.Config) {
		cfg.ReconnectInterval = 200 * time.Millisecond
		// memberlist stops gossiping to the failed member at once, so only
		// the reconnect loop can merge the two sides.
		cfg.Timing.GossipToTheDeadTime = time.Millisecond
	})
	port := int(cs[1].Addr().Port())
	cs[1].Close()
	clustertest.WaitState(t, cs[0], cs[1].Name(), cluster.StateFailed, 10*time.Second)
	cfg := clustertest.Config(t, cs[1].Name())
	cfg.BindPort = port
	cfg.ReconnectInterval = -1 // only the other side reconnects
	alone, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Skipf("restart on port %d: %v", port, err)
	}
	defer alone.Close()
	clustertest.WaitAlive(t, []*cluster.Cluster{cs[0], alone}, 2, 10*time.Second)
}

// TestRestartOnNewAddress_C5: a member that restarts under the same name at
// another address (a new port, a rescheduled container) is accepted as
// soon as its old incarnation is declared failed, not a push/pull period
// later.
func TestRestartOnNewAddress_C5(t *testing.T) {
	cs := clustertest.Start(t, 3, func(i int, cfg *cluster.Config) {
		cfg.Timing.PushPullInterval = time.Minute // only gossip may carry it
	})
	sub := cs[0].Subscribe()
	defer sub.Close()
	oldAddr := cs[2].Addr()
	cs[2].Close()
	cfg := clustertest.Config(t, cs[2].Name())
	cfg.Timing.PushPullInterval = time.Minute
	cfg.Join = []string{cs[0].Addr().String()}
	re, err := cluster.Start(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	if re.Addr() == oldAddr {
		t.Skip("the restarted member got its old port back")
	}
	start := time.Now()
	bound := cs[0].Config().FailureDetectionTimeout(3) + time.Second
	for _, c := range cs[:2] {
		_, err := c.WaitFor(ctxT(t), func(s cluster.Snapshot) bool {
			m, ok := s.Member(re.Name())
			return ok && m.State == cluster.StateAlive && m.Addr == re.Addr()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > bound {
		t.Errorf("restarted member accepted after %v, want within the detection bound %v", d, bound)
	}
	t.Logf("restart on a new address accepted after %v", time.Since(start))
}
