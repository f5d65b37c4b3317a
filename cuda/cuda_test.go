package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/testlog"
)

// TestOpenWithoutDriver: no driver means no devices, a nil error and one log
// line that says so.
func TestOpenWithoutDriver(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	devs, err := Open(context.Background(), Config{Logger: log, Library: "libcuda-acpp-test-missing.so.1"})
	if err != nil || len(devs) != 0 {
		t.Fatalf("Open without a driver = %v, %v; want no devices and no error", devs, err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "no CUDA driver") {
		t.Errorf("log = %q, want one line saying there is no CUDA driver", buf.String())
	}
}

// TestOpenWithoutDriverStillChecksEnvironment: a bad ACPP_CUDA_* value
// fails Open with ErrConfig naming the variable even where there is no
// driver, so a typo is seen on the machine where it is made.
func TestOpenWithoutDriverStillChecksEnvironment(t *testing.T) {
	for _, env := range []string{CompletionEnv, GraphsEnv} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "typo")
			devs, err := Open(context.Background(), Config{Library: "libcuda-acpp-test-missing.so.1"})
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), env) || len(devs) != 0 {
				t.Fatalf("%s=typo: Open = %v, %v; want ErrConfig naming the variable", env, devs, err)
			}
		})
	}
}

// TestBackendRegistered: importing the package registers the CUDA backend.
func TestBackendRegistered(t *testing.T) {
	for _, b := range device.Backends() {
		if b.Kind == device.KindCUDA {
			return
		}
	}
	t.Fatalf("device.Backends() has no %s backend", device.KindCUDA)
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	bad := Config{Streams: -1, Completion: 9, PollMin: 5, PollMax: 1, Link: 7, Devices: []int{-2}}
	err := bad.Validate()
	for _, want := range []string{"Streams", "Completion", "PollMin", "Link", "ordinal -2"} {
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want ErrConfig mentioning %s", bad, err, want)
		}
	}
	c := Config{}.withDefaults()
	if c.Streams != 4 || c.PollMin <= 0 || c.PollMax < c.PollMin || c.ManagedReserve == 0 || c.Logger == nil {
		t.Errorf("withDefaults() = %+v", c)
	}
}

// TestConfigOptionsTakeEffectOrFail: a poll bound is either used as given
// or refused naming the field (a PollMin above the default PollMax was
// once lowered to 200 µs without a word), a bound of a strategy the Config
// rules out is refused instead of ignored, and an unknown Link says which
// values there are.
func TestConfigOptionsTakeEffectOrFail(t *testing.T) {
	for _, c := range []struct {
		name     string
		cfg      Config
		min, max time.Duration // after withDefaults; 0: Validate must refuse
		want     string        // in the error
	}{
		{"defaults", Config{}, 2 * time.Microsecond, 200 * time.Microsecond, ""},
		{"min only", Config{PollMin: 50 * time.Microsecond}, 50 * time.Microsecond, 200 * time.Microsecond, ""},
		{"min at the default max", Config{PollMin: 200 * time.Microsecond}, 200 * time.Microsecond, 200 * time.Microsecond, ""},
		{"max below the default min", Config{PollMax: time.Microsecond}, time.Microsecond, time.Microsecond, ""},
		{"both", Config{PollMin: time.Millisecond, PollMax: 2 * time.Millisecond}, time.Millisecond, 2 * time.Millisecond, ""},
		{"min above the default max", Config{PollMin: time.Millisecond}, 0, 0, "PollMin (1ms) must be <= PollMax, which is 200µs when left 0"},
		{"min above max", Config{PollMin: 2 * time.Millisecond, PollMax: time.Millisecond}, 0, 0, "PollMin (2ms) must be <= PollMax (1ms)"},
		{"negative", Config{PollMax: -1}, 0, 0, "must be >= 0"},
		{"unknown link", Config{Link: LinkNever + 1}, 0, 0, "use LinkAuto, LinkAlways or LinkNever"},
		{"poll bound with blocking-sync", Config{Completion: CompletionBlockingSync, PollMax: time.Millisecond}, 0, 0, "PollMin and PollMax apply to CompletionPoll only"},
		{"poll bound with spin", Config{Completion: CompletionSpin, PollMin: time.Microsecond}, 0, 0, "PollMin and PollMax apply to CompletionPoll only"},
		{"spin bound with callback", Config{Completion: CompletionCallback, SpinIdle: time.Millisecond}, 0, 0, "SpinIdle applies to CompletionSpin only"},
		{"spin bound, strategy from the environment", Config{SpinIdle: time.Millisecond}, 2 * time.Microsecond, 200 * time.Microsecond, ""},
	} {
		err := c.cfg.Validate()
		if c.want != "" {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: Validate() = %v, want ErrConfig saying %q", c.name, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Validate() = %v", c.name, err)
			continue
		}
		if d := c.cfg.withDefaults(); d.PollMin != c.min || d.PollMax != c.max {
			t.Errorf("%s: poll bounds [%v, %v], want [%v, %v]", c.name, d.PollMin, d.PollMax, c.min, c.max)
		}
	}
}

// The completion strategy comes from ACPP_CUDA_COMPLETION when Config
// leaves it zero (how acpp.NewQueue's devices get one), an unknown value
// is a config error, and SpinWait (device.SpinWaiter) is SpinIdle under
// CompletionSpin only.
func TestCompletionFromEnvironmentAndSpinWait(t *testing.T) {
	t.Setenv(CompletionEnv, "spin")
	if c := (Config{}).withDefaults(); c.Completion != CompletionSpin {
		t.Fatalf("%s=spin: Completion %v, want spin", CompletionEnv, c.Completion)
	}
	if c := (Config{Completion: CompletionBlockingSync}).withDefaults(); c.Completion != CompletionBlockingSync {
		t.Fatalf("an explicit Completion was overridden by the environment: %v", c.Completion)
	}
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{Completion: CompletionSpin}, 50 * time.Microsecond},
		{Config{Completion: CompletionSpin, SpinIdle: time.Millisecond}, time.Millisecond},
		{Config{Completion: CompletionBlockingSync}, 0},
		{Config{Completion: CompletionCallback}, 0},
	} {
		d := &Device{cfg: c.cfg.withDefaults()}
		if got := device.SpinWaitOf(d); got != c.want {
			t.Errorf("SpinWait under %v (SpinIdle %v) = %v, want %v", c.cfg.Completion, c.cfg.SpinIdle, got, c.want)
		}
	}
	t.Setenv(CompletionEnv, "busy")
	if err := (Config{}).Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), CompletionEnv) {
		t.Fatalf("%s=busy: Validate = %v, want ErrConfig naming the variable", CompletionEnv, err)
	}
}

// TestLinkDecision_L2_L3: only GPUs that share memory with the host are
// linked; the overrides work; every decision has a reason.
func TestLinkDecision_L2_L3(t *testing.T) {
	h200 := Attributes{Name: "NVIDIA H200", CanMapHost: true, ConcurrentManagedAccess: true}
	tests := []struct {
		name   string
		a      Attributes
		mode   Link
		linked bool
		reason string
	}{
		{"discrete", h200, LinkAuto, false, "discrete GPU"},
		{"integrated", Attributes{Integrated: true, CanMapHost: true}, LinkAuto, true, "integrated"},
		{"host page tables", Attributes{CanMapHost: true, PageableMemoryAccess: true, PageableUsesHostPageTables: true}, LinkAuto, true, "host page tables"},
		{"pageable access through migration only", Attributes{CanMapHost: true, PageableMemoryAccess: true}, LinkAuto, false, "discrete"},
		{"forced", h200, LinkAlways, true, "LinkAlways"},
		{"forced without mapping", Attributes{}, LinkAlways, false, "cannot map"},
		{"never", Attributes{Integrated: true, CanMapHost: true}, LinkNever, false, "LinkNever"},
	}
	for _, tc := range tests {
		linked, why := linkDecision(tc.a, tc.mode)
		if linked != tc.linked || !strings.Contains(why, tc.reason) {
			t.Errorf("%s: linkDecision = %v, %q; want %v and a reason mentioning %q", tc.name, linked, why, tc.linked, tc.reason)
		}
		if tc.mode == LinkAuto && tc.a.HostUnified() != tc.linked {
			t.Errorf("%s: HostUnified() = %v, want %v", tc.name, tc.a.HostUnified(), tc.linked)
		}
	}
}

func f32(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
func u64(v uint64) []byte  { return binary.LittleEndian.AppendUint64(nil, v) }

// TestPackArgs_V4_A3: each accessor variant carries exactly what it stores,
// at its alignment, after the ND range; local accessors become 16-byte
// aligned offsets into dynamic shared memory.
func TestPackArgs_V4_A3(t *testing.T) {
	k := &device.Kernel{Name: "k", Params: []device.Param{
		{Name: "raw", Kind: device.ArgPointer, Space: device.Global},
		{Name: "s", Kind: device.ArgScalar, Space: device.Private},
		{Name: "acc", Kind: device.ArgAccessor, Space: device.Global},
		{Name: "l1", Kind: device.ArgLocal, Space: device.Local},
		{Name: "rng", Kind: device.ArgRangedAccessor, Space: device.Global},
		{Name: "l2", Kind: device.ArgLocal, Space: device.Local},
		{Name: "b", Kind: device.ArgScalar, Space: device.Private},
	}}
	m1 := &device.Mem{Addr: 0x1000, Bytes: 4096}
	m2 := &device.Mem{Addr: 0x8000, Bytes: 4096}
	args := []device.Arg{
		{Kind: device.ArgPointer, Mem: m1, Offset: 16},
		{Kind: device.ArgScalar, Scalar: f32(2.5)},
		{Kind: device.ArgAccessor, Mem: m2, Range: [3]int{1, 4, 8}},
		{Kind: device.ArgLocal, LocalBytes: 10},
		{Kind: device.ArgRangedAccessor, Mem: m1, Range: [3]int{2, 3, 4}, AccessOffset: [3]int{0, 1, 2}, AccessRange: [3]int{2, 2, 2}},
		{Kind: device.ArgLocal, LocalBytes: 64},
		{Kind: device.ArgScalar, Scalar: []byte{7}},
	}
	r := device.NDRange{Global: [3]int{1, 4, 8}, Local: [3]int{1, 2, 4}, Offset: [3]int{0, 1, 0}}
	got, shared, err := packArgs(k, r, args, func(m *device.Mem) (uint64, error) { return m.Addr, nil })
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, v := range []uint64{1, 4, 8, 0, 1, 0} { // acpp_nd
		want = append(want, u64(v)...)
	}
	want = append(want, u64(0x1010)...)                     // raw: one pointer (offset applied)
	want = append(want, f32(2.5)...)                        // scalar float
	want = append(want, 0, 0, 0, 0)                         // pad to 8
	want = append(want, u64(0x8000)...)                     // unranged: pointer
	want = append(want, u64(1)...)                          //   + range
	want = append(want, u64(4)...)                          //
	want = append(want, u64(8)...)                          //
	want = append(want, u64(0)...)                          // local 1 at offset 0
	want = append(want, u64(0x1000)...)                     // ranged: pointer
	for _, v := range []uint64{2, 3, 4, 0, 1, 2, 2, 2, 2} { // range, offset, access range
		want = append(want, u64(v)...)
	}
	want = append(want, u64(16)...) // local 2: 10 bytes rounded up to 16
	want = append(want, 7)          // byte scalar, no trailing padding
	if !bytes.Equal(got, want) {
		t.Errorf("packArgs =\n%x\nwant\n%x", got, want)
	}
	if shared != 16+64 {
		t.Errorf("dynamic shared memory = %d, want %d", shared, 16+64)
	}
	// The layout is what kernels.CheckLayout expects of a PTX entry.
	var entry kernels.Entry
	entry.Params = append(entry.Params, kernels.EntryParam{Name: "nd", Size: kernels.NDRangeBytes, Align: 8})
	for _, p := range k.Params {
		p.ElemSize = map[string]int{"s": 4, "b": 1}[p.Name]
		size, align := kernels.ArgBytes(p)
		entry.Params = append(entry.Params, kernels.EntryParam{Name: p.Name, Size: size, Align: align})
	}
	sum := 0
	for _, p := range entry.Params {
		sum = (sum + p.Align - 1) &^ (p.Align - 1)
		sum += p.Size
	}
	if sum != len(got) {
		t.Errorf("ArgBytes layout totals %d bytes, packArgs wrote %d", sum, len(got))
	}
}

// TestPackArgsNamesUnreachableArgument_A2: memory a GPU's kernels cannot
// reach is refused before launch, naming the argument.
func TestPackArgsNamesUnreachableArgument_A2(t *testing.T) {
	k := &device.Kernel{Name: "k", Params: []device.Param{
		{Name: "x", Kind: device.ArgPointer, Space: device.Global},
		{Name: "y", Kind: device.ArgPointer, Space: device.Global},
	}}
	ok := &device.Mem{Addr: 1}
	far := &device.Mem{Addr: 2}
	_, _, err := packArgs(k, device.NDRange{Global: [3]int{1, 1, 1}}, []device.Arg{{Kind: device.ArgPointer, Mem: ok}, {Kind: device.ArgPointer, Mem: far}},
		func(m *device.Mem) (uint64, error) {
			if m == far {
				return 0, errors.New("not reachable")
			}
			return m.Addr, nil
		})
	var ae *device.ArgError
	if !errors.As(err, &ae) || ae.Index != 1 || ae.Param != "y" {
		t.Fatalf("packArgs = %v, want an ArgError for argument 1 (y)", err)
	}
}

func TestLaunchGeometry(t *testing.T) {
	tests := []struct {
		r           device.NDRange
		hint        *kernels.Launch
		grid, block [3]uint32
		err         string
	}{
		{r: device.NDRange{Global: [3]int{1, 1, 1000}}, grid: [3]uint32{4, 1, 1}, block: [3]uint32{256, 1, 1}},
		{r: device.NDRange{Global: [3]int{1, 100, 70}}, grid: [3]uint32{3, 13, 1}, block: [3]uint32{32, 8, 1}},
		{r: device.NDRange{Global: [3]int{5, 9, 33}}, grid: [3]uint32{2, 3, 3}, block: [3]uint32{32, 4, 2}},
		{r: device.NDRange{Global: [3]int{1, 64, 64}, Local: [3]int{1, 16, 16}}, grid: [3]uint32{4, 4, 1}, block: [3]uint32{16, 16, 1}},
		{r: device.NDRange{Global: [3]int{1, 1, 4096}, Local: [3]int{1, 1, 2048}}, err: "at most 1024"},
		{r: device.NDRange{Global: [3]int{1, 1 << 20, 1}}, err: "dimension 1"},
		// small 1D ranges: whole warps, no more
		{r: device.NDRange{Global: [3]int{1, 1, 1}}, grid: [3]uint32{1, 1, 1}, block: [3]uint32{32, 1, 1}},
		{r: device.NDRange{Global: [3]int{1, 1, 100}}, grid: [3]uint32{1, 1, 1}, block: [3]uint32{128, 1, 1}},
		// the Jacobi built-in's hint: 128×2 threads, 8 rows each
		{r: device.NDRange{Global: [3]int{1, 4096, 4096}}, hint: jacobiHint(t), grid: [3]uint32{32, 256, 1}, block: [3]uint32{128, 2, 1}},
		{r: device.NDRange{Global: [3]int{1, 301, 517}}, hint: jacobiHint(t), grid: [3]uint32{5, 19, 1}, block: [3]uint32{128, 2, 1}},
		// a narrow grid gets a narrower block
		{r: device.NDRange{Global: [3]int{1, 1, 40}}, hint: jacobiHint(t), grid: [3]uint32{1, 1, 1}, block: [3]uint32{64, 1, 1}},
		// a grouped launch ignores it
		{r: device.NDRange{Global: [3]int{1, 64, 64}, Local: [3]int{1, 16, 16}}, hint: jacobiHint(t), grid: [3]uint32{4, 4, 1}, block: [3]uint32{16, 16, 1}},
	}
	for _, tc := range tests {
		g, err := hintedGeometry(tc.r, 1024, tc.hint)
		if tc.err != "" {
			if !errors.Is(err, device.ErrBadOp) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("launchGeometry(%+v) = %v, want ErrBadOp mentioning %q", tc.r, err, tc.err)
			}
			continue
		}
		if err != nil || g.Grid != tc.grid || g.Block != tc.block {
			t.Errorf("launchGeometry(%+v) = %+v, %v; want grid %v block %v", tc.r, g, err, tc.grid, tc.block)
		}
	}
}

func jacobiHint(t *testing.T) *kernels.Launch {
	b, _ := kernels.Lookup("jacobi2d")
	l, ok := kernels.LaunchFor(b.PTX())
	if !ok {
		t.Fatal("jacobi2d has no launch hint")
	}
	return &l
}

// fakeDevice is a Device with no driver behind it: enough for the checks
// that run before anything reaches the GPU.
func fakeDevice() *Device {
	g := &group{devs: map[int]*Device{}}
	a := Attributes{Name: "test GPU", MaxThreadsPerBlock: 1024, MaxSharedPerBlock: 48 << 10, MaxSharedPerBlockOptin: 227 << 10, CanMapHost: true}
	d := newDevice(Config{}.withDefaults(), nil, a, 0, 0, g)
	g.devs[0] = d
	return d
}

func (d *Device) fakeMem(kind device.MemKind, bytes int) *device.Mem {
	st := &memState{dev: d, kind: kind, devPtr: 0x10000, pinned: kind == device.MemHost, managed: kind == device.MemShared}
	m := &device.Mem{Device: d.info.ID, Kind: kind, Bytes: bytes, Addr: 0x10000, Handle: st}
	d.mems[m] = st
	return m
}

// TestCheckLaunchAddressSpaces_A1_A2: every argument is checked against its
// declared space and against where its memory really is, and the error
// names the argument.
func TestCheckLaunchAddressSpaces_A1_A2(t *testing.T) {
	d := fakeDevice()
	dev := d.fakeMem(device.MemDevice, 1024)
	host := d.fakeMem(device.MemHost, 1024)
	cpu := &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemDevice, Bytes: 1024, Host: make([]byte, 1024)}
	ptx := &device.PTX{Module: []byte(".entry k(.param .align 8 .b8 nd[48], .param .u64 p)\n{ret;}"), Entry: "k"}
	kern := func(space device.AddrSpace) *device.Kernel {
		return &device.Kernel{Name: "k", PTX: ptx, Params: []device.Param{{Name: "p", Kind: device.ArgPointer, Space: space}}}
	}
	flat := device.NDRange{Global: [3]int{1, 1, 16}}
	tests := []struct {
		name string
		op   device.LaunchOp
		want string // "" = accepted
	}{
		{"device memory as global_device", device.LaunchOp{Kernel: kern(device.GlobalDevice), Range: flat, Args: []device.Arg{{Kind: device.ArgPointer, Space: device.GlobalDevice, Mem: dev}}}, ""},
		{"host USM as global", device.LaunchOp{Kernel: kern(device.Global), Range: flat, Args: []device.Arg{{Kind: device.ArgPointer, Space: device.GlobalHost, Mem: host}}}, ""},
		{"host USM as global_device", device.LaunchOp{Kernel: kern(device.GlobalDevice), Range: flat, Args: []device.Arg{{Kind: device.ArgPointer, Space: device.GlobalHost, Mem: host}}}, "argument 0 (p): a host USM pointer is no global_device argument"},
		{"host USM claiming global_device", device.LaunchOp{Kernel: kern(device.GlobalDevice), Range: flat, Args: []device.Arg{{Kind: device.ArgPointer, Space: device.GlobalDevice, Mem: host}}}, "argument 0 (p): the argument claims global_device space, but its memory is global_host"},
		{"CPU memory", device.LaunchOp{Kernel: kern(device.Global), Range: flat, Args: []device.Arg{{Kind: device.ArgPointer, Space: device.GlobalDevice, Mem: cpu}}}, "argument 0 (p): device memory of cpu:0 is not accessible from cuda:0 kernels"},
		{"local on a flat launch", device.LaunchOp{Kernel: &device.Kernel{Name: "k", PTX: ptx, Params: []device.Param{{Name: "tile", Kind: device.ArgLocal, Space: device.Local}}}, Range: flat, Args: []device.Arg{{Kind: device.ArgLocal, Space: device.Local, LocalBytes: 64}}}, "argument 0 (tile): local memory needs work-groups"},
		{"too much local memory", device.LaunchOp{Kernel: &device.Kernel{Name: "k", PTX: ptx, Params: []device.Param{{Name: "tile", Kind: device.ArgLocal, Space: device.Local}}}, Range: device.NDRange{Global: [3]int{1, 1, 16}, Local: [3]int{1, 1, 16}}, Args: []device.Arg{{Kind: device.ArgLocal, Space: device.Local, LocalBytes: 1 << 20}}}, "local memory"},
		{"no PTX", device.LaunchOp{Kernel: &device.Kernel{Name: "gofunc"}, Range: flat}, "has no PTX"},
		{"closure", device.LaunchOp{Name: "adhoc", Range: flat}, "named PTX kernels only"},
	}
	for _, tc := range tests {
		_, err := d.checkLaunch(tc.op)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: checkLaunch = %v, want accepted", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: checkLaunch = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestEnqueueRefusesBadOps: malformed ops are refused at once, with the
// error class the runtime branches on, and done is never called.
func TestEnqueueRefusesBadOps(t *testing.T) {
	d := fakeDevice()
	dev := d.fakeMem(device.MemDevice, 64)
	opaque := &device.Mem{Device: device.ID{Kind: device.KindFake}, Kind: device.MemDevice, Bytes: 64}
	done := func(error) { t.Errorf("done called for a refused op") }
	tests := []struct {
		op   device.Op
		want error
	}{
		{device.CopyOp{Src: device.Region{Mem: dev, Extent: [3]int{1, 1, 16}}, Dst: device.Region{Mem: dev, Extent: [3]int{1, 1, 16}}, Size: [3]int{1, 1, 17}, ElemSize: 4}, device.ErrBadOp},
		{device.CopyOp{Src: device.Region{Mem: opaque, Extent: [3]int{1, 1, 16}}, Dst: device.Region{Mem: dev, Extent: [3]int{1, 1, 16}}, Size: [3]int{1, 1, 16}, ElemSize: 4}, device.ErrUnsupported},
		{device.FillOp{Dst: dev, Bytes: 65, Pattern: []byte{1}}, device.ErrBadOp},
		{device.LaunchOp{Name: "adhoc", Range: device.NDRange{Global: [3]int{1, 1, 1}}}, device.ErrNoImplementation},
	}
	for _, tc := range tests {
		if err := d.Enqueue(0, tc.op, done); !errors.Is(err, tc.want) {
			t.Errorf("Enqueue(%T) = %v, want %v", tc.op, err, tc.want)
		}
	}
	d.q.closed = true
	err := d.Enqueue(0, device.FillOp{Dst: dev, Bytes: 4, Pattern: []byte{1}}, done)
	if !errors.Is(err, device.ErrClosed) {
		t.Errorf("Enqueue after close = %v, want ErrClosed", err)
	}
}

// TestPollSleepProportional: the poller sleeps an eighth of the wait so far,
// within its bounds, so latency overshoot stays proportional to the wait.
func TestPollSleepProportional(t *testing.T) {
	tests := []struct{ waited, want time.Duration }{
		{0, 2 * time.Microsecond},
		{8 * time.Microsecond, 2 * time.Microsecond},
		{240 * time.Microsecond, 30 * time.Microsecond},
		{time.Second, 200 * time.Microsecond},
	}
	for _, tc := range tests {
		if got := pollSleep(tc.waited, 2*time.Microsecond, 200*time.Microsecond); got != tc.want {
			t.Errorf("pollSleep(%v) = %v, want %v", tc.waited, got, tc.want)
		}
	}
}

// TestGraphsEnvironment: ACPP_CUDA_GRAPHS=0 turns graph replay off, 1 or
// unset leaves it on, and any other value is a configuration error that
// names the variable (an option is taken or refused, never ignored).
func TestGraphsEnvironment(t *testing.T) {
	for _, c := range []struct {
		v        string
		noGraphs bool
	}{{"", false}, {"1", false}, {"0", true}} {
		t.Setenv(GraphsEnv, c.v)
		if err := (Config{}).Validate(); err != nil {
			t.Errorf("%s=%q: Validate = %v", GraphsEnv, c.v, err)
		}
		if got := (Config{}).withDefaults().NoGraphs; got != c.noGraphs {
			t.Errorf("%s=%q: NoGraphs = %v, want %v", GraphsEnv, c.v, got, c.noGraphs)
		}
	}
	t.Setenv(GraphsEnv, "off")
	if err := (Config{}).Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), GraphsEnv) {
		t.Fatalf("%s=off: Validate = %v, want ErrConfig naming the variable", GraphsEnv, err)
	}
}

// TestBackendLogsToTheOpenersLogger: the registered backend (what queues
// and nodes open through device.Backends) logs to OpenConfig.Logger, and
// with none it discards: never to slog.Default(), which it used to use
// whatever the queue's logger was (acpp.WithLogger(nil) did not silence
// it). Without a driver it says so; with GPUs it logs its link decisions.
func TestBackendLogsToTheOpenersLogger(t *testing.T) {
	var def, own testlog.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	log := slog.New(slog.NewTextHandler(&own, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, l := range []*slog.Logger{log, nil} {
		devs, err := openBackend(context.Background(), device.OpenConfig{Logger: l})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range devs {
			d.Close()
		}
	}
	if own.String() == "" {
		t.Error("the opener's logger got nothing")
	}
	if s := def.String(); s != "" {
		t.Errorf("slog.Default() got %q, want nothing", s)
	}
}
