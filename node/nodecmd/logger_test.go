package nodecmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// TestJSONLogValues: with --log-format json, durations are strings like
// "30s" (not nanoseconds) and values that have a String form (device IDs,
// limits, instruction kinds) are that string, not a struct or a number.
func TestJSONLogValues(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	var nilID *device.ID
	log.Info("x", "lease", 30*time.Second, "device", device.ID{Kind: device.KindCPU}, "kind", proto.InstrFill,
		"max_bytes", device.MemoryLimit{Share: 0.5}, "nil", nilID, "error", fmt.Errorf("boom"), "n", 3)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	for k, want := range map[string]any{"lease": "30s", "device": "cpu:0", "kind": proto.InstrFill.String(), "max_bytes": "50%", "error": "boom", "n": 3.0} {
		if rec[k] != want {
			t.Errorf("%s = %#v, want %#v (line %s)", k, rec[k], want, buf.String())
		}
	}
}
