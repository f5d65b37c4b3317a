package integration

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rejoinBound is how soon a restarted node must be back in the cluster, as
// every node's /healthz sees it: about a second on an idle machine
// (rejoins are tried every second), with room for a loaded 2-core one.
const rejoinBound = 6 * time.Second

// TestRestartedNodeRejoinsAtOnce_C1_C5: the walkthrough of OPERATIONS.md,
// every node given the same --join list, its own address included. The
// first node starts a cluster at once (only its own address answers; it
// does not wait --join-retry); a node restarted after SIGTERM or SIGKILL
// with the same flags is back in the three-member cluster within seconds;
// and a first node started without --join (the walkthrough's old form) is
// merged again by the others within seconds of its restart. Before, that
// node came back as a one-node cluster, and the next job ran on it alone:
// about 20 s after a kill, for good after a SIGTERM (members that left
// were never retried).
func TestRestartedNodeRejoinsAtOnce_C1_C5(t *testing.T) {
	creds := makeCredentials(t, "rejoin", []string{"n1", "n2", "n3"}, nil)
	type addrs struct{ name, gossip, quic, health string }
	var specs []addrs
	for i := range 3 {
		at := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
		specs = append(specs, addrs{fmt.Sprintf("n%d", i+1), at(), at(), at()})
	}
	join := []string{specs[0].gossip, specs[1].gossip, specs[2].gossip}
	start := func(i int, join []string) *proc {
		s := specs[i]
		return startNodeAt(t, creds, s.name, s.gossip, s.quic, s.health, join)
	}
	t0 := time.Now()
	procs := []*proc{start(0, join)}
	waitMembers(t, procs, 1, 15*time.Second) // --join-retry is 60 s: it did not wait for the others
	t.Logf("n1 up alone after %v", time.Since(t0).Round(time.Millisecond))
	procs = append(procs, start(1, join), start(2, join))
	waitMembers(t, procs, 3, 15*time.Second)

	for i, how := range []string{"SIGTERM", "SIGKILL"} {
		if how == "SIGTERM" {
			procs[i].stop(t, 10*time.Second)
		} else {
			procs[i].kill()
		}
		procs[i] = start(i, join)
		d := waitMembers(t, procs, 3, rejoinBound)
		t.Logf("%s of %s, restarted with the same --join list: every node sees 3 members %v after its start", how, procs[i].name, d.Round(time.Millisecond))
	}

	// The old walkthrough: the first node restarted without --join. The
	// others must find it at its old address.
	procs[0].stop(t, 10*time.Second)
	waitMembers(t, procs[1:], 2, 15*time.Second)
	procs[0] = start(0, nil)
	d := waitMembers(t, procs, 3, rejoinBound)
	t.Logf("n1 restarted without --join after a SIGTERM: every node sees 3 members %v after its start", d.Round(time.Millisecond))
}

// TestSIGTERMWhileJoiningExitsZero: a node waiting for its --join
// addresses answers /healthz with 503 "starting", and SIGTERM then is a
// clean stop (exit 0, "stopped before joining"), as OPERATIONS.md says of
// SIGTERM. Before, nothing listened on --http-addr until the join, and the
// node exited 1 with "node: context canceled".
func TestSIGTERMWhileJoiningExitsZero(t *testing.T) {
	creds := makeCredentials(t, "early", []string{"n1"}, nil)
	nobody := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startNode(t, creds, "n1", []string{nobody}, "--join-retry", "60s")
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get("http://" + p.health + "/healthz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "starting") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz did not answer 503 starting within 15 s (last: %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop(t, 10*time.Second)
	if out := p.output(); !strings.Contains(out, "stopped before joining") {
		t.Errorf("log lacks \"stopped before joining\":\n%s", out)
	}
}
