package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/examples/custom-node/poly"
)

// The program runs embedded and computes y = a·x² + y with the Go form of
// custom.poly (integration/custom_node_test.go runs it on custom nodes).
func TestPolyEmbedded(t *testing.T) {
	q, err := acpp.NewQueue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ys, err := poly.Run(context.Background(), q, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, y := range ys {
		x := float32(i%97) / 97
		want := float32(i % 13)
		for s := range 2 {
			a := float32(s+1) * 0.5
			want = float32(float32(a*x)*x) + want
		}
		if y != want {
			t.Fatalf("y[%d] = %v, want %v", i, y, want)
		}
	}
}

// The program as its README runs it: the embedded run prints the crc32 of
// y; flags it cannot honour fail with a message instead of a panic (-n -5
// panicked in make) or a silent no-op (-steps -1 ran nothing and printed
// the initial y).
func TestCustomNodeProgramFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-n", "1000", "-steps", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "custom.poly: 1000 elements, 2 steps, crc32 ") {
		t.Errorf("output %q, want the run's summary", out.String())
	}
	for _, args := range [][]string{{"-n", "-5"}, {"-n", "0"}, {"-n", "1"}, {"-steps", "-1"}, {"extra"}} {
		out.Reset()
		if err := run(context.Background(), args, &out); err == nil {
			t.Errorf("run(%q) = nil (output %q), want an error", args, out.String())
		}
	}
	q, err := acpp.NewQueue(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := poly.Run(context.Background(), q, -5, 1); err == nil {
		t.Error("poly.Run(n = -5) = nil error")
	}
	if _, err := poly.Run(context.Background(), q, 10, -1); err == nil {
		t.Error("poly.Run(steps = -1) = nil error")
	}
}
