package transport

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// TestProcessesOfOneClientIdentity_C4: two processes with client alice's
// certificate are connected to one node at once; the node reaches each of
// them, calls and page transfers, through the identity its handler saw
// (with the Instance the process announced), and a process that is gone
// cannot be reached. Before, the node held one connection per identity and
// sent both processes' read-backs to one of them.
func TestProcessesOfOneClientIdentity_C4(t *testing.T) {
	var d directory
	n1 := startNode(t, &d, "n1", nil)
	var mu sync.Mutex
	heard := map[string]credentials.Identity{} // by the text each process sends, guarded by mu
	HandleFunc(n1, msgEcho, func(_ context.Context, from credentials.Identity, req *echoReq) (*echoResp, error) {
		mu.Lock()
		defer mu.Unlock()
		heard[req.Text] = from
		return &echoResp{Text: req.Text}, nil
	})
	ctx := testCtx(t)
	procs := map[string]*Transport{"first": startClient(t, credDir, "alice"), "second": startClient(t, credDir, "alice")}
	bufs := map[string][]byte{} // pages each process received, guarded by mu
	for name, p := range procs {
		answer := name // each process answers with its own name
		HandleFunc(p, msgEcho, func(context.Context, credentials.Identity, *echoReq) (*echoResp, error) {
			return &echoResp{Text: answer}, nil
		})
		p.HandlePages(func(context.Context, credentials.Identity, *proto.PageHeader) (PageSink, error) {
			buf := make([]byte, 8)
			return PageSink{Dst: [][]byte{buf}, Done: func(err error) error {
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					bufs[answer] = buf
				}
				return nil
			}}, nil
		})
		if _, err := p.DialAddr(ctx, n1.Addr().String()); err != nil {
			t.Fatal(err)
		}
		if err := p.Call(ctx, credentials.Node("n1"), msgEcho, &echoReq{Text: name}, nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	seen := maps.Clone(heard)
	mu.Unlock()
	if seen["first"].Instance == seen["second"].Instance || seen["first"].Instance != procs["first"].Identity().Instance {
		t.Fatalf("node saw instances %x and %x, want the processes' %x and %x", seen["first"].Instance, seen["second"].Instance,
			procs["first"].Identity().Instance, procs["second"].Identity().Instance)
	}
	if got := n1.connCount(); got != 2 {
		t.Errorf("node holds %d connections, want one per process (2)", got)
	}
	for _, name := range []string{"first", "second", "first"} {
		var resp echoResp
		if err := n1.Call(ctx, seen[name], msgEcho, &echoReq{}, &resp); err != nil || resp.Text != name {
			t.Errorf("node calls process %q back: answer %q, %v; want %q", name, resp.Text, err, name)
		}
		h := &proto.PageHeader{Job: 1, Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Lo: [3]uint64{0, 0, 0}, Hi: [3]uint64{8, 1, 1}}}}
		if err := n1.SendPages(ctx, seen[name], h, [][]byte{[]byte(name[:1] + "-pages")[:7], {'!'}}); err != nil {
			t.Errorf("pages to process %q: %v", name, err)
		}
	}
	mu.Lock()
	if string(bufs["first"]) != "f-pages!" || string(bufs["second"]) != "s-pages!" {
		t.Errorf("pages landed as %q and %q, want each process's own", bufs["first"], bufs["second"])
	}
	mu.Unlock()
	if !n1.Connected(seen["second"]) || n1.Connected(credentials.Client("alice")) {
		t.Error("Connected: want true for a connected process, false for the identity without an instance")
	}
	procs["second"].Close()
	eventually(t, "the node notices the second process closed", func() bool { return !n1.Connected(seen["second"]) })
	err := n1.Call(ctx, seen["second"], msgEcho, &echoReq{}, nil)
	if !errors.Is(err, ErrNoRoute) || !strings.Contains(err.Error(), "client/alice") {
		t.Errorf("call to a process that is gone: error %v, want ErrNoRoute naming client/alice", err)
	}
	var resp echoResp
	if err := n1.Call(ctx, seen["first"], msgEcho, &echoReq{}, &resp); err != nil || resp.Text != "first" {
		t.Errorf("the other process after one closed: %q, %v", resp.Text, err)
	}
}

// crashAndRestart makes n2 stop answering as a killed process would (its
// socket closes, nothing is sent), then starts a new run of it at the same
// address with the same credentials.
func crashAndRestart(t *testing.T, d *directory, n2 *Transport) *Transport {
	t.Helper()
	addr := n2.Addr().String()
	n2.udp.Close()
	n2b := startNode(t, d, "n2", func(c *Config) { c.ListenAddr = addr })
	registerEcho(n2b)
	if n2b.Identity().Instance == n2.Identity().Instance {
		t.Fatal("two runs announce one instance")
	}
	return n2b
}

// TestRestartedNodeAtSameAddress_C5: a node killed and started again at
// once at the same address is reached at the first call: by a call that
// meets the new run's stateless reset and is made again on a new
// connection (from a node, which resolves the address, and from a client,
// which dials the address it reached the node at); by ClosePeer, which
// closes the connections to the old run only; and when the new run
// connects first, its connection replaces the old run's. Before, the
// first calls failed with "received a stateless reset" until the
// connection idled out.
func TestRestartedNodeAtSameAddress_C5(t *testing.T) {
	for _, how := range []string{"stateless reset", "client", "ClosePeer", "new run connects"} {
		t.Run(how, func(t *testing.T) {
			var d directory
			n1 := startNode(t, &d, "n1", nil)
			registerEcho(n1)
			n2 := startNode(t, &d, "n2", nil)
			registerEcho(n2)
			ctx := testCtx(t)
			if how == "client" {
				n1 = startClient(t, credDir, "alice") // n1 is the caller below
				if _, err := n1.DialAddr(ctx, n2.Addr().String()); err != nil {
					t.Fatal(err)
				}
			}
			if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "before"}, nil); err != nil {
				t.Fatal(err)
			}
			old := n2.Identity()
			n2b := crashAndRestart(t, &d, n2)
			switch how {
			case "ClosePeer":
				other := old
				other.Instance++
				if k := n1.ClosePeer(other, "not this run"); k != 0 || !n1.Connected(credentials.Node("n2")) {
					t.Errorf("ClosePeer of another run closed %d connections, want 0 and the connection kept", k)
				}
				if k := n1.ClosePeer(old, "n2 failed"); k != 1 || n1.Connected(credentials.Node("n2")) || n1.connCount() != 0 {
					t.Errorf("ClosePeer of the old run closed %d connections (%d left), want 1 (none left)", k, n1.connCount())
				}
			case "new run connects":
				var resp echoResp
				if err := n2b.Call(ctx, credentials.Node("n1"), msgEcho, &echoReq{Text: "hello"}, &resp); err != nil {
					t.Fatal(err)
				}
				eventually(t, "n1 closes the connection to the old run", func() bool { return n1.connCount() == 1 })
			}
			var resp echoResp
			if err := n1.Call(ctx, credentials.Node("n2"), msgEcho, &echoReq{Text: "after"}, &resp); err != nil || resp.Text != "after" {
				t.Fatalf("first call to the restarted node: %+v, %v", resp, err)
			}
			if got := n1.connCount(); got != 1 {
				t.Errorf("n1 holds %d connections after the restart, want 1", got)
			}
			// Page transfers go the same way.
			if how == "stateless reset" {
				n2c := crashAndRestart(t, &d, n2b)
				got := make(chan string, 1)
				n2c.HandlePages(func(context.Context, credentials.Identity, *proto.PageHeader) (PageSink, error) {
					buf := make([]byte, 4)
					return PageSink{Dst: [][]byte{buf}, Done: func(err error) error {
						got <- string(buf)
						return nil
					}}, nil
				})
				h := &proto.PageHeader{Job: 1, Buffer: 1, ElemSize: 1, Boxes: []proto.Box{{Hi: [3]uint64{4, 1, 1}}}}
				if err := n1.SendPages(ctx, credentials.Node("n2"), h, [][]byte{[]byte("page")}); err != nil {
					t.Errorf("first transfer to the restarted node: %v", err)
				} else if s := <-got; s != "page" {
					t.Errorf("first transfer to the restarted node landed as %q", s)
				}
			}
		})
	}
}
