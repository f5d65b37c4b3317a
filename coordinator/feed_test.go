package coordinator_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/node"
)

// warnings counts the node log records at WARN and above whose message
// holds a phrase.
type warnings struct {
	phrase string
	n      atomic.Int32
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.Contains(r.Message, w.phrase) {
		w.n.Add(1)
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// A node whose client reads its completions too slowly stops recording
// them (node.Config.FeedLimit) rather than growing without bound; the
// client's feed sees the gap in the events' numbers, or a quiet spell,
// and asks for the instructions' state instead: every group completes
// with the right data, nothing hangs (C5's "no hang").
func TestFeedCatchesUpAfterNodeDroppedEvents(t *testing.T) {
	w := &warnings{phrase: "reads its completions too slowly"}
	c := coordtest.Start(t, 1, coordtest.Options{Modify: func(_ int, cfg *node.Config) {
		cfg.FeedLimit = 4
		cfg.ReportGather = 20e6 // 20 ms: completions pile up unread meanwhile
		cfg.Logger = slog.New(w)
	}})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	const n, groups = 256, 64
	bufs := make([]*coordinator.Buffer, groups)
	for i := range bufs {
		bufs[i], _ = j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
		fill(t, j, bufs[i], n, float32(i), "n0/cpu:0")
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if w.n.Load() == 0 {
		t.Fatal("the node never dropped an event: the test did not test the catch-up")
	}
	for i, b := range bufs {
		got, err := j.Read(ctx, b, coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			t.Fatal(err)
		}
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*(n-1):])); v != float32(i) {
			t.Fatalf("buffer %d holds %v, want %d", i, v, i)
		}
	}
}

// A long job does not make its nodes remember every instruction it ran:
// the coordinator tells each node to forget the finished ones
// (Submit.Forget) every forgetEvery instructions, once none still queued
// names them.
func TestNodesForgetFinishedInstructions(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	const n, groups = 64, 30000
	b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	for i := range groups {
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, n}, Device: "n0/cpu:0",
			Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, NoInit: true}), coordinator.ScalarF32(float32(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	inv, err := c.Client().Inventory(ctx, "n0")
	if err != nil {
		t.Fatal(err)
	}
	for _, ji := range inv.JobList {
		if ji.ID != j.ID() {
			continue
		}
		if ji.Known >= groups/3 {
			t.Errorf("the node remembers %d instructions of a finished job of %d groups; want the finished ones forgotten", ji.Known, groups)
		}
		t.Logf("after %d groups the node remembers %d instructions", groups, ji.Known)
		return
	}
	t.Fatalf("job %d not in n0's job list %+v", j.ID(), inv.JobList)
}

// A node named in the device filter that the job did not reach (a typo,
// or a node not up yet) is said in a warning, not ignored in silence.
func TestUnknownSelectedNodeWarned(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	w := &warnings{phrase: "a selected node is not in the job"}
	j := openJob(t, c, func(cfg *coordinator.Config) {
		cfg.Devices.Nodes = []string{"n0", "n9"}
		cfg.Logger = slog.New(w)
	})
	_ = j
	if w.n.Load() != 1 {
		t.Errorf("%d warnings for the unknown node n9, want 1", w.n.Load())
	}
}

// The recovery line names a checkpoint only when there is one: from the
// job's start it said "restoring the checkpoint taken after group 0".
func TestRecoveryReportWording_C5(t *testing.T) {
	r := coordinator.RecoveryReport{Node: "n3", AtGroup: 1204, LostBytes: 1 << 20}
	if s := r.String(); !strings.Contains(s, "no checkpoint yet: replaying the groups from the job's start") || strings.Contains(s, "group 0") {
		t.Errorf("without a checkpoint: %q", s)
	}
	r.Checkpoint = 800
	if s := r.String(); !strings.Contains(s, "restoring the checkpoint taken after group 800") {
		t.Errorf("with a checkpoint after group 800: %q", s)
	}
}

// A selected device kind or device that no node reached has is warned
// about, as a node is (the job runs on what the other selections allow;
// such a device may join later); a kind that is no kind at all ("gpu")
// fails Open, naming it.
func TestUnknownSelectedKindAndDeviceWarned(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	kinds := &warnings{phrase: "a selected device kind is not in the job"}
	openJob(t, c, func(cfg *coordinator.Config) {
		cfg.Devices.Kinds = []string{"cpu", "cuda"}
		cfg.Logger = slog.New(kinds)
	})
	if kinds.n.Load() != 1 {
		t.Errorf("%d warnings for the kind cuda no node has, want 1", kinds.n.Load())
	}
	devs := &warnings{phrase: "a selected device is not in the job"}
	openJob(t, c, func(cfg *coordinator.Config) {
		cfg.Devices.Devices = []string{"n0/cpu:0", "n7/cpu:0"}
		cfg.Logger = slog.New(devs)
	})
	if devs.n.Load() != 1 {
		t.Errorf("%d warnings for the device n7/cpu:0, want 1", devs.n.Load())
	}
	cfg := c.Config()
	cfg.Devices.Kinds = []string{"gpu"}
	if _, err := coordinator.Open(testCtx(t), cfg); err == nil || !strings.Contains(err.Error(), `Devices.Kinds[0] = "gpu" is no device kind`) {
		t.Errorf("Open with the kind gpu: %v, want it refused naming it", err)
	}
}
