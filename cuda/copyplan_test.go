package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/acpp/acpp/device"
)

// simulate runs a plan over two host byte arrays whose addresses are the
// offsets (base 0): what the driver does with the descriptor.
func simulate(p copyPlan, dst, src []byte) {
	switch p.Dims {
	case 1:
		copy(dst[p.Dst:p.Dst+p.Width], src[p.Src:p.Src+p.Width])
	case 2:
		for y := uint64(0); y < p.Height; y++ {
			s, d := p.Src+y*p.SrcPitch, p.Dst+y*p.DstPitch
			copy(dst[d:d+p.Width], src[s:s+p.Width])
		}
	case 3:
		for z := uint64(0); z < p.Depth; z++ {
			for y := uint64(0); y < p.Height; y++ {
				s := p.Src + (z*p.SrcHeight+y)*p.SrcPitch
				d := p.Dst + (z*p.DstHeight+y)*p.DstPitch
				copy(dst[d:d+p.Width], src[s:s+p.Width])
			}
		}
	}
}

// TestPlanBoxOneTransfer_T4: every box, 1D to 3D with odd sizes, is one
// backend transfer, moves exactly the box's bytes, and copies what
// device.CopyHost copies, byte for byte.
func TestPlanBoxOneTransfer_T4(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for i := 0; i < 3000; i++ {
		elem := []int{1, 2, 4, 8, 12}[r.IntN(5)]
		var se, de, so, do, sz [3]int
		dims := 1 + r.IntN(3)
		for d := 0; d < 3; d++ {
			if d < 3-dims {
				se[d], de[d] = 1, 1
				continue
			}
			sz[d] = 1 + r.IntN(7)
			if r.IntN(3) == 0 {
				sz[d] = 0 + r.IntN(2) // empty or single boxes too
			}
			se[d] = sz[d] + r.IntN(4)
			de[d] = sz[d] + r.IntN(4)
			if se[d] == 0 {
				se[d] = 1
			}
			if de[d] == 0 {
				de[d] = 1
			}
			so[d] = r.IntN(se[d] - sz[d] + 1)
			do[d] = r.IntN(de[d] - sz[d] + 1)
		}
		for d := 0; d < 3-dims; d++ {
			sz[d] = 1
		}
		srcOff, dstOff := r.IntN(3)*elem, r.IntN(3)*elem
		src := make([]byte, srcOff+se[0]*se[1]*se[2]*elem)
		for j := range src {
			src[j] = byte(r.Uint32())
		}
		want := make([]byte, dstOff+de[0]*de[1]*de[2]*elem)
		got := make([]byte, len(want))
		op := device.CopyOp{
			Src:  device.Region{Mem: &device.Mem{Bytes: len(src)}, Offset: srcOff, Extent: se, Origin: so},
			Dst:  device.Region{Mem: &device.Mem{Bytes: len(want)}, Offset: dstOff, Extent: de, Origin: do},
			Size: sz, ElemSize: elem,
		}
		if err := op.Validate(); err != nil {
			t.Fatalf("case %d: generated an invalid op: %v", i, err)
		}
		device.CopyHost(want, src, op)
		p := planBox(uint64(srcOff), uint64(dstOff), se, de, so, do, sz, elem)
		if p.Bytes() != uint64(op.Bytes()) {
			t.Fatalf("case %d: plan %+v moves %d bytes, the box has %d", i, p, p.Bytes(), op.Bytes())
		}
		simulate(p, got, src)
		if string(got) != string(want) {
			t.Fatalf("case %d: plan %+v for src ext %v org %v, dst ext %v org %v, size %v, elem %d copies different bytes", i, p, se, so, de, do, sz, elem)
		}
	}
}

func TestPlanBoxMergesDimensions_T4(t *testing.T) {
	tests := []struct {
		name     string
		ext, org [3]int
		size     [3]int
		dims     int
	}{
		{"whole 3D array is linear", [3]int{4, 5, 6}, [3]int{}, [3]int{4, 5, 6}, 1},
		{"whole slices are linear", [3]int{4, 5, 6}, [3]int{1, 0, 0}, [3]int{2, 5, 6}, 1},
		{"whole rows of a slab are 2D", [3]int{4, 5, 6}, [3]int{0, 1, 0}, [3]int{3, 2, 6}, 2},
		{"one row is linear", [3]int{4, 5, 6}, [3]int{2, 3, 1}, [3]int{1, 1, 4}, 1},
		{"a column of single elements is 2D", [3]int{4, 5, 6}, [3]int{0, 0, 2}, [3]int{4, 1, 1}, 2},
		{"a 2D box in one slice is 2D", [3]int{4, 5, 6}, [3]int{1, 1, 1}, [3]int{1, 3, 4}, 2},
		{"a 3D box is 3D", [3]int{4, 5, 6}, [3]int{1, 1, 1}, [3]int{2, 3, 4}, 3},
	}
	for _, tc := range tests {
		p := planBox(0, 0, tc.ext, tc.ext, tc.org, tc.org, tc.size, 4)
		if p.Dims != tc.dims {
			t.Errorf("%s: planBox dims = %d, want %d (%+v)", tc.name, p.Dims, tc.dims, p)
		}
	}
}
