package cluster_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: ours, or
// memberlist's (which end within Timing.TCPTimeout after Close). A probe
// that memberlist started just before Close waits for its ack until the
// probe interval (1 s) has passed, longer than goleak's retries (about
// 0.4 s): that one is ignored (it failed CI once in session 3). When the
// binary runs as a child of TestMultiProcessConverge it is a member
// instead.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(childMain(name))
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}
