package coordinator_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// Bad input gets an error that names what is wrong; the job goes on.
func TestInvalidInputRefused(t *testing.T) {
	c := coordtest.Start(t, 1, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	other := openJob(t, c, nil)
	b, err := j.NewBuffer(coordinator.BufferSpec{Name: "b", Range: coordinator.Dims{1, 1, 16}, ElemSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 16}, ElemSize: 4})
	acc := func(a coordinator.Accessor) coordinator.Arg { return coordinator.Acc(a) }
	r16 := coordinator.Dims{1, 1, 16}
	tests := []struct {
		name string
		g    coordinator.Group
		is   error
		want string
	}{
		{"no kernel", coordinator.Group{Range: r16}, coordinator.ErrInvalid, "Kernel is empty"},
		{"zero range", coordinator.Group{Kernel: "empty"}, coordinator.ErrInvalid, "must be ≥ 1"},
		{"range not a multiple of the group", coordinator.Group{Kernel: "empty", Range: r16, Local: coordinator.Dims{1, 1, 5}}, coordinator.ErrInvalid, "multiple of the work-group size"},
		{"wrong argument count", coordinator.Group{Kernel: "saxpy", Range: r16}, coordinator.ErrInvalid, "takes 3 arguments, got 0"},
		{"foreign buffer", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{acc(coordinator.Accessor{Buffer: foreign, Mode: coordinator.Write}), coordinator.ScalarF32(1)}}, coordinator.ErrInvalid, "not a buffer of this job"},
		{"read-only no_init", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Read, NoInit: true}), coordinator.ScalarF32(1)}}, coordinator.ErrInvalid, "cannot be NoInit"},
		{"accessor outside the buffer", coordinator.Group{Kernel: "fill_f32", Range: r16, Args: []coordinator.Arg{acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, Offset: coordinator.Dims{0, 0, 8}, Range: coordinator.Dims{1, 1, 16}}), coordinator.ScalarF32(1)}}, coordinator.ErrInvalid, "range outside the buffer"},
		{"negative split borders", coordinator.Group{Kernel: "empty", Range: r16, Split: &coordinator.Split{Borders: -1}}, coordinator.ErrInvalid, "Split.Borders -1 is negative"},
		{"bad split dimension", coordinator.Group{Kernel: "empty", Range: r16, Split: &coordinator.Split{Along: 7}}, coordinator.ErrInvalid, "Split.Along 7"},
		{"range mapper gives a negative range", coordinator.Group{Kernel: "fill_f32", Range: r16, Split: &coordinator.Split{}, Args: []coordinator.Arg{acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, Map: coordinator.MapFunc(func(c coordinator.Chunk, _ coordinator.Dims) (coordinator.Dims, coordinator.Dims) {
			return c.Offset, coordinator.Dims{1, 1, -1}
		})}), coordinator.ScalarF32(1)}}, coordinator.ErrInvalid, "range mapper gave a negative range"},
		{"split without a mapper", coordinator.Group{Kernel: "fill_f32", Range: r16, Split: &coordinator.Split{}, Args: []coordinator.Arg{acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write}), coordinator.ScalarF32(1)}}, coordinator.ErrInvalid, "no range mapper"},
		{"unknown device", coordinator.Group{Kernel: "empty", Range: r16, Device: "n9/cpu:0"}, coordinator.ErrNoDevice, `"n9/cpu:0" is not a device of this job`},
		{"unknown split device", coordinator.Group{Kernel: "empty", Range: r16, Split: &coordinator.Split{Devices: []string{"n0/cuda:0"}}}, coordinator.ErrNoDevice, "not a device of this job"},
		{"empty argument", coordinator.Group{Kernel: "spin", Range: r16, Args: []coordinator.Arg{{}}}, coordinator.ErrInvalid, "argument 0 is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := j.Submit(ctx, tt.g)
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Submit() = %v, want %v mentioning %q", err, tt.is, tt.want)
			}
		})
	}
	for _, spec := range []coordinator.BufferSpec{
		{Range: coordinator.Dims{1, 0, 4}, ElemSize: 4},
		{Range: coordinator.Dims{1, 1, 4}, ElemSize: 0},
		{Range: coordinator.Dims{1, 1, 4}, ElemSize: 4, Init: make([]byte, 3)},
	} {
		if _, err := j.NewBuffer(spec); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("NewBuffer(%+v) = %v, want ErrInvalid", spec, err)
		}
	}
	if _, err := j.Read(ctx, b, coordinator.Dims{0, 0, 10}, coordinator.Dims{1, 1, 10}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("Read outside the buffer = %v, want ErrInvalid", err)
	}
	if err := j.Err(); err != nil {
		t.Errorf("the job failed after bad input: %v", err)
	}
	if _, err := coordinator.Open(ctx, coordinator.Config{Nodes: c.Addrs(), Client: c.Client(), Devices: coordinator.DeviceFilter{Kinds: []string{"cuda"}}}); !errors.Is(err, coordinator.ErrNoDevice) || !strings.Contains(err.Error(), "n0/cpu:0") {
		t.Errorf("Open with a filter that selects nothing = %v, want ErrNoDevice listing the devices", err)
	}
}

// Without data to follow, unpinned groups spread over the devices (fewest
// unfinished groups first, then learnt durations: StarPU's dmda).
func TestPlacementSpreadsLoad(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	for i := range 3 {
		b, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, 1, 1}, ElemSize: 4})
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_barrier", Range: coordinator.Dims{1, 1, 1},
			Args: []coordinator.Arg{coordinator.ScalarU64(2000), coordinator.ScalarU64(3), coordinator.Acc(coordinator.Accessor{Buffer: b, Mode: coordinator.Write, NoInit: true})}}); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	if err := j.Wait(ctx); err != nil {
		t.Fatalf("three independent unpinned groups did not run on three devices at once: %v", err)
	}
	for _, d := range []string{"n0/cpu:0", "n1/cpu:0", "n2/cpu:0"} {
		if got := j.Stats().Placed[d]; got != 1 {
			t.Errorf("%s got %d groups, want 1 (%v)", d, got, j.Stats().Placed)
		}
	}
}
