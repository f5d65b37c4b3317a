package node

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// TestDocumentedDefaults: the defaults and bounds docs/NODE.md and
// docs/OPERATIONS.md state are the code's. A change to one of them must
// change the docs too.
func TestDocumentedDefaults(t *testing.T) {
	d := Config{}.withDefaults()
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"JobLease (30 s)", int64(d.JobLease), int64(30 * time.Second)},
		{"MaxJobLease (10 min)", int64(d.MaxJobLease), int64(10 * time.Minute)},
		{"DrainTimeout (10 s)", int64(d.DrainTimeout), int64(10 * time.Second)},
		{"ReportGather (200 µs)", int64(d.ReportGather), int64(200 * time.Microsecond)},
		{"MaxReportGather (100 ms)", int64(MaxReportGather), int64(100 * time.Millisecond)},
		{"FeedLimit (65,536)", int64(d.FeedLimit), 65536},
		{"MaxJobInstrs (1,048,576)", int64(d.MaxJobInstrs), 1048576},
		{"MaxClientJobs (1024)", int64(d.MaxClientJobs), 1024},
		{"kernels per job (256)", maxJobKernels, 256},
		{"module bytes per job (64 MiB)", maxJobKernelBytes, 64 << 20},
		{"module bytes per node (256 MiB)", int64(maxModuleCache), 256 << 20},
		{"a closed job's module release poll (100 ms)", int64(idlePoll), int64(100 * time.Millisecond)},
		{"pinned staging buffers kept per GPU (4)", poolMaxBuffers, 4},
		{"pinned staging bytes kept per GPU (1 GiB)", poolMaxBytes, 1 << 30},
		{"wait for a cancelled send by reference (10 s)", int64(refAckTimeout), int64(10 * time.Second)},
		{"no references offered after a refusal (a minute)", int64(refRetry), int64(time.Minute)},
		{"grace before freeing a lent allocation (2 s)", int64(refFreeGrace), int64(2 * time.Second)},
	} {
		if c.got != c.want {
			t.Errorf("%s: the code has %d, the docs say %d", c.what, c.got, c.want)
		}
	}
	if device.DefaultHostShare != 0.75 || device.DefaultDeviceShare != 0.90 {
		t.Errorf("default budgets: host %v, GPU %v of their memory; the docs say 75%% and 90%%", device.DefaultHostShare, device.DefaultDeviceShare)
	}
}

// TestReportGatherBound: Config.ReportGather may be MaxReportGather
// (100 ms), not a nanosecond more.
func TestReportGatherBound(t *testing.T) {
	base := Config{Name: "n1", CredentialsDir: "/nonexistent"}
	for _, c := range []struct {
		gather time.Duration
		ok     bool
	}{{MaxReportGather, true}, {MaxReportGather + 1, false}, {-1, true}} {
		cfg := base
		cfg.ReportGather = c.gather
		err := cfg.Validate()
		if c.ok && err != nil || !c.ok && (err == nil || !strings.Contains(err.Error(), "ReportGather")) {
			t.Errorf("ReportGather %v: Validate() = %v, want ok %v", c.gather, err, c.ok)
		}
	}
}

// TestStagingPoolBounds: a GPU memory's pool keeps at most 4 idle pinned
// buffers and 1 GiB; a buffer past either goes back to the caller (who
// frees it), and get hands out the smallest that fits.
func TestStagingPoolBounds(t *testing.T) {
	var p stagingPool
	for i := range poolMaxBuffers {
		if !p.put(&device.Mem{Bytes: 1 << (10 + i)}) {
			t.Fatalf("buffer %d of %d refused", i+1, poolMaxBuffers)
		}
	}
	if p.put(&device.Mem{Bytes: 1}) {
		t.Fatalf("a buffer past %d kept", poolMaxBuffers)
	}
	if m := p.get(1500); m == nil || m.Bytes != 2048 {
		t.Fatalf("get(1500) = %v, want the 2 KiB buffer (the smallest that fits)", m)
	}
	p.drain()
	if !p.put(&device.Mem{Bytes: poolMaxBytes - 1}) || !p.put(&device.Mem{Bytes: 1}) {
		t.Fatalf("buffers of exactly %d bytes together refused", poolMaxBytes)
	}
	if p.put(&device.Mem{Bytes: 1}) {
		t.Fatalf("a byte past %d bytes kept", poolMaxBytes)
	}
}

// TestJobModuleBytesEdge: a job may hold exactly 64 MiB of modules; a
// kernel that takes it one byte past is refused (CodeTooLarge, naming the
// bounds), and the refused request holds nothing. (Done here, not over the
// wire, to keep the test from moving 64 MiB: the kernels share one
// interned module.)
func TestJobModuleBytesEdge(t *testing.T) {
	n := offlineNode(t)
	j := newJob(n, 1, credentials.Client("alice"), time.Minute, 0)
	n.jobs[1] = j
	b, _ := ptxlib.Lookup("saxpy")
	base := b.Kernel()
	quarter := make([]byte, maxJobKernelBytes/4)
	kernel := func(name string, mod []byte) device.Kernel {
		k := base
		k.Name = name
		k.PTX = &device.PTX{Module: mod, Entry: base.PTX.Entry}
		return k
	}
	var ks []device.Kernel
	for _, name := range []string{"lim.a", "lim.b", "lim.c", "lim.d"} {
		ks = append(ks, kernel(name, quarter))
	}
	r, err := j.addKernels(ks)
	if err != nil || r.Bytes != maxJobKernelBytes || r.Kernels != 4 {
		t.Fatalf("modules of exactly %d bytes: %+v, %v; want accepted", maxJobKernelBytes, r, err)
	}
	held := internedBytes(n)
	_, err = j.addKernels([]device.Kernel{kernel("lim.e", []byte{'\n'})})
	if err == nil || !strings.Contains(err.Error(), "67108865 bytes") || !strings.Contains(err.Error(), "at most 256 kernels and 67108864 bytes") {
		t.Fatalf("one byte past %d: %v, want a refusal naming the size and the bounds", maxJobKernelBytes, err)
	}
	var er *proto.ErrorReply
	if !errors.As(err, &er) || er.Code != proto.CodeTooLarge {
		t.Errorf("one byte past %d: %v, want CodeTooLarge", maxJobKernelBytes, err)
	}
	if got := internedBytes(n); got != held {
		t.Fatalf("the refused kernel left %d bytes of modules held, want %d", got, held)
	}
	n.closeJob(j, errJobClosed)
	// The job's modules are released on a goroutine of the node's: wait
	// for it before the node goes.
	eventuallyFreed(t, n)
}

// eventuallyFreed waits until n holds no job modules.
func eventuallyFreed(t *testing.T, n *Node) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); internedBytes(n) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node still holds %d bytes of modules 5 s after its last job closed", internedBytes(n))
		}
	}
}

// TestNodeNameLengthEdge: a node's name is 1 to 64 characters
// (TRANSPORT.md, "Credentials").
func TestNodeNameLengthEdge(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{{"a", true}, {strings.Repeat("a", 64), true}, {strings.Repeat("a", 65), false}} {
		err := Config{Name: c.name, CredentialsDir: "/nonexistent"}.Validate()
		if c.ok && err != nil || !c.ok && (err == nil || !strings.Contains(err.Error(), "1 to 64 characters")) {
			t.Errorf("a name of %d characters: Validate() = %v, want ok %v", len(c.name), err, c.ok)
		}
	}
}
