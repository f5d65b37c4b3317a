package proto

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestPageHeaderValidate(t *testing.T) {
	box := func(lo, hi [3]uint64) Box { return Box{Lo: lo, Hi: hi} }
	tests := []struct {
		name    string
		h       PageHeader
		max     uint64
		want    uint64
		wantErr bool
	}{
		{"one box", PageHeader{ElemSize: 4, Boxes: []Box{box([3]uint64{0, 0, 0}, [3]uint64{2, 3, 4})}}, 0, 96, false},
		{"two boxes", PageHeader{ElemSize: 1, Boxes: []Box{box([3]uint64{}, [3]uint64{1, 1, 10}), box([3]uint64{0, 0, 15}, [3]uint64{1, 1, 16})}}, 0, 11, false},
		{"zero elem", PageHeader{Boxes: []Box{box([3]uint64{}, [3]uint64{1, 1, 1})}}, 0, 0, true},
		{"no boxes", PageHeader{ElemSize: 1}, 0, 0, true},
		{"empty box", PageHeader{ElemSize: 1, Boxes: []Box{box([3]uint64{0, 0, 1}, [3]uint64{1, 1, 1})}}, 0, 0, true},
		{"inverted", PageHeader{ElemSize: 1, Boxes: []Box{box([3]uint64{0, 0, 2}, [3]uint64{1, 1, 1})}}, 0, 0, true},
		{"overflow", PageHeader{ElemSize: 8, Boxes: []Box{box([3]uint64{}, [3]uint64{math.MaxUint32, math.MaxUint32, 4})}}, 0, 0, true},
		{"over limit", PageHeader{ElemSize: 4, Boxes: []Box{box([3]uint64{}, [3]uint64{1, 1, 100})}}, 399, 0, true},
		{"overlap", PageHeader{ElemSize: 1, Boxes: []Box{box([3]uint64{0, 0, 0}, [3]uint64{2, 2, 2}), box([3]uint64{1, 1, 1}, [3]uint64{3, 3, 3})}}, 0, 0, true},
		{"touching", PageHeader{ElemSize: 1, Boxes: []Box{box([3]uint64{0, 0, 0}, [3]uint64{2, 2, 2}), box([3]uint64{0, 0, 2}, [3]uint64{2, 2, 3})}}, 0, 12, false},
		{"at limit", PageHeader{ElemSize: 4, Boxes: []Box{box([3]uint64{}, [3]uint64{1, 1, 100})}}, 400, 400, false},
		{"the most boxes", PageHeader{ElemSize: 1, Boxes: rowOf(MaxBoxes)}, 0, MaxBoxes, false},
		{"a box too many", PageHeader{ElemSize: 1, Boxes: rowOf(MaxBoxes + 1)}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.h.Validate(tt.max)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Validate(%d) = %d, %v; want %d, error %v", tt.max, got, err, tt.want, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("Validate error %v does not wrap ErrMalformed", err)
			}
		})
	}
}

// rowOf is n boxes of one element each, every other element of a row.
func rowOf(n int) []Box {
	out := make([]Box, n)
	for i := range out {
		out[i] = Box{Lo: [3]uint64{0, 0, uint64(2 * i)}, Hi: [3]uint64{1, 1, uint64(2*i + 1)}}
	}
	return out
}

func TestPageSegmentValidate(t *testing.T) {
	h := PageHeader{ElemSize: 1, Boxes: []Box{{Hi: [3]uint64{1, 1, 100}}}}
	ref := h
	ref.Ref = &PageRef{Host: "boot", PID: 1, Handle: []byte{1}, Bytes: 100}
	big := PageHeader{ElemSize: 1, Boxes: []Box{{Hi: [3]uint64{1, 1, 1000}}}}
	huge := PageHeader{ElemSize: 4, Boxes: []Box{{Hi: [3]uint64{1 << 20, 1 << 20, 1 << 20}}}}
	tests := []struct {
		name string
		s    PageSegment
		ok   bool
	}{
		{"whole", PageSegment{Count: 1, Length: 100, Header: h}, true},
		{"part", PageSegment{Index: 1, Count: 2, Offset: 50, Length: 50, Header: h}, true},
		{"single partial", PageSegment{Count: 1, Length: 50, Header: h}, false},
		{"past end", PageSegment{Index: 1, Count: 2, Offset: 60, Length: 50, Header: h}, false},
		{"index out of range", PageSegment{Index: 2, Count: 2, Length: 10, Header: h}, false},
		{"part not where its index puts it", PageSegment{Index: 1, Count: 2, Offset: 0, Length: 50, Header: h}, false},
		{"part too short", PageSegment{Index: 0, Count: 2, Offset: 0, Length: 40, Header: h}, false},
		{"by reference, no payload", PageSegment{Count: 1, Header: ref}, true},
		{"by reference in two segments", PageSegment{Index: 1, Count: 2, Header: ref}, false},
		{"by reference with a payload", PageSegment{Count: 1, Length: 100, Header: ref}, false},
		{"zero count", PageSegment{Length: 100, Header: h}, false},
		{"the most segments", PageSegment{Index: MaxSegments - 1, Count: MaxSegments, Offset: 1000 * (MaxSegments - 1) / MaxSegments, Length: 1000 - 1000*(MaxSegments-1)/MaxSegments, Header: big}, true},
		{"too many", PageSegment{Count: MaxSegments + 1, Length: 1, Header: h}, false},
		// 2^62 bytes (no limit: Validate(0), or a MaxPageBytes that large):
		// segment 5 of 8 is bytes 5·2^59 to 6·2^59. total·5 overflowed 64
		// bits, which refused this segment and accepted 2^59+2^59.
		{"huge, in place", PageSegment{Index: 5, Count: 8, Offset: 5 << 59, Length: 1 << 59, Header: huge}, true},
		{"huge, where overflow put it", PageSegment{Index: 5, Count: 8, Offset: 1 << 59, Length: 1 << 59, Header: huge}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.s.Validate(0)
			if (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestBoxRuns checks the runs against an element-by-element copy of the box
// and that whole rows and planes merge into one run.
func TestBoxRuns(t *testing.T) {
	rng := [3]uint64{3, 4, 5}
	const es = 2
	alloc := make([]byte, 3*4*5*es)
	for i := range alloc {
		alloc[i] = byte(i)
	}
	tests := []struct {
		name     string
		box      Box
		wantRuns int
	}{
		{"single element", Box{Lo: [3]uint64{1, 2, 3}, Hi: [3]uint64{2, 3, 4}}, 1},
		{"partial rows", Box{Lo: [3]uint64{0, 1, 1}, Hi: [3]uint64{2, 3, 4}}, 4},
		{"whole rows", Box{Lo: [3]uint64{0, 1, 0}, Hi: [3]uint64{2, 3, 5}}, 2},
		{"whole planes", Box{Lo: [3]uint64{1, 0, 0}, Hi: [3]uint64{3, 4, 5}}, 1},
		{"everything", Box{Hi: rng}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs, err := BoxRuns(alloc, rng, es, tt.box)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != tt.wantRuns {
				t.Errorf("BoxRuns gave %d runs, want %d", len(runs), tt.wantRuns)
			}
			var got, want []byte
			for _, r := range runs {
				got = append(got, r...)
			}
			b := tt.box
			for i := b.Lo[0]; i < b.Hi[0]; i++ {
				for j := b.Lo[1]; j < b.Hi[1]; j++ {
					for k := b.Lo[2]; k < b.Hi[2]; k++ {
						off := ((i*rng[1]+j)*rng[2] + k) * es
						want = append(want, alloc[off:off+es]...)
					}
				}
			}
			if string(got) != string(want) {
				t.Errorf("BoxRuns bytes = %v, want %v", got, want)
			}
		})
	}
	for _, bad := range []Box{{Hi: [3]uint64{4, 4, 5}}, {Lo: [3]uint64{1, 0, 0}, Hi: [3]uint64{1, 4, 5}}} {
		if _, err := BoxRuns(alloc, rng, es, bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("BoxRuns(%v) error = %v, want ErrMalformed", bad, err)
		}
	}
	if _, err := BoxRuns(alloc[:10], rng, es, Box{Hi: [3]uint64{1, 1, 1}}); !errors.Is(err, ErrMalformed) {
		t.Errorf("BoxRuns on a short allocation: error = %v, want ErrMalformed", err)
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{MsgPages.String(), "MsgPages"},
		{MsgType(65000).String(), "MsgType(65000)"},
		{CodeVersion.String(), "version mismatch"},
		{(&ErrorReply{Code: CodeRefused, Message: "no such buffer"}).Error(), "refused: no such buffer"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestInstrValidateEdges: each per-instruction bound of docs/NODE.md and
// docs/TRANSPORT.md holds at its value and refuses one past it (boxes,
// dependencies, kernel arguments, work items of a launch).
func TestInstrValidateEdges(t *testing.T) {
	launch := func(global [3]uint64, args int) Instr {
		return Instr{ID: 1, Kind: InstrLaunch, Launch: &Launch{Kernel: "k", Device: "cpu:0", Global: global, Args: make([]KArg, args)}}
	}
	deps := func(n int) Instr {
		in := Instr{ID: 1 << 20, Kind: InstrFree, Deps: make([]uint64, n)}
		for i := range in.Deps {
			in.Deps[i] = uint64(i + 1)
		}
		return in
	}
	for _, c := range []struct {
		name string
		in   Instr
		want string // "" means valid
	}{
		{"the most boxes", Instr{ID: 1, Kind: InstrCopy, Boxes: rowOf(MaxBoxes)}, ""},
		{"a box too many", Instr{ID: 1, Kind: InstrCopy, Boxes: rowOf(MaxBoxes + 1)}, "1025 boxes, at most 1024"},
		{"the most dependencies", deps(MaxDeps), ""},
		{"a dependency too many", deps(MaxDeps + 1), "1025 dependencies, at most 1024"},
		{"the most kernel arguments", launch([3]uint64{1, 1, 1}, MaxKernelArgs), ""},
		{"a kernel argument too many", launch([3]uint64{1, 1, 1}, MaxKernelArgs+1), "257 kernel arguments, at most 256"},
		{"the most work items", launch([3]uint64{1, 1 << 24, 1 << 24}, 0), ""},
		{"past the most work items", launch([3]uint64{1, 1<<24 + 1, 1 << 24}, 0), "more than 281474976710656 work items"},
		{"the longest extent", launch([3]uint64{1, 1, 1 << 40}, 0), ""},
		{"an extent too long", launch([3]uint64{1, 1, 1<<40 + 1}, 0), "out of bounds"},
		{"a 64-byte fill pattern", Instr{ID: 1, Kind: InstrFill, Pattern: make([]byte, 64)}, ""},
		{"a 65-byte fill pattern", Instr{ID: 1, Kind: InstrFill, Pattern: make([]byte, 65)}, "pattern of 65 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.in.Validate()
			if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("Validate() = %v, want %q", err, c.want)
			}
		})
	}
}
