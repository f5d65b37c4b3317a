package cluster_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
)

func validConfig() cluster.Config {
	cfg := cluster.DefaultLocalConfig()
	cfg.Name = "n1"
	cfg.GossipKeys = [][]byte{[]byte("0123456789abcdef")}
	return cfg
}

// TestConfigValidate: each bad field is named with its bound.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *cluster.Config)
		want string // "" = valid
	}{
		{"valid local", func(c *cluster.Config) {}, ""},
		{"valid lan", func(c *cluster.Config) { t := cluster.DefaultLANConfig().Timing; c.Timing = t; c.BindPort = 7946 }, ""},
		{"zero timing means LAN defaults", func(c *cluster.Config) { c.Timing = cluster.Timing{} }, ""},
		{"insecure", func(c *cluster.Config) { c.GossipKeys = nil; c.InsecureNoEncryption = true }, ""},
		{"name too long", func(c *cluster.Config) { c.Name = strings.Repeat("x", 129) }, "Name"},
		{"name control char", func(c *cluster.Config) { c.Name = "a\tb" }, "control character"},
		{"cluster name too long", func(c *cluster.Config) { c.ClusterName = strings.Repeat("x", 256) }, "ClusterName is 256 bytes"},
		{"bind addr", func(c *cluster.Config) { c.BindAddr = "localhost" }, "BindAddr \"localhost\" is not an IP"},
		{"bind port", func(c *cluster.Config) { c.BindPort = 70000 }, "BindPort 70000"},
		{"advertise addr", func(c *cluster.Config) { c.AdvertiseAddr = "0.0.0.0" }, "AdvertiseAddr \"0.0.0.0\" is unspecified"},
		{"advertise port without bind port", func(c *cluster.Config) { c.AdvertisePort = 9000 }, "needs a fixed BindPort"},
		{"quic addr", func(c *cluster.Config) { c.QUICAddr = "10.0.0.1" }, "QUICAddr"},
		{"quic port 0", func(c *cluster.Config) { c.QUICAddr = "10.0.0.1:0" }, "port \"0\""},
		{"devices unsorted", func(c *cluster.Config) {
			c.Devices = []cluster.DeviceSummary{{Kind: cluster.DeviceCUDA, Count: 1}, {Kind: cluster.DeviceCPU, Count: 1}}
		}, "sorted by kind"},
		{"no key", func(c *cluster.Config) { c.GossipKeys = nil }, "encryption is required"},
		{"key and insecure", func(c *cluster.Config) { c.InsecureNoEncryption = true }, "drop one"},
		{"short key", func(c *cluster.Config) { c.GossipKeys = [][]byte{[]byte("short")} }, "GossipKeys[0]: key is 5 bytes"},
		{"repeated key", func(c *cluster.Config) { c.GossipKeys = append(c.GossipKeys, c.GossipKeys[0]) }, "GossipKeys[1] repeats"},
		{"empty join", func(c *cluster.Config) { c.Join = []string{""} }, "Join[0] is empty"},
		{"negative event buffer", func(c *cluster.Config) { c.EventBuffer = -1 }, "EventBuffer -1"},
		{"negative timing", func(c *cluster.Config) { c.Timing.ProbeInterval = -time.Second }, "Timing.ProbeInterval -1s"},
		{"probe timeout above interval", func(c *cluster.Config) { c.Timing.ProbeTimeout = time.Hour }, "must not exceed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			tc.mod(&cfg)
			err := cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, cluster.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig saying %q", err, tc.want)
			}
		})
	}
}

// TestConfigValidateReportsAll: every bad field is reported at once.
func TestConfigValidateReportsAll(t *testing.T) {
	cfg := validConfig()
	cfg.BindPort = -1
	cfg.GossipKeys = nil
	cfg.QUICAddr = "x"
	cfg.Timing.GossipNodes = -2
	err := cfg.Validate()
	for _, want := range []string{"BindPort -1", "GossipKeys is empty", "QUICAddr", "Timing.GossipNodes -2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

// TestFailureDetectionTimeout_C5: the bound grows with probe interval,
// suspicion and cluster size, and the local preset is much faster than
// the LAN one.
func TestFailureDetectionTimeout_C5(t *testing.T) {
	lan, local := cluster.DefaultLANConfig(), cluster.DefaultLocalConfig()
	for _, tc := range []struct {
		name string
		cfg  cluster.Config
		n    int
		want time.Duration
	}{
		// 2 probe rounds + 1 interval + suspicion 4s (too few peers to
		// confirm: the minimum) + 3 gossip rounds.
		{"lan 3", lan, 3, 3*time.Second + 4*time.Second + 600*time.Millisecond},
		// 9 intervals + 1 + 4s×log10(10)×6 (waits for confirmations) + 0.6s.
		{"lan 10", lan, 10, 10*time.Second + 24*time.Second + 600*time.Millisecond},
		{"local 3", local, 3, 600*time.Millisecond + 2400*time.Millisecond + 90*time.Millisecond},
		{"zero config is lan", cluster.Config{}, 3, 3*time.Second + 4*time.Second + 600*time.Millisecond},
	} {
		if got := tc.cfg.FailureDetectionTimeout(tc.n); got != tc.want {
			t.Errorf("%s: FailureDetectionTimeout(%d) = %v, want %v", tc.name, tc.n, got, tc.want)
		}
	}
}
