package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestReductionExample_A3(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-n", "65536", "-group", "64"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "sum 2147450880: ok") {
		t.Fatalf("output %q", out.String())
	}
	if err := run(context.Background(), []string{"-group", "100"}, &out); err == nil {
		t.Fatal("-group 100 accepted")
	}
}
