package node

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acpp/acpp/credentials"
)

// TestGossipKeyFileBounded: a gossip key file larger than
// credentials.MaxFileBytes is refused naming the limit, not read whole
// (a FIFO or device that never ends ran the node out of memory).
func TestGossipKeyFileBounded(t *testing.T) {
	k, _ := credentials.GenerateGossipKey()
	path := filepath.Join(t.TempDir(), credentials.GossipKeyFile)
	big := append(credentials.EncodeGossipKey(k), bytes.Repeat([]byte("#\n"), credentials.MaxFileBytes/2+1)...)
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadGossipKeys(path); !errors.Is(err, credentials.ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("loadGossipKeys(%d bytes) = %v, want ErrInvalid naming the limit", len(big), err)
	}
	if err := os.WriteFile(path, big[:credentials.MaxFileBytes], 0o600); err != nil {
		t.Fatal(err)
	}
	if keys, err := loadGossipKeys(path); err != nil || len(keys) != 1 {
		t.Errorf("loadGossipKeys(%d bytes) = %d keys, %v; want the key", credentials.MaxFileBytes, len(keys), err)
	}
}
