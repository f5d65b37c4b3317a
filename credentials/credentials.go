package credentials

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/acpp/acpp/internal/fileread"
	"github.com/acpp/acpp/proto"
)

// File names of the directory layout (see the package documentation).
const (
	CACertFile    = "ca.crt"
	CAKeyFile     = "ca.key"
	GossipKeyFile = "gossip.key"
	NodesDir      = "nodes"
	ClientsDir    = "clients"
)

var (
	// ErrExists is returned by the Create functions when a file they would
	// write is already there; remove it to re-create it.
	ErrExists = errors.New("credentials: file already exists")
	// ErrNotFound is returned by loaders when a file is missing.
	ErrNotFound = errors.New("credentials: file not found")
	// ErrInsecureKey is returned when a private key file is readable by
	// group or others.
	ErrInsecureKey = errors.New("credentials: private key file is readable by others")
	// ErrInvalid is returned for a file that does not parse, a key that does
	// not match its certificate, or a name that cannot be used.
	ErrInvalid = errors.New("credentials: invalid")
	// ErrUntrusted is returned when a peer's certificate does not chain to
	// the cluster CA, names no acpp identity, or names another cluster.
	ErrUntrusted = errors.New("credentials: peer not trusted")
)

// Identity is who a certificate's holder is.
type Identity struct {
	Cluster string
	Name    string
	Role    proto.Role
	// Instance tells apart processes that hold the same certificate (one
	// client identity may run any number of programs at once): a random
	// number each process's transport announces in its handshake, set on
	// the identities the transport reports for its peers. A node announces
	// its boot ID. It is not part of the certificate. 0: none announced, or
	// an identity for addressing that names no particular process.
	Instance uint64
}

// String is "<role>/<name>"; it leaves out Instance.
func (id Identity) String() string { return string(id.Role) + "/" + id.Name }

// Node returns the identity of node name in no particular cluster, for
// addressing calls (the transport fills in its own cluster).
func Node(name string) Identity { return Identity{Name: name, Role: proto.RoleNode} }

// Client returns the identity of client name, for addressing calls.
func Client(name string) Identity { return Identity{Name: name, Role: proto.RoleClient} }

// IsClient reports whether id holds a client certificate: a client or an
// operator (a client that also sees every client's jobs in a node's
// status). Both dial nodes and run jobs; neither listens.
func (id Identity) IsClient() bool {
	return id.Role == proto.RoleClient || id.Role == proto.RoleOperator
}

// uri is the SAN that carries id.
func (id Identity) uri() *url.URL {
	return &url.URL{Scheme: "acpp", Host: id.Cluster, Path: "/" + string(id.Role) + "/" + id.Name}
}

// CheckName reports whether name can name a node, client or cluster: 1 to
// 64 characters of letters, digits, '-', '_' and '.', starting with a letter
// or digit. (Names become file names and URI parts.)
func CheckName(kind, name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: %s name %q must be 1 to 64 characters long", ErrInvalid, kind, name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '-' || r == '_' || r == '.'))
		if !ok {
			return fmt.Errorf("%w: %s name %q: use letters, digits, '-', '_' and '.', starting with a letter or digit", ErrInvalid, kind, name)
		}
	}
	return nil
}

// checkCluster is CheckName with the stricter rules of a URI host: lower
// case letters, digits, '-' and '.'.
func checkCluster(name string) error {
	if err := CheckName("cluster", name); err != nil {
		if len(name) == 0 || len(name) > 64 {
			return err
		}
		// Say the cluster's own rule, not a node's (which allows '_').
		return fmt.Errorf("%w: cluster name %q: use lower-case letters, digits, '-' and '.', starting with a letter or digit (it is a host name in certificates)", ErrInvalid, name)
	}
	if strings.ContainsAny(name, "_ABCDEFGHIJKLMNOPQRSTUVWXYZ") || strings.Contains(name, "..") || strings.HasSuffix(name, ".") || strings.HasSuffix(name, "-") {
		return fmt.Errorf("%w: cluster name %q: use lower-case letters, digits, '-' and '.' (it is a host name in certificates)", ErrInvalid, name)
	}
	return nil
}

// IdentityFromCert reads the acpp identity from cert's URI SAN. It does not
// verify the certificate.
func IdentityFromCert(cert *x509.Certificate) (Identity, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "acpp" {
			continue
		}
		id, err := parseIdentityURI(u)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: certificate %q: %v", ErrUntrusted, cert.Subject.CommonName, err)
		}
		return id, nil
	}
	return Identity{}, fmt.Errorf("%w: certificate %q carries no acpp identity (URI SAN acpp://cluster/role/name); issue it with acpp-node's credentials command", ErrUntrusted, cert.Subject.CommonName)
}

// parseIdentityURI reads acpp://<cluster>/<role>/<name>.
func parseIdentityURI(u *url.URL) (Identity, error) {
	role, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	id := Identity{Cluster: u.Host, Name: name, Role: proto.Role(role)}
	if u.Scheme != "acpp" || !ok || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" ||
		(id.Role != proto.RoleNode && !id.IsClient()) || CheckName("peer", name) != nil || checkCluster(id.Cluster) != nil {
		return Identity{}, fmt.Errorf("malformed acpp identity %q, want acpp://<cluster>/node|client|operator/<name>", u)
	}
	return id, nil
}

// CAConfig configures CreateCA.
type CAConfig struct {
	// Cluster names the cluster (required): lower-case letters, digits, '-'
	// and '.'. Every certificate the CA issues carries it.
	Cluster string
	// Validity is how long the CA certificate is valid; zero means 10 years.
	Validity time.Duration
	// Now is the issuing time; zero means time.Now (tests set it).
	Now time.Time
}

// IssueConfig configures the issuing of a node or client certificate.
type IssueConfig struct {
	// Validity is how long the certificate is valid; zero means 1 year.
	// It is cut to the CA's own expiry.
	Validity time.Duration
	// Now is the issuing time; zero means time.Now (tests set it).
	Now time.Time
}

// CA is a loaded cluster certificate authority that can issue certificates.
type CA struct {
	Cert    *x509.Certificate
	Cluster string
	key     crypto.Signer
	certPEM []byte
}

// clockSkew backdates NotBefore so that a certificate issued on one machine
// is valid at once on a machine whose clock is a little behind.
const clockSkew = time.Hour

// NewCA creates a CA in memory (CreateCA also writes it out).
func NewCA(cfg CAConfig) (*CA, error) {
	if err := checkCluster(cfg.Cluster); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	validity := cfg.Validity
	if validity == 0 {
		validity = 10 * 365 * 24 * time.Hour
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("credentials: generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "acpp cluster " + cfg.Cluster + " CA", Organization: []string{"acpp"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "acpp", Host: cfg.Cluster, Path: "/ca"}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("credentials: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Cluster: cfg.Cluster, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// CertPEM is the CA certificate in PEM form.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Issued is a certificate and its private key, in PEM form.
type Issued struct {
	Identity Identity
	CertPEM  []byte
	KeyPEM   []byte
	NotAfter time.Time
}

// Issue creates a certificate for name in role: a node certificate serves
// and dials (server and client auth), a client or operator certificate only
// dials.
func (ca *CA) Issue(role proto.Role, name string, cfg IssueConfig) (*Issued, error) {
	if err := CheckName(string(role), name); err != nil {
		return nil, err
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	switch role {
	case proto.RoleNode:
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	case proto.RoleClient, proto.RoleOperator:
	default:
		return nil, fmt.Errorf("%w: role %q: want %q, %q or %q", ErrInvalid, role, proto.RoleNode, proto.RoleClient, proto.RoleOperator)
	}
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	validity := cfg.Validity
	if validity == 0 {
		validity = 365 * 24 * time.Hour
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("credentials: generate key: %w", err)
	}
	id := Identity{Cluster: ca.Cluster, Name: name, Role: role}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"acpp " + ca.Cluster}, OrganizationalUnit: []string{string(role)}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		URIs:         []*url.URL{id.uri()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("credentials: issue certificate for %s: %w", id, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{Identity: id, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER), NotAfter: notAfter}, nil
}

// Credentials are a process's own certificate and key plus the cluster CA:
// everything it needs for mutual TLS.
type Credentials struct {
	Identity Identity
	// NotAfter is when the certificate expires; operators should re-issue
	// before then.
	NotAfter time.Time
	cert     tls.Certificate
	roots    *x509.CertPool
}

// New builds Credentials from PEM blocks: the holder's certificate and key
// and the cluster CA certificate. It checks that the key matches, that the
// certificate chains to the CA and carries an acpp identity.
func New(certPEM, keyPEM, caPEM []byte) (*Credentials, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate and key: %v", ErrInvalid, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: certificate: %v", ErrInvalid, err)
	}
	cert.Leaf = leaf
	caCert, err := parseCertPEM(caPEM)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("%w: certificate %q was not issued by this cluster CA (or has expired): %v", ErrInvalid, leaf.Subject.CommonName, err)
	}
	id, err := IdentityFromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Credentials{Identity: id, NotAfter: leaf.NotAfter, cert: cert, roots: roots}, nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: no PEM CERTIFICATE block", ErrInvalid)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate: %v", ErrInvalid, err)
	}
	return c, nil
}

// ServerTLS is the TLS configuration for accepting connections: TLS 1.3,
// client certificates required and verified against the cluster CA only,
// and the peer's identity checked to be of this cluster.
func (c *Credentials) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.roots,
		NextProtos:   []string{proto.ALPN},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := c.PeerIdentity(cs)
			return err
		},
	}
}

// ClientTLS is the TLS configuration for dialing a node: TLS 1.3, this
// process's certificate, the server verified against the cluster CA only
// (as a node of this cluster), and then check, if not nil, given the
// server's identity (the transport uses it to insist on the node it meant).
func (c *Credentials) ClientTLS(check func(Identity) error) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		RootCAs:      c.roots,
		NextProtos:   []string{proto.ALPN},
		// Host names play no part: nodes are named by the URI SAN, which
		// VerifyConnection checks after verifying the chain itself.
		InsecureSkipVerify: true,
		ServerName:         "acpp",
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := c.PeerIdentity(cs)
			if err != nil {
				return err
			}
			if id.Role != proto.RoleNode {
				return fmt.Errorf("%w: %s serves connections but is not a node", ErrUntrusted, id)
			}
			if check != nil {
				return check(id)
			}
			return nil
		},
	}
}

// PeerIdentity verifies the peer certificate of a TLS connection against
// the cluster CA (whether or not the TLS stack did already) and returns its
// identity. It fails, wrapping ErrUntrusted, when there is no certificate,
// the chain does not lead to the cluster CA, the certificate has expired or
// is not meant for the peer's role, or it names another cluster.
func (c *Credentials) PeerIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, fmt.Errorf("%w: the peer presented no certificate; give it one issued by the cluster CA", ErrUntrusted)
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return Identity{}, fmt.Errorf("%w: certificate %q: %v", ErrUntrusted, leaf.Subject.CommonName, err)
	}
	id, err := IdentityFromCert(leaf)
	if err != nil {
		return Identity{}, err
	}
	if id.Cluster != c.Identity.Cluster {
		return Identity{}, fmt.Errorf("%w: %s belongs to cluster %q, this process to %q", ErrUntrusted, id, id.Cluster, c.Identity.Cluster)
	}
	if id.Role == proto.RoleNode {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return Identity{}, fmt.Errorf("%w: node certificate %q is not valid for serving: %v", ErrUntrusted, leaf.Subject.CommonName, err)
		}
	}
	return id, nil
}

// ---- files ----

// CreateCA creates a cluster CA and writes dir/ca.crt and dir/ca.key
// (creating dir with mode 0700 if needed). It refuses to overwrite either.
func CreateCA(dir string, cfg CAConfig) (*CA, error) {
	ca, err := NewCA(cfg)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := writeNew(filepath.Join(dir, CAKeyFile), pemBlock("PRIVATE KEY", keyDER), 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(filepath.Join(dir, CACertFile), ca.certPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA loads dir/ca.crt and dir/ca.key for issuing.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := readFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := readKey(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

// parseCA builds a CA from the contents of ca.crt and ca.key.
func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CACertFile, err)
	}
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		return nil, fmt.Errorf("%w: %s holds no PEM block", ErrInvalid, CAKeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, CAKeyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !publicEqual(signer.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("%w: %s does not belong to %s", ErrInvalid, CAKeyFile, CACertFile)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%w: %s is not a CA certificate", ErrInvalid, CACertFile)
	}
	cluster := ""
	for _, u := range cert.URIs {
		if u.Scheme == "acpp" {
			cluster = u.Host
		}
	}
	if checkCluster(cluster) != nil {
		return nil, fmt.Errorf("%w: %s names no acpp cluster", ErrInvalid, CACertFile)
	}
	return &CA{Cert: cert, Cluster: cluster, key: signer, certPEM: certPEM}, nil
}

func publicEqual(a, b crypto.PublicKey) bool {
	ae, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ae.Equal(b)
}

// CreateNode issues a certificate for node name with the CA in dir and
// writes dir/nodes/<name>.crt and .key.
func CreateNode(dir, name string, cfg IssueConfig) (*Issued, error) {
	return create(dir, proto.RoleNode, name, cfg)
}

// CreateClient issues a certificate for client name (a user or job
// submitter) with the CA in dir and writes dir/clients/<name>.crt and .key.
func CreateClient(dir, name string, cfg IssueConfig) (*Issued, error) {
	return create(dir, proto.RoleClient, name, cfg)
}

// CreateOperator issues an operator certificate for name with the CA in dir:
// a client that also sees every client's jobs in a node's status. It
// writes dir/clients/<name>.crt and .key, beside the clients (client and
// operator names share one namespace), and LoadClient loads it.
func CreateOperator(dir, name string, cfg IssueConfig) (*Issued, error) {
	return create(dir, proto.RoleOperator, name, cfg)
}

func roleDir(role proto.Role) string {
	if role == proto.RoleNode {
		return NodesDir
	}
	return ClientsDir
}

// Paths returns the certificate and key paths of name in role under dir.
func Paths(dir string, role proto.Role, name string) (certFile, keyFile string) {
	base := filepath.Join(dir, roleDir(role), name)
	return base + ".crt", base + ".key"
}

func create(dir string, role proto.Role, name string, cfg IssueConfig) (*Issued, error) {
	ca, err := LoadCA(dir)
	if err != nil {
		return nil, err
	}
	iss, err := ca.Issue(role, name, cfg)
	if err != nil {
		return nil, err
	}
	certFile, keyFile := Paths(dir, role, name)
	if err := os.MkdirAll(filepath.Dir(certFile), 0o755); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if _, err := os.Stat(certFile); err == nil {
		return nil, fmt.Errorf("%w: %s; remove it (and %s) to re-issue", ErrExists, certFile, filepath.Base(keyFile))
	}
	if err := writeNew(keyFile, iss.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(certFile, iss.CertPEM, 0o644); err != nil {
		return nil, err
	}
	return iss, nil
}

// LoadNode loads node name's credentials from the layout under dir.
func LoadNode(dir, name string) (*Credentials, error) { return load(dir, proto.RoleNode, name) }

// LoadClient loads client name's credentials from the layout under dir;
// name may hold a client or an operator certificate (see CreateOperator).
func LoadClient(dir, name string) (*Credentials, error) { return load(dir, proto.RoleClient, name) }

func load(dir string, role proto.Role, name string) (*Credentials, error) {
	if err := CheckName(string(role), name); err != nil {
		return nil, err
	}
	certFile, keyFile := Paths(dir, role, name)
	c, err := LoadFiles(certFile, keyFile, filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	roleOK := c.Identity.Role == role || role == proto.RoleClient && c.Identity.IsClient()
	if !roleOK || c.Identity.Name != name {
		return nil, fmt.Errorf("%w: %s holds the certificate of %s, not %s/%s", ErrInvalid, certFile, c.Identity, role, name)
	}
	return c, nil
}

// LoadFiles loads credentials from explicit paths (for operators who keep
// them elsewhere than the standard layout).
func LoadFiles(certFile, keyFile, caFile string) (*Credentials, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readKey(keyFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := readFile(caFile)
	if err != nil {
		return nil, err
	}
	c, err := New(certPEM, keyPEM, caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	return c, nil
}

// ---- gossip key ----

// GossipKeySize is the size of generated gossip keys (AES-256).
const GossipKeySize = 32

// GenerateGossipKey returns 32 random bytes for memberlist's keyring.
func GenerateGossipKey() ([]byte, error) {
	k := make([]byte, GossipKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("credentials: generate gossip key: %w", err)
	}
	return k, nil
}

// EncodeGossipKey is the file form of a key: base64 and a newline.
func EncodeGossipKey(k []byte) []byte {
	return []byte(base64.StdEncoding.EncodeToString(k) + "\n")
}

// ParseGossipKey decodes a key in file form; memberlist takes 16, 24 or 32
// bytes (AES-128, -192, -256).
func ParseGossipKey(b []byte) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%w: gossip key is not base64: %v", ErrInvalid, err)
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("%w: gossip key has %d bytes, want 16, 24 or 32 (generate one with acpp-node's credentials command)", ErrInvalid, len(k))
}

// CreateGossipKey generates a key and writes it to dir/gossip.key (0600).
func CreateGossipKey(dir string) ([]byte, error) {
	k, err := GenerateGossipKey()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := writeNew(filepath.Join(dir, GossipKeyFile), EncodeGossipKey(k), 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// LoadGossipKey reads a key file written by CreateGossipKey.
func LoadGossipKey(path string) ([]byte, error) {
	b, err := readKey(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseGossipKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ---- file helpers ----

func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s; remove it to re-create it", ErrExists, path)
	}
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("credentials: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("credentials: write %s: %w", path, err)
	}
	return nil
}

// MaxFileBytes bounds a credential file (certificate, key, CA, gossip
// key: a few hundred bytes each); a larger one, or a device that never
// ends such as /dev/zero, is refused without reading past it.
const MaxFileBytes = 1 << 20

func readFile(path string) ([]byte, error) {
	b, err := fileread.AtMost(path, MaxFileBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s; create it with acpp-node's credentials command or copy it from the machine that holds the cluster CA", ErrNotFound, path)
	case errors.Is(err, fileread.ErrTooLarge):
		return nil, fmt.Errorf("%w: %s is larger than %d bytes; name the PEM file acpp-node's credentials command wrote", ErrInvalid, path, MaxFileBytes)
	case err != nil:
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return b, nil
}

func readKey(path string) ([]byte, error) {
	if runtime.GOOS != "windows" {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%w: %s has mode %v; run chmod 600 %s", ErrInsecureKey, path, st.Mode().Perm(), path)
		}
	}
	return readFile(path)
}

// DeriveSecret returns 32 bytes derived from the private key and label: a
// secret that stays the same across restarts of the holder and that no one
// without the key can compute. The transport derives its QUIC stateless
// reset key from it, so a restarted node resets connections that its
// previous run held, and peers notice at once instead of after the idle
// timeout.
func (c *Credentials) DeriveSecret(label string) [32]byte {
	der, err := x509.MarshalPKCS8PrivateKey(c.cert.PrivateKey)
	if err != nil {
		panic("credentials: private key cannot be marshalled: " + err.Error()) // New checked it
	}
	h := sha256.New()
	h.Write([]byte("acpp derive v1\x00" + label + "\x00"))
	h.Write(der)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}
