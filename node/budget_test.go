package node_test

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/kernels"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// tib is the buffer of issue 14: float32 [268435456, 1024], exactly 1 TiB.
var tib = [3]uint64{1, 268435456, 1024}

// hostBudgetBelow skips t when this machine's default host budget would
// admit bytes (the test must never allocate them).
func hostBudgetBelow(t *testing.T, bytes uint64) uint64 {
	t.Helper()
	size, _, err := cpu.HostMemory()
	if err != nil {
		t.Skipf("host memory size unknown here (%v): no default budget to test", err)
	}
	budget, _ := device.MemoryLimit{}.Budget(size, true)
	if budget >= bytes {
		t.Skipf("this machine's default host budget (%d bytes) admits %d bytes; the test would allocate them", budget, bytes)
	}
	return budget
}

// TestDefaultBudgetRefusesTooBigAllocation_B5: with no --max-bytes a node
// still has a budget per memory (75% of host memory); an allocation of 1
// TiB fails its instruction with the memory-limit error, naming the size,
// the budget and what to do, before anything is allocated; the node stays
// up, and the next job on it allocates, fills and reads back. The budget
// and the use are in the inventory and on /metrics.
func TestDefaultBudgetRefusesTooBigAllocation_B5(t *testing.T) {
	budget := hostBudgetBelow(t, 1<<40)
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.HTTPAddr = "127.0.0.1:0" })
	n := nodes[0]
	c := startClient(t, credDir, "alice", n)

	big := openJob(t, c, "n0", 1)
	submit(t, big,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: tib, ElemSize: 4},
		proto.Instr{ID: 2, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Pattern: []byte{1, 0, 0, 0}},
	)
	err := big.Wait(testCtx(t), 1, 2)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 2 || fe.Failed[0].ID != 1 || fe.Failed[0].Code != proto.CodeMemoryLimit {
		t.Fatalf("Wait = %v; want the 1 TiB allocation failed with the memory limit (and its fill with it)", err)
	}
	msg := fe.Failed[0].Message
	for _, want := range []string{"node n0", "allocation of buffer 1", "1099511627776 bytes", "host memory budget", device.FormatBytes(budget), "75% of", "--max-bytes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("memory-limit error %q lacks %q", msg, want)
		}
	}
	if got := n.Allocated(); got != 0 {
		t.Errorf("after the refused allocation the node holds %d bytes, want 0", got)
	}

	small := openJob(t, c, "n0", 2)
	rng := [3]uint64{1, 1, 1024}
	submit(t, small,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4},
		proto.Instr{ID: 2, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Pattern: []byte{7, 0, 0, 0}},
	)
	wait(t, small, 1, 2)
	got := make([]byte, 4096)
	if err := small.ReadBack(testCtx(t), 3, []uint64{2}, 1, 0, rng, 4, []proto.Box{{Hi: rng}}, got); err != nil {
		t.Fatalf("read back of the second job: %v", err)
	}
	if got[0] != 7 || got[4092] != 7 {
		t.Errorf("second job read back %v…, want 7s", got[:8])
	}

	inv := n.Inventory()
	host := inv.Memories[0]
	if !host.Host || host.Budget != budget || host.Used != 4096 || host.Bytes == 0 {
		t.Errorf("inventory host memory = %+v; want budget %d, used 4096 and its size", host, budget)
	}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`acpp_node_memory_budget_bytes{device="cpu:0",memory="0"}`, `acpp_node_memory_used_bytes{device="cpu:0",memory="0"} 4096`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestMaxBytesIsEachMemorysBudget_B5: --max-bytes sets the budget of each
// memory (and the node's total).
func TestMaxBytesIsEachMemorysBudget_B5(t *testing.T) {
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.MaxBytes = 1 << 20 })
	c := startClient(t, credDir, "alice", nodes...)
	j := openJob(t, c, "n0", 1)
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 2 << 20}, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrAlloc, Buffer: 2, Range: [3]uint64{1, 1, 768 << 10}, ElemSize: 1},
	)
	err := j.Wait(testCtx(t), 1, 2)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 1 || fe.Failed[0].ID != 1 || fe.Failed[0].Code != proto.CodeMemoryLimit ||
		!strings.Contains(fe.Failed[0].Message, "the configured limit") {
		t.Fatalf("Wait = %v; want the 2 MiB allocation refused by the 1 MiB budget", err)
	}
	if m := nodes[0].Inventory().Memories[0]; m.Budget != 1<<20 || m.Used != 768<<10 {
		t.Errorf("host memory = %+v; want budget 1 MiB, 768 KiB used", m)
	}
}

// TestStagingCountsAgainstHostBudget_B5: pages read back from device
// memory without a host view pass through host staging, which is admitted
// against host memory's budget like an allocation: staging that does not
// fit fails the read-back with the memory-limit error (nothing allocated),
// and a smaller one afterwards works.
func TestStagingCountsAgainstHostBudget_B5(t *testing.T) {
	size, _, err := cpu.HostMemory()
	if err != nil {
		t.Skipf("host memory size unknown here: %v", err)
	}
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) {
		cfg.ExtraDevices = []device.Device{devicetest.NewFake(devicetest.FakeConfig{})}
		// About 16 KiB of host memory; the fake's memory has no known
		// size, so no budget.
		cfg.MemoryShare = float64(16<<10) / float64(size)
	})
	c := startClient(t, credDir, "alice", nodes...)
	mem, _ := memOf(t, c, "n0", "fake:0")
	j := openJob(t, c, "n0", 1)
	big, small := [3]uint64{1, 1, 64 << 10}, [3]uint64{1, 1, 4 << 10}
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Mem: mem, Range: big, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrFill, Deps: []uint64{1}, Buffer: 1, Mem: mem, Pattern: []byte{5}},
		proto.Instr{ID: 3, Kind: proto.InstrAlloc, Buffer: 2, Mem: mem, Range: small, ElemSize: 1},
		proto.Instr{ID: 4, Kind: proto.InstrFill, Deps: []uint64{3}, Buffer: 2, Mem: mem, Pattern: []byte{6}},
	)
	wait(t, j, 1, 2, 3, 4)
	got := make([]byte, 64<<10)
	err = j.ReadBack(testCtx(t), 5, nil, 1, mem, big, 1, []proto.Box{{Hi: big}}, got)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 1 || fe.Failed[0].Code != proto.CodeMemoryLimit ||
		!strings.Contains(fe.Failed[0].Message, "send staging needs 65536 bytes") || !strings.Contains(fe.Failed[0].Message, "host memory budget") {
		t.Fatalf("read back of 64 KiB through a 16 KiB host budget = %v; want the staging refused", err)
	}
	if err := j.ReadBack(testCtx(t), 6, nil, 2, mem, small, 1, []proto.Box{{Hi: small}}, got[:4<<10]); err != nil {
		t.Fatalf("read back of 4 KiB afterwards: %v", err)
	}
	if got[0] != 6 || got[4<<10-1] != 6 {
		t.Errorf("read back %v…, want 6s", got[:4])
	}
	if m := nodes[0].Inventory().Memories[0]; m.Used != 0 {
		t.Errorf("host memory holds %d bytes after the read-backs, want 0 (staging released)", m.Used)
	}
}

// TestGPUBudget_B5: a GPU's memory has a budget of 90% of its size by
// default; an allocation of the whole GPU fails with the memory-limit
// error naming the GPU (before cuMemAlloc is asked), and one that fits
// works. Skipped without a GPU.
func TestGPUBudget_B5(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := startClient(t, credDir, "alice", nodes...)
	mem, ok := memOf(t, c, "n0", "cuda:0")
	if !ok {
		t.Skip("no GPU on this machine")
	}
	m := nodes[0].Inventory().Memories[mem]
	if m.Bytes == 0 || m.Budget != uint64(float64(m.Bytes)*device.DefaultDeviceShare) {
		t.Fatalf("cuda:0 memory = %+v; want a budget of 90%% of its size", m)
	}
	t.Logf("cuda:0: %d bytes, budget %d", m.Bytes, m.Budget)
	j := openJob(t, c, "n0", 1)
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Mem: mem, Range: [3]uint64{1, 1, m.Bytes}, ElemSize: 1},
		proto.Instr{ID: 2, Kind: proto.InstrAlloc, Buffer: 2, Mem: mem, Range: [3]uint64{1, 1, 1 << 20}, ElemSize: 4},
	)
	err := j.Wait(testCtx(t), 1, 2)
	var fe *nodeclient.InstrFailedError
	if !errors.As(err, &fe) || len(fe.Failed) != 1 || fe.Failed[0].ID != 1 || fe.Failed[0].Code != proto.CodeMemoryLimit ||
		!strings.Contains(fe.Failed[0].Message, "cuda:0 memory budget") || !strings.Contains(fe.Failed[0].Message, "90% of") {
		t.Fatalf("Wait = %v; want the whole-GPU allocation refused by cuda:0's budget, the 4 MiB one made", err)
	}
	if got := nodes[0].Inventory().Memories[mem].Used; got != 4<<20 {
		t.Errorf("cuda:0 used = %d, want 4 MiB", got)
	}
}

// Issue 13 §2: the inventory declares each kernel of the node's registry:
// its parameters and forms (go, ptx), as the client's registry declares
// them.
func TestInventoryDeclaresKernels(t *testing.T) {
	if err := kernels.Register(); err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 1, nil)
	inv := nodes[0].Inventory()
	if len(inv.KernelDecls) != len(inv.Kernels) || len(inv.Kernels) == 0 {
		t.Fatalf("inventory declares %d kernels and names %d", len(inv.KernelDecls), len(inv.Kernels))
	}
	for _, d := range inv.KernelDecls {
		k, err := device.Kernels.Lookup(d.Name)
		if err != nil {
			t.Fatalf("declared %q, which the registry lacks", d.Name)
		}
		if !slices.Equal(proto.Params(d.Params), k.Params) {
			t.Errorf("%s: declared %v, registry %v", d.Name, proto.Params(d.Params), k.Params)
		}
		if k.Has(device.FormGo) != slices.Contains(d.Forms, "go") || k.Has(device.FormPTX) != slices.Contains(d.Forms, "ptx") {
			t.Errorf("%s: forms %v, want go=%v ptx=%v", d.Name, d.Forms, k.Has(device.FormGo), k.Has(device.FormPTX))
		}
	}
}
