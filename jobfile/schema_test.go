package jobfile

import (
	"encoding/json"
	"os"
	"sort"
	"strconv"
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
		"copy": fieldsCopy, "repeat": fieldsRepeat, "output": fieldsOutput, "recovery": fieldsRecovery,
	} {
		d, ok := schema.Defs[def]
		if !ok {
			t.Errorf("schema has no $defs/%s", def)
			continue
		}
		check("$defs/"+def, keys(d.Properties), fields)
	}
	// split is true or an object: the object's fields.
	var split struct {
		OneOf []struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"oneOf"`
	}
	if err := json.Unmarshal(schemaDef(t, data, "split"), &split); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range split.OneOf {
		got = append(got, keys(o.Properties)...)
	}
	check("$defs/split", got, fieldsSplit)
}

func schemaDef(t *testing.T, data []byte, def string) json.RawMessage {
	t.Helper()
	var s struct {
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s.Defs[def]
}

// TestSchemaTakesExpressions: every integer field the decoder reads as an
// expression over the params (JOBS.md: "any integer field ... may be an
// integer expression") accepts a string in the schema too; a job with
// split: {devices: ndev} or map: {neighbourhood: k} ran, and the schema
// called it invalid.
func TestSchemaTakesExpressions(t *testing.T) {
	data, err := os.ReadFile("../docs/job.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	// at follows a path of object keys and array indexes ("1").
	at := func(path ...string) any {
		v := schema
		for _, p := range path {
			switch x := v.(type) {
			case map[string]any:
				v = x[p]
			case []any:
				i, _ := strconv.Atoi(p)
				if i >= len(x) {
					return nil
				}
				v = x[i]
			default:
				return nil
			}
		}
		return v
	}
	// takesExpr: the node is, or offers in oneOf/anyOf, the expr reference.
	takesExpr := func(v any) bool {
		m, _ := v.(map[string]any)
		if m["$ref"] == "#/$defs/expr" || m["$ref"] == "#/$defs/int" {
			return true
		}
		for _, k := range []string{"oneOf", "anyOf"} {
			alts, _ := m[k].([]any)
			for _, a := range alts {
				if am, _ := a.(map[string]any); am["$ref"] == "#/$defs/expr" || am["$ref"] == "#/$defs/int" {
					return true
				}
			}
		}
		return false
	}
	for _, field := range []string{"dim", "devices", "chunks_per_device", "borders"} {
		if v := at("$defs", "split", "oneOf", "1", "properties", field); !takesExpr(v) {
			t.Errorf("schema $defs/split.%s = %v, want it to take an expression over the params", field, v)
		}
	}
	if v := at("$defs", "accessor", "properties", "map", "oneOf", "1", "properties", "neighbourhood"); !takesExpr(v) {
		t.Errorf("schema $defs/accessor.map.neighbourhood = %v, want it to take an expression over the params", v)
	}
	// And the decoder does take them there.
	job := `params: {n: 64, k: 1, two: 2}
buffers:
  a: {type: float32, range: n, init: {value: 1}}
  b: {type: float32, range: n, init: {value: 1}}
steps:
  - kernel: saxpy
    scalars: {a: two}
    split: {dim: 0, devices: two, chunks_per_device: two, borders: k}
    accessors:
      - {param: x, buffer: a, mode: read, map: {neighbourhood: k}}
      - {param: y, buffer: b, mode: read_write, map: one_to_one}
`
	j, err := Parse("e.yaml", []byte(job), opts(t))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if sp := j.Steps[0].Split; sp.Devices != "2" || sp.ChunksPerDevice != 2 || sp.Borders != 1 {
		t.Errorf("split = %+v, want devices 2, chunks_per_device 2, borders 1", sp)
	}
}
