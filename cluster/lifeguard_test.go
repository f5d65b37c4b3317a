package cluster

import (
	"testing"
	"time"
)

// TestPresetsKeepLifeguard: both presets run memberlist with Lifeguard's
// local health awareness on (a member that misses acks or has to refute a
// suspicion backs its own probes off, up to 8× the interval and timeout,
// instead of accusing healthy peers) and with indirect probes (the nacks
// that feed it), and pass the suspicion settings through unchanged:
// memberlist scales the suspicion time by log10 of the member count and
// shortens it as independent confirmations arrive. docs/OPERATIONS.md,
// "Membership at scale", says where each preset stops being safe.
func TestPresetsKeepLifeguard(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"lan", DefaultLANConfig()}, {"local", DefaultLocalConfig()}} {
		cfg := tc.cfg
		cfg.Name, cfg.InsecureNoEncryption = "n0", true
		c := &Cluster{cfg: cfg.withDefaults()}
		mlc, err := c.memberlistConfig()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tm := cfg.Timing
		if mlc.AwarenessMaxMultiplier != 8 {
			t.Errorf("%s: AwarenessMaxMultiplier = %d, want 8 (Lifeguard awareness on)", tc.name, mlc.AwarenessMaxMultiplier)
		}
		if mlc.IndirectChecks < 1 {
			t.Errorf("%s: IndirectChecks = %d: no nacks, no awareness", tc.name, mlc.IndirectChecks)
		}
		if mlc.SuspicionMult != tm.SuspicionMult || mlc.SuspicionMaxTimeoutMult != tm.SuspicionMaxTimeoutMult ||
			mlc.ProbeInterval != tm.ProbeInterval || mlc.ProbeTimeout != tm.ProbeTimeout {
			t.Errorf("%s: memberlist suspicion/probe settings %d/%d/%v/%v, preset %d/%d/%v/%v", tc.name,
				mlc.SuspicionMult, mlc.SuspicionMaxTimeoutMult, mlc.ProbeInterval, mlc.ProbeTimeout,
				tm.SuspicionMult, tm.SuspicionMaxTimeoutMult, tm.ProbeInterval, tm.ProbeTimeout)
		}
		if mlc.ProbeTimeout >= mlc.ProbeInterval {
			t.Errorf("%s: ProbeTimeout %v ≥ ProbeInterval %v leaves no time for indirect probes", tc.name, mlc.ProbeTimeout, mlc.ProbeInterval)
		}
	}
	// The failure-detection bound grows with the member count (the
	// suspicion's log10 scaling and the probe round).
	local := DefaultLocalConfig()
	if a, b := local.FailureDetectionTimeout(16), local.FailureDetectionTimeout(64); b <= a || b < 10*time.Second {
		t.Errorf("local FailureDetectionTimeout(16, 64) = %v, %v: want growth with the member count", a, b)
	}
}
