package kernels

import (
	"fmt"
	"math/bits"

	"github.com/acpp/acpp/device"
)

// checks refuse the launches a built-in kernel cannot compute as documented
// (device.Kernel.Check): both implementations would read past local memory
// or sum the wrong items, so the launch fails before it runs, on every
// backend, with what to pass.
var checks = map[string]func(device.NDRange, []device.Arg) error{
	"matmul_tiled":   checkMatmulTiled,
	"reduce_sum_f32": checkReduceSum,
	"histogram_u32":  checkHistogram,
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
	return nil
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
	return nil
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
	return nil
}
