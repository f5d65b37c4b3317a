package cuda

import (
	"encoding/binary"
	"fmt"

	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
)

// localAlign is the alignment of each local accessor in dynamic shared
// memory: enough for any vector type.
const localAlign = 16

// addrOf says what device address a memory argument has on the launching
// device, or why it has none there (the error names no argument; the caller
// adds that).
type addrOf func(m *device.Mem) (uint64, error)

// packArgs lays out a launch's parameter buffer (V4) and its dynamic shared
// memory (A3): first the ND range (struct acpp_nd), then each argument in
// the form its declared parameter kind says, at its natural alignment. Local
// memory arguments become byte offsets into the launch's dynamic shared
// memory, each aligned to 16 bytes; shared is the total. args must already
// be validated against k.Params (device.ValidateArgs).
func packArgs(k *device.Kernel, r device.NDRange, args []device.Arg, addr addrOf) (params []byte, shared int, err error) {
	buf := make([]byte, 0, kernels.NDRangeBytes+len(args)*16)
	put64 := func(v uint64) { buf = binary.LittleEndian.AppendUint64(buf, v) }
	pad := func(a int) {
		for len(buf)%a != 0 {
			buf = append(buf, 0)
		}
	}
	for d := 0; d < 3; d++ {
		put64(uint64(r.Global[d]))
	}
	for d := 0; d < 3; d++ {
		put64(uint64(r.Offset[d]))
	}
	for i, p := range k.Params {
		a := args[i]
		bad := func(format string, v ...any) error {
			return &device.ArgError{Kernel: k.Name, Index: i, Param: p.Name, Reason: fmt.Sprintf(format, v...)}
		}
		switch p.Kind {
		case device.ArgPointer, device.ArgAccessor, device.ArgRangedAccessor:
			if a.Mem == nil {
				return nil, 0, bad("no memory behind the %s", p.Kind)
			}
			base, err := addr(a.Mem)
			if err != nil {
				return nil, 0, bad("%v", err)
			}
			if a.Offset < 0 || a.Offset > a.Mem.Bytes {
				return nil, 0, bad("offset %d outside its allocation of %d bytes", a.Offset, a.Mem.Bytes)
			}
			pad(8)
			put64(base + uint64(a.Offset))
			if p.Kind == device.ArgPointer {
				continue
			}
			for d := 0; d < 3; d++ {
				put64(uint64(a.Range[d]))
			}
			if p.Kind == device.ArgAccessor {
				continue
			}
			for d := 0; d < 3; d++ {
				put64(uint64(a.AccessOffset[d]))
			}
			for d := 0; d < 3; d++ {
				put64(uint64(a.AccessRange[d]))
			}
		case device.ArgLocal:
			if a.LocalBytes <= 0 {
				return nil, 0, bad("local memory of %d bytes", a.LocalBytes)
			}
			shared = (shared + localAlign - 1) &^ (localAlign - 1)
			pad(8)
			put64(uint64(shared))
			shared += a.LocalBytes
		case device.ArgScalar:
			if len(a.Scalar) == 0 {
				return nil, 0, bad("scalar without bytes")
			}
			_, align := kernels.ArgBytes(device.Param{Kind: device.ArgScalar, ElemSize: len(a.Scalar)})
			pad(align)
			buf = append(buf, a.Scalar...)
		default:
			return nil, 0, bad("parameter kind %s has no CUDA layout", p.Kind)
		}
	}
	// No trailing padding: the driver wants the buffer exactly as long as
	// the entry's parameter list (CU_LAUNCH_PARAM_BUFFER_SIZE), or refuses
	// the launch with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.
	return buf, shared, nil
}

// geometry is a launch's grid and block, CUDA order (x is dimension 2).
type geometry struct {
	Grid, Block [3]uint32
}

// launchGeometry maps an ND range onto a grid of blocks. A grouped range
// uses its work-group as the block; a flat one gets 256 threads along x
// (1D; fewer, in whole warps, for a range under 256), 32×8 (2D) or 32×4×2
// (3D), and the grid is rounded up (kernels check
// their ids against the range). It refuses what CUDA cannot launch.
func launchGeometry(r device.NDRange, maxThreads int) (geometry, error) {
	return hintedGeometry(r, maxThreads, nil)
}

// hintedGeometry is launchGeometry with a built-in kernel's launch hint
// (kernels.LaunchFor): a flat range then gets the hint's block, and each
// thread covers PerThread items along each dimension, so the grid is that
// many times smaller. A grouped range ignores the hint.
func hintedGeometry(r device.NDRange, maxThreads int, hint *kernels.Launch) (geometry, error) {
	var g geometry
	var block [3]int // dims order
	per := [3]int{1, 1, 1}
	switch {
	case r.Grouped():
		block = r.Local
	case hint != nil:
		// The hint's block, shrunk to fit a small range: whole warps along
		// x, no more than the range along y and z.
		block = hint.Block
		block[2] = min(block[2], max(32, (r.Global[2]+31)&^31))
		for d := range 2 {
			block[d] = min(block[d], max(1, r.Global[d]))
		}
		for d := range 3 {
			per[d] = max(hint.PerThread[d], 1)
		}
	case r.Global[0] <= 1 && r.Global[1] <= 1:
		// 256 threads, or the range rounded up to whole warps: a small
		// launch gets no idle threads beyond its last warp.
		block = [3]int{1, 1, min(256, max(32, (r.Global[2]+31)&^31))}
	case r.Global[0] <= 1:
		block = [3]int{1, 8, 32}
	default:
		block = [3]int{2, 4, 32}
	}
	threads := block[0] * block[1] * block[2]
	if maxThreads > 0 && threads > maxThreads {
		return g, fmt.Errorf("%w: work-group %v has %d work-items, the GPU runs at most %d per group; use smaller work-groups", device.ErrBadOp, block, threads, maxThreads)
	}
	limits := [3]int{65535, 65535, 1<<31 - 1} // grid z, y, x
	for d := 0; d < 3; d++ {
		step := block[d] * per[d]
		n := (r.Global[d] + step - 1) / step
		if n > limits[d] {
			return g, fmt.Errorf("%w: range %v needs %d blocks along dimension %d, CUDA allows %d; use larger work-groups or fold the range into dimension 2", device.ErrBadOp, r.Global, n, d, limits[d])
		}
		g.Grid[2-d] = uint32(n)
		g.Block[2-d] = uint32(block[d])
	}
	return g, nil
}
