package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/internal/fileread"
)

// loadGossipKeys reads a gossip key file: one base64 key per line, the
// primary key first (a file with one key is what `acpp-node credentials
// init` writes; during a rotation it holds two, see docs/CLUSTER.md). The
// file must not be readable by group or others.
func loadGossipKeys(path string) ([][]byte, error) {
	if runtime.GOOS != "windows" {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%w: %s has mode %v; run chmod 600 %s", credentials.ErrInsecureKey, path, st.Mode().Perm(), path)
		}
	}
	b, err := fileread.AtMost(path, credentials.MaxFileBytes)
	if errors.Is(err, fileread.ErrTooLarge) {
		return nil, fmt.Errorf("%w: gossip key file %s is larger than %d bytes; it holds one base64 key a line", credentials.ErrInvalid, path, credentials.MaxFileBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("gossip key file: %w (create it with `acpp-node credentials init`)", err)
	}
	var keys [][]byte
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 || bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			continue
		}
		k, err := credentials.ParseGossipKey(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key", credentials.ErrInvalid, path)
	}
	return keys, nil
}

func (n *Node) keyFile() string {
	return filepath.Join(n.cfg.CredentialsDir, credentials.GossipKeyFile)
}

// ReloadGossipKeys reads the gossip key file again and makes the node's
// keyring exactly its keys, the first one primary (acpp-node does it on
// SIGHUP). It fails, changing nothing, when the node was given its keys in
// Config.GossipKeys or the file is unreadable or malformed.
func (n *Node) ReloadGossipKeys() error {
	if n.cfg.CredentialsDir == "" {
		return fmt.Errorf("node: no CredentialsDir: the gossip keys came from the config and cannot be reloaded")
	}
	keys, err := loadGossipKeys(n.keyFile())
	if err != nil {
		return fmt.Errorf("node: reload gossip keys: %w", err)
	}
	if err := n.cl.SetKeys(keys); err != nil {
		return fmt.Errorf("node: reload gossip keys: %w", err)
	}
	n.log.Info("gossip keys reloaded", "keys", len(keys))
	return nil
}
