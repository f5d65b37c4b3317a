package coordinator_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// Conflicting command groups on different nodes run in submission order,
// whether data moves between them (read-write chain) or not (discard
// writes, ordered by the coordinator's gate); independent ones on different
// nodes run at the same time (C4, D3, D4).
func TestClusterOrdering_C4_D3_D4(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	devs := []string{"n0/cpu:0", "n1/cpu:0", "n2/cpu:0"}
	ctx := testCtx(t)

	for _, tc := range []struct {
		name   string
		noInit bool
	}{{"read-write chain", false}, {"discard writes", true}} {
		t.Run("conflicting/"+tc.name, func(t *testing.T) {
			j := openJob(t, c, nil)
			takeSpans()
			init := make([]byte, 4)
			binary.LittleEndian.PutUint32(init, 1)
			buf, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4, Init: init})
			if err != nil {
				t.Fatal(err)
			}
			const n = 6
			for i := range n {
				mode := coordinator.ReadWrite
				if tc.noInit {
					mode = coordinator.Write
				}
				if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_mark", Range: coordinator.Dims{1, 1, 1}, Device: devs[i%3],
					Args: []coordinator.Arg{coordinator.ScalarU64(uint64(i + 1)), coordinator.Acc(coordinator.Accessor{Buffer: buf, Mode: mode, NoInit: tc.noInit})}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			sp := takeSpans()
			if len(sp) != n {
				t.Fatalf("%d kernels ran, want %d", len(sp), n)
			}
			for i, s := range sp {
				if s.id != uint64(i+1) {
					t.Fatalf("kernel %d ran as number %d; want submission order", s.id, i+1)
				}
				if i > 0 && s.start.Before(sp[i-1].end) {
					t.Errorf("kernel %d started %v before kernel %d ended", s.id, sp[i-1].end.Sub(s.start), sp[i-1].id)
				}
			}
			if !tc.noInit {
				got, err := j.Read(ctx, buf, coordinator.Dims{}, coordinator.Dims{})
				if err != nil {
					t.Fatal(err)
				}
				want := uint32(1)
				for i := range n {
					want = want*2 + uint32(i+1)
				}
				if v := binary.LittleEndian.Uint32(got); v != want {
					t.Errorf("chain result %d, want %d", v, want)
				}
			}
		})
	}

	t.Run("independent overlap", func(t *testing.T) {
		j := openJob(t, c, nil)
		for i, d := range devs {
			b, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_barrier", Range: coordinator.Dims{1, 1, 1}, Device: d,
				Args: []coordinator.Arg{coordinator.ScalarU64(uint64(i/3 + 1000)), coordinator.ScalarU64(3),
					coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, NoInit: true})}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Wait(ctx); err != nil {
			t.Fatalf("three independent groups on three nodes did not all run at once: %v", err)
		}
	})
}

// A group is placed where its data is (bytes that would move), and never
// on a device without the kernel.
func TestPlacementFollowsData_C2_C3(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	const n = 1 << 14
	x, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	y, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, n}, ElemSize: 4})
	for _, b := range []*coordinator.Buffer{x, y} {
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, n}, Device: "n2/cpu:0",
			Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, NoInit: true}), coordinator.ScalarF32(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := j.Stats().Placed["n2/cpu:0"]
	for range 4 {
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "saxpy", Range: coordinator.Dims{1, 1, n},
			Args: []coordinator.Arg{coordinator.ScalarF32(2), coordinator.Acc(coordinator.Accessor{Buffer: x, Mode: coordinator.Read}),
				coordinator.Acc(coordinator.Accessor{Buffer: y, Mode: coordinator.ReadWrite})}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := j.Stats().Placed["n2/cpu:0"] - before; got != 4 {
		t.Errorf("%d of 4 saxpy groups placed on n2, where x and y are; placed: %v", got, j.Stats().Placed)
	}
	if got := c.PeerBytes(); got != 0 {
		t.Errorf("bytes between nodes = %d, want 0 (everything stays on n2)", got)
	}
	_, err := j.Submit(ctx, coordinator.Group{Kernel: "test_ptx_only", Range: coordinator.Dims{1, 1, 1}})
	if !errors.Is(err, coordinator.ErrNoDevice) {
		t.Errorf("Submit of a PTX-only kernel to CPU nodes = %v, want ErrNoDevice", err)
	}
}

// Placement learns kernel durations (dmda): with the device that holds the
// data busy for longer than moving the data takes, a group goes to an idle
// device instead.
func TestPlacementUsesLearntDurations(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	sleep := func(b *coordinator.Buffer, mode coordinator.Mode, dev string) {
		t.Helper()
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_sleep", Range: coordinator.Dims{1, 1, 1}, Device: dev,
			Args: []coordinator.Arg{coordinator.ScalarU64(1), coordinator.ScalarU64(150), coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: mode})}}); err != nil {
			t.Fatal(err)
		}
	}
	// Learn test_sleep's duration on both devices.
	for _, d := range []string{"n0/cpu:0", "n1/cpu:0"} {
		b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
		sleep(b, coordinator.Write, d)
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	data, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
	busy, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
	fill(t, j, data, 1, 1, "n0/cpu:0")
	sleep(busy, coordinator.Write, "n0/cpu:0") // n0 is busy for ~150 ms
	before := j.Stats().Placed["n1/cpu:0"]
	sleep(data, coordinator.Read, "") // its 4 bytes are on n0; n1 is idle
	if got := j.Stats().Placed["n1/cpu:0"] - before; got != 1 {
		t.Errorf("the group went to the busy device n0 (placed %v); want n1, idle, with 4 bytes to move", j.Stats().Placed)
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// Two groups writing disjoint halves of a brand-new buffer on one device
// run at the same time (D1, D4): the second lists the allocation the first
// creates and waits for its alloc instruction only, not for the first
// group; the node makes the allocation once.
func TestFreshBufferDisjointWriters_D1_D4(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	b, err := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 2}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		// test_barrier returns once both launches have arrived (and fails
		// the launch after 20 s otherwise): it passes only if they overlap.
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_barrier", Range: coordinator.Dims{1, 1, 1}, Device: "n0/cpu:0",
			Args: []coordinator.Arg{coordinator.ScalarU64(2001), coordinator.ScalarU64(2),
				coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, NoInit: true,
					Offset: coordinator.Dims{0, 0, i}, Range: coordinator.Dims{1, 1, 1}})}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatalf("two writers of disjoint halves of a new buffer did not run at once: %v", err)
	}
}
