package liveview

import (
	"strings"

	"github.com/acpp/acpp/coherence"
)

// MaxCells bounds the cells of one allocation's page grid: the page draws
// each cell as one box, so more would not be seen, only sent.
const MaxCells = 256

// maxSide is the most cells along one side of a two-dimensional grid.
const maxSide = 16

// Shape is the cells a page grid of the given size is drawn with, at most
// max (MaxCells when max <= 0). A grid whose pages lie along one
// dimension (or along dimensions 1 and 2 only) is drawn as a line of
// cells wrapped in rows of up to 16; other grids as rows over dimension 0
// by columns over dimensions 1 and 2 (flattened), each side at most 16
// when the other needs it.
func Shape(pages [3]int, max int) (cols, rows int) {
	if max <= 0 {
		max = MaxCells
	}
	p0, q := pages[0], pages[1]*pages[2]
	if p0 <= 0 || q <= 0 {
		return 0, 0
	}
	if p0 == 1 || q == 1 {
		n := min(p0*q, max)
		cols = min(n, maxSide)
		return cols, min((n+cols-1)/cols, max/cols) // a wrapped last row counts whole
	}
	cols = min(q, maxSide, max) // max < 16 would leave no room for one row
	rows = min(p0, max/cols)
	cols = min(q, max/rows)
	return cols, rows
}

// NewBuffer is a buffer's entry in a view with its cell shape, no
// allocations yet.
func NewBuffer(name string, pages [3]int) Buffer {
	cols, rows := Shape(pages, MaxCells)
	return Buffer{Name: name, Pages: pages, Cols: cols, Rows: rows}
}

// AddAlloc adds an allocation of b, given the page boxes that are not up
// to date there (as coherence.Core.Outdated reports them: they do not
// overlap) and those being transferred there (which may overlap: a cell's
// share counts at most all of its pages).
func (b *Buffer) AddAlloc(name string, outdated, moving []coherence.Box) {
	total := b.Pages[0] * b.Pages[1] * b.Pages[2]
	a := Alloc{Name: name, ValidPages: total - volume(outdated)}
	a.Valid = Digits(Cells(b.Pages, b.Cols, b.Rows, outdated), true)
	if len(moving) > 0 {
		a.Moving = Digits(Cells(b.Pages, b.Cols, b.Rows, moving), false)
	}
	b.Allocs = append(b.Allocs, a)
}

func volume(boxes []coherence.Box) int {
	n := 0
	for _, x := range boxes {
		n += x.Volume()
	}
	return n
}

// Cells is the share of each cell's pages (row by row, cols×rows cells
// as Shape gives them) that the boxes cover, counting overlapping boxes
// twice (Digits caps a share at 1); a cell with no pages (the
// end of a wrapped line) is -1. It costs O(boxes × cells touched) for
// boxes whole along dimension 2 (Jacobi's halos, splits along rows),
// plus O(rows of pages) per box otherwise: never O(pages).
func Cells(pages [3]int, cols, rows int, boxes []coherence.Box) []float64 {
	n := cols * rows
	acc := make([]float64, n)
	if n == 0 {
		return acc
	}
	p0, p1, p2 := pages[0], pages[1], pages[2]
	q := p1 * p2
	linear := p0 == 1 || q == 1
	// A box's extent along the flattened dimensions 1-2: one interval when
	// it is whole along dimension 2, else one per index of dimension 1.
	spans := func(x coherence.Box, f func(a, b int)) {
		if x.Lo[2] == 0 && x.Hi[2] == p2 {
			f(x.Lo[1]*p2, x.Hi[1]*p2)
			return
		}
		for y := x.Lo[1]; y < x.Hi[1]; y++ {
			f(y*p2+x.Lo[2], y*p2+x.Hi[2])
		}
	}
	if linear {
		total := p0 * q
		cells := min(total, n)
		for _, x := range boxes {
			if x.Lo[1] == 0 && x.Hi[1] == p1 && x.Lo[2] == 0 && x.Hi[2] == p2 {
				addSpan(acc, total, cells, x.Lo[0]*q, x.Hi[0]*q, 1)
				continue
			}
			for r := x.Lo[0]; r < x.Hi[0]; r++ {
				spans(x, func(a, b int) { addSpan(acc, total, cells, r*q+a, r*q+b, 1) })
			}
		}
		for i := range acc {
			if i >= cells {
				acc[i] = -1
				continue
			}
			acc[i] /= float64(end(i, total, cells) - start(i, total, cells))
		}
		return acc
	}
	row := make([]float64, cols) // one box's share per column cell
	for _, x := range boxes {
		clear(row)
		spans(x, func(a, b int) { addSpan(row, q, cols, a, b, 1) })
		for r := cellOf(x.Lo[0], p0, rows); r < rows && start(r, p0, rows) < x.Hi[0]; r++ {
			ov := float64(min(x.Hi[0], end(r, p0, rows)) - max(x.Lo[0], start(r, p0, rows)))
			for c, v := range row {
				acc[r*cols+c] += ov * v
			}
		}
	}
	for r := range rows {
		h := float64(end(r, p0, rows) - start(r, p0, rows))
		for c := range cols {
			acc[r*cols+c] /= h * float64(end(c, q, cols)-start(c, q, cols))
		}
	}
	return acc
}

// Cell i of n over a length of p covers [start(i), end(i)).
func start(i, p, n int) int { return i * p / n }
func end(i, p, n int) int   { return (i + 1) * p / n }

// cellOf is the cell of n over p that holds x.
func cellOf(x, p, n int) int {
	i := x * n / p
	for i > 0 && start(i, p, n) > x {
		i--
	}
	for i+1 < n && start(i+1, p, n) <= x {
		i++
	}
	return i
}

// addSpan adds w times the overlap of [a, b) with each of n cells over p.
func addSpan(acc []float64, p, n, a, b int, w float64) {
	if a >= b {
		return
	}
	for i := cellOf(a, p, n); i < n && start(i, p, n) < b; i++ {
		acc[i] += w * float64(min(b, end(i, p, n))-max(a, start(i, p, n)))
	}
}

// Digits encodes shares as hex digits (see Alloc.Valid), one minus each
// share when invert is set; a cell of -1 is '.'.
func Digits(shares []float64, invert bool) string {
	var sb strings.Builder
	sb.Grow(len(shares))
	for _, s := range shares {
		if s < 0 {
			sb.WriteByte('.')
			continue
		}
		if invert {
			s = 1 - s
		}
		sb.WriteByte("0123456789abcdef"[level(s)])
	}
	return sb.String()
}

// level maps a share to 0…15: 0 only for none, 15 only for all.
func level(s float64) int {
	const eps = 1e-9
	switch {
	case s <= eps:
		return 0
	case s >= 1-eps:
		return 15
	}
	return 1 + min(int(s*14), 13)
}
