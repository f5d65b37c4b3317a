package coordinator_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/node"
)

// Nodes with a device memory of their own (an in-memory fake GPU without a
// host view): pages move within a node by local copies (InstrCopy), the
// client's data is uploaded once, and the directory tracks each (node,
// memory) (C2, C3).
func TestDeviceMemoriesWithinNode_C2_C3(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{Modify: func(_ int, cfg *node.Config) {
		cfg.Devices = "" // cpu and the fake
		cfg.ExtraDevices = []device.Device{devicetest.NewFake(devicetest.FakeConfig{})}
	}})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	var fake *coordinator.Device
	for _, d := range j.Devices() {
		if d.Node == "n0" && d.Kind == "fake" {
			fake = &d
		}
	}
	if fake == nil || fake.Mem == 0 {
		t.Fatalf("no fake device with a memory of its own on n0: %+v", j.Devices())
	}
	const n = 4096
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(i)
	}
	x, _ := j.NewBuffer(coordinator.BufferSpec{Name: "x", Range: coordinator.Dims{1, 1, n}, ElemSize: 4, Init: f32bytes(xs)})
	y1, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	y2, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	cp := func(dst *coordinator.Buffer, dev string) {
		t.Helper()
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "copy_f32", Range: coordinator.Dims{1, 1, n}, Device: dev,
			Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Read}), coordinator.Acc(coordinator.Accessor{Buffer: dst, Mode: coordinator.Write, NoInit: true})}}); err != nil {
			t.Fatal(err)
		}
	}
	cp(y1, fake.String()) // x uploaded into the fake's memory
	cp(y2, "n0/cpu:0")    // x copied from the fake's memory to host memory on n0
	for _, b := range []*coordinator.Buffer{y1, y2} {
		got, err := j.Read(ctx, b, coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			t.Fatal(err)
		}
		if g := bytesF32(got); !slices.Equal(g, xs) {
			t.Fatalf("copy through device memory differs")
		}
	}
	if up := c.Received(0)["client"]; up != n*4 {
		t.Errorf("n0 received %d bytes from the client, want %d (x uploaded once)", up, n*4)
	}
	if moved := c.PeerBytes(); moved != 0 {
		t.Errorf("bytes between nodes = %d, want 0", moved)
	}
	st := j.Stats()
	if got := st.PlannedBytes["n0->n0"]; got != n*4 {
		t.Errorf("planned local copy n0->n0 = %d bytes, want %d (%v)", got, n*4, st.PlannedBytes)
	}
	states, err := j.PageStates(x, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"client", "n0/m0", "n0/m" + strconv.Itoa(int(fake.Mem))} {
		if len(states[a]) == 0 {
			t.Errorf("x not up to date on %s: %v", a, states)
		}
	}
}
