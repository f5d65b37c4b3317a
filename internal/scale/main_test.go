package scale

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/internal/nodeproc"
)

func TestMain(m *testing.M) {
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	goleak.VerifyTestMain(cleanup{m},
		// In-process nodes (BenchmarkSubmitCPU), as in the coordinator's
		// tests: memberlist's TCP handlers end within its TCP timeout
		// after Close, and a probe started just before Close waits out the
		// probe interval.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).streamListen"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

type cleanup struct{ m *testing.M }

func (c cleanup) Run() int {
	code := c.m.Run()
	nodeproc.Cleanup()
	return code
}
