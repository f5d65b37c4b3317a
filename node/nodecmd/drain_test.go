package nodecmd

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/credentials/credtest"
	"github.com/acpp/acpp/internal/testlog"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/proto"
)

// TestDrainTriesEveryAddress: acpp-node drain with several addresses asks
// every one, reports each, and fails at the end if any could not be asked
// (it used to stop at the first failure).
func TestDrainTriesEveryAddress(t *testing.T) {
	dir := t.TempDir()
	if err := credtest.Create(dir, "lab", []string{"n1"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := credentials.CreateOperator(dir, "ops", credentials.IssueConfig{}); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.CredentialsDir, cfg.CPUWorkers = "n1", dir, 1
	cfg.Logger = testlog.Default(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// Nobody listens there (a UDP port just freed).
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	out, errOut, err := execute(t, nil, "drain", "--credentials", dir, "--client", "ops", "--timeout", "2s", dead, n.QUICAddr())
	if err == nil || !strings.Contains(err.Error(), "1 of 2 nodes") || !strings.Contains(err.Error(), dead) {
		t.Errorf("drain error = %v; want one naming the 1 of 2 nodes at %s", err, dead)
	}
	if !strings.Contains(errOut, dead+": connect") {
		t.Errorf("drain stderr = %q; want the failure at %s", errOut, dead)
	}
	if want := "node n1 drains: no job open, it leaves (" + n.QUICAddr() + ")\n"; out != want {
		t.Errorf("drain stdout = %q; want n1, after the dead address, asked too: %q", out, want)
	}
}

// TestDrainLineCounts: acpp-node drain's lines say "1 job open hands over
// its pages" (it printed "1 jobs open hand over their pages", and "0 jobs
// open hand over their pages" for a node with none).
func TestDrainLineCounts(t *testing.T) {
	for _, tt := range []struct {
		r    proto.NodeDraining
		want string
	}{
		{proto.NodeDraining{Node: "n3"}, "node n3 drains: no job open, it leaves (a:1)"},
		{proto.NodeDraining{Node: "n3", Jobs: 1}, "node n3 drains: 1 job open hands over its pages, then it leaves (a:1)"},
		{proto.NodeDraining{Node: "n3", Jobs: 2}, "node n3 drains: 2 jobs open hand over their pages, then it leaves (a:1)"},
		{proto.NodeDraining{Node: "n3", Jobs: 1, Already: true}, "node n3 is already draining (1 job open; a:1)"},
		{proto.NodeDraining{Node: "n3", Already: true}, "node n3 is already draining (0 jobs open; a:1)"},
	} {
		if got := drainLine(&tt.r, "a:1"); got != tt.want {
			t.Errorf("drainLine(%+v) = %q, want %q", tt.r, got, tt.want)
		}
	}
}

// TestDrainTimeoutMustBePositive: --timeout 0 or below is refused at once
// (every node was reported unreachable: "context deadline exceeded").
func TestDrainTimeoutMustBePositive(t *testing.T) {
	for _, v := range []string{"0s", "-1s"} {
		_, _, err := execute(t, nil, "drain", "--credentials", t.TempDir(), "--client", "ops", "--timeout", v, "127.0.0.1:7951")
		if err == nil || !strings.Contains(err.Error(), "--timeout "+v+":") || !strings.Contains(err.Error(), "positive") {
			t.Errorf("drain --timeout %s: error %v, want one refusing --timeout", v, err)
		}
	}
}
