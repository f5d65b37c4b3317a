package cluster_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: ours, or
// memberlist's (which end within Timing.TCPTimeout after Close).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
