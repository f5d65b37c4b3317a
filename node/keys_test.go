package node_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/node"
)

// copyCreds copies the credentials node name needs into a new directory.
func copyCreds(t *testing.T, name string) string {
	dir := t.TempDir()
	for _, f := range []string{"ca.crt", "gossip.key", "nodes/" + name + ".crt", "nodes/" + name + ".key"} {
		b, err := os.ReadFile(filepath.Join(credDir, f))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o700)
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReloadGossipKeys_C6: the key file may list several keys, primary
// first; ReloadGossipKeys applies an edited file, and refuses a bad one
// without changing the keyring.
func TestReloadGossipKeys_C6(t *testing.T) {
	dir := copyCreds(t, "n0")
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.CredentialsDir = dir })
	n := nodes[0]
	keyFile := filepath.Join(dir, credentials.GossipKeyFile)
	oldFile, _ := os.ReadFile(keyFile)
	old, _ := credentials.ParseGossipKey(oldFile)
	next, _ := credentials.GenerateGossipKey()
	tests := []struct {
		name    string
		file    []byte
		want    [][]byte // keyring after the reload
		wantErr bool
	}{
		{"install", append(bytes.Clone(oldFile), credentials.EncodeGossipKey(next)...), [][]byte{old, next}, false},
		{"use", append(credentials.EncodeGossipKey(next), oldFile...), [][]byte{next, old}, false},
		{"bad line keeps the keyring", []byte("not base64!\n"), [][]byte{next, old}, true},
		{"empty file keeps the keyring", []byte("# nothing\n"), [][]byte{next, old}, true},
		{"remove", credentials.EncodeGossipKey(next), [][]byte{next}, false},
	}
	for _, tt := range tests {
		if err := os.WriteFile(keyFile, tt.file, 0o600); err != nil {
			t.Fatal(err)
		}
		err := n.ReloadGossipKeys()
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: ReloadGossipKeys = %v, want error %v", tt.name, err, tt.wantErr)
		}
		got, err := n.Cluster().Keys()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tt.want) || !bytes.Equal(got[0], tt.want[0]) {
			t.Errorf("%s: keyring has %d keys (primary %x), want %d (primary %x)", tt.name, len(got), got[0][:4], len(tt.want), tt.want[0][:4])
		}
	}
	os.Chmod(keyFile, 0o644)
	if err := n.ReloadGossipKeys(); err == nil {
		t.Error("a key file readable by others was accepted")
	}
}
