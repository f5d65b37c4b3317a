package coherence

import "testing"

// TestAppendNoInitSplitsEdgePages_T1_T3: a no_init accessor discards only
// the pages it covers completely (T1); partly covered pages become plain
// writes so they are brought to the target first (T3).
func TestAppendNoInitSplitsEdgePages_T1_T3(t *testing.T) {
	g, err := NewGeometry(Dims{1, 1, 64}, 4, Dims{1, 1, 16})
	if err != nil {
		t.Fatal(err)
	}
	a := Access{Buffer: 1, Mode: Write, Target: AllocID{Mem: 1}}
	tests := []struct {
		name     string
		off, rng Dims
		discard  []Box
		written  []Box
	}{
		{"aligned", Dims{0, 0, 16}, Dims{1, 1, 32}, []Box{{Dims{0, 0, 1}, Dims{1, 1, 3}}}, nil},
		{"both edges", Dims{0, 0, 8}, Dims{1, 1, 32}, []Box{{Dims{0, 0, 1}, Dims{1, 1, 2}}},
			[]Box{{Dims{0, 0, 0}, Dims{1, 1, 1}}, {Dims{0, 0, 2}, Dims{1, 1, 3}}}},
		{"inside one page", Dims{0, 0, 2}, Dims{1, 1, 4}, nil, []Box{{Dims{0, 0, 0}, Dims{1, 1, 1}}}},
		{"to the buffer's end", Dims{0, 0, 48}, Dims{1, 1, 16}, []Box{{Dims{0, 0, 3}, Dims{1, 1, 4}}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := g.AppendNoInit(nil, a, tc.off, tc.rng)
			if err != nil {
				t.Fatal(err)
			}
			var discard, written []Box
			for _, x := range got {
				if x.Mode != Write || x.Buffer != 1 || x.Target != a.Target {
					t.Errorf("access %+v lost the accessor's buffer, mode or target", x)
				}
				if x.Discard {
					discard = append(discard, x.Pages)
				} else {
					written = append(written, x.Pages)
				}
			}
			if !boxesEqual(discard, tc.discard) || !boxesEqual(written, tc.written) {
				t.Errorf("AppendNoInit(%v, %v) = discard %v, written %v; want discard %v, written %v",
					tc.off, tc.rng, discard, written, tc.discard, tc.written)
			}
		})
	}
	if _, err := g.AppendNoInit(nil, a, Dims{0, 0, 60}, Dims{1, 1, 8}); err == nil {
		t.Error("AppendNoInit past the buffer's end: no error")
	}
}

func boxesEqual(a, b []Box) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
