package main

import (
	"context"
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
