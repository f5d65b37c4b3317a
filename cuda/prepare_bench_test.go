package cuda

import (
	"testing"

	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
)

// BenchmarkLaunchPrepare: the host work of a launch before the device's
// owner sees it (Enqueue's argument checks, the PTX entry check, packing
// the parameter buffer), and the grid the owner works out, on a
// device with no driver behind it, so it runs everywhere (CI) and a
// regression in the CPU side of the launch path shows without a GPU. The
// GPU side is BenchmarkLaunchEmpty and BenchmarkSubmitWait.
func BenchmarkLaunchPrepare(b *testing.B) {
	d := fakeDevice()
	x := d.fakeMem(device.MemDevice, 4<<20)
	y := d.fakeMem(device.MemDevice, 4<<20)
	rg := [3]int{1, 1024, 1024}
	for _, c := range []struct {
		name string
		op   device.LaunchOp
	}{
		{"saxpy", device.LaunchOp{Kernel: builtin(b, "saxpy"), Range: device.NDRange{Global: [3]int{1, 1, 1 << 20}},
			Args: []device.Arg{scalarF32(2), ptrArg(x, 4), ptrArg(y, 4)}}},
		{"jacobi2d", device.LaunchOp{Kernel: builtin(b, "jacobi2d"), Range: device.NDRange{Global: rg},
			Args: []device.Arg{accArg(x, rg), accArg(y, rg)}}},
		{"empty", device.LaunchOp{Kernel: builtin(b, "empty"), Range: device.NDRange{Global: [3]int{1, 1, 1}}}},
	} {
		var hint *kernels.Launch
		if l, ok := kernels.LaunchFor(c.op.Kernel.PTX); ok {
			hint = &l
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				args, err := d.checkLaunch(c.op)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := d.prepareLaunch(c.op, args); err != nil {
					b.Fatal(err)
				}
				if _, err := hintedGeometry(c.op.Range, 1024, hint); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
