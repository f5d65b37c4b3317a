package nodecmd

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestSettingsPrecedence(t *testing.T) {
	file := []byte("name: from-file\njoin: [10.0.0.1:7946]\nmax_bytes: 8GiB\njob_lease: 1m\ncpu_workers: 3\n")
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		file  []byte
		check func(s settings) string
	}{
		{"defaults", nil, nil, nil, func(s settings) string {
			if s.GossipAddr != "0.0.0.0:7946" || s.QUICAddr != "0.0.0.0:7947" || s.JobLease != "30s" || s.Timing != "lan" {
				return "defaults not applied"
			}
			return ""
		}},
		{"file", nil, nil, file, func(s settings) string {
			if s.Name != "from-file" || !slices.Equal(s.Join, []string{"10.0.0.1:7946"}) || s.MaxBytes != "8GiB" || s.CPUWorkers != 3 {
				return "file values not applied"
			}
			return ""
		}},
		{"env over file", nil, map[string]string{"ACPP_NAME": "from-env", "ACPP_JOIN": "a:1,b:2", "ACPP_CPU_WORKERS": "5"}, file, func(s settings) string {
			if s.Name != "from-env" || !slices.Equal(s.Join, []string{"a:1", "b:2"}) || s.CPUWorkers != 5 || s.JobLease != "1m" {
				return "env did not override the file"
			}
			return ""
		}},
		{"flag over env", []string{"--name", "from-flag", "--join", "c:3", "--join", "d:4"}, map[string]string{"ACPP_NAME": "from-env"}, file, func(s settings) string {
			if s.Name != "from-flag" || !slices.Equal(s.Join, []string{"c:3", "d:4"}) {
				return "flags did not override env"
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var flags settings
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			addFlags(fs, &flags)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			s, err := resolve(fs, &flags, tt.file, func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(s); msg != "" {
				t.Errorf("%s: got %+v", msg, s)
			}
		})
	}
}

func TestSettingsErrorsNameEveryBadField(t *testing.T) {
	s := defaultSettings()
	s.Name, s.MaxBytes, s.JobLease, s.Timing, s.Devices, s.ReportGather = "n1", "lots", "-1s", "wan", "gpu", "1s"
	_, err := s.nodeConfig(nil)
	if err == nil {
		t.Fatal("nodeConfig accepted bad settings")
	}
	for _, want := range []string{"max-bytes", "job-lease", "timing", "Devices", "report-gather"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	s = defaultSettings()
	s.Name, s.MaxJobBytes, s.DrainTimeout = "n1", "512MiB", "3s"
	cfg, err := s.nodeConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxJobBytes != 512<<20 || cfg.DrainTimeout != 3*time.Second {
		t.Errorf("nodeConfig = MaxJobBytes %d, DrainTimeout %v", cfg.MaxJobBytes, cfg.DrainTimeout)
	}
	// --report-gather: the default, a value, and 0 (each completion at
	// once: negative in node.Config, whose 0 is the default).
	for in, want := range map[string]time.Duration{"200us": 200 * time.Microsecond, "2ms": 2 * time.Millisecond, "0": -1} {
		s.ReportGather = in
		if cfg, err := s.nodeConfig(nil); err != nil || cfg.ReportGather != want {
			t.Errorf("--report-gather %s: ReportGather %v (%v), want %v", in, cfg.ReportGather, err, want)
		}
	}
}

// TestMaxBytesSetting_B5: --max-bytes defaults to auto (the default
// budgets, not "unlimited"); a size, a share and 0 (no budget) map to the
// node's config; anything else is an error that names the forms.
func TestMaxBytesSetting_B5(t *testing.T) {
	if d := defaultSettings().MaxBytes; d != "auto" {
		t.Errorf("default --max-bytes = %q, want auto", d)
	}
	for _, tt := range []struct {
		in    string
		bytes uint64
		share float64
		off   bool
		err   string
	}{
		{in: "auto"}, {in: "64GiB", bytes: 64 << 30}, {in: "50%", share: 0.5}, {in: "100%", share: 1}, {in: "0", off: true},
		{in: "150%", err: "percentage"}, {in: "0%", err: "percentage"}, {in: "lots", err: "a share like 50%"},
	} {
		s := defaultSettings()
		s.Name, s.MaxBytes = "n1", tt.in
		cfg, err := s.nodeConfig(nil)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "max-bytes") {
				t.Errorf("--max-bytes %s: error %v, want one naming max-bytes and %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || cfg.MaxBytes != tt.bytes || cfg.MemoryShare != tt.share || cfg.NoMemoryBudget != tt.off {
			t.Errorf("--max-bytes %s: MaxBytes %d, MemoryShare %v, NoMemoryBudget %v, %v; want %d, %v, %v",
				tt.in, cfg.MaxBytes, cfg.MemoryShare, cfg.NoMemoryBudget, err, tt.bytes, tt.share, tt.off)
		}
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"0", 0, false}, {"4096", 4096, false}, {"512MiB", 512 << 20, false}, {"64GiB", 64 << 30, false},
		{"2 GB", 2e9, false}, {"1TiB", 1 << 40, false}, {"12B", 12, false},
		{"", 0, true}, {"-1", 0, true}, {"1.5GiB", 0, true}, {"99999999999999TiB", 0, true}, {"GiB", 0, true},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// FuzzConfigFile: any config file is either accepted or refused with an
// error; never a panic.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("name: n1\ngossip_addr: 127.0.0.1:7946\njoin: [a:1]\n"))
	f.Add([]byte("max_bytes: 8GiB\njob_lease: 1m\ncpu_workers: 2\ntiming: local\n"))
	f.Add([]byte("unknown_key: 1\n"))
	f.Add([]byte("join: {a: b}\n"))
	f.Add([]byte("- [\n"))
	f.Fuzz(func(t *testing.T, file []byte) {
		var flags settings
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		addFlags(fs, &flags)
		s, err := resolve(fs, &flags, file, func(string) string { return "" })
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := s.nodeConfig(nil); err != nil {
			buf.WriteString(err.Error())
		}
	})
}

// TestJoinRetry: nodes of a cluster may be started in any order, so by
// default a node keeps retrying --join for a while instead of exiting when
// its seed is not up yet; 0 turns that off and a bad value is named.
func TestJoinRetry(t *testing.T) {
	s := defaultSettings()
	s.Name = "n1"
	cfg, err := s.nodeConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.JoinRetry != 60*time.Second {
		t.Errorf("default JoinRetry = %v, want 60s", cfg.Cluster.JoinRetry)
	}
	s.JoinRetry = "0"
	if cfg, err = s.nodeConfig(nil); err != nil || cfg.Cluster.JoinRetry != 0 {
		t.Errorf("join-retry 0: JoinRetry %v, err %v; want 0, nil", cfg.Cluster.JoinRetry, err)
	}
	s.JoinRetry = "soon"
	if _, err = s.nodeConfig(nil); err == nil || !strings.Contains(err.Error(), "join-retry") {
		t.Errorf("join-retry soon: err %v, want one naming join-retry", err)
	}
}
