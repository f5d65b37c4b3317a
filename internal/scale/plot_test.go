package scale

import (
	"bytes"
	"image/png"
	"math"
	"testing"
)

// TestLinePlot draws a plot with a gap and a dashed goal line and checks
// that the PNG decodes at the plot's size with each series' colour on it.
func TestLinePlot(t *testing.T) {
	var buf bytes.Buffer
	err := LinePlot(&buf, Plot{
		Title: "convergence", XLabel: "members", YLabel: "seconds", LogX: true,
		Series: []Series{
			{Name: "lan", X: []float64{1, 4, 16, 64}, Y: []float64{0.1, 0.5, 1.2, 3.2}},
			{Name: "local", X: []float64{1, 4, 16, 64}, Y: []float64{0.1, 0.3, math.NaN(), 19}},
			{Name: "goal 5 s", X: []float64{1, 64}, Y: []float64{5, 5}, Dashed: true},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != plotW || b.Dy() != plotH {
		t.Fatalf("size %v, want %dx%d", b, plotW, plotH)
	}
	for i := range 3 {
		want := palette[i]
		found := false
		for y := 0; y < plotH && !found; y++ {
			for x := 0; x < plotW; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(b>>8) == want.B {
					found = true
					break
				}
			}
		}
		if !found {
			t.Errorf("series %d's colour %v is not on the plot", i, want)
		}
	}
	if err := LinePlot(&buf, Plot{Title: "empty"}); err == nil {
		t.Error("a plot with no points: no error")
	}
}
