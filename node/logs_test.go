package node_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/acpp/acpp/node"
)

// logBuffer collects a node's logs; safe for the node's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestJSONLogValuesAreStrings: with a JSON handler, the node logs device
// IDs, memory limits and durations as strings ("cpu:0", "auto", "30s", not
// {"Kind":1,"Index":0}, {"Bytes":0,...} or nanoseconds), and job IDs as
// decimal strings, as acpp-submit status prints them (a JSON number above
// 2^53 is rounded by jq).
func TestJSONLogValuesAreStrings(t *testing.T) {
	var logs logBuffer
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) {
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	c := startClient(t, credDir, "alice", nodes...)
	const id = 1<<60 + 1
	openJob(t, c, "n0", id)
	records := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		if msg, _ := rec["msg"].(string); records[msg] == nil {
			records[msg] = rec
		}
	}
	for _, c := range []struct{ msg, key, want string }{
		{"memory budget", "device", "cpu:0"},
		{"memory budget", "max_bytes", "auto"},
		{"job opened", "job", "1152921504606846977"},
		{"job opened", "lease", "30s"},
	} {
		if got := records[c.msg][c.key]; got != c.want {
			t.Errorf("%q: %s = %#v, want %q", c.msg, c.key, got, c.want)
		}
	}
}
