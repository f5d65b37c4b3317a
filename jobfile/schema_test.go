package jobfile

import (
	"encoding/json"
	"os"
	"sort"
	"testing"
)

// TestSchemaMatchesDecoder: docs/job.schema.json declares exactly the
// fields the decoder accepts, object by object, so the schema cannot drift
// from the format.
func TestSchemaMatchesDecoder(t *testing.T) {
	data, err := os.ReadFile("../docs/job.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Defs       map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("docs/job.schema.json is not JSON: %v", err)
	}
	keys := func(m map[string]json.RawMessage) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	sorted := func(s []string) []string {
		out := append([]string(nil), s...)
		sort.Strings(out)
		return out
	}
	check := func(what string, got []string, want []string) {
		t.Helper()
		w := sorted(want)
		if len(got) != len(w) {
			t.Errorf("schema %s has fields %v, the decoder %v", what, got, w)
			return
		}
		for i := range got {
			if got[i] != w[i] {
				t.Errorf("schema %s has fields %v, the decoder %v", what, got, w)
				return
			}
		}
	}
	check("(top level)", keys(schema.Properties), fieldsJob)
	for def, fields := range map[string][]string{
		"buffer": fieldsBuffer, "init": fieldsInit, "kernel": fieldsKernel, "param": fieldsParam,
		"step": fieldsStep, "accessor": fieldsAccessor, "region": fieldsRegion, "fill": fieldsFill,
		"copy": fieldsCopy, "repeat": fieldsRepeat, "output": fieldsOutput,
	} {
		d, ok := schema.Defs[def]
		if !ok {
			t.Errorf("schema has no $defs/%s", def)
			continue
		}
		check("$defs/"+def, keys(d.Properties), fields)
	}
}
