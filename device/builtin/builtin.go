package builtin

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
)

func f32s(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func f32(a device.Arg) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(a.Scalar)) }
func u64(a device.Arg) uint64  { return binary.LittleEndian.Uint64(a.Scalar) }

func linear(r [3]int, z, y, x int) int { return (z*r[1]+y)*r[2] + x }

// goImpls are the Go implementations, by built-in name.
var goImpls = map[string]device.GoFunc{
	"empty": func(*device.Work) {},
	"saxpy": func(w *device.Work) {
		a := f32(w.Args[0])
		x, y := f32s(w.Data[1]), f32s(w.Data[2])
		off := w.Range.Offset[2]
		for i := w.Lo[2] + off; i < w.Hi[2]+off; i++ {
			y[i] = a*x[i] + y[i]
		}
	},
	"fill_f32": func(w *device.Work) {
		out, v, r, o := f32s(w.Data[0]), f32(w.Args[1]), w.Args[0].Range, w.Range.Offset
		for z := w.Lo[0]; z < w.Hi[0]; z++ {
			for y := w.Lo[1]; y < w.Hi[1]; y++ {
				for x := w.Lo[2]; x < w.Hi[2]; x++ {
					out[linear(r, z+o[0], y+o[1], x+o[2])] = v
				}
			}
		}
	},
	"copy_f32": func(w *device.Work) {
		s, d := w.Args[0], w.Args[1]
		src, dst := f32s(w.Data[0]), f32s(w.Data[1])
		for z := w.Lo[0]; z < w.Hi[0]; z++ {
			for y := w.Lo[1]; y < w.Hi[1]; y++ {
				for x := w.Lo[2]; x < w.Hi[2]; x++ {
					id := [3]int{z, y, x}
					skip := false
					for k := range 3 {
						if id[k] >= s.AccessRange[k] || id[k] >= d.AccessRange[k] {
							skip = true
						}
					}
					if skip {
						continue
					}
					dst[linear(d.Range, d.AccessOffset[0]+z, d.AccessOffset[1]+y, d.AccessOffset[2]+x)] =
						src[linear(s.Range, s.AccessOffset[0]+z, s.AccessOffset[1]+y, s.AccessOffset[2]+x)]
				}
			}
		}
	},
	"jacobi2d": func(w *device.Work) {
		in, out := f32s(w.Data[0]), f32s(w.Data[1])
		rows, cols := w.Args[0].Range[1], w.Args[0].Range[2]
		for yy := w.Lo[1]; yy < w.Hi[1]; yy++ {
			for xx := w.Lo[2]; xx < w.Hi[2]; xx++ {
				y, x := yy+w.Range.Offset[1], xx+w.Range.Offset[2]
				i := y*cols + x
				if y == 0 || x == 0 || y+1 >= rows || x+1 >= cols {
					out[i] = in[i]
					continue
				}
				s := in[i-cols] + in[i+cols]
				s = s + in[i-1]
				s = s + in[i+1]
				out[i] = 0.25 * s
			}
		}
	},
	// matmul_tiled is grouped: global {1, M, N} rounded up to tiles,
	// local {1, T, T}.
	"matmul_tiled": func(w *device.Work) {
		A, B, C := f32s(w.Data[0]), f32s(w.Data[1]), f32s(w.Data[2])
		M, N, K := int(u64(w.Args[3])), int(u64(w.Args[4])), int(u64(w.Args[5]))
		T := w.Range.Local[2]
		As, Bs := f32s(w.Local[6]), f32s(w.Local[7])
		acc := make([]float32, T*T) // one private accumulator per item
		for t := 0; t < K; t += T {
			for ty := 0; ty < T; ty++ {
				for tx := 0; tx < T; tx++ {
					row, col := w.Lo[1]+ty, w.Lo[2]+tx
					ka, kb := t+tx, t+ty
					As[ty*T+tx], Bs[ty*T+tx] = 0, 0
					if row < M && ka < K {
						As[ty*T+tx] = A[row*K+ka]
					}
					if kb < K && col < N {
						Bs[ty*T+tx] = B[kb*N+col]
					}
				}
			}
			for ty := 0; ty < T; ty++ { // after the barrier
				for tx := 0; tx < T; tx++ {
					s := acc[ty*T+tx]
					for k := 0; k < T; k++ {
						s = s + As[ty*T+k]*Bs[k*T+tx]
					}
					acc[ty*T+tx] = s
				}
			}
		}
		for ty := 0; ty < T; ty++ {
			for tx := 0; tx < T; tx++ {
				if row, col := w.Lo[1]+ty, w.Lo[2]+tx; row < M && col < N {
					C[row*N+col] = acc[ty*T+tx]
				}
			}
		}
	},
	// reduce_sum_f32 is grouped, 1D, power-of-two groups.
	"reduce_sum_f32": func(w *device.Work) {
		in, partial := f32s(w.Data[0]), f32s(w.Data[1])
		n := int(u64(w.Args[2]))
		G := w.Range.Local[2]
		s := f32s(w.Local[3])
		for t := 0; t < G; t++ {
			i := w.Group[2]*G + t
			s[t] = 0
			if i < n {
				s[t] = in[i]
			}
		}
		for stride := G / 2; stride > 0; stride >>= 1 {
			for t := 0; t < stride; t++ {
				s[t] = s[t] + s[t+stride]
			}
		}
		partial[w.Group[2]] = s[0]
	},
}

// Names lists the kernels this package registers.
func Names() []string {
	var out []string
	for _, n := range kernels.Names() {
		if goImpls[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

// Register adds the library to r (device.Kernels at init).
func Register(r *device.Registry) error {
	for _, n := range Names() {
		b, _ := kernels.Lookup(n)
		k := b.Kernel()
		k.Go = goImpls[n]
		if err := r.Register(k); err != nil {
			return fmt.Errorf("builtin: %w", err)
		}
	}
	return nil
}

func init() {
	if err := Register(device.Kernels); err != nil {
		panic(err)
	}
}
