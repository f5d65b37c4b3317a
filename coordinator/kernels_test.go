package coordinator_test

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/node"
)

// jobSaxpy is the built-in saxpy's PTX under a name no registry has: a
// kernel only a job knows (as a job file's PTX kernel is on remote nodes).
func jobSaxpy(name string) device.Kernel {
	b, _ := ptxlib.Lookup("saxpy")
	k := b.Kernel()
	k.Name = name
	return k
}

// saxpyArgs are saxpy's arguments: a, x and y as raw pointers (the job
// does not know a shipped kernel's parameters, so the kinds are explicit).
func saxpyArgs(a float32, x, y *coordinator.Buffer) []coordinator.Arg {
	return []coordinator.Arg{
		coordinator.ScalarF32(a),
		coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Read, Kind: device.ArgPointer}),
		coordinator.Acc(coordinator.Accessor{Buffer: y, Mode: coordinator.ReadWrite, Kind: device.ArgPointer}),
	}
}

// ptxFake stands in for a GPU where there is none: a device that runs PTX
// kernels only. Each launch is recorded (kernel name, module, entry) and
// the entry "saxpy" is computed in Go on the fake's memory.
type ptxFake struct {
	device.Device // a devicetest.Fake that runs Go, for the emulation
	mu            sync.Mutex
	seen          []device.Kernel // guarded by mu
}

func (f *ptxFake) Info() device.Info {
	info := f.Device.Info()
	info.Caps.KernelForms = []device.Form{device.FormPTX}
	return info
}

func (f *ptxFake) Enqueue(q int, op device.Op, done func(error)) error {
	l, isLaunch := op.(device.LaunchOp)
	if !isLaunch {
		return f.Device.Enqueue(q, op, done)
	}
	if l.Kernel == nil || l.Kernel.PTX == nil || l.Kernel.PTX.Entry != "saxpy" {
		return device.ErrNoImplementation
	}
	f.mu.Lock()
	f.seen = append(f.seen, *l.Kernel)
	f.mu.Unlock()
	l.Kernel, l.Func = nil, emulateSaxpy
	return f.Device.Enqueue(q, l, done)
}

// ptxCluster starts two nodes: n0 with devices (a node.Config.Devices
// list) and a ptxFake, n1 with a CPU only.
func ptxCluster(t *testing.T, devices string) (*coordtest.Cluster, *ptxFake) {
	fake := &ptxFake{Device: devicetest.NewFake(devicetest.FakeConfig{})}
	c := coordtest.Start(t, 2, coordtest.Options{Modify: func(i int, cfg *node.Config) {
		if i == 0 {
			cfg.Devices = devices
			cfg.ExtraDevices = []device.Device{fake}
		}
	}})
	return c, fake
}

func emulateSaxpy(w *device.Work) {
	a := math.Float32frombits(binary.LittleEndian.Uint32(w.Args[0].Scalar))
	for i := w.Lo[2]; i < w.Hi[2]; i++ {
		x := math.Float32frombits(binary.LittleEndian.Uint32(w.Data[1][4*i:]))
		y := math.Float32frombits(binary.LittleEndian.Uint32(w.Data[2][4*i:]))
		binary.LittleEndian.PutUint32(w.Data[2][4*i:], math.Float32bits(a*x+y))
	}
}

// TestRegisterKernelsPerJob_C6: a job ships a PTX kernel that no registry
// has; it reaches the nodes with a device that runs PTX (n0's fake GPU)
// and not the CPU-only node, placement puts its groups there, and the
// device runs the shipped module with the job's data. Another job of the
// same client cannot launch it; pinned to a CPU device it is refused,
// naming the device and the kernel.
func TestRegisterKernelsPerJob_C6(t *testing.T) {
	c, fake := ptxCluster(t, "fake")
	j := openJob(t, c, nil)
	k := jobSaxpy("coord.saxpy")
	if err := j.RegisterKernels(testCtx(t), k); err != nil {
		t.Fatalf("RegisterKernels: %v", err)
	}
	const n = 4096
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i%100), 1.5
	}
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Name: "y", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(ys)})
	for range 2 {
		if _, err := j.Submit(testCtx(t), coordinator.Group{Kernel: "coord.saxpy", Range: coordinator.Dims{1, 1, n}, Args: saxpyArgs(2, x, y)}); err != nil {
			t.Fatalf("Submit: %v", err)
		}
	}
	got, err := j.Read(testCtx(t), y, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesF32(got) {
		if want := 4*float32(i%100) + 1.5; v != want {
			t.Fatalf("y[%d] = %v after two saxpy with a = 2, want %v", i, v, want)
		}
	}
	if p := j.Stats().Placed; p["n0/fake:0"] != 2 || len(p) != 1 {
		t.Errorf("groups placed %v, want both on n0/fake:0", p)
	}
	fake.mu.Lock()
	seen := fake.seen
	fake.mu.Unlock()
	if len(seen) != 2 || seen[0].Name != "coord.saxpy" || string(seen[0].PTX.Module) != string(k.PTX.Module) {
		t.Errorf("the device ran %d launches (%v), want 2 of coord.saxpy with the shipped module", len(seen), seen)
	}

	// Pinned to the CPU-only node, which never got it: refused.
	_, err = j.Submit(testCtx(t), coordinator.Group{Kernel: "coord.saxpy", Range: coordinator.Dims{1, 1, n}, Device: "n1/cpu:0", Args: saxpyArgs(2, x, y)})
	if !errors.Is(err, coordinator.ErrNoDevice) || !strings.Contains(err.Error(), "n1/cpu:0") || !strings.Contains(err.Error(), "coord.saxpy") {
		t.Errorf("coord.saxpy pinned to n1/cpu:0: %v, want ErrNoDevice naming both", err)
	}

	// Another job does not have it.
	j2 := openJob(t, c, nil)
	x2, _ := j2.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	_, err = j2.Submit(testCtx(t), coordinator.Group{Kernel: "coord.saxpy", Range: coordinator.Dims{1, 1, n}, Args: saxpyArgs(2, x2, x2)})
	if !errors.Is(err, coordinator.ErrNoDevice) {
		t.Errorf("another job launching coord.saxpy: %v, want ErrNoDevice", err)
	}
	if err := j.Wait(testCtx(t)); err != nil {
		t.Fatalf("job: %v", err)
	}
}

// TestRegisterKernelsRefused_C6: kernels that cannot travel or that a
// node refuses fail RegisterKernels with an error naming the kernel (and
// the node); on CPU-only nodes a PTX kernel fails at once with
// ErrNoDevice naming the kernel and the devices, instead of hanging.
func TestRegisterKernelsRefused_C6(t *testing.T) {
	c, _ := ptxCluster(t, "cpu,fake")
	j := openJob(t, c, nil)
	withGo := jobSaxpy("coord.withgo")
	withGo.Go = emulateSaxpy
	noEntry := jobSaxpy("coord.noentry")
	noEntry.PTX = &device.PTX{Module: noEntry.PTX.Module, Entry: "saxpy_v2"}
	builtin, _ := device.Kernels.Lookup("jacobi2d") // coordtest registered the built-ins
	tests := []struct {
		name string
		k    device.Kernel
		is   error
		want []string
	}{
		{"Go implementation", withGo, coordinator.ErrInvalid, []string{`"coord.withgo"`, "Go implementation"}},
		{"no PTX", device.Kernel{Name: "coord.nothing", Go: emulateSaxpy}, coordinator.ErrInvalid, []string{`"coord.nothing"`, "no PTX"}},
		{"bad name", jobSaxpy("coord/saxpy"), coordinator.ErrInvalid, []string{"coord/saxpy", "name"}},
		{"entry missing", noEntry, nil, []string{"node n0", `"coord.noentry"`, `entry "saxpy_v2" is not in its PTX module (entries: saxpy)`}},
		// (In one process the nodes' registry is this one: the node's own
		// refusal of the name is node/'s TestJobKernelsRefused_C6.)
		{"name of the registry", device.Kernel{Name: "jacobi2d", Params: builtin.Params, PTX: builtin.PTX}, coordinator.ErrInvalid, []string{`another kernel "jacobi2d"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := j.RegisterKernels(testCtx(t), tt.k)
			if err == nil || tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("RegisterKernels = %v, want an error (%v)", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("RegisterKernels error %q lacks %q", err, w)
				}
			}
		})
	}

	cpuOnly := openJob(t, c, func(cfg *coordinator.Config) { cfg.Devices.Kinds = []string{"cpu"} })
	err := cpuOnly.RegisterKernels(testCtx(t), jobSaxpy("coord.saxpy"))
	if !errors.Is(err, coordinator.ErrNoDevice) {
		t.Fatalf("RegisterKernels on CPU-only devices = %v, want ErrNoDevice", err)
	}
	for _, w := range []string{"coord.saxpy", "PTX only", "n0/cpu:0", "n1/cpu:0"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// A shipped PTX kernel is placed only on PTX devices, also on a node that
// has a CPU device too: the job places by the declaration it shipped.
func TestShippedKernelPlacedOnPTXDevice_C6(t *testing.T) {
	c, _ := ptxCluster(t, "cpu,fake")
	j := openJob(t, c, nil)
	if err := j.RegisterKernels(testCtx(t), jobSaxpy("mixed.saxpy")); err != nil {
		t.Fatalf("RegisterKernels: %v", err)
	}
	const n = 1024
	xs := make([]float32, n)
	x, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	for range 4 {
		if _, err := j.Submit(testCtx(t), coordinator.Group{Kernel: "mixed.saxpy", Range: coordinator.Dims{1, 1, n}, Args: saxpyArgs(1, x, y)}); err != nil {
			t.Fatalf("Submit: %v", err)
		}
	}
	if err := j.Wait(testCtx(t)); err != nil {
		t.Fatalf("job: %v", err)
	}
	if p := j.Stats().Placed; p["n0/fake:0"] != 4 || len(p) != 1 {
		t.Errorf("groups placed %v, want all four on n0/fake:0 (n0/cpu:0 cannot run PTX)", p)
	}
}
