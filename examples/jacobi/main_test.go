package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestJacobiExample_L2(t *testing.T) {
	for _, args := range [][]string{{"-n", "64", "-iters", "10", "-blocks", "4"}, {"-n", "35", "-iters", "7", "-blocks", "3"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(out.String(), "bytes copied host↔CPU 0: ok") {
			t.Fatalf("%v: output %q", args, out.String())
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-n", "2"}, &out); err == nil {
		t.Fatal("-n 2 accepted")
	}
}
