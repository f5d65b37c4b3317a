package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/acpp/acpp/device"
)

// Views of argument memory. Host allocations are aligned for any element
// type, and Work.Data starts at the argument's offset, which the runtime
// keeps a multiple of the element size.

func f32s(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func u32s(b []byte) []uint32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func scalarF32(a device.Arg) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(a.Scalar))
}
func scalarU32(a device.Arg) uint32 { return binary.LittleEndian.Uint32(a.Scalar) }
func scalarU64(a device.Arg) uint64 { return binary.LittleEndian.Uint64(a.Scalar) }

// saxpy: y[i] = a*x[i] + y[i] (src/saxpy.cu). The CUDA kernel uses only
// dimension 2 of the id; so does this one, once per (i0, i1) pair.
func saxpy(w *device.Work) {
	a := scalarF32(w.Args[0])
	x, y := f32s(w.Data[1]), f32s(w.Data[2])
	lo, hi := w.Lo[2]+w.Range.Offset[2], w.Hi[2]+w.Range.Offset[2]
	for r := 0; r < (w.Hi[0]-w.Lo[0])*(w.Hi[1]-w.Lo[1]); r++ {
		xs, ys := x[lo:hi], y[lo:hi]
		ys = ys[:len(xs)]
		for i, xv := range xs {
			ys[i] = float32(a*xv) + ys[i] // explicit rounding: no fused multiply-add
		}
	}
}

// fillF32: out[id + offset] = v over the launch range (src/fill.cu).
func fillF32(w *device.Work) {
	out := f32s(w.Data[0])
	rg := w.Args[0].Range
	v := scalarF32(w.Args[1])
	o := w.Range.Offset
	for z := w.Lo[0]; z < w.Hi[0]; z++ {
		for y := w.Lo[1]; y < w.Hi[1]; y++ {
			base := ((z+o[0])*rg[1]+y+o[1])*rg[2] + o[2]
			row := out[base+w.Lo[2] : base+w.Hi[2]]
			for i := range row {
				row[i] = v
			}
		}
	}
}

// copyF32: dst[dst.offset+id] = src[src.offset+id] for ids inside both
// access ranges (src/copy.cu; like it, the launch offset is not applied).
func copyF32(w *device.Work) {
	sa, da := w.Args[0], w.Args[1]
	src, dst := f32s(w.Data[0]), f32s(w.Data[1])
	var hi [3]int
	for d := range 3 {
		hi[d] = min(w.Hi[d], sa.AccessRange[d], da.AccessRange[d])
	}
	if w.Lo[2] >= hi[2] {
		return
	}
	for z := w.Lo[0]; z < hi[0]; z++ {
		for y := w.Lo[1]; y < hi[1]; y++ {
			s := ((sa.AccessOffset[0]+z)*sa.Range[1]+sa.AccessOffset[1]+y)*sa.Range[2] + sa.AccessOffset[2]
			d := ((da.AccessOffset[0]+z)*da.Range[1]+da.AccessOffset[1]+y)*da.Range[2] + da.AccessOffset[2]
			copy(dst[d+w.Lo[2]:d+hi[2]], src[s+w.Lo[2]:s+hi[2]])
		}
	}
}

// jacobi2d: out = 0.25*(((north+south)+west)+east) inside, out = in on the
// border (src/jacobi.cu, same order of additions). Dimension 0 of the id is
// not used, as in CUDA.
func jacobi2d(w *device.Work) {
	in, out := f32s(w.Data[0]), f32s(w.Data[1])
	rows, cols := w.Args[0].Range[1], w.Args[0].Range[2]
	if w.Lo[0] >= w.Hi[0] {
		return
	}
	o := w.Range.Offset
	x0, x1 := w.Lo[2]+o[2], w.Hi[2]+o[2]
	for y := w.Lo[1] + o[1]; y < w.Hi[1]+o[1]; y++ {
		row := y * cols
		if y == 0 || y+1 >= rows {
			copy(out[row+x0:row+x1], in[row+x0:row+x1])
			continue
		}
		lo, hi := x0, x1
		if lo == 0 {
			out[row] = in[row]
			lo = 1
		}
		if hi >= cols {
			hi = cols - 1
			if x1 > hi {
				out[row+hi] = in[row+hi]
			}
		}
		if lo >= hi {
			continue
		}
		// Row slices of equal length let the compiler drop bounds checks.
		mid := in[row+lo-1 : row+hi+1]
		up := in[row-cols+lo : row-cols+hi]
		dn := in[row+cols+lo : row+cols+hi]
		dst := out[row+lo : row+hi]
		up = up[:len(dst)]
		dn = dn[:len(dst)]
		mid = mid[:len(dst)+2]
		for i := range dst {
			s := up[i] + dn[i]
			s = s + mid[i]
			s = s + mid[i+2]
			dst[i] = 0.25 * s
		}
	}
}

// matmulTiled: C = A·B for the group's rows and columns (src/matmul.cu).
// Each C element sums over k in ascending order, as the CUDA kernel does
// tile by tile; the padding products it adds are +0 and change nothing.
// The group's accumulators live in tileA (at least T·T floats, as on CUDA);
// the loop runs i-k-j so the innermost loop streams rows of B and C.
func matmulTiled(w *device.Work) {
	A, B, C := f32s(w.Data[0]), f32s(w.Data[1]), f32s(w.Data[2])
	M, N, K := int(scalarU64(w.Args[3])), int(scalarU64(w.Args[4])), int(scalarU64(w.Args[5]))
	r0, r1 := w.Lo[1], min(w.Hi[1], M)
	c0, c1 := w.Lo[2], min(w.Hi[2], N)
	if r0 >= r1 || c0 >= c1 {
		return
	}
	nc := c1 - c0
	acc := f32s(w.Local[6])
	if len(acc) < nc {
		panic(fmt.Sprintf("kernels: matmul_tiled: tileA holds %d floats, the work-group needs at least T·T (a row of %d); pass T·T·4 bytes", len(acc), nc))
	}
	acc = acc[:nc]
	for r := r0; r < r1; r++ {
		clear(acc)
		arow := A[r*K : r*K+K]
		for k, a := range arow {
			brow := B[k*N+c0 : k*N+c1]
			brow = brow[:len(acc)]
			for j, b := range brow {
				acc[j] = acc[j] + float32(a*b)
			}
		}
		copy(C[r*N+c0:r*N+c1], acc)
	}
}

// reduceSumF32: partial[g] = the tree sum of group g's items, 0 past n
// (src/reduce.cu, same tree, so the same bits).
func reduceSumF32(w *device.Work) {
	in, partial := f32s(w.Data[0]), f32s(w.Data[1])
	n := scalarU64(w.Args[2])
	bs := w.Range.Local[2]
	s := f32s(w.Local[3])
	if len(s) < bs {
		panic(fmt.Sprintf("kernels: reduce_sum_f32: scratch holds %d floats, the work-group has %d items; pass group-size·4 bytes", len(s), bs))
	}
	s = s[:bs]
	base := w.Lo[2]
	for t := range s {
		if uint64(base+t) < n {
			s[t] = in[base+t]
		} else {
			s[t] = 0
		}
	}
	for stride := bs / 2; stride > 0; stride >>= 1 {
		lo, hi := s[:stride], s[stride:2*stride]
		for t := range lo {
			lo[t] = lo[t] + hi[t]
		}
	}
	partial[w.Group[2]] = s[0]
}

// histogramU32: bins[in[i] % nbins] += 1 for i < n, each group counting its
// grid-stride share in local memory first (src/histogram.cu).
func histogramU32(w *device.Work) {
	in, bins := u32s(w.Data[0]), u32s(w.Data[2])
	n := scalarU64(w.Args[1])
	nbins := scalarU32(w.Args[3])
	if nbins == 0 {
		panic("kernels: histogram_u32: nbins is 0; pass the number of bins")
	}
	lb := u32s(w.Local[4])
	if uint64(len(lb)) < uint64(nbins) {
		panic(fmt.Sprintf("kernels: histogram_u32: lbins holds %d counters, nbins is %d; pass nbins·4 bytes", len(lb), nbins))
	}
	lb = lb[:nbins]
	clear(lb)
	bs := uint64(w.Range.Local[2])
	stride := uint64(w.Range.Global[2])
	for start := uint64(w.Lo[2]); start < n; start += stride {
		end := min(start+bs, n)
		for _, v := range in[start:end] {
			lb[v%nbins]++
		}
	}
	for b, c := range lb {
		if c != 0 {
			atomic.AddUint32(&bins[b], c)
		}
	}
}

// spinSink keeps the spin loop from being optimised away.
var spinSink atomic.Uint64

// spin busy-loops for about cycles iterations.
func spin(w *device.Work) {
	c := scalarU64(w.Args[0])
	var x uint64
	for i := uint64(0); i < c; i++ {
		x += i ^ (x >> 3)
	}
	spinSink.Add(x)
}
