package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// faultChildEnv marks the child process TestKernelFaultLosesDevice runs
// the fault in: a lost CUDA context cannot be used again by its process,
// so the fault must not happen in the process that runs the other tests.
const faultChildEnv = "ACPP_TEST_FAULT_CHILD"

// TestKernelFaultLosesDevice: a kernel that writes to an illegal address
// (a job's own PTX can) leaves the process's CUDA state unusable. The
// launch fails with an error matching device.ErrDeviceLost and
// driver.ErrContextLost; from then on the device reports itself lost
// (device.Health) and refuses every use at once with that error, instead
// of each use failing later in the driver; Free and Close end without
// hanging.
func TestKernelFaultLosesDevice(t *testing.T) {
	if os.Getenv(faultChildEnv) != "1" {
		openGPUs(t, Config{}) // skips without a GPU
		// Every completion strategy: after a fault the driver calls no
		// host function again, so callback mode needs a look of its own.
		for _, mode := range []string{"poll", "spin", "blocking-sync", "callback"} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestKernelFaultLosesDevice$", "-test.v", "-test.count", "1")
			cmd.Env = append(os.Environ(), faultChildEnv+"=1", "ACPP_CUDA_COMPLETION="+mode)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestKernelFaultLosesDevice") {
				t.Errorf("the fault's process, completion %s: %v\n%s", mode, err, out)
			}
		}
		return
	}
	devs, err := Open(context.Background(), Config{})
	if err != nil || len(devs) == 0 {
		t.Fatalf("Open in the child: %d devices, %v", len(devs), err)
	}
	d := devs[0]
	if d.Lost() != nil {
		t.Fatalf("a fresh device is lost: %v", d.Lost())
	}
	keep := mustAlloc(t, d, device.MemDevice, 4096)
	bad := &device.Kernel{Name: "job.fault", PTX: &device.PTX{Module: []byte(userPTX), Entry: "add_one"}, Params: []device.Param{
		{Name: "p", Kind: device.ArgScalar, Space: device.Private, ElemSize: 8},
		{Name: "n", Kind: device.ArgScalar, Space: device.Private, ElemSize: 4},
	}}
	addr := device.Arg{Kind: device.ArgScalar, Space: device.Private, Scalar: binary.LittleEndian.AppendUint64(nil, 8)}
	err = do(t, d, 0, device.LaunchOp{Kernel: bad, Range: device.NDRange{Global: [3]int{1, 1, 1}}, Args: []device.Arg{addr, scalarU32(1)}})
	if !errors.Is(err, device.ErrDeviceLost) || !errors.Is(err, driver.ErrContextLost) || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("the faulting launch: %v, want device.ErrDeviceLost and driver.ErrContextLost saying to restart", err)
	}
	t.Logf("the fault: %v", err)
	lost := d.Lost()
	if !errors.Is(lost, device.ErrDeviceLost) || !strings.Contains(lost.Error(), d.info.ID.String()) {
		t.Fatalf("Lost() = %v, want ErrDeviceLost naming %s", lost, d.info.ID)
	}
	fill := device.FillOp{Dst: keep, Bytes: 4096, Pattern: []byte{0, 0, 0, 0}}
	if err := d.Enqueue(0, fill, func(error) { t.Error("done of a refused op called") }); !errors.Is(err, device.ErrDeviceLost) {
		t.Errorf("Enqueue after the loss: %v, want ErrDeviceLost at once", err)
	}
	if _, err := d.Alloc(device.MemDevice, 4096); !errors.Is(err, device.ErrDeviceLost) {
		t.Errorf("Alloc after the loss: %v, want ErrDeviceLost", err)
	}
	if err := d.Free(keep); err != nil {
		t.Errorf("Free after the loss: %v, want nil (the memory went with the context)", err)
	}
	closed := make(chan error, 1)
	go func() {
		var errs []error
		for _, d := range devs {
			errs = append(errs, d.Close())
		}
		closed <- errors.Join(errs...)
	}()
	select {
	case err := <-closed:
		t.Logf("Close after the loss: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close after the loss did not return within 30 s")
	}
}
