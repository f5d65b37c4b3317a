package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/acpp/acpp/credentials"
	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// TestJobKernelsFreedWithJob_C6: a job's kernels leave the node's table
// when the job closes; two jobs that ship the same module share one copy
// of it, which leaves the node's module table with the second job (B1).
func TestJobKernelsFreedWithJob_C6(t *testing.T) {
	n := offlineNode(t)
	b, _ := ptxlib.Lookup("saxpy")
	k := b.Kernel()
	k.Name = "internal.saxpy"
	k.PTX = &device.PTX{Module: append([]byte(nil), k.PTX.Module...), Entry: k.PTX.Entry}
	var jobs []*job
	for id := uint64(1); id <= 2; id++ {
		j := newJob(n, id, credentials.Client("alice"), time.Minute, 0)
		n.jobs[id] = j
		kk := k
		kk.PTX = &device.PTX{Module: append([]byte(nil), k.PTX.Module...), Entry: k.PTX.Entry}
		if _, err := j.addKernels([]device.Kernel{kk}); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	ka, _ := jobs[0].kernel("internal.saxpy", n.devs.list[0])
	if ka != nil {
		t.Fatalf("kernel lookup on the CPU device gave %v, want a refusal", ka.Name)
	}
	m0, m1 := shippedKernel(jobs[0], "internal.saxpy"), shippedKernel(jobs[1], "internal.saxpy")
	if m0 == nil || m1 == nil || unsafe.SliceData(m0.PTX.Module) != unsafe.SliceData(m1.PTX.Module) {
		t.Fatalf("the two jobs' copies of one module are not shared: %p %p", m0, m1)
	}
	n.closeJob(jobs[0], errJobClosed)
	deadline := time.Now().Add(5 * time.Second)
	for shippedKernel(jobs[0], "internal.saxpy") != nil {
		if time.Now().After(deadline) {
			t.Fatal("a closed job's kernels are still registered after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if got := jobs[1].jobKernelNames(); len(got) != 1 {
		t.Fatalf("the other job's kernels = %v after closing job 1, want its one", got)
	}
	if _, err := jobs[0].addKernels([]device.Kernel{k}); err == nil {
		t.Fatal("kernels accepted for a closed job")
	} else if re, ok := err.(*proto.ErrorReply); !ok || re.Code != proto.CodeNoJob {
		t.Fatalf("kernels for a closed job: %v, want CodeNoJob", err)
	}
	if got := internedBytes(n); got != len(k.PTX.Module) {
		t.Fatalf("node holds %d bytes of modules with one of two jobs closed, want the shared %d", got, len(k.PTX.Module))
	}
	n.closeJob(jobs[1], errJobClosed)
	for internedBytes(n) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("node still holds %d bytes of modules 5 s after its last job closed", internedBytes(n))
		}
		time.Sleep(time.Millisecond)
	}
}

// internedBytes is what n's module table holds, checked against its entries.
func internedBytes(n *Node) int {
	modules.mu.Lock()
	defer modules.mu.Unlock()
	sum := 0
	for key, m := range modules.m {
		if key.n == n {
			sum += len(m.data)
		}
	}
	if sum != modules.bytes[n] {
		panic(fmt.Sprintf("module table of %s: entries hold %d bytes, its count says %d", n.cfg.Name, sum, modules.bytes[n]))
	}
	return sum
}

// TestInternCountsHolders_C6_B1: intern shares one copy per node and
// content and counts its holders; release drops it with the last one (and
// only then returns it, to be unloaded); interning the same text again
// afterwards gives a fresh copy at another address, so an unload of the
// old one in flight cannot hit it; another node has its own copy; a
// registration that fails half way releases what it interned.
func TestInternCountsHolders_C6_B1(t *testing.T) {
	n, other := offlineNode(t), offlineNode(t)
	text := []byte(".visible .entry k() { ret; }")
	a, err := intern(n, text)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := intern(n, slices.Clone(text))
	o, _ := intern(other, text)
	if unsafe.SliceData(a) != unsafe.SliceData(b) || unsafe.SliceData(a) == unsafe.SliceData(text) {
		t.Fatalf("intern twice on one node gave %p and %p (input at %p), want one copy that is not the input", unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(text))
	}
	if unsafe.SliceData(o) == unsafe.SliceData(a) {
		t.Fatal("two nodes share one copy of a module; each must have its own")
	}
	if gone := release(n, [][]byte{a}); len(gone) != 0 {
		t.Fatalf("release of one of two holders returned %d modules to unload, want none", len(gone))
	}
	if gone := release(n, [][]byte{b}); len(gone) != 1 || unsafe.SliceData(gone[0]) != unsafe.SliceData(a) {
		t.Fatalf("release of the last holder returned %d modules, want the one copy", len(gone))
	}
	if got := internedBytes(n); got != 0 {
		t.Fatalf("node holds %d bytes after its last holder let go, want 0", got)
	}
	if got := internedBytes(other); got != len(text) {
		t.Fatalf("the other node holds %d bytes, want its %d", got, len(text))
	}
	c, _ := intern(n, text)
	if unsafe.SliceData(c) == unsafe.SliceData(a) {
		t.Fatal("interning after the last release gave the old copy back, want a fresh one")
	}
	release(n, [][]byte{c})
	release(other, [][]byte{o})

	// A registration whose second module is over the node's limit.
	j := newJob(n, 1, credentials.Client("alice"), time.Minute, 0)
	n.jobs[1] = j
	bk, _ := ptxlib.Lookup("saxpy")
	small := bk.Kernel()
	small.Name = "internal.small"
	big := small
	big.Name = "internal.big"
	big.PTX = &device.PTX{Module: append(slices.Clone(small.PTX.Module), make([]byte, 100)...), Entry: small.PTX.Entry}
	defer func(limit int) { maxModuleCache = limit }(maxModuleCache)
	maxModuleCache = len(small.PTX.Module) + len(big.PTX.Module) - 1
	if _, err := j.addKernels([]device.Kernel{small, big}); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a registration over the node's module limit: %v, want a refusal naming the limit", err)
	}
	if got := internedBytes(n); got != 0 {
		t.Fatalf("a refused registration left %d bytes of modules held, want 0", got)
	}
	n.closeJob(j, errJobClosed)
}

func shippedKernel(j *job, name string) *device.Kernel {
	shipped.mu.RLock()
	defer shipped.mu.RUnlock()
	if s := shipped.m[j]; s != nil {
		return s.m[name]
	}
	return nil
}

// TestParamBoundsMatchDevice: proto's numeric bounds of a parameter's kind
// and space are device's.
func TestParamBoundsMatchDevice(t *testing.T) {
	if proto.MaxParamKind != int(device.ArgScalar) || proto.MaxParamSpace != int(device.Constant) {
		t.Fatalf("proto bounds kind %d, space %d; device has ArgScalar %d, Constant %d", proto.MaxParamKind, proto.MaxParamSpace, device.ArgScalar, device.Constant)
	}
}
