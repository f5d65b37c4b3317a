package scale

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
)

// Series is one line of a plot: points (X[i], Y[i]); a NaN Y leaves a gap
// (a run that did not converge, say).
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool // a reference line (a goal), drawn dashed and without markers
}

// Plot is a line plot with a legend, drawn by LinePlot.
type Plot struct {
	Title, XLabel, YLabel string
	// LogX spaces the x axis by log2 (members 1, 4, 16, 64 evenly); ticks
	// are at the series' x values.
	LogX   bool
	Series []Series
}

const (
	plotW, plotH = 900, 520
	padL, padR   = 90, 250
	padT, padB   = 60, 70
	glyphScale   = 2
	glyphAdvance = 4 * glyphScale
)

var palette = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {23, 190, 207, 255}, {127, 127, 127, 255},
}

// LinePlot draws p as a PNG (900×520) to w.
func LinePlot(w io.Writer, p Plot) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	x0, x1, y0, y1 := padL, plotW-padR, plotH-padB, padT // pixel box of the data (y0 bottom)
	fx := func(x float64) float64 {
		if p.LogX {
			return math.Log2(math.Max(x, 1e-9))
		}
		return x
	}
	// Data ranges.
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	var xticks []float64
	for _, s := range p.Series {
		for i, x := range s.X {
			xmin, xmax = math.Min(xmin, fx(x)), math.Max(xmax, fx(x))
			if !s.Dashed && !containsF(xticks, x) {
				xticks = append(xticks, x)
			}
			if i < len(s.Y) && !math.IsNaN(s.Y[i]) {
				ymax = math.Max(ymax, s.Y[i])
			}
		}
	}
	if math.IsInf(xmin, 0) {
		return fmt.Errorf("scale: plot %q has no points", p.Title)
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	step := niceStep(ymax / 5)
	if ymax == 0 {
		step = 1
	}
	ytop := step * math.Ceil(ymax*1.05/step)
	px := func(x float64) int { return x0 + int(math.Round((fx(x)-xmin)/(xmax-xmin)*float64(x1-x0))) }
	py := func(y float64) int { return y0 - int(math.Round(y/ytop*float64(y0-y1))) }
	// Grid, axes, ticks.
	grey, black := color.RGBA{225, 225, 225, 255}, color.RGBA{0, 0, 0, 255}
	for y := 0.0; y <= ytop+step/2; y += step {
		line(img, x0, py(y), x1, py(y), grey, 1, false)
		s := fmtTick(y)
		text(img, x0-8-len(s)*glyphAdvance, py(y)-5, s, black)
	}
	for _, x := range xticks {
		line(img, px(x), y0, px(x), y1, grey, 1, false)
		s := fmtTick(x)
		text(img, px(x)-len(s)*glyphAdvance/2, y0+10, s, black)
	}
	line(img, x0, y0, x1, y0, black, 2, false)
	line(img, x0, y0, x0, y1, black, 2, false)
	text(img, (x0+x1)/2-len(p.XLabel)*glyphAdvance/2, y0+36, p.XLabel, black)
	text(img, 10, y1-24, p.YLabel, black)
	text(img, plotW/2-len(p.Title)*glyphAdvance/2, 12, p.Title, black)
	// Lines, markers, legend.
	for i, s := range p.Series {
		c := palette[i%len(palette)]
		prev := false
		var lx, ly int
		for k, x := range s.X {
			if k >= len(s.Y) || math.IsNaN(s.Y[k]) {
				prev = false
				continue
			}
			X, Y := px(x), py(s.Y[k])
			if prev {
				line(img, lx, ly, X, Y, c, 2, s.Dashed)
			}
			if !s.Dashed {
				fill(img, image.Rect(X-4, Y-4, X+5, Y+5), c)
			}
			lx, ly, prev = X, Y, true
		}
		ly0 := y1 + 10 + i*22
		line(img, x1+20, ly0+5, x1+50, ly0+5, c, 2, s.Dashed)
		text(img, x1+58, ly0, s.Name, black)
	}
	return png.Encode(w, img)
}

func containsF(xs []float64, x float64) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// line draws a segment of the given width (dashed: 8 pixels on, 6 off).
func line(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA, width int, dashed bool) {
	dx, dy := xb-xa, yb-ya
	n := max(abs(dx), abs(dy), 1)
	for i := 0; i <= n; i++ {
		if dashed && i%14 >= 8 {
			continue
		}
		x := xa + int(math.Round(float64(dx*i)/float64(n)))
		y := ya + int(math.Round(float64(dy*i)/float64(n)))
		fill(img, image.Rect(x-width/2, y-width/2, x-width/2+width, y-width/2+width), c)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// text draws s with a 3×5 pixel font scaled by glyphScale; letters print
// as capitals, characters without a glyph as blanks.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, r := range strings.ToUpper(s) {
		if g, ok := font[r]; ok {
			for row, bits := range g {
				for col := range 3 {
					if bits[col] == '#' {
						fill(img, image.Rect(x+col*glyphScale, y+row*glyphScale, x+(col+1)*glyphScale, y+(row+1)*glyphScale), c)
					}
				}
			}
		}
		x += glyphAdvance
	}
}

var font = map[rune][5]string{
	'0': {"###", "#.#", "#.#", "#.#", "###"}, '1': {".#.", "##.", ".#.", ".#.", "###"},
	'2': {"###", "..#", "###", "#..", "###"}, '3': {"###", "..#", "###", "..#", "###"},
	'4': {"#.#", "#.#", "###", "..#", "..#"}, '5': {"###", "#..", "###", "..#", "###"},
	'6': {"###", "#..", "###", "#.#", "###"}, '7': {"###", "..#", "..#", ".#.", ".#."},
	'8': {"###", "#.#", "###", "#.#", "###"}, '9': {"###", "#.#", "###", "..#", "###"},
	'A': {".#.", "#.#", "###", "#.#", "#.#"}, 'B': {"##.", "#.#", "##.", "#.#", "##."},
	'C': {".##", "#..", "#..", "#..", ".##"}, 'D': {"##.", "#.#", "#.#", "#.#", "##."},
	'E': {"###", "#..", "##.", "#..", "###"}, 'F': {"###", "#..", "##.", "#..", "#.."},
	'G': {".##", "#..", "#.#", "#.#", ".##"}, 'H': {"#.#", "#.#", "###", "#.#", "#.#"},
	'I': {"###", ".#.", ".#.", ".#.", "###"}, 'J': {"..#", "..#", "..#", "#.#", ".#."},
	'K': {"#.#", "#.#", "##.", "#.#", "#.#"}, 'L': {"#..", "#..", "#..", "#..", "###"},
	'M': {"#.#", "###", "#.#", "#.#", "#.#"}, 'N': {"##.", "#.#", "#.#", "#.#", "#.#"},
	'O': {".#.", "#.#", "#.#", "#.#", ".#."}, 'P': {"##.", "#.#", "##.", "#..", "#.."},
	'Q': {".#.", "#.#", "#.#", "##.", ".##"}, 'R': {"##.", "#.#", "##.", "#.#", "#.#"},
	'S': {".##", "#..", ".#.", "..#", "##."}, 'T': {"###", ".#.", ".#.", ".#.", ".#."},
	'U': {"#.#", "#.#", "#.#", "#.#", "###"}, 'V': {"#.#", "#.#", "#.#", "#.#", ".#."},
	'W': {"#.#", "#.#", "#.#", "###", "#.#"}, 'X': {"#.#", "#.#", ".#.", "#.#", "#.#"},
	'Y': {"#.#", "#.#", ".#.", ".#.", ".#."}, 'Z': {"###", "..#", ".#.", "#..", "###"},
	'.': {"...", "...", "...", "...", ".#."}, ',': {"...", "...", "...", ".#.", "#.."},
	':': {"...", ".#.", "...", ".#.", "..."}, '-': {"...", "...", "###", "...", "..."},
	'/': {"..#", "..#", ".#.", "#..", "#.."}, '(': {".#.", "#..", "#..", "#..", ".#."},
	')': {".#.", "..#", "..#", "..#", ".#."}, '%': {"#.#", "..#", ".#.", "#..", "#.#"},
	'=': {"...", "###", "...", "###", "..."}, '+': {"...", ".#.", "###", ".#.", "..."},
	'<': {"..#", ".#.", "#..", ".#.", "..#"}, '>': {"#..", ".#.", "..#", ".#.", "#.."},
	'_': {"...", "...", "...", "...", "###"}, 'µ': {"#.#", "#.#", "#.#", "##.", "#.."},
}
