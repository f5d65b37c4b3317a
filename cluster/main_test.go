package cluster_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: ours, or
// memberlist's (which end within Timing.TCPTimeout after Close). When the
// binary runs as a child of TestMultiProcessConverge it is a member
// instead.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(childMain(name))
	}
	goleak.VerifyTestMain(m)
}
