package partition

import (
	"errors"
	"testing"
)

func TestRangeMappers_C4(t *testing.T) {
	buf := Dims{1, 10, 20}
	c := Chunk{Offset: Dims{0, 3, 0}, Range: Dims{1, 4, 20}}
	tests := []struct {
		name     string
		m        RangeMapper
		off, rng Dims
	}{
		{"one-to-one", OneToOne(), Dims{0, 3, 0}, Dims{1, 4, 20}},
		{"neighbourhood 1, clipped", Neighbourhood(1), Dims{0, 2, 0}, Dims{1, 6, 20}},
		{"neighbourhood per dimension", Neighbourhood(0, 5, 0), Dims{0, 0, 0}, Dims{1, 10, 20}},
		{"all", All(), Dims{}, buf},
		{"fixed", Fixed(Dims{0, 1, 1}, Dims{1, 2, 2}), Dims{0, 1, 1}, Dims{1, 2, 2}},
		{"custom, clipped to the buffer", MapFunc(func(c Chunk, _ Dims) (Dims, Dims) { return Dims{0, 8, 0}, Dims{1, 8, 30} }), Dims{0, 8, 0}, Dims{1, 2, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off, rng, err := MapAccess(tt.m, c, buf)
			if err != nil || off != tt.off || rng != tt.rng {
				t.Errorf("MapAccess = %v, %v, %v; want %v, %v", off, rng, err, tt.off, tt.rng)
			}
		})
	}
	if _, _, err := MapAccess(MapFunc(func(Chunk, Dims) (Dims, Dims) { return Dims{}, Dims{1, -1, 1} }), c, buf); !errors.Is(err, ErrBadSplit) {
		t.Errorf("negative range from a custom mapper = %v, want ErrBadSplit", err)
	}
}

// Neighbourhood takes one extent (every dimension) or three; any other
// number is a programming error and panics with a message that says so.
func TestNeighbourhoodExtents_C4(t *testing.T) {
	for _, k := range [][]int{nil, {1, 2}, {1, 2, 3, 4}} {
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); msg != "partition: Neighbourhood takes one extent or three" {
					t.Errorf("Neighbourhood(%v) panicked with %v, want the extent-count message", k, r)
				}
			}()
			Neighbourhood(k...)
			t.Errorf("Neighbourhood(%v) did not panic", k)
		}()
	}
}
