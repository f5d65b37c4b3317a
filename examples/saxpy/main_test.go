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
	if err := run(context.Background(), []string{"-n", "0"}, &out); err == nil {
		t.Fatal("-n 0 accepted")
	}
}
