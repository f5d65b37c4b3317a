package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/acpp/acpp/device"
)

// checks refuse the launches a built-in kernel cannot compute as documented
// (device.Kernel.Check): both implementations would read past local memory
// or sum the wrong items, so the launch fails before it runs, on every
// backend, with what to pass.
//
// They also refuse launches that would index past an argument's memory:
// the CUDA forms trust the launch range and the size scalars (as
// hand-written kernels do), so such a launch would write over other
// buffers or fault and take the GPU out of service for the node's life
// (docs/OPERATIONS.md, "A GPU lost to a faulting kernel"); the Go forms would
// panic. Where an argument's size is not known yet (the API's submit
// before placement, acpp-submit check) that part waits for the backend,
// which checks with the real memory.
var checks = map[string]func(device.NDRange, []device.Arg) error{
	"saxpy":          checkSaxpy,
	"fill_f32":       checkFill,
	"jacobi2d":       checkJacobi,
	"matmul_tiled":   checkMatmulTiled,
	"reduce_sum_f32": checkReduceSum,
	"histogram_u32":  checkHistogram,
}

// elems is how many elements argument i gives the kernel from where its
// pointer starts: an accessor's buffer range, and at most what is left of
// its allocation past its offset. ok is false when neither is known (no
// such argument, no range, no memory size).
func elems(args []device.Arg, i int) (n uint64, ok bool) {
	if i >= len(args) {
		return 0, false
	}
	a := args[i]
	switch a.Kind {
	case device.ArgAccessor, device.ArgRangedAccessor, device.ArgPointer:
	default:
		return 0, false
	}
	if r := a.Range; a.Kind != device.ArgPointer && r[0] > 0 && r[1] > 0 && r[2] > 0 {
		n, ok = uint64(r[0])*uint64(r[1])*uint64(r[2]), true
	}
	if a.Mem != nil && a.Mem.Bytes > 0 && a.ElemSize > 0 {
		m := uint64(max(a.Mem.Bytes-a.Offset, 0) / a.ElemSize)
		if !ok || m < n {
			n = m
		}
		ok = true
	}
	return n, ok
}

// within refuses a launch that makes the kernel touch element last of
// argument i (named name) when the argument holds fewer; how says which
// part of the launch reaches it.
func within(args []device.Arg, i int, name string, last uint64, how func() string) error {
	if n, ok := elems(args, i); ok && last >= n {
		return fmt.Errorf("%s reaches %s[%d], but %s holds %d elements: keep the launch range (and offset) within the buffers", how(), name, last, name, n)
	}
	return nil
}

// empty reports whether the launch has no items (nothing runs, nothing is
// touched).
func empty(nd device.NDRange) bool {
	return nd.Global[0] <= 0 || nd.Global[1] <= 0 || nd.Global[2] <= 0
}

// ends is where the launch ends (offset + global range) in each
// dimension; it refuses a negative offset, and an end past MaxInt, which
// wrapped negative and slipped past the bounds below.
func ends(nd device.NDRange) (end [3]int, err error) {
	for d := range 3 {
		if nd.Offset[d] < 0 {
			return end, fmt.Errorf("offset %v is negative", nd.Offset)
		}
		if nd.Offset[d] > math.MaxInt-nd.Global[d] {
			return end, fmt.Errorf("offset %v plus range %v passes the largest index", nd.Offset, nd.Global)
		}
		end[d] = nd.Offset[d] + nd.Global[d]
	}
	return end, nil
}

// checkSaxpy: item i of dimension 2 (plus the offset) reads x[i] and
// updates y[i].
func checkSaxpy(nd device.NDRange, args []device.Arg) error {
	if empty(nd) {
		return nil
	}
	end, err := ends(nd)
	if err != nil {
		return err
	}
	last := uint64(end[2] - 1)
	how := func() string {
		return fmt.Sprintf("items [%d, %d) of dimension 2", nd.Offset[2], nd.Offset[2]+nd.Global[2])
	}
	return errors.Join(within(args, 1, "x", last, how), within(args, 2, "y", last, how))
}

// checkFill: item id writes out at the linear index of id + offset in
// out's range.
func checkFill(nd device.NDRange, args []device.Arg) error {
	if empty(nd) || len(args) == 0 {
		return nil
	}
	r := args[0].Range
	end, err := ends(nd)
	if err != nil {
		return err
	}
	hi := [3]int{end[0] - 1, end[1] - 1, end[2] - 1}
	// The index is the largest at the last item, unless it wraps past
	// 2^64: then the items before it reach past any buffer.
	c0, p0 := bits.Mul64(uint64(hi[0]), uint64(r[1]))
	s0, c1 := bits.Add64(p0, uint64(hi[1]), 0)
	c2, p1 := bits.Mul64(s0, uint64(r[2]))
	last, c3 := bits.Add64(p1, uint64(hi[2]), 0)
	if c0|c1|c2|c3 != 0 {
		return fmt.Errorf("the launch's last item %v lies past 2^64 elements of out's range %v: keep the launch range (and offset) within the buffer", hi, r)
	}
	return within(args, 0, "out", last, func() string { return fmt.Sprintf("the launch's last item %v", hi) })
}

// checkJacobi: the launch's rows and columns (dimensions 1 and 2, plus the
// offset) lie inside in's grid, and out holds as much of it.
func checkJacobi(nd device.NDRange, args []device.Arg) error {
	if empty(nd) || len(args) < 2 {
		return nil
	}
	rows, cols := args[0].Range[1], args[0].Range[2]
	if _, ok := elems(args, 0); !ok {
		return nil
	}
	end, err := ends(nd)
	if err != nil {
		return err
	}
	y, x := end[1], end[2]
	if y > rows || x > cols {
		return fmt.Errorf("rows [%d, %d) and columns [%d, %d) run past the %d×%d grid of in: keep the launch range (and offset) within it", nd.Offset[1], y, nd.Offset[2], x, rows, cols)
	}
	// The stencil reads in's rows around the launch's (its range says
	// rows×cols); it writes out at the same places.
	last := uint64(y-1)*uint64(cols) + uint64(x-1)
	how := func() string { return fmt.Sprintf("row %d, column %d of the %d×%d grid", y-1, x-1, rows, cols) }
	return errors.Join(within(args, 0, "in", min(last+uint64(cols), uint64(rows)*uint64(cols)-1), how), within(args, 1, "out", last, how))
}

// localBytes is the size of local-memory argument i, or -1 when args has
// no such argument (ValidateArgs refuses that first).
func localBytes(args []device.Arg, i int) int {
	if i >= len(args) || args[i].Kind != device.ArgLocal {
		return -1
	}
	return args[i].LocalBytes
}

// checkReduceSum: a power-of-two work-group (the tree halves it each step:
// any other size drops items) and scratch for one float per item.
func checkReduceSum(nd device.NDRange, args []device.Arg) error {
	if !nd.Grouped() {
		return fmt.Errorf("it sums each work-group's items: give a work-group size (a power of two, e.g. 256)")
	}
	bs := nd.Local[0] * nd.Local[1] * nd.Local[2]
	if nd.Local[0] != 1 || nd.Local[1] != 1 {
		return fmt.Errorf("a work-group of %d×%d×%d items: the tree sum needs a 1D work-group of a power-of-two size (e.g. 256)", nd.Local[0], nd.Local[1], nd.Local[2])
	}
	if bits.OnesCount(uint(bs)) != 1 {
		return fmt.Errorf("a work-group of %d items: the tree sum needs a power of two (e.g. 256), or it drops items", bs)
	}
	if b := localBytes(args, 3); b >= 0 && b < 4*bs {
		return fmt.Errorf("scratch has %d bytes, a work-group of %d items needs %d (group size·4)", b, bs, 4*bs)
	}
	if empty(nd) {
		return nil
	}
	// Item i reads in[i] while i < n; work-group g writes partial[g].
	var errs []error
	if n, ok := scalar64(args, 2); ok && n > 0 {
		errs = append(errs, within(args, 0, "in", min(n, uint64(nd.Global[2]))-1, func() string { return fmt.Sprintf("n = %d over %d items", n, nd.Global[2]) }))
	}
	if groups := nd.Global[2] / bs; groups > 0 { // none: the range is refused as not a multiple of the work-group
		errs = append(errs, within(args, 1, "partial", uint64(groups-1), func() string { return fmt.Sprintf("%d work-groups (one sum each)", groups) }))
	}
	return errors.Join(errs...)
}

// scalar64 is scalar argument i as a uint64, if it is one.
func scalar64(args []device.Arg, i int) (uint64, bool) {
	if i >= len(args) || len(args[i].Scalar) != 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(args[i].Scalar), true
}

// checkMatmulTiled: square T×T work-groups over the last two dimensions
// and tiles of T·T floats.
func checkMatmulTiled(nd device.NDRange, args []device.Arg) error {
	if !nd.Grouped() {
		return fmt.Errorf("it works in T×T tiles: give a work-group size [1, T, T] (e.g. [1, 16, 16])")
	}
	t := nd.Local[2]
	if nd.Local[0] != 1 || nd.Local[1] != t {
		return fmt.Errorf("a work-group of %d×%d×%d items: give a square work-group [1, T, T] (or [T, T])", nd.Local[0], nd.Local[1], nd.Local[2])
	}
	for _, i := range []int{6, 7} {
		if b := localBytes(args, i); b >= 0 && b < 4*t*t {
			return fmt.Errorf("%s has %d bytes, a %d×%d tile needs %d (T·T·4)", []string{"tileA", "tileB"}[i-6], b, t, t, 4*t*t)
		}
	}
	// A is M×K, B K×N and C M×N, whatever the launch covers.
	m, okM := scalar64(args, 3)
	n, okN := scalar64(args, 4)
	k, okK := scalar64(args, 5)
	if !okM || !okN || !okK || m == 0 || n == 0 || k == 0 || empty(nd) {
		return nil
	}
	var errs []error
	for _, e := range []struct {
		i          int
		name       string
		rows, cols uint64
	}{{0, "A", m, k}, {1, "B", k, n}, {2, "C", m, n}} {
		hi, lo := bits.Mul64(e.rows, e.cols)
		if hi != 0 {
			errs = append(errs, fmt.Errorf("%s is %d×%d elements, more than memory holds: check M, N and K", e.name, e.rows, e.cols))
			continue
		}
		errs = append(errs, within(args, e.i, e.name, lo-1, func() string { return fmt.Sprintf("M = %d, N = %d, K = %d", m, n, k) }))
	}
	return errors.Join(errs...)
}

// checkHistogram: at least one bin, and local counters for every bin.
func checkHistogram(nd device.NDRange, args []device.Arg) error {
	if len(args) < 5 || len(args[3].Scalar) != 4 {
		return nil // ValidateArgs refuses these first
	}
	s := args[3].Scalar
	nbins := int(uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24)
	if nbins == 0 {
		return fmt.Errorf("nbins is 0; pass the number of bins")
	}
	if !nd.Grouped() {
		return fmt.Errorf("it counts in local memory per work-group: give a work-group size (e.g. 256)")
	}
	if b := localBytes(args, 4); b >= 0 && b < 4*nbins {
		return fmt.Errorf("lbins has %d bytes, %d bins need %d (nbins·4)", b, nbins, 4*nbins)
	}
	if empty(nd) {
		return nil
	}
	// The items read in[0..n) between them; the bins are bins[0..nbins).
	var errs []error
	if n, ok := scalar64(args, 1); ok && n > 0 {
		errs = append(errs, within(args, 0, "in", n-1, func() string { return fmt.Sprintf("n = %d", n) }))
	}
	errs = append(errs, within(args, 2, "bins", uint64(nbins-1), func() string { return fmt.Sprintf("nbins = %d", nbins) }))
	return errors.Join(errs...)
}
