package fileread

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// AtMost reads a file up to its limit, refuses one beyond it (a regular
// file by its size, a device such as /dev/zero without reading past the
// limit), a directory, and passes os.Open's errors on.
func TestAtMost(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := AtMost(p, 5); err != nil || string(b) != "12345" {
		t.Errorf("AtMost(5 bytes, 5) = %q, %v", b, err)
	}
	if _, err := AtMost(p, 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("AtMost(5 bytes, 4) = %v, want ErrTooLarge", err)
	}
	if _, err := AtMost("/dev/zero", 1<<10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("AtMost(/dev/zero) = %v, want ErrTooLarge", err)
	}
	if _, err := AtMost(dir, 10); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("AtMost(a directory) = %v, want it refused", err)
	}
	if _, err := AtMost(filepath.Join(dir, "none"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("AtMost(a missing file) = %v, want fs.ErrNotExist", err)
	}
}
