package node_test

import (
	"bytes"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// TestJobIsolation_C6: a client cannot use another client's job, and a
// job's instructions only reach its own allocations; a client of another
// CA cannot connect at all.
func TestJobIsolation_C6(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	alice := startClient(t, credDir, "alice", nodes...)
	bob := startClient(t, credDir, "bob", nodes...)
	ja := openJob(t, alice, "n0", 10)
	rng := [3]uint64{1, 1, 64}
	whole := []proto.Box{{Hi: rng}}
	secret := bytes.Repeat([]byte("secret!!"), 8)
	submit(t, ja,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: whole},
	)
	if err := ja.Upload(testCtx(t), 1, 0, rng, 1, whole, secret); err != nil {
		t.Fatal(err)
	}
	wait(t, ja, 2)

	var re *transport.RemoteError
	if _, err := bob.Open(testCtx(t), "n0", 10, nodeclient.JobOptions{}); !errors.As(err, &re) || re.Code != proto.CodeNotOwner {
		t.Errorf("bob opens alice's job: %v, want CodeNotOwner", err)
	}
	jb := openJob(t, bob, "n0", 11)
	got := make([]byte, len(secret))
	err := jb.ReadBack(testCtx(t), 1, nil, 1, 0, rng, 1, whole, got)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || bytes.Contains(got, []byte("secret")) {
		t.Errorf("bob reads buffer 1 from his own job: %v, %q; want a failure and no data", err, got)
	}
	// Alice's data is untouched and hers to read.
	if err := ja.ReadBack(testCtx(t), 3, []uint64{2}, 1, 0, rng, 1, whole, got); err != nil || !bytes.Equal(got, secret) {
		t.Errorf("alice reads her buffer: %v, %q", err, got)
	}

	creds, err := credentials.LoadClient(otherDir, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	m, err := nodeclient.Start(nodeclient.Config{Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Connect(testCtx(t), nodes[0].QUICAddr()); !errors.Is(err, transport.ErrTLS) && !errors.Is(err, transport.ErrUnauthorized) {
		t.Errorf("a client of another CA connects: %v, want a TLS or authorization failure", err)
	}
}

// operatorOnce issues operator "ops" into credDir for the tests that need
// one (once per test binary: the file stays for -count > 1).
var operatorOnce sync.Once

func startOperator(t testing.TB, nodes ...*node.Node) *nodeclient.Client {
	t.Helper()
	operatorOnce.Do(func() {
		if _, err := credentials.CreateOperator(credDir, "ops", credentials.IssueConfig{}); err != nil && !errors.Is(err, credentials.ErrExists) {
			t.Fatalf("issue operator ops: %v", err)
		}
	})
	return startClient(t, credDir, "ops", nodes...)
}

// TestStatusShowsClientsTheirOwnJobs_C6: a node's status (MsgInventory)
// lists to a client only that client's jobs, saying so, with the node's
// totals still counting every job; an operator sees every client's jobs,
// runs a job of its own as a client does, and neither may use the
// other's jobs.
func TestStatusShowsClientsTheirOwnJobs_C6(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	alice := startClient(t, credDir, "alice", nodes...)
	bob := startClient(t, credDir, "bob", nodes...)
	ops := startOperator(t, nodes...)
	rng := [3]uint64{1, 1, 64}
	whole := []proto.Box{{Hi: rng}}
	hold := func(c *nodeclient.Client, id uint64) *nodeclient.Job {
		j := openJob(t, c, "n0", id)
		submit(t, j, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 1})
		wait(t, j, 1)
		return j
	}
	hold(alice, 40)
	hold(bob, 41)
	// The operator runs a job: upload and read back its own data.
	jo := hold(ops, 42)
	data := bytes.Repeat([]byte("operator"), 8)
	submit(t, jo, proto.Instr{ID: 2, Kind: proto.InstrUpload, Deps: []uint64{1}, Buffer: 1, Boxes: whole})
	if err := jo.Upload(testCtx(t), 1, 0, rng, 1, whole, data); err != nil {
		t.Fatalf("operator uploads to its job: %v", err)
	}
	got := make([]byte, len(data))
	if err := jo.ReadBack(testCtx(t), 3, []uint64{2}, 1, 0, rng, 1, whole, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("operator reads back its job's buffer: %v, %q; want %q", err, got, data)
	}

	type view struct {
		ids     []uint64
		clients []string
		own     bool
		jobs    int
	}
	status := func(c *nodeclient.Client) view {
		t.Helper()
		inv, err := c.Inventory(testCtx(t), "n0")
		if err != nil {
			t.Fatalf("%s asks for status: %v", c.Identity(), err)
		}
		v := view{own: inv.OwnJobsOnly, jobs: inv.Jobs}
		for _, j := range inv.JobList {
			v.ids = append(v.ids, j.ID)
			v.clients = append(v.clients, j.Client)
		}
		return v
	}
	for _, tt := range []struct {
		c    *nodeclient.Client
		want view
	}{
		{alice, view{[]uint64{40}, []string{"alice"}, true, 3}},
		{bob, view{[]uint64{41}, []string{"bob"}, true, 3}},
		{ops, view{[]uint64{40, 41, 42}, []string{"alice", "bob", "ops"}, false, 3}},
	} {
		if got := status(tt.c); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("status as %s = %+v, want %+v", tt.c.Identity(), got, tt.want)
		}
	}

	var re *transport.RemoteError
	if _, err := alice.Open(testCtx(t), "n0", 42, nodeclient.JobOptions{}); !errors.As(err, &re) || re.Code != proto.CodeNotOwner {
		t.Errorf("alice opens the operator's job: %v, want CodeNotOwner", err)
	}
	if _, err := ops.Open(testCtx(t), "n0", 40, nodeclient.JobOptions{}); !errors.As(err, &re) || re.Code != proto.CodeNotOwner {
		t.Errorf("the operator opens alice's job: %v, want CodeNotOwner (operators see jobs, they do not take them over)", err)
	}
}
