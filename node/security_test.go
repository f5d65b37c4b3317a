package node_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/acpp/acpp/credentials"
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
