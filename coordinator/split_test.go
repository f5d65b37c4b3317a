package coordinator_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// Split results equal unsplit results, for every kind of range mapper and
// for more chunks than devices.
func TestSplitEqualsUnsplit_C4(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	ctx := testCtx(t)
	const n = 10000
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i)/7, float32(n-i)/3
	}
	saxpy := func(t *testing.T, split *coordinator.Split, xmap coordinator.RangeMapper, pin string) []float32 {
		j := openJob(t, c, nil)
		x, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 500}, Init: f32bytes(xs)})
		y, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 500}, Init: f32bytes(ys)})
		for _, a := range []float32{2, -0.5, 3} {
			if _, err := j.Submit(ctx, coordinator.Group{Kernel: "saxpy", Range: coordinator.Dims{1, 1, n}, Split: split, Device: pin,
				Args: []coordinator.Arg{coordinator.ScalarF32(a),
					coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Read, Map: xmap}),
					coordinator.Acc(coordinator.Accessor{Buffer: y, Mode: coordinator.ReadWrite, Map: coordinator.OneToOne()})}}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := j.Read(ctx, y, coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			t.Fatal(err)
		}
		return bytesF32(got)
	}
	want := saxpy(t, nil, nil, "n0/cpu:0")
	for _, tc := range []struct {
		name  string
		split *coordinator.Split
		xmap  coordinator.RangeMapper
	}{
		{"one-to-one, 3 devices", &coordinator.Split{}, coordinator.OneToOne()},
		{"one-to-one, 7 chunks", &coordinator.Split{Chunks: 7}, coordinator.OneToOne()},
		{"one-to-one, 7 chunks interleaved", &coordinator.Split{Chunks: 7, Interleave: true}, coordinator.OneToOne()},
		{"neighbourhood(3)", &coordinator.Split{}, coordinator.Neighbourhood(3)},
		{"all", &coordinator.Split{}, coordinator.All()},
		{"borders of 100 items", &coordinator.Split{Borders: 100}, coordinator.Neighbourhood(1)},
		{"fixed", &coordinator.Split{Chunks: 4}, coordinator.Fixed(coordinator.Dims{}, coordinator.Dims{1, 1, n})},
		{"custom", &coordinator.Split{Devices: []string{"n2/cpu:0", "n0/cpu:0"}}, coordinator.MapFunc(func(c coordinator.Chunk, buf coordinator.Dims) (coordinator.Dims, coordinator.Dims) {
			return c.Offset, c.Range
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := saxpy(t, tc.split, tc.xmap, ""); !slices.Equal(got, want) {
				t.Errorf("split saxpy differs from unsplit at %d", firstDiff(got, want))
			}
		})
	}

	t.Run("jacobi", func(t *testing.T) {
		const rows, cols, iters = 30, 40, 4
		in := jacobiInput(rows, cols)
		run := func(split *coordinator.Split) []float32 {
			j := openJob(t, c, nil)
			a, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: coordinator.Dims{1, 2, cols}, Init: f32bytes(in)})
			b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: coordinator.Dims{1, 2, cols}})
			res := runJacobi(t, j, a, b, rows, cols, iters, split, "")
			got, err := j.Read(ctx, res, coordinator.Dims{}, coordinator.Dims{})
			if err != nil {
				t.Fatal(err)
			}
			return bytesF32(got)
		}
		unsplit, split := run(nil), run(&coordinator.Split{Chunks: 5})
		if !slices.Equal(unsplit, split) || !slices.Equal(unsplit, jacobiRef(in, rows, cols, iters)) {
			t.Errorf("split Jacobi (5 chunks, pages of 2 rows) differs from unsplit or from plain Go")
		}
		if borders := run(&coordinator.Split{Borders: 2}); !slices.Equal(unsplit, borders) {
			t.Errorf("split Jacobi with border chunks of 2 rows differs from unsplit at %d", firstDiff(borders, unsplit))
		}
	})
}

// The coordinator tracks page states per (node, memory) allocation, and
// the client's own copy, cluster-wide (C2); host reads bring back only the
// pages outdated on the client (T3).
func TestPageStatesClusterWide_C2_T3(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	const n = 64
	pg := coordinator.Dims{1, 1, 8} // 8 pages of 8 elements
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: pg, Init: f32bytes(make([]float32, n))})
	page := func(lo, hi int) coherence.Box {
		return coherence.Box{Lo: coordinator.Dims{0, 0, lo}, Hi: coordinator.Dims{1, 1, hi}}
	}
	check := func(what string, want map[string][]coherence.Box) {
		t.Helper()
		got, err := j.PageStates(x, coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range got {
			if len(v) == 0 {
				delete(got, k)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: page states %v, want %v", what, got, want)
			return
		}
		for k, v := range want {
			if !slices.Equal(got[k], v) {
				t.Errorf("%s: up to date on %s = %v, want %v", what, k, got[k], v)
			}
		}
	}
	check("initial", map[string][]coherence.Box{"client": {page(0, 8)}})
	// n1 writes the first half (read-write: uploads it first).
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, n / 2}, Device: "n1/cpu:0",
		Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.ReadWrite, Range: coordinator.Dims{1, 1, n / 2}}), coordinator.ScalarF32(7)}}); err != nil {
		t.Fatal(err)
	}
	check("after n1 writes [0,32)", map[string][]coherence.Box{"client": {page(4, 8)}, "n1/m0": {page(0, 4)}})
	// n2 reads everything: pages come from n1 (first half) and the client.
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_mark", Range: coordinator.Dims{1, 1, 1}, Device: "n2/cpu:0",
		Args: []coordinator.Arg{coordinator.ScalarU64(1), coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Read})}}); err != nil {
		t.Fatal(err)
	}
	check("after n2 reads all", map[string][]coherence.Box{"client": {page(4, 8)}, "n1/m0": {page(0, 4)}, "n2/m0": {page(0, 8)}})
	fromClient := func() int64 {
		var s int64
		for i := range c.Nodes {
			s += c.Sent(i)["client"]
		}
		return s
	}
	before := fromClient()
	got, err := j.Read(ctx, x, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	if moved := fromClient() - before; moved != n/2*4 {
		t.Errorf("host read moved %d bytes to the client, want %d (only the outdated half)", moved, n/2*4)
	}
	for i, v := range bytesF32(got) {
		if want := float32(0); i < n/2 && v != 7 || i >= n/2 && v != want {
			t.Fatalf("x[%d] = %v", i, v)
		}
	}
	check("after the host read", map[string][]coherence.Box{"client": {page(0, 8)}, "n1/m0": {page(0, 4)}, "n2/m0": {page(0, 8)}})
	before = fromClient()
	if _, err := j.Read(ctx, x, coordinator.Dims{}, coordinator.Dims{}); err != nil {
		t.Fatal(err)
	}
	if moved := fromClient() - before; moved != 0 {
		t.Errorf("second host read moved %d bytes, want 0", moved)
	}
}

// A range mapper on an accessor of a group without Split maps the group's
// whole range as one chunk (it was ignored and the whole buffer was
// accessed), unless Offset or Range is set; a Neighbourhood of a wrong
// number of extents is refused with ErrInvalid at Submit (it panicked).
func TestAccessorMapInUnsplitGroup_C4(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	const n = 64
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 8}, Init: f32bytes(make([]float32, n))})
	page := func(lo, hi int) coherence.Box {
		return coherence.Box{Lo: coordinator.Dims{0, 0, lo}, Hi: coordinator.Dims{1, 1, hi}}
	}
	fill := func(m coordinator.RangeMapper, off, rng coordinator.Dims) error {
		_, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, 16}, Device: "n1/cpu:0",
			Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Write, Map: m, Offset: off, Range: rng}), coordinator.ScalarF32(5)}})
		return err
	}
	if err := fill(coordinator.OneToOne(), coordinator.Dims{}, coordinator.Dims{}); err != nil {
		t.Fatal(err)
	}
	got, err := j.PageStates(x, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got["n1/m0"], []coherence.Box{page(0, 2)}) || !slices.Equal(got["client"], []coherence.Box{page(2, 8)}) {
		t.Errorf("after a 16-item group with a one-to-one mapper on n1: page states %v, want n1/m0 [0,2) and client [2,8)", got)
	}
	// Offset/Range decide over a mapper in an unsplit group (one accessor
	// serves split and unsplit submits).
	if err := fill(coordinator.All(), coordinator.Dims{0, 0, 16}, coordinator.Dims{1, 1, 8}); err != nil {
		t.Fatal(err)
	}
	if got, _ := j.PageStates(x, coordinator.Dims{}, coordinator.Dims{}); !slices.Equal(got["n1/m0"], []coherence.Box{page(0, 3)}) {
		t.Errorf("after a group writing [16,24) by Offset/Range, with All as its mapper: n1/m0 holds %v, want [0,3)", got["n1/m0"])
	}
	for _, tc := range []struct {
		name     string
		m        coordinator.RangeMapper
		off, rng coordinator.Dims
		want     string
	}{
		{"four extents", coordinator.Neighbourhood(1, 1, 1, 1), coordinator.Dims{}, coordinator.Dims{}, "Neighbourhood takes 1 to 3 extents, got 4"},
		{"negative extent", coordinator.Neighbourhood(-1), coordinator.Dims{}, coordinator.Dims{}, "negative extent"},
	} {
		if err := fill(tc.m, tc.off, tc.rng); !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Submit = %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	// Two extents are a 2D buffer's rows and columns.
	b, _ := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: coordinator.Dims{1, 8, 8}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 8}})
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 8, 8}, Split: &coordinator.Split{},
		Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, Map: coordinator.Neighbourhood(1, 0)}), coordinator.ScalarF32(1)}}); err != nil {
		t.Errorf("Neighbourhood(1, 0) on a 2D buffer: %v", err)
	}
}
