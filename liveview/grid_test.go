package liveview

import (
	"slices"
	"strings"
	"testing"

	"github.com/acpp/acpp/coherence"
)

func box(lo, hi coherence.Dims) coherence.Box { return coherence.Box{Lo: lo, Hi: hi} }

func TestShape(t *testing.T) {
	for _, tc := range []struct {
		pages      [3]int
		cols, rows int
	}{
		{[3]int{16, 1, 1}, 16, 1},
		{[3]int{40, 1, 1}, 16, 3},
		{[3]int{1 << 24, 1, 1}, 16, 16},
		{[3]int{1, 1, 5}, 5, 1},
		{[3]int{4096, 4096, 1}, 16, 16},
		{[3]int{2, 1000, 1}, 128, 2},
		{[3]int{1000, 2, 1}, 2, 128},
		{[3]int{4, 4, 1}, 4, 4},
	} {
		cols, rows := Shape(tc.pages, MaxCells)
		if cols != tc.cols || rows != tc.rows || cols*rows > MaxCells {
			t.Errorf("Shape(%v) = %d×%d, want %d×%d", tc.pages, cols, rows, tc.cols, tc.rows)
		}
	}
}

func TestAddAllocDigits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pages    [3]int
		outdated []coherence.Box
		want     string
		valid    int
	}{
		{"all valid", [3]int{4, 1, 1}, nil, "ffff", 4},
		{"none valid", [3]int{4, 1, 1}, []coherence.Box{box(coherence.Dims{}, coherence.Dims{4, 1, 1})}, "0000", 0},
		{"halo rows", [3]int{4, 1, 1}, []coherence.Box{box(coherence.Dims{1, 0, 0}, coherence.Dims{3, 1, 1})}, "f00f", 2},
		{"wrapped line", [3]int{18, 1, 1}, nil, "ffffffffffffffffff..............", 18},
		// 512 pages in 256 cells: a cell half valid is neither 0 nor f.
		{"half a cell", [3]int{512, 1, 1}, []coherence.Box{box(coherence.Dims{1, 0, 0}, coherence.Dims{2, 1, 1})}, "8" + strings.Repeat("f", 255), 511},
		// 2D: 4×4 pages, the right half of rows 1-2 outdated.
		{"2d", [3]int{4, 4, 1}, []coherence.Box{box(coherence.Dims{1, 2, 0}, coherence.Dims{3, 4, 1})}, "ffffff00ff00ffff", 12},
		// 3D folded: 2×2×2 pages; one page outdated.
		{"3d", [3]int{2, 2, 2}, []coherence.Box{box(coherence.Dims{1, 1, 1}, coherence.Dims{2, 2, 2})}, "fffffff0", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuffer("b", tc.pages)
			b.AddAlloc("a", tc.outdated, nil)
			a := b.Allocs[0]
			if a.Valid != tc.want || a.ValidPages != tc.valid {
				t.Errorf("AddAlloc(%v, %v) = %q (%d valid), want %q (%d)", tc.pages, tc.outdated, a.Valid, a.ValidPages, tc.want, tc.valid)
			}
		})
	}
}

// The shares of a random set of boxes agree with counting page by page.
func TestCellsAgainstPages(t *testing.T) {
	pages := [3]int{37, 23, 3}
	boxes := []coherence.Box{
		box(coherence.Dims{0, 0, 0}, coherence.Dims{5, 23, 3}),
		box(coherence.Dims{10, 3, 1}, coherence.Dims{20, 9, 2}),
		box(coherence.Dims{30, 0, 0}, coherence.Dims{37, 1, 3}),
	}
	cols, rows := Shape(pages, MaxCells)
	got := Cells(pages, cols, rows, boxes)
	q := pages[1] * pages[2]
	count, in := make([]float64, cols*rows), make([]float64, cols*rows)
	for x := range pages[0] {
		for y := range pages[1] {
			for z := range pages[2] {
				c := cellOf(x, pages[0], rows)*cols + cellOf(y*pages[2]+z, q, cols)
				count[c]++
				for _, b := range boxes {
					if b.Contains(coherence.Dims{x, y, z}) {
						in[c]++
					}
				}
			}
		}
	}
	for i := range got {
		if want := in[i] / count[i]; got[i] < want-1e-9 || got[i] > want+1e-9 {
			t.Errorf("cell %d = %v, want %v", i, got[i], want)
		}
	}
}

// A buffer of 2^24 pages costs what a small one does: the work follows
// boxes and cells, not pages.
func BenchmarkAddAlloc(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 24} {
		b.Run(map[int]string{1 << 10: "pages=2^10", 1 << 24: "pages=2^24"}[n], func(b *testing.B) {
			out := []coherence.Box{box(coherence.Dims{n / 3, 0, 0}, coherence.Dims{n / 2, 1, 1}),
				box(coherence.Dims{2 * n / 3, 0, 0}, coherence.Dims{n - 1, 1, 1})}
			b.ReportAllocs()
			for b.Loop() {
				buf := NewBuffer("b", [3]int{n, 1, 1})
				buf.AddAlloc("a", out, out[:1])
			}
		})
	}
}

// Pages in transit may be reported twice (two groups bring them): a cell
// counts at most all of its pages.
func TestMovingOverlapCapped(t *testing.T) {
	b := NewBuffer("b", [3]int{4, 1, 1})
	twice := box(coherence.Dims{0, 0, 0}, coherence.Dims{2, 1, 1})
	b.AddAlloc("a", nil, []coherence.Box{twice, twice})
	if got := b.Allocs[0].Moving; got != "ff00" {
		t.Errorf("Moving = %q, want ff00", got)
	}
}

func TestFrontier(t *testing.T) {
	got := Frontier([]string{"n2/cpu:0: k", "n1/cpu:0: k", "n2/cpu:0: k"})
	if want := []string{"n1/cpu:0: k", "n2/cpu:0: k ×2"}; !slices.Equal(got, want) {
		t.Errorf("Frontier = %q, want %q", got, want)
	}
}

// Shape holds to its bound for every max, however small: a grid of more
// than one row and column with max below 16 divided by zero.
func TestShapeAnyMax(t *testing.T) {
	for max := 1; max <= 300; max++ {
		for _, pages := range [][3]int{{5, 100, 1}, {100, 5, 1}, {3, 3, 1}, {1, 40, 1}, {40, 1, 1}, {2, 2, 2}, {1 << 20, 1 << 10, 4}} {
			cols, rows := Shape(pages, max)
			if cols < 1 || rows < 1 || cols*rows > max {
				t.Fatalf("Shape(%v, %d) = %d×%d, want at least 1×1 and at most %d cells", pages, max, cols, rows, max)
			}
			// Cells of that shape must fold the pages without a panic.
			b := Buffer{Pages: pages, Cols: cols, Rows: rows}
			b.AddAlloc("a", []coherence.Box{box(coherence.Dims{0, 0, 0}, coherence.Dims{1, 1, 1})}, nil)
			if len(b.Allocs[0].Valid) != cols*rows {
				t.Fatalf("Shape(%v, %d): %d cells, want %d", pages, max, len(b.Allocs[0].Valid), cols*rows)
			}
		}
	}
}
