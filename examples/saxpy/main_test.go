package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSaxpyExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-n", "100000"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ok") {
		t.Fatalf("output %q", out.String())
	}
	// The named kernel computes the same values (run checks each element).
	out.Reset()
	if err := run(context.Background(), []string{"-n", "100000", "-kernel", "named"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "saxpy (named)") || !strings.Contains(out.String(), "ok") {
		t.Fatalf("output %q", out.String())
	}
	if err := run(context.Background(), []string{"-kernel", "lambda"}, &out); err == nil || !strings.Contains(err.Error(), "closure or named") {
		t.Fatalf("-kernel lambda: %v", err)
	}
	if err := run(context.Background(), []string{"-n", "0"}, &out); err == nil {
		t.Fatal("-n 0 accepted")
	}
	// An a that is no finite float32 is refused up front (it failed the
	// element check with "y[0] = NaN, want NaN").
	for _, a := range []string{"NaN", "Inf", "1e39"} {
		if err := run(context.Background(), []string{"-n", "10", "-a", a}, &out); err == nil || !strings.Contains(err.Error(), "finite") {
			t.Errorf("-a %s: %v, want refused as not finite", a, err)
		}
	}
}
