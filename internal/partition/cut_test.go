package partition

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSplitRange_C4(t *testing.T) {
	tests := []struct {
		name          string
		off, rng, loc Dims
		along         SplitDim
		n             int
		want          []Chunk
		wantErr       bool
	}{
		{"1D in 3, remainder first", Dims{}, Dims{1, 1, 10}, Dims{}, SplitAuto, 3, []Chunk{
			{Dims{0, 0, 0}, Dims{1, 1, 4}}, {Dims{0, 0, 4}, Dims{1, 1, 3}}, {Dims{0, 0, 7}, Dims{1, 1, 3}}}, false},
		{"2D rows by default", Dims{}, Dims{1, 6, 8}, Dims{}, SplitAuto, 2, []Chunk{
			{Dims{0, 0, 0}, Dims{1, 3, 8}}, {Dims{0, 3, 0}, Dims{1, 3, 8}}}, false},
		{"explicit columns, with offset", Dims{0, 1, 2}, Dims{1, 6, 8}, Dims{}, SplitDim2, 2, []Chunk{
			{Dims{0, 1, 2}, Dims{1, 6, 4}}, {Dims{0, 1, 6}, Dims{1, 6, 4}}}, false},
		{"work-groups stay whole", Dims{}, Dims{1, 1, 12}, Dims{1, 1, 4}, SplitAuto, 2, []Chunk{
			{Dims{0, 0, 0}, Dims{1, 1, 8}}, {Dims{0, 0, 8}, Dims{1, 1, 4}}}, false},
		{"more chunks than items", Dims{}, Dims{1, 1, 2}, Dims{}, SplitAuto, 5, []Chunk{
			{Dims{0, 0, 0}, Dims{1, 1, 1}}, {Dims{0, 0, 1}, Dims{1, 1, 1}}}, false},
		{"single item", Dims{}, Dims{1, 1, 1}, Dims{}, SplitAuto, 3, []Chunk{{Dims{}, Dims{1, 1, 1}}}, false},
		{"range not a multiple of the group", Dims{}, Dims{1, 1, 10}, Dims{1, 1, 4}, SplitAuto, 2, nil, true},
		{"bad dimension", Dims{}, Dims{1, 1, 10}, Dims{}, SplitDim(7), 2, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := splitRange(tt.off, tt.rng, tt.loc, tt.along, tt.n)
			if (err != nil) != tt.wantErr {
				t.Fatalf("splitRange() error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrBadSplit) {
					t.Errorf("error %v does not wrap ErrBadSplit", err)
				}
				return
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("splitRange() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestChunkDevice_C4(t *testing.T) {
	tests := []struct {
		split   Split
		n, devs int
		want    []int
	}{
		{Split{}, 3, 3, []int{0, 1, 2}},
		{Split{}, 6, 3, []int{0, 0, 1, 1, 2, 2}},
		{Split{}, 7, 3, []int{0, 0, 0, 1, 1, 2, 2}},
		{Split{}, 2, 3, []int{0, 1}},
		{Split{Interleave: true}, 6, 3, []int{0, 1, 2, 0, 1, 2}},
	}
	for _, tt := range tests {
		var got []int
		for i := range tt.n {
			got = append(got, tt.split.chunkDevice(i, tt.n, tt.devs))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%+v: %d chunks over %d devices go to %v, want %v", tt.split, tt.n, tt.devs, got, tt.want)
		}
	}
}

// Split.Borders cuts a thin chunk off each side of a device's block that
// touches another block; the chunks still cover the range in order, each
// on its block's device (C4).
func TestSplitBorders_C4(t *testing.T) {
	rows := func(cs []Chunk) (out [][2]int) {
		for _, c := range cs {
			out = append(out, [2]int{c.Offset[1], c.Range[1]})
		}
		return out
	}
	s := Split{Borders: 1}
	cs, devs, err := s.Cut(Dims{}, Dims{1, 30, 8}, Dims{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{0, 9}, {9, 1}, {10, 1}, {11, 8}, {19, 1}, {20, 1}, {21, 9}}
	if !slices.Equal(rows(cs), want) || !slices.Equal(devs, []int{0, 0, 1, 1, 1, 2, 2}) {
		t.Errorf("borders of 1 row over 3 devices: rows %v on devices %v; want %v on 0 0 1 1 1 2 2", rows(cs), devs, want)
	}
	// Work-groups of 4 rows: borders of one work-group.
	cs, _, err = s.Cut(Dims{}, Dims{1, 32, 8}, Dims{1, 4, 8}, 2)
	if err != nil || !slices.Equal(rows(cs), [][2]int{{0, 12}, {12, 4}, {16, 4}, {20, 12}}) {
		t.Errorf("borders of one 4-row work-group: %v, %v", rows(cs), err)
	}
	// A block too thin to cut stays whole.
	cs, _, err = (&Split{Borders: 4}).Cut(Dims{}, Dims{1, 8, 8}, Dims{}, 2)
	if err != nil || !slices.Equal(rows(cs), [][2]int{{0, 4}, {4, 4}}) {
		t.Errorf("blocks of 4 rows with borders of 4: %v, %v", rows(cs), err)
	}
	// Borders with 2 chunks per device: the interior is cut in two.
	cs, devs, err = (&Split{Borders: 1, Chunks: 6}).Cut(Dims{}, Dims{1, 30, 8}, Dims{}, 3)
	want = [][2]int{{0, 5}, {5, 4}, {9, 1}, {10, 1}, {11, 4}, {15, 4}, {19, 1}, {20, 1}, {21, 5}, {26, 4}}
	if err != nil || !slices.Equal(rows(cs), want) || !slices.Equal(devs, []int{0, 0, 0, 1, 1, 1, 1, 2, 2, 2}) {
		t.Errorf("borders of 1 row, 2 chunks per device: rows %v on devices %v (%v); want %v", rows(cs), devs, err, want)
	}
	for _, bad := range []Split{{Borders: -1}, {Borders: 1, Chunks: 7}, {Borders: 1, Interleave: true}} {
		if _, _, err := bad.Cut(Dims{}, Dims{1, 30, 8}, Dims{}, 3); !errors.Is(err, ErrBadSplit) {
			t.Errorf("%+v: %v, want ErrBadSplit", bad, err)
		}
	}
}

// C4: Split.Cut over random ranges, work-group sizes and options: the
// chunks follow each other along the cut and cover the range, keep
// work-groups whole, go to devices in range (in contiguous runs unless
// interleaved), and with whole blocks per device leave every device the
// rows it holds with one chunk per device.
func TestCutProperties_C4(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 11))
	for i := range 3000 {
		devs := 1 + r.IntN(5)
		unit := 1 + r.IntN(4)
		rng := Dims{1, unit * (1 + r.IntN(40)), 1 + r.IntN(3)}
		local := Dims{}
		if r.IntN(2) == 0 {
			local = Dims{1, unit, rng[2]}
		} else {
			unit = 1
		}
		s := Split{Along: SplitDim1, Chunks: r.IntN(4 * devs), Interleave: r.IntN(4) == 0, Borders: r.IntN(3)}
		chunks, dev, err := s.Cut(Dims{}, rng, local, devs)
		perDevice := !s.Interleave && (s.Chunks == 0 || s.Chunks%devs == 0)
		if err != nil {
			if s.Borders > 0 && !perDevice && errors.Is(err, ErrBadSplit) {
				continue
			}
			t.Fatalf("case %d: %+v over %v, %d devices: %v", i, s, rng, devs, err)
		}
		owner := make([]int, rng[1])
		next := 0
		for k, c := range chunks {
			if c.Offset[1] != next || c.Range[1] < 1 || c.Range[1]%unit != 0 || c.Range[0] != rng[0] || c.Range[2] != rng[2] {
				t.Fatalf("case %d: %+v over %v: chunk %d is %v+%v after row %d (work-groups of %d rows)", i, s, rng, k, c.Offset, c.Range, next, unit)
			}
			if dev[k] < 0 || dev[k] >= devs || (!s.Interleave && k > 0 && dev[k] < dev[k-1]) {
				t.Fatalf("case %d: %+v: devices %v for %d devices", i, s, dev, devs)
			}
			for row := c.Offset[1]; row < c.Offset[1]+c.Range[1]; row++ {
				owner[row] = dev[k]
			}
			next += c.Range[1]
		}
		if next != rng[1] {
			t.Fatalf("case %d: %+v: chunks cover %d of %d rows", i, s, next, rng[1])
		}
		if !perDevice {
			continue
		}
		base, baseDev, _ := (&Split{Along: SplitDim1}).Cut(Dims{}, rng, local, devs)
		for k, c := range base {
			for row := c.Offset[1]; row < c.Offset[1]+c.Range[1]; row++ {
				if owner[row] != baseDev[k] {
					t.Fatalf("case %d: %+v over %d rows, %d devices: row %d on device %d, on %d with one chunk per device", i, s, rng[1], devs, row, owner[row], baseDev[k])
				}
			}
		}
	}
}

// C4: with whole blocks per device, the rows a device holds do not depend
// on how many chunks (or border chunks) its block is cut into, so steps
// split differently agree on where data lives; work-groups stay whole.
func TestDeviceBlocksIndependentOfChunks_C4(t *testing.T) {
	for _, tc := range []struct{ rows, local, devs int }{{64, 0, 3}, {30, 0, 3}, {64, 4, 3}, {100, 0, 4}, {7, 0, 2}, {48, 8, 2}} {
		rng, local := Dims{1, tc.rows, 8}, Dims{}
		if tc.local > 0 {
			local = Dims{1, tc.local, 8}
		}
		owner := func(s Split) []int {
			cs, devs, err := s.Cut(Dims{}, rng, local, tc.devs)
			if err != nil {
				t.Fatalf("%+v over %d rows: %v", s, tc.rows, err)
			}
			out := make([]int, tc.rows)
			next := 0
			for i, c := range cs {
				if c.Offset[1] != next {
					t.Fatalf("%+v over %d rows: chunk %d starts at row %d, want %d (in order, no gaps)", s, tc.rows, i, c.Offset[1], next)
				}
				if tc.local > 0 && c.Range[1]%tc.local != 0 {
					t.Fatalf("%+v: chunk %d has %d rows, not whole work-groups of %d", s, i, c.Range[1], tc.local)
				}
				for r := c.Offset[1]; r < c.Offset[1]+c.Range[1]; r++ {
					out[r] = devs[i]
				}
				next += c.Range[1]
			}
			if next != tc.rows {
				t.Fatalf("%+v: chunks cover %d of %d rows", s, next, tc.rows)
			}
			return out
		}
		base := owner(Split{})
		for _, s := range []Split{{Chunks: 2 * tc.devs}, {Chunks: 4 * tc.devs}, {Chunks: 3 * tc.devs, Borders: 1}, {Borders: 1}} {
			if got := owner(s); !slices.Equal(got, base) {
				t.Errorf("%d rows over %d devices: %+v puts rows on devices %v, one chunk per device %v", tc.rows, tc.devs, s, got, base)
			}
		}
	}
}

// FuzzSplitRange: chunks are disjoint, cover the range exactly, keep
// work-groups whole, and never number more than asked. (C4)
func FuzzSplitRange(f *testing.F) {
	f.Add(0, 0, 0, 1, 1, 10, 0, 0, 0, uint8(0), 3)
	f.Add(0, 2, 1, 1, 6, 8, 0, 0, 0, uint8(2), 2)
	f.Add(0, 0, 0, 1, 1, 12, 1, 1, 4, uint8(3), 5)
	f.Fuzz(func(t *testing.T, o0, o1, o2, r0, r1, r2, l0, l1, l2 int, along uint8, n int) {
		clamp := func(v, hi int) int { return ((v % hi) + hi) % hi }
		off := Dims{clamp(o0, 4), clamp(o1, 4), clamp(o2, 4)}
		rng := Dims{1 + clamp(r0, 6), 1 + clamp(r1, 6), 1 + clamp(r2, 40)}
		local := Dims{clamp(l0, 3), clamp(l1, 3), clamp(l2, 5)}
		n = clamp(n, 9)
		chunks, dim, err := splitRange(off, rng, local, SplitDim(along%5), n)
		if err != nil {
			if !errors.Is(err, ErrBadSplit) {
				t.Fatalf("error %v does not wrap ErrBadSplit", err)
			}
			return
		}
		if len(chunks) == 0 || len(chunks) > max(n, 1) {
			t.Fatalf("%d chunks for n=%d", len(chunks), n)
		}
		covered := 0
		next := off[dim]
		for _, c := range chunks {
			for d := range 3 {
				if d != dim && (c.Offset[d] != off[d] || c.Range[d] != rng[d]) {
					t.Fatalf("chunk %v changes dimension %d (cut along %d)", c, d, dim)
				}
			}
			if c.Offset[dim] != next || c.Range[dim] < 1 {
				t.Fatalf("chunk %v does not follow at %d", c, next)
			}
			if local[dim] > 0 && c.Range[dim]%local[dim] != 0 {
				t.Fatalf("chunk %v splits a work-group of %d", c, local[dim])
			}
			next += c.Range[dim]
			covered += c.Range.Volume()
		}
		if covered != rng.Volume() || next != off[dim]+rng[dim] {
			t.Fatalf("chunks cover %d items ending at %d, want %d ending at %d", covered, next, rng.Volume(), off[dim]+rng[dim])
		}
	})
}
