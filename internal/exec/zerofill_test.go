package exec

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
)

// fillCounter counts the fills enqueued on a device.
type fillCounter struct {
	device.Device
	fills atomic.Int32
}

func (c *fillCounter) Enqueue(q int, op device.Op, done func(error)) error {
	if _, ok := op.(device.FillOp); ok {
		c.fills.Add(1)
	}
	return c.Device.Enqueue(q, op, done)
}

// A group that only fills zeros into an allocation its device made zeroed
// (the CPU's) and no node used yet costs nothing: its fills are dropped.
// Once anything used the allocation, or it was handed out as USM (Touch),
// or the fill is not of zeros, the fills run.
func TestZeroFillOfFreshAllocationIsFree(t *testing.T) {
	cd := cpu.New(0, 2)
	d := &fillCounter{Device: cd}
	rt, err := New(Config{Devices: []device.Device{d}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() {
		if err := rt.Close(ctx); err != nil {
			t.Error(err)
		}
		cd.Close()
	}()
	host := rt.HostAlloc()
	fill := func(buf coherence.BufferID, geo coherence.Geometry, discard bool, pat ...byte) bool {
		t.Helper()
		m, err := rt.Alloc(buf, host) // as an accessor does when declared
		if err != nil {
			t.Fatal(err)
		}
		before := d.fills.Load()
		n, err := rt.Submit(Group{Name: "fill", Device: d,
			Accesses: []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.Write, Target: host, Discard: discard}},
			Ops:      []device.Op{device.FillOp{Dst: m, Bytes: geo.Bytes(), Pattern: pat}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		return d.fills.Load() > before
	}
	fresh, geo := addBuffer(t, rt, 1024)
	if fill(fresh, geo, true, 0, 0, 0, 0) {
		t.Error("the zero fill of a fresh allocation ran")
	}
	if !fill(fresh, geo, true, 0, 0, 0, 0) {
		t.Error("a second zero fill (the allocation was used) did not run")
	}
	one, geo := addBuffer(t, rt, 1024)
	if !fill(one, geo, true, 0, 0, 0x80, 0x3f) {
		t.Error("a fill of 1.0 into a fresh allocation did not run")
	}
	written, geo := addBuffer(t, rt, 1024)
	rt.Alloc(written, host)
	n, _ := rt.Submit(Group{Name: "write", Device: d, Accesses: []coherence.Access{{Buffer: written, Pages: geo.All(), Mode: coherence.Write, Target: host}},
		Ops: []device.Op{launch(func() {})}})
	n.Wait(ctx)
	if !fill(written, geo, true, 0) {
		t.Error("the zero fill of a written allocation did not run")
	}
	usm, geo := addBuffer(t, rt, 1024)
	rt.Alloc(usm, host)
	rt.Touch(usm, host)
	if !fill(usm, geo, true, 0) {
		t.Error("the zero fill of an allocation handed out as USM did not run")
	}
	plain, geo := addBuffer(t, rt, 1024)
	if fill(plain, geo, false, 0) {
		t.Error("a zero fill of a fresh allocation through a plain write (nothing to copy in) ran")
	}
}
