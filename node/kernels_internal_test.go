package node

import (
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
// of it (so the CUDA backend's module cache, keyed by the bytes' address,
// can never see a freed module's address reused).
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
	n.closeJob(jobs[1], errJobClosed)
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
