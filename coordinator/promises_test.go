package coordinator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/device"
)

// What COORDINATOR.md and the package's doc comments promise, checked
// against the public API (the audit of 2026-11-27).

// Arguments that do not match the kernel's declaration are refused at
// Submit with ErrInvalid naming the argument, as the package's Errors
// section promises ("Invalid groups … are refused at Submit … The job goes
// on"). Before, they went to the node, whose check failed the whole job.
func TestArgumentsCheckedAtSubmit_A2(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	r16 := coordinator.Dims{1, 1, 16}
	b, err := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: r16, ElemSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	part, _ := j.NewBuffer(coordinator.BufferSpec{Name: "part", Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
	out := func(kind device.ArgKind) coordinator.Arg {
		return coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, Kind: kind})
	}
	tests := []struct {
		name string
		g    coordinator.Group
		want string
	}{
		{"an accessor passed as a scalar", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(device.ArgScalar), coordinator.ScalarF32(1)}}, "argument 0 (out): declared a accessor in global space, got a scalar"},
		{"an unknown accessor kind", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(99), coordinator.ScalarF32(1)}}, "got a argkind(99)"},
		{"a raw accessor for an unranged parameter (V2)", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(device.ArgPointer), coordinator.ScalarF32(1)}}, "never converts to an accessor with a range"},
		{"a ranged accessor for an unranged parameter (V2)", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(device.ArgRangedAccessor), coordinator.ScalarF32(1)}}, "a ranged accessor never converts to an unranged one"},
		{"a scalar of the wrong size", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(0), coordinator.ScalarU64(1)}}, "argument 1 (v): element size 0, declared 4"},
		{"local memory for a scalar", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(0), coordinator.LocalMem(4)}}, "declared a scalar, got a local memory"},
		{"arguments swapped", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{coordinator.ScalarF32(1), out(0)}}, "argument 0 (out)"},
		// An accessor with no kind for a scalar parameter stayed a
		// scalar of no bytes: accepted, then the node's kernel indexed it
		// and panicked, failing the job.
		{"an accessor for a scalar", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(0), coordinator.Acc(coordinator.Accessor{Buffer: part, Mode: coordinator.Read})}}, "argument 1 (v): declared a scalar, got a accessor"},
		// The kernel's own Check (device.Kernel.Check) refuses a launch it
		// cannot compute as documented.
		{"a launch the kernel cannot compute", coordinator.Group{Kernel: "reduce_sum_f32", Range: r16, Args: []coordinator.Arg{
			coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Read}), coordinator.Acc(coordinator.Accessor{Buffer: part, Mode: coordinator.Write}),
			coordinator.ScalarU64(16), coordinator.LocalMem(64)}}, "give a work-group size"},
		// A launch past its buffers (which on a GPU would write over other
		// memory or fault, taking the GPU out of service), with raw
		// accessors too, whose size the node's check reads from the memory.
		{"a fill past its buffer", coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, 17}, Args: []coordinator.Arg{out(0), coordinator.ScalarF32(1)}}, "reaches out[16], but out holds 16 elements"},
		{"a saxpy past its buffers", coordinator.Group{Kernel: "saxpy", Range: coordinator.Dims{1, 1, 8}, Offset: coordinator.Dims{0, 0, 12}, Args: []coordinator.Arg{coordinator.ScalarF32(2),
			coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Read}), coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.ReadWrite})}}, "reaches x[19], but x holds 16 elements"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids, err := j.Submit(ctx, tt.g)
			if !errors.Is(err, coordinator.ErrInvalid) || !errors.Is(err, device.ErrBadArg) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Submit() = %v, %v; want ErrInvalid and device.ErrBadArg mentioning %q", ids, err, tt.want)
			}
			if len(ids) != 0 {
				t.Errorf("Submit() returned IDs %v with its refusal", ids)
			}
		})
	}
	// The job goes on: a good group runs and its result reads back.
	if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{out(0), coordinator.ScalarF32(3)}}); err != nil {
		t.Fatalf("a valid group after the refusals: %v", err)
	}
	got, err := j.Read(ctx, b, coordinator.Dims{}, coordinator.Dims{})
	if err != nil {
		t.Fatalf("Read after the refusals: %v (the job failed: %v)", err, j.Err())
	}
	for i, v := range bytesF32(got) {
		if v != 3 {
			t.Fatalf("b[%d] = %v, want 3", i, v)
		}
	}
	if s := j.Stats(); s.Groups != 2 { // the fill and the host read
		t.Errorf("Stats().Groups = %d, want 2: refused groups count as submitted", s.Groups)
	}
}

// Group.Device pins a group; Split divides it. Both at once used to split
// over every device, ignoring Device; it is refused now, pointing at
// Split.Devices.
func TestSplitWithPinnedDeviceRefused_C4(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	r16 := coordinator.Dims{1, 1, 16}
	b, _ := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: r16, ElemSize: 4})
	g := coordinator.Group{Kernel: "fill_f32", Range: r16, Device: "n1/cpu:0", Split: &coordinator.Split{},
		Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, Map: coordinator.OneToOne()}), coordinator.ScalarF32(1)}}
	ids, err := j.Submit(ctx, g)
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "Split.Devices") {
		t.Fatalf("Submit(Device and Split) = %v, %v; want ErrInvalid pointing at Split.Devices", ids, err)
	}
	// What the error suggests works, and pins every chunk.
	g.Device, g.Split = "", &coordinator.Split{Devices: []string{"n1/cpu:0"}, Chunks: 2}
	ids, err = j.Submit(ctx, g)
	if err != nil || len(ids) != 2 {
		t.Fatalf("Submit(Split.Devices) = %v, %v; want 2 chunks", ids, err)
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if p := j.Stats().Placed; p["n1/cpu:0"] != 2 || p["n0/cpu:0"] != 0 {
		t.Errorf("Placed = %v, want both chunks on n1/cpu:0", p)
	}
}

// Split.Chunks is "the number of chunks; 0 means one per device": a
// negative number used to be taken as 0.
func TestSplitNegativeChunksRefused_C4(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	r16 := coordinator.Dims{1, 1, 16}
	b, _ := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: r16, ElemSize: 4})
	ids, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: r16, Split: &coordinator.Split{Chunks: -2},
		Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, Map: coordinator.OneToOne()}), coordinator.ScalarF32(1)}})
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "Split.Chunks -2 is negative") {
		t.Fatalf("Submit(Chunks -2) = %v, %v; want ErrInvalid naming Split.Chunks", ids, err)
	}
	if _, _, err := (&coordinator.Split{Chunks: -1}).Cut(coordinator.Dims{}, r16, coordinator.Dims{}, 1); err == nil {
		t.Error("Split{Chunks: -1}.Cut() = nil error, want a refusal")
	}
}

// PageStates answers for this job's buffers only. A nil buffer panicked; a
// released one gave an empty answer; another job's buffer with the same ID
// gave this job's buffer's states.
func TestPageStatesRefusesOtherBuffers_C2(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	other := openJob(t, c, nil)
	spec := coordinator.BufferSpec{Name: "b", Range: coordinator.Dims{1, 1, 16}, ElemSize: 4, Init: make([]byte, 64)}
	b, _ := j.NewBuffer(spec)
	foreign, _ := other.NewBuffer(spec) // the same buffer ID in the other job
	st, err := j.PageStates(b, coordinator.Dims{}, coordinator.Dims{})
	if err != nil || len(st["client"]) != 1 {
		t.Fatalf("PageStates(own buffer) = %v, %v; want the client's copy up to date", st, err)
	}
	released, _ := j.NewBuffer(spec)
	if err := j.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    *coordinator.Buffer
	}{{"nil", nil}, {"another job's", foreign}, {"released", released}} {
		if st, err := j.PageStates(tc.b, coordinator.Dims{}, coordinator.Dims{}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("PageStates(%s buffer) = %v, %v; want ErrInvalid", tc.name, st, err)
		}
	}
}

// One address is enough: Open asks that node for the members and opens
// the job on the cluster's other nodes too (their joins later come through
// the job's membership watch: integration TestNodeJoinsRunningJob;
// COORDINATOR.md, "How acpp.Connect … sit on it"), unless Config.Static is
// set or MembershipInterval is negative.
func TestMembershipWatchJoinsUnlessStatic_C1(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	first := func(static bool, interval time.Duration) func(*coordinator.Config) {
		return func(cfg *coordinator.Config) {
			cfg.Nodes = cfg.Nodes[:1]
			cfg.Static = static
			cfg.MembershipInterval = interval
		}
	}
	watched := openJob(t, c, first(false, 50*time.Millisecond))
	static := openJob(t, c, first(true, 50*time.Millisecond))
	off := openJob(t, c, first(false, -1))
	deadline := time.Now().Add(20 * time.Second)
	for len(watched.Nodes()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the watched job has nodes %v after 20 s, want n0 and n1", watched.Nodes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := watched.Devices(); len(d) != 2 || d[1].String() != "n1/cpu:0" {
		t.Errorf("watched job's devices = %v, want n0/cpu:0 and n1/cpu:0", d)
	}
	if s := watched.Stats().Recovery.Joins; s != 0 {
		t.Errorf("Stats().Recovery.Joins = %d, want 0: n1 was in the job from Open", s)
	}
	time.Sleep(500 * time.Millisecond) // 10 intervals of the static job's watch
	for name, j := range map[string]*coordinator.Job{"Static": static, "MembershipInterval < 0": off} {
		if n := j.Nodes(); len(n) != 1 {
			t.Errorf("with %s the job has nodes %v, want n0 only", name, n)
		}
	}
}

// DeviceFilter.Labels and MatchLabels: a device is selected when its node
// carries every label asked for; labels name nodes not in the filter's
// other lists.
func TestDeviceFilterLabels(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	labels := map[string][]string{"n0": {"rack-a"}, "n1": {"rack-a", "gpu"}, "n2": {"gpu"}}
	for _, tc := range []struct {
		match []string
		kinds []string
		want  []string
	}{
		{[]string{"gpu"}, nil, []string{"n1/cpu:0", "n2/cpu:0"}},
		{[]string{"rack-a", "gpu"}, nil, []string{"n1/cpu:0"}},
		{[]string{"rack-a"}, []string{"cpu"}, []string{"n0/cpu:0", "n1/cpu:0"}},
		{nil, nil, []string{"n0/cpu:0", "n1/cpu:0", "n2/cpu:0"}},
	} {
		j := openJob(t, c, func(cfg *coordinator.Config) {
			cfg.Devices = coordinator.DeviceFilter{Labels: labels, MatchLabels: tc.match, Kinds: tc.kinds}
			cfg.Static = true
		})
		var got []string
		for _, d := range j.Devices() {
			got = append(got, d.String())
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("MatchLabels %v, Kinds %v: devices %v, want %v", tc.match, tc.kinds, got, tc.want)
		}
	}
	_, err := coordinator.Open(testCtx(t), func() coordinator.Config {
		cfg := c.Config()
		cfg.Devices = coordinator.DeviceFilter{Labels: labels, MatchLabels: []string{"tpu"}}
		return cfg
	}())
	if !errors.Is(err, coordinator.ErrNoDevice) {
		t.Errorf("Open with a label no node carries = %v, want ErrNoDevice", err)
	}
}

// PlaceRoundRobin "cycles through the devices that can run the kernel,
// ignoring data and load"; JobID is the job's ID on the nodes.
func TestRoundRobinPlacementAndJobID(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, func(cfg *coordinator.Config) {
		cfg.Placement = coordinator.PlaceRoundRobin
		cfg.JobID = 4242
	})
	if j.ID() != 4242 {
		t.Errorf("ID() = %d, want the configured JobID 4242", j.ID())
	}
	// Every group reads and writes the same buffer: PlaceAuto would keep
	// them where the data is.
	b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1024}, ElemSize: 4})
	for i := range 6 {
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, 1024},
			Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.ReadWrite}), coordinator.ScalarF32(float32(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"n0/cpu:0", "n1/cpu:0", "n2/cpu:0"} {
		if got := j.Stats().Placed[d]; got != 2 {
			t.Errorf("%s got %d of 6 groups, want 2 (%v)", d, got, j.Stats().Placed)
		}
	}
}

// ParseCheckpoint reads "auto", "off" or a number of command groups, and
// CheckpointString is its inverse; ParseNodeLossPolicy reads "recover" or
// "fail".
func TestParseCheckpointAndPolicy(t *testing.T) {
	for s, want := range map[string]int{"auto": coordinator.CheckpointAuto, "off": coordinator.CheckpointOff, "1": 1, "250": 250} {
		got, err := coordinator.ParseCheckpoint(s)
		if err != nil || got != want {
			t.Errorf("ParseCheckpoint(%q) = %d, %v; want %d", s, got, err, want)
		}
		if back := coordinator.CheckpointString(got); back != s {
			t.Errorf("CheckpointString(%d) = %q, want %q", got, back, s)
		}
	}
	for _, s := range []string{"0", "-1", "-5", "never", "1.5", "auto "} {
		if got, err := coordinator.ParseCheckpoint(s); err == nil {
			t.Errorf("ParseCheckpoint(%q) = %d, nil; want an error", s, got)
		}
	}
	for s, want := range map[string]coordinator.NodeLossPolicy{"recover": coordinator.RecoverOnLoss, "fail": coordinator.FailOnLoss} {
		got, err := coordinator.ParseNodeLossPolicy(s)
		if err != nil || got != want {
			t.Errorf("ParseNodeLossPolicy(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	if got, err := coordinator.ParseNodeLossPolicy("ignore"); err == nil {
		t.Errorf("ParseNodeLossPolicy(\"ignore\") = %v, nil; want an error", got)
	}
}

// CheckpointAuto takes a checkpoint once Young's interval sqrt(2 × C × M)
// has passed, M being NodeMTBF over the job's nodes: with the default (24
// h per node) a short job takes none; with a tiny NodeMTBF it takes them as
// it goes; with FailOnLoss (nothing to recover) never.
func TestAutoCheckpointFollowsNodeMTBF_C5(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	ctx := testCtx(t)
	run := func(mod func(*coordinator.Config)) *coordinator.Job {
		j := openJob(t, c, mod)
		b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 256}, ElemSize: 4})
		for i := range 8 {
			if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, 256},
				Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.ReadWrite}), coordinator.ScalarF32(float32(i))}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(15 * time.Millisecond) // > sqrt(2 × 10 ms × 1 ms) = 4.5 ms
		}
		if err := j.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		return j
	}
	tiny := run(func(cfg *coordinator.Config) { cfg.NodeMTBF = time.Millisecond })
	deadline := time.Now().Add(10 * time.Second)
	for tiny.Stats().Recovery.Checkpoints == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("NodeMTBF 1 ms: no checkpoint in 8 groups 15 ms apart (%+v)", tiny.Stats().Recovery)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for name, mod := range map[string]func(*coordinator.Config){
		"the default NodeMTBF": nil,
		"FailOnLoss":           func(cfg *coordinator.Config) { cfg.NodeMTBF, cfg.OnNodeLoss = time.Millisecond, coordinator.FailOnLoss },
		"CheckpointOff": func(cfg *coordinator.Config) {
			cfg.NodeMTBF, cfg.Checkpoint = time.Millisecond, coordinator.CheckpointOff
		},
	} {
		if n := run(mod).Stats().Recovery.Checkpoints; n != 0 {
			t.Errorf("with %s: %d checkpoints in a short job, want 0", name, n)
		}
	}
}

// A nil *Buffer (a failed NewBuffer's result) prints and answers its
// geometry instead of panicking in an error message or a log line.
func TestNilBufferPrints(t *testing.T) {
	var b *coordinator.Buffer
	if s := b.String(); s != "nil buffer" {
		t.Errorf("nil buffer's String = %q", s)
	}
	if g := b.Geometry(); g.ElemSize != 0 {
		t.Errorf("nil buffer's Geometry = %+v, want the zero one", g)
	}
}
