package embedded

import (
	"context"
	"testing"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/internal/exec"
)

// TestIssueAheadOnlyWithOneInOrderDevice: the embedded engine issues
// groups ahead when its devices include one with in-order queues, not
// when they include several (a Jacobi split over two H100s lost 15–25 %
// an iteration with it; issueAheadFor), unless ACPP_ISSUE_AHEAD=1 asks
// for it; ACPP_ISSUE_AHEAD=0 turns it off with one.
func TestIssueAheadOnlyWithOneInOrderDevice(t *testing.T) {
	for _, c := range []struct {
		name    string
		fakes   int
		env     string
		inOrder bool
		want    bool
	}{
		{"one in-order device", 1, "", true, true},
		{"one, turned off", 1, "0", true, false},
		{"two in-order devices", 2, "", true, false},
		{"two, asked for", 2, "1", true, true},
		{"devices without in-order queues", 2, "", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(exec.IssueAheadEnv, c.env)
			var devs []device.Device
			for i := range c.fakes {
				f := devicetest.NewFake(devicetest.FakeConfig{Index: i, InOrder: c.inOrder})
				defer f.Close()
				devs = append(devs, f)
			}
			e, err := Open[struct{}](context.Background(), Config{Devices: devs, Kinds: []device.Kind{device.KindFake}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			if got := e.rt.IssuesAhead(); got != c.want {
				t.Errorf("issue-ahead on = %v, want %v", got, c.want)
			}
		})
	}
}
