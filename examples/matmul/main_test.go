package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMatmulExample_A3(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-n", "48", "-tile", "8"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ok") {
		t.Fatalf("output %q", out.String())
	}
	if err := run(context.Background(), []string{"-n", "50", "-tile", "8"}, &out); err == nil {
		t.Fatal("-n not a multiple of -tile accepted")
	}
}
