package credentials

import (
	"bytes"
	"net/url"
	"testing"
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
