package acpp

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The cluster tests' nodes (connect_test.go): memberlist's TCP
		// handlers end within its TCP timeout after Close.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).streamListen"),
		// A probe started just before Close waits out the probe interval.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

func newQueue(t testing.TB, opts ...Option) *Queue {
	t.Helper()
	q, err := NewQueue(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return q
}

// must returns v, panicking (and so failing the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
