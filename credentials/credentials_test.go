package credentials

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/proto"
)

// handshake runs a TLS handshake over an in-memory pipe and returns the
// server's and client's errors and the identity the server saw.
func handshake(t *testing.T, srv, cli *tls.Config) (srvErr, cliErr error, seen Identity) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	var cs tls.ConnectionState
	go func() {
		defer close(done)
		s := tls.Server(a, srv)
		srvErr = s.HandshakeContext(ctx)
		cs = s.ConnectionState()
		if srvErr != nil {
			a.Close()
		}
	}()
	c := tls.Client(b, cli)
	cliErr = c.HandshakeContext(ctx)
	if cliErr == nil {
		// TLS 1.3: the client finishes before the server has checked its
		// certificate; a read surfaces the server's verdict.
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var one [1]byte
		if _, err := c.Read(one[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cliErr = err
		}
	}
	b.Close()
	<-done
	if srvErr == nil && len(cs.PeerCertificates) > 0 {
		seen, _ = IdentityFromCert(cs.PeerCertificates[0])
	}
	return srvErr, cliErr, seen
}

func setup(t *testing.T, cluster string) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := CreateCA(dir, CAConfig{Cluster: cluster}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := CreateNode(dir, n, IssueConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := CreateClient(dir, "alice", IssueConfig{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustLoad(t *testing.T, load func(dir, name string) (*Credentials, error), dir, name string) *Credentials {
	t.Helper()
	c, err := load(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMutualTLS_C6: certificates from one CA authenticate both ways and the
// server sees the client's identity; no certificate, another CA's
// certificate or another cluster's is refused.
func TestMutualTLS_C6(t *testing.T) {
	dir := setup(t, "lab")
	other := setup(t, "lab") // same cluster name, different CA
	otherCluster := setup(t, "prod")
	n1 := mustLoad(t, LoadNode, dir, "n1")
	n2 := mustLoad(t, LoadNode, dir, "n2")
	alice := mustLoad(t, LoadClient, dir, "alice")
	stranger := mustLoad(t, LoadNode, other, "n2")
	foreign := mustLoad(t, LoadNode, otherCluster, "n2")

	noCert := n2.ClientTLS(nil)
	noCert.Certificates = nil

	tests := []struct {
		name     string
		srv, cli *tls.Config
		ok       bool
		want     Identity
	}{
		{"node to node", n1.ServerTLS(), n2.ClientTLS(nil), true, Identity{Cluster: "lab", Name: "n2", Role: proto.RoleNode}},
		{"client to node", n1.ServerTLS(), alice.ClientTLS(nil), true, Identity{Cluster: "lab", Name: "alice", Role: proto.RoleClient}},
		{"no client certificate", n1.ServerTLS(), noCert, false, Identity{}},
		{"client from another CA", n1.ServerTLS(), stranger.ClientTLS(nil), false, Identity{}},
		{"server from another CA", stranger.ServerTLS(), n2.ClientTLS(nil), false, Identity{}},
		{"client from another cluster", n1.ServerTLS(), foreign.ClientTLS(nil), false, Identity{}},
		{"client refuses unexpected node", n1.ServerTLS(), n2.ClientTLS(func(id Identity) error {
			if id.Name != "n9" {
				return errors.New("want n9")
			}
			return nil
		}), false, Identity{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srvErr, cliErr, seen := handshake(t, tt.srv, tt.cli)
			ok := srvErr == nil && cliErr == nil
			if ok != tt.ok {
				t.Fatalf("handshake: server error %v, client error %v; want success %v", srvErr, cliErr, tt.ok)
			}
			if ok && seen != tt.want {
				t.Errorf("server saw %+v, want %+v", seen, tt.want)
			}
		})
	}
}

// TestClientCertCannotServe_C6: a client certificate lacks server auth, so
// a process holding one cannot pose as a node.
func TestClientCertCannotServe_C6(t *testing.T) {
	dir := setup(t, "lab")
	alice := mustLoad(t, LoadClient, dir, "alice")
	n1 := mustLoad(t, LoadNode, dir, "n1")
	if srvErr, cliErr, _ := handshake(t, alice.ServerTLS(), n1.ClientTLS(nil)); cliErr == nil && srvErr == nil {
		t.Fatal("a node accepted a server presenting a client certificate")
	}
}

func TestLayoutAndPermissions(t *testing.T) {
	dir := setup(t, "lab")
	for _, f := range []string{CAKeyFile, "nodes/n1.key", "clients/alice.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	if _, err := CreateCA(dir, CAConfig{Cluster: "lab"}); !errors.Is(err, ErrExists) {
		t.Errorf("CreateCA over an existing CA: error %v, want ErrExists", err)
	}
	if _, err := CreateNode(dir, "n1", IssueConfig{}); !errors.Is(err, ErrExists) {
		t.Errorf("CreateNode twice: error %v, want ErrExists", err)
	}
	key := filepath.Join(dir, "nodes/n1.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadNode(dir, "n1"); !errors.Is(err, ErrInsecureKey) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("LoadNode with a world-readable key: error %v, want ErrInsecureKey telling to chmod", err)
	}
	if _, err := LoadNode(dir, "n7"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadNode of a missing node: error %v, want ErrNotFound", err)
	}
	// A node's files loaded as a client are refused.
	os.MkdirAll(filepath.Join(dir, ClientsDir), 0o755)
	for _, ext := range []string{".crt", ".key"} {
		b, _ := os.ReadFile(filepath.Join(dir, "nodes/n2"+ext))
		os.WriteFile(filepath.Join(dir, "clients/bob"+ext), b, 0o600)
	}
	if _, err := LoadClient(dir, "bob"); !errors.Is(err, ErrInvalid) {
		t.Errorf("LoadClient of a node certificate: error %v, want ErrInvalid", err)
	}
}

// TestOperatorCertificate_C6: an operator certificate is issued beside the
// clients', loads as a client's (LoadClient), names the operator role in
// its identity, authenticates to a node as operator/<name>, and cannot
// serve; client and operator names share one namespace.
func TestOperatorCertificate_C6(t *testing.T) {
	dir := setup(t, "lab")
	iss, err := CreateOperator(dir, "ops", IssueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{Cluster: "lab", Name: "ops", Role: proto.RoleOperator}
	if iss.Identity != want {
		t.Errorf("CreateOperator identity = %+v, want %+v", iss.Identity, want)
	}
	if crt, _ := Paths(dir, proto.RoleOperator, "ops"); crt != filepath.Join(dir, "clients", "ops.crt") {
		t.Errorf("Paths(operator, ops) = %s, want clients/ops.crt", crt)
	}
	ops := mustLoad(t, LoadClient, dir, "ops")
	if ops.Identity != want || !ops.Identity.IsClient() || ops.Identity.String() != "operator/ops" {
		t.Errorf("LoadClient(ops) = %+v (%s, IsClient %v), want %+v, operator/ops, true", ops.Identity, ops.Identity, ops.Identity.IsClient(), want)
	}
	if alice := mustLoad(t, LoadClient, dir, "alice"); alice.Identity.Role != proto.RoleClient || !alice.Identity.IsClient() {
		t.Errorf("LoadClient(alice) = %+v, want a client", alice.Identity)
	}
	if n := mustLoad(t, LoadNode, dir, "n1"); n.Identity.IsClient() {
		t.Error("a node identity says IsClient")
	}
	n1 := mustLoad(t, LoadNode, dir, "n1")
	srvErr, cliErr, seen := handshake(t, n1.ServerTLS(), ops.ClientTLS(nil))
	if srvErr != nil || cliErr != nil || seen != want {
		t.Errorf("operator to node: server error %v, client error %v, seen %+v; want success as %+v", srvErr, cliErr, seen, want)
	}
	if srvErr, cliErr, _ := handshake(t, ops.ServerTLS(), n1.ClientTLS(nil)); srvErr == nil && cliErr == nil {
		t.Error("a node accepted a server presenting an operator certificate")
	}
	if _, err := CreateClient(dir, "ops", IssueConfig{}); !errors.Is(err, ErrExists) {
		t.Errorf("CreateClient over operator ops: error %v, want ErrExists", err)
	}
	if _, err := CreateOperator(dir, "alice", IssueConfig{}); !errors.Is(err, ErrExists) {
		t.Errorf("CreateOperator over client alice: error %v, want ErrExists", err)
	}
	if _, err := LoadNode(dir, "ops"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadNode(ops): error %v, want ErrNotFound", err)
	}
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(proto.Role("admin"), "root", IssueConfig{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"operator"`) {
		t.Errorf("Issue with role admin: error %v, want ErrInvalid naming the roles", err)
	}
	for _, tt := range []struct {
		uri string
		ok  bool
	}{
		{"acpp://lab/operator/ops", true}, {"acpp://lab/client/alice", true}, {"acpp://lab/node/n1", true},
		{"acpp://lab/admin/ops", false}, {"acpp://lab/operator/", false}, {"acpp://lab/Operator/ops", false},
	} {
		u, err := url.Parse(tt.uri)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseIdentityURI(u); (err == nil) != tt.ok {
			t.Errorf("parseIdentityURI(%s) = %v, want ok %v", tt.uri, err, tt.ok)
		}
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct {
		kind, name string
		ok         bool
	}{
		{"node", "n1", true}, {"node", "gpu-box_2.lab", true}, {"node", "", false},
		{"node", "-x", false}, {"node", "a/b", false}, {"node", strings.Repeat("a", 65), false},
	} {
		if err := CheckName(tt.kind, tt.name); (err == nil) != tt.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
	if _, err := NewCA(CAConfig{Cluster: "Lab_1"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewCA with an upper-case cluster name: error %v, want ErrInvalid", err)
	}
	// A cluster name's error states the cluster's rule (it said a node's,
	// which allows '_', for a name with a space).
	for _, name := range []string{"a b", "Lab_1", "_x"} {
		if _, err := NewCA(CAConfig{Cluster: name}); err == nil || !strings.Contains(err.Error(), "use lower-case letters, digits, '-' and '.'") {
			t.Errorf("NewCA(%q): %v, want the cluster name rule", name, err)
		}
	}
}

func TestExpiredCertificateRefused_C6(t *testing.T) {
	ca, err := NewCA(CAConfig{Cluster: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	old, err := ca.Issue(proto.RoleNode, "n1", IssueConfig{Now: time.Now().Add(-48 * time.Hour), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(old.CertPEM, old.KeyPEM, ca.CertPEM()); !errors.Is(err, ErrInvalid) {
		t.Errorf("New with an expired certificate: error %v, want ErrInvalid", err)
	}
}

func TestGossipKey_C6(t *testing.T) {
	dir := t.TempDir()
	k, err := CreateGossipKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadGossipKey(filepath.Join(dir, GossipKeyFile))
	if err != nil || string(got) != string(k) || len(k) != 32 {
		t.Fatalf("LoadGossipKey = %x, %v; want the 32 bytes written (%x)", got, err, k)
	}
	for _, bad := range []string{"", "not base64!", "AAAA"} {
		if _, err := ParseGossipKey([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseGossipKey(%q) error %v, want ErrInvalid", bad, err)
		}
	}
}

func TestDeriveSecret(t *testing.T) {
	dir := setup(t, "lab")
	a := mustLoad(t, LoadNode, dir, "n1")
	a2 := mustLoad(t, LoadNode, dir, "n1")
	b := mustLoad(t, LoadNode, dir, "n2")
	if a.DeriveSecret("x") != a2.DeriveSecret("x") {
		t.Error("DeriveSecret differs between two loads of the same key")
	}
	if a.DeriveSecret("x") == a.DeriveSecret("y") || a.DeriveSecret("x") == b.DeriveSecret("x") {
		t.Error("DeriveSecret does not depend on the label and the key")
	}
}

// TestEndlessFileRefused: a credential file that never ends (a device such
// as /dev/zero given by mistake) is refused after MaxFileBytes, not read
// until the process runs out of memory.
func TestEndlessFileRefused(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	_, err := LoadFiles("/dev/zero", "/dev/zero", "/dev/zero")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadFiles(/dev/zero) = %v, want ErrInvalid saying the file is larger than the limit", err)
	}
}
