package credentials

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"testing"

	"github.com/acpp/acpp/proto"
)

// FuzzIdentityURI: the identity parser of peer certificates rejects junk
// without crashing; what it accepts prints back to the same identity.
func FuzzIdentityURI(f *testing.F) {
	f.Add("acpp://lab/node/n1")
	f.Add("acpp://lab/operator/ops")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		id, err := parseIdentityURI(u)
		if err != nil {
			return
		}
		u2, err := url.Parse(id.uri().String())
		if err != nil {
			t.Fatalf("identity %+v prints as an unparsable URI: %v", id, err)
		}
		if id2, err := parseIdentityURI(u2); err != nil || id2 != id {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", s, id2, err, id)
		}
	})
}

// FuzzParseGossipKey: the gossip key file parser accepts only 16, 24 or
// 32 bytes of base64.
func FuzzParseGossipKey(f *testing.F) {
	f.Add([]byte("AAAA"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseGossipKey(b)
		if err != nil {
			return
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			t.Fatalf("accepted a %d-byte key", n)
		}
		if k2, err := ParseGossipKey(EncodeGossipKey(k)); err != nil || !bytes.Equal(k, k2) {
			t.Fatalf("round trip: %x, %v; want %x", k2, err, k)
		}
	})
}

// FuzzCredentialFiles: the PEM files a node or client loads (certificate,
// key, cluster CA: New, as LoadFiles reads them) and the CA's own pair
// (LoadCA: parseCA) are accepted or refused with ErrInvalid; never a
// panic. What loads names a valid identity or cluster. The fuzz input
// edits a node's and its CA's valid files, 4 bytes an edit (which file,
// where, what: a byte set, the DER cut there, or the PEM block's type
// changed), so that the parsers are reached past their first checks
// (whole PEM files as inputs left the fuzzer minimizing for its whole
// run: each try verifies a signature).
func FuzzCredentialFiles(f *testing.F) {
	ca, err := NewCA(CAConfig{Cluster: "lab"})
	if err != nil {
		f.Fatal(err)
	}
	is, err := ca.Issue(proto.RoleNode, "n1", IssueConfig{})
	if err != nil {
		f.Fatal(err)
	}
	caKeyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		f.Fatal(err)
	}
	valid := [4]*pem.Block{}
	for i, b := range [][]byte{is.CertPEM, is.KeyPEM, ca.CertPEM(), pemBlock("PRIVATE KEY", caKeyDER)} {
		valid[i], _ = pem.Decode(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 200, 0x41})           // a byte of the certificate
	f.Add([]byte{1, 0, 30, 0x80})            // the key cut short
	f.Add([]byte{2, 0, 0, 0xc0})             // the CA as another block type
	f.Add([]byte{3, 1, 0, 0x13, 0, 0, 5, 7}) // two edits
	f.Fuzz(func(t *testing.T, edits []byte) {
		var files [4][]byte
		blocks := [4]pem.Block{}
		for i, b := range valid {
			blocks[i] = pem.Block{Type: b.Type, Bytes: bytes.Clone(b.Bytes)}
		}
		for ; len(edits) >= 4; edits = edits[4:] {
			b := &blocks[edits[0]%4]
			if len(b.Bytes) == 0 {
				continue
			}
			pos := (int(edits[1])<<8 | int(edits[2])) % len(b.Bytes)
			switch v := edits[3]; v >> 6 {
			case 0, 1:
				b.Bytes[pos] = v << 1
			case 2:
				b.Bytes = b.Bytes[:pos]
			case 3:
				b.Type = []string{"CERTIFICATE", "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"}[v%4]
			}
		}
		for i := range blocks {
			files[i] = pem.EncodeToMemory(&blocks[i])
		}
		c, err := New(files[0], files[1], files[2])
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("New: %v, want ErrInvalid", err)
			}
		} else if CheckName(string(c.Identity.Role), c.Identity.Name) != nil {
			t.Fatalf("New accepted the invalid identity %v", c.Identity)
		}
		got, err := parseCA(files[2], files[3])
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("parseCA: %v, want ErrInvalid", err)
			}
			return
		}
		if checkCluster(got.Cluster) != nil {
			t.Fatalf("parseCA accepted the cluster name %q", got.Cluster)
		}
	})
}
