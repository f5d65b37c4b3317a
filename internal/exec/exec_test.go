package exec

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newRuntime(t *testing.T) (*Runtime, *cpu.Device) {
	t.Helper()
	d := cpu.New(0, 2)
	rt, err := New(Config{Devices: []device.Device{d}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
		d.Close()
	})
	return rt, d
}

func addBuffer(t *testing.T, rt *Runtime, n int) (coherence.BufferID, coherence.Geometry) {
	t.Helper()
	geo, err := coherence.NewGeometry(coherence.Dims{1, 1, n}, 4, coherence.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.AddBuffer(geo, nil, coherence.AllocID{})
	if err != nil {
		t.Fatal(err)
	}
	return id, geo
}

func launch(f func()) device.Op {
	return device.LaunchOp{Name: "k", Range: device.NDRange{Global: [3]int{1, 1, 1}}, Func: func(*device.Work) { f() }}
}

// A busy runtime hands groups to a planner goroutine: a chain of
// read-write groups still runs in submission order, every group completes,
// and Step (Deps) is coherence's plan even when asked before the planner
// got to it.
func TestPipelinedChainRunsInOrder_D3(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the planner needs two processors")
	}
	rt, d := newRuntime(t)
	buf, geo := addBuffer(t, rt, 16)
	acc := []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.ReadWrite, Target: rt.HostAlloc()}}
	release := make(chan struct{})
	first, err := rt.Submit(Group{Name: "gate", Accesses: acc, Device: d, Ops: []device.Op{launch(func() { <-release })}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	var ran atomic.Int64
	var bad atomic.Int64
	nodes := make([]*Node, n)
	for i := range n {
		want := int64(i)
		nodes[i], err = rt.Submit(Group{Name: "step", Accesses: acc, Device: d, Ops: []device.Op{launch(func() {
			if ran.Add(1)-1 != want {
				bad.Add(1)
			}
		})}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Asked before the gate opens: the plan must be there (D3: each
	// depends on the one before).
	prev := first.Seq
	for _, nd := range nodes[:10] {
		if !slices.Contains(nd.Deps(), prev) {
			t.Fatalf("group %d deps %v, want %d among them", nd.Seq, nd.Deps(), prev)
		}
		prev = nd.Seq
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != n || bad.Load() != 0 {
		t.Fatalf("%d groups ran, %d out of order; want %d in order", ran.Load(), bad.Load(), n)
	}
	for _, nd := range nodes {
		if !nd.Finished() || nd.Err() != nil || nd.State() != Complete {
			t.Fatalf("group %d: finished %v, state %v, err %v", nd.Seq, nd.Finished(), nd.State(), nd.Err())
		}
	}
	if got := rt.Stats().Groups; got != n+1 {
		t.Errorf("Stats.Groups = %d, want %d", got, n+1)
	}
}

// Coherence's refusal is Submit's error when the runtime is idle, and the
// group's error (on the node and from TakeErrors) when a planner took it;
// either way the runtime goes on.
func TestPlanErrorSyncWhenIdleOnNodeWhenBusy(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the planner needs two processors")
	}
	rt, d := newRuntime(t)
	buf, geo := addBuffer(t, rt, 16)
	bad := []coherence.Access{{Buffer: buf + 100, Pages: geo.All(), Mode: coherence.Read, Target: rt.HostAlloc()}}
	if _, err := rt.Submit(Group{Name: "bad", Accesses: bad, Device: d, Ops: []device.Op{launch(func() {})}}); !errors.Is(err, coherence.ErrUnknownBuffer) {
		t.Fatalf("idle Submit = %v, want ErrUnknownBuffer", err)
	}
	release := make(chan struct{})
	if _, err := rt.Submit(Group{Name: "gate", Device: d, Ops: []device.Op{launch(func() { <-release })}}); err != nil {
		t.Fatal(err)
	}
	// The gate keeps the runtime busy: the group goes to the planner.
	n, err := rt.Submit(Group{Name: "bad", Accesses: bad, Device: d, Ops: []device.Op{launch(func() {})}})
	if err != nil {
		t.Fatalf("busy Submit = %v, want nil (the planner reports on the node)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if werr := n.Wait(ctx); !errors.Is(werr, coherence.ErrUnknownBuffer) || n.State() != Failed {
		t.Fatalf("busy group: error %v, state %v; want ErrUnknownBuffer, failed", werr, n.State())
	}
	close(release)
	if err := rt.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if errs := rt.TakeErrors(); len(errs) != 1 || !errors.Is(errs[0], coherence.ErrUnknownBuffer) {
		t.Fatalf("TakeErrors = %v, want the refused group's error", errs)
	}
	good := []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.ReadWrite, Target: rt.HostAlloc()}}
	ok, err := rt.Submit(Group{Name: "after", Accesses: good, Device: d, Ops: []device.Op{launch(func() {})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.Wait(context.Background()); err != nil {
		t.Fatalf("group after a refused one: %v", err)
	}
}

// B1, B2, B5: an allocation keeps its address while it exists (lookups are
// cached), and once a release freed it the next use makes a new one: the
// cache never hands out freed memory.
func TestAllocCacheForgetsReleased_B1_B2_B5(t *testing.T) {
	rt, _ := newRuntime(t)
	buf, _ := addBuffer(t, rt, 16)
	host := rt.HostAlloc()
	m1, err := rt.Alloc(buf, host)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if m, err := rt.Alloc(buf, host); err != nil || m != m1 {
			t.Fatalf("Alloc again = %p, %v; want the same allocation %p (B2)", m, err, m1)
		}
	}
	if err := rt.FreeReleased(ReleaseReq{Buffer: buf, Alloc: host}); err != nil {
		t.Fatal(err)
	}
	m2, err := rt.Alloc(buf, host)
	if err != nil {
		t.Fatal(err)
	}
	if m2 == m1 {
		t.Fatalf("Alloc after the release returned the freed allocation %p", m1)
	}
	if st := rt.Stats(); st.Allocations != 2 {
		t.Fatalf("allocations = %d, want 2 (made again after the release, B5)", st.Allocations)
	}
}

// TestNewNeedsHostDeviceRunningGo: Config.Devices must hold a host-unified
// device that runs Go kernels (it runs host tasks and host-side copies);
// without one New fails and says what to add, also when the only
// host-unified device runs no Go (a linked GPU).
func TestNewNeedsHostDeviceRunningGo(t *testing.T) {
	gpu := devicetest.NewFake(devicetest.FakeConfig{})
	defer gpu.Close()
	linked := devicetest.NewFake(devicetest.FakeConfig{Index: 1, HostUnified: true, Forms: []device.Form{device.FormPTX}})
	defer linked.Close()
	for _, devs := range [][]device.Device{nil, {gpu}, {gpu, linked}} {
		rt, err := New(Config{Devices: devs})
		if err == nil {
			rt.Close(context.Background())
			t.Fatalf("New(%d devices, none host-unified running Go) succeeded", len(devs))
		}
		if !strings.Contains(err.Error(), "runs Go kernels") || !strings.Contains(err.Error(), "cpu.Open") {
			t.Errorf("New(%d devices) = %v, want an error saying a host-unified device that runs Go kernels is needed and how to add one", len(devs), err)
		}
	}
	host := devicetest.NewFake(devicetest.FakeConfig{Index: 2, HostUnified: true})
	defer host.Close()
	rt, err := New(Config{Devices: []device.Device{gpu, linked, host}})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Host() != host {
		t.Errorf("Host() = %v, want the host-unified device that runs Go", rt.Host().Info().ID)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Error(err)
	}
}
