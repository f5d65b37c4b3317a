package nodecmd

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// lookup is os.LookupEnv over env.
func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

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
			s, err := resolve(fs, &flags, tt.file, lookup(tt.env))
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
	for _, want := range []string{"max-bytes", "job-lease", "timing", `devices: "gpu"`, "report-gather"} {
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

// TestParseBytesErrorQuotesTheInput: a size refused is quoted as given,
// unit and all ("10PiB" was quoted "10Pi", its B taken for bytes).
func TestParseBytesErrorQuotesTheInput(t *testing.T) {
	for in, want := range map[string]string{
		"10PiB":      `size "10PiB": want bytes with an optional unit (KiB`,
		"1.5 GiB":    `size "1.5 GiB": want bytes`,
		"20000000TB": `size "20000000TB" overflows`,
	} {
		if _, err := parseBytes(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseBytes(%q): error %v, want %q", in, err, want)
		}
	}
	s := defaultSettings()
	s.Name, s.MaxJobBytes = "n1", "10PiB"
	if _, err := s.nodeConfig(nil); err == nil || !strings.Contains(err.Error(), `max-job-bytes: size "10PiB"`) {
		t.Errorf("--max-job-bytes 10PiB: error %v", err)
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
		s, err := resolve(fs, &flags, file, lookup(nil))
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

// resolveArgs resolves settings from flags, an environment and a file.
func resolveArgs(t *testing.T, args []string, env map[string]string, file string) settings {
	t.Helper()
	var flags settings
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	addFlags(fs, &flags)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	s, err := resolve(fs, &flags, []byte(file), lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSetButEmptyMeansEmpty: where an empty value means something
// (http-addr: no HTTP endpoint; join: nobody), an ACPP_* variable set to ""
// and a config key set to "" or [] override what is below them, as the
// flag does; for the other settings an empty variable is ignored.
func TestSetButEmptyMeansEmpty(t *testing.T) {
	file := "http_addr: 127.0.0.1:9999\njoin: [10.0.0.1:7946]\n"
	for _, tt := range []struct {
		name  string
		args  []string
		env   map[string]string
		file  string
		check func(s settings) bool
	}{
		{"flag", []string{"--http-addr", ""}, nil, "", func(s settings) bool { return s.HTTPAddr == "" }},
		{"env", nil, map[string]string{"ACPP_HTTP_ADDR": ""}, "", func(s settings) bool { return s.HTTPAddr == "" }},
		{"env over file", nil, map[string]string{"ACPP_HTTP_ADDR": ""}, file, func(s settings) bool { return s.HTTPAddr == "" }},
		{"file", nil, nil, "http_addr: \"\"\n", func(s settings) bool { return s.HTTPAddr == "" }},
		{"file null", nil, nil, "http_addr:\n", func(s settings) bool { return s.HTTPAddr == "" }},
		{"unset env keeps file", nil, nil, file, func(s settings) bool { return s.HTTPAddr == "127.0.0.1:9999" }},
		{"join env over file", nil, map[string]string{"ACPP_JOIN": ""}, file, func(s settings) bool { return len(s.Join) == 0 }},
		{"join file empty", nil, nil, "join: []\n", func(s settings) bool { return len(s.Join) == 0 }},
		{"empty lease env ignored", nil, map[string]string{"ACPP_JOB_LEASE": "", "ACPP_LOG_LEVEL": ""}, "job_lease: 1m\n", func(s settings) bool { return s.JobLease == "1m" && s.LogLevel == "info" }},
		{"empty lease key ignored", nil, nil, "job_lease: \"\"\n", func(s settings) bool { return s.JobLease == "30s" }},
		{"cpu_workers 0 in file", nil, map[string]string{}, "cpu_workers: 0\n", func(s settings) bool { return s.CPUWorkers == 0 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := resolveArgs(t, tt.args, tt.env, tt.file)
			if !tt.check(s) {
				t.Errorf("args %q, env %q, file %q: got http_addr %q, join %q, job_lease %q, log_level %q", tt.args, tt.env, tt.file, s.HTTPAddr, s.Join, s.JobLease, s.LogLevel)
			}
			// And the node gets no HTTP endpoint from an empty one.
			if s.HTTPAddr == "" {
				s.Name = "n1"
				if cfg, err := s.nodeConfig(nil); err != nil || cfg.HTTPAddr != "" {
					t.Errorf("nodeConfig: HTTPAddr %q, %v; want none", cfg.HTTPAddr, err)
				}
			}
		})
	}
}

// TestListSettingsTrimmed: comma-separated lists may have spaces after
// the commas and a trailing comma (ACPP_JOIN, and the --join flag and the
// file's list alike).
func TestListSettingsTrimmed(t *testing.T) {
	want := []string{"127.0.0.1:7999", "127.0.0.1:7946"}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		file string
	}{
		{"env", nil, map[string]string{"ACPP_JOIN": " 127.0.0.1:7999, 127.0.0.1:7946, "}, ""},
		{"flags", []string{"--join", " 127.0.0.1:7999", "--join", "", "--join", "127.0.0.1:7946 "}, nil, ""},
		{"file", nil, nil, "join: [' 127.0.0.1:7999', '127.0.0.1:7946', '']\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := resolveArgs(t, tt.args, tt.env, tt.file)
			if !slices.Equal(s.Join, want) {
				t.Fatalf("join = %q, want %q", s.Join, want)
			}
			s.Name, s.Devices = "n1", " cpu, "
			if cfg, err := s.nodeConfig(nil); err != nil || !slices.Equal(cfg.Join, want) {
				t.Errorf("nodeConfig: Join %q, %v; want %q", cfg.Join, err, want)
			}
		})
	}
}

// TestSettingErrorsNameTheFlag: a bad address or duration is named by its
// setting (what the operator typed), once, never by node.Config's or
// cluster.Config's field (AdvertiseAddr, BindAddr, MaxJobLease).
func TestSettingErrorsNameTheFlag(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(s *settings)
		want string
	}{
		{"advertise", func(s *settings) { s.AdvertiseAddr = "node7.example" }, `advertise-addr "node7.example"`},
		{"advertise unspecified", func(s *settings) { s.AdvertiseAddr = "0.0.0.0" }, `advertise-addr "0.0.0.0"`},
		{"gossip host", func(s *settings) { s.GossipAddr = "localhost:7946" }, `gossip-addr "localhost:7946"`},
		{"gossip port", func(s *settings) { s.GossipAddr = "127.0.0.1:x" }, `gossip-addr "127.0.0.1:x"`},
		{"quic", func(s *settings) { s.QUICAddr = "7947" }, `quic-addr "7947"`},
		{"http", func(s *settings) { s.HTTPAddr = "9464" }, `http-addr "9464"`},
		{"join", func(s *settings) { s.Join = []string{"10.0.0.1"} }, `join "10.0.0.1"`},
		{"job lease", func(s *settings) { s.JobLease = "-1s" }, `job-lease "-1s"`},
		{"drain timeout", func(s *settings) { s.DrainTimeout = "0" }, `drain-timeout "0"`},
		{"name", func(s *settings) { s.Name = "../x" }, `name "../x"`},
		{"devices", func(s *settings) { s.Devices = "gpu" }, `devices: "gpu"`},
		{"cpu workers", func(s *settings) { s.CPUWorkers = -1 }, `cpu-workers -1`},
		{"job bytes over budget", func(s *settings) { s.MaxBytes, s.MaxJobBytes = "1MiB", "2MiB" }, `max-job-bytes 2MiB is more than max-bytes 1MiB`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := defaultSettings()
			s.Name = "n1"
			tt.mod(&s)
			_, err := s.nodeConfig(nil)
			if err == nil {
				t.Fatal("nodeConfig accepted it")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not name %s", msg, tt.want)
			}
			if n := strings.Count(msg, "\n") + 1; n != 1 {
				t.Errorf("error has %d lines, want one:\n%s", n, msg)
			}
			for _, field := range []string{"AdvertiseAddr", "BindAddr", "GossipAddr", "QUICAddr", "HTTPAddr", "MaxJobLease", "JobLease", "DrainTimeout", "Join address",
				"Name", "Devices", "CPUWorkers", "MaxJobBytes", "MaxBytes", "invalid config"} {
				if strings.Contains(msg, field) {
					t.Errorf("error %q names the field %s, not the setting", msg, field)
				}
			}
		})
	}
}

// TestDrainTimeoutHelpSaysHandOver: --drain-timeout is first the time the
// jobs get to hand the node's pages over (OPERATIONS.md, "Stopping"), not
// only the time running instructions get.
func TestDrainTimeoutHelpSaysHandOver(t *testing.T) {
	var s settings
	for _, st := range s.table() {
		if st.flag == "drain-timeout" && !strings.Contains(st.help, "move the pages only this node holds") {
			t.Errorf("--drain-timeout help = %q; want the hand-over", st.help)
		}
	}
}

// TestConfigFileIsOneDocument: the config file's settings are read from
// one YAML document; a second one ("---", as when two files are
// concatenated) is refused instead of ignored with its unknown keys and
// its settings (OPERATIONS.md: "Unknown keys in the file are an error").
// A leading "---" and a file of comments only are fine.
func TestConfigFileIsOneDocument(t *testing.T) {
	for _, tt := range []struct {
		file, want string // want: "" accepted
	}{
		{"---\nname: n2\n---\nname: n3\nfoo: 1\n", "second YAML document at line 3"},
		{"name: n2\n...\ngarbage: [\n", "reads one document"},
		{"---\nname: n2\n", ""},
		{"# nothing yet\n", ""},
		// A file that ends with a separator (generated files do) has no
		// second document with settings.
		{"---\nname: n2\n---\n", ""},
		{"---\nname: n2\n---\n# end\n", ""},
		{"---\nname: n2\n---\n---\nname: n3\n", "second YAML document at line 4"},
	} {
		var flags settings
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		addFlags(fs, &flags)
		s, err := resolve(fs, &flags, []byte(tt.file), lookup(nil))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("config %q: %v", tt.file, err)
		case tt.want == "" && strings.HasPrefix(tt.file, "---") && s.Name != "n2":
			t.Errorf("config %q: name %q, want n2", tt.file, s.Name)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("config %q: error %v, want one with %q", tt.file, err, tt.want)
		}
	}
}

// TestDocumentedSettingDefaults: every default of docs/OPERATIONS.md's
// settings table is the code's, and turns into the node.Config it says.
func TestDocumentedSettingDefaults(t *testing.T) {
	want := settings{
		Credentials: "/etc/acpp", GossipAddr: "0.0.0.0:7946", QUICAddr: "0.0.0.0:7947", JoinRetry: "60s", Devices: "all",
		CPUWorkers: 0, HTTPAddr: "127.0.0.1:9464", UI: "true", MaxBytes: "auto", MaxJobBytes: "0", JobLease: "30s",
		DrainTimeout: "10s", ReportGather: "200us", Timing: "lan", LogLevel: "info", LogFormat: "text",
	}
	got := defaultSettings()
	if !slices.Equal(got.Join, want.Join) {
		t.Errorf("default join %v, want none", got.Join)
	}
	got.Join, want.Join = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	s := defaultSettings()
	s.Name = "n1"
	cfg, err := s.nodeConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobLease != 30*time.Second || cfg.DrainTimeout != 10*time.Second || cfg.ReportGather != 200*time.Microsecond ||
		cfg.MaxBytes != 0 || cfg.MemoryShare != 0 || cfg.NoMemoryBudget || cfg.MaxJobBytes != 0 || cfg.Cluster.JoinRetry != time.Minute {
		t.Errorf("default node.Config: lease %v, drain %v, gather %v, max bytes %d share %v off %v, job bytes %d, join retry %v",
			cfg.JobLease, cfg.DrainTimeout, cfg.ReportGather, cfg.MaxBytes, cfg.MemoryShare, cfg.NoMemoryBudget, cfg.MaxJobBytes, cfg.Cluster.JoinRetry)
	}
}

// TestReportGatherSettingBound: --report-gather takes up to 100ms, and
// not a microsecond more.
func TestReportGatherSettingBound(t *testing.T) {
	for in, ok := range map[string]bool{"100ms": true, "100001us": false, "0": true, "-1us": false} {
		s := defaultSettings()
		s.Name, s.ReportGather = "n1", in
		cfg, err := s.nodeConfig(nil)
		if ok && (err != nil || in == "100ms" && cfg.ReportGather != 100*time.Millisecond) || !ok && (err == nil || !strings.Contains(err.Error(), "report-gather")) {
			t.Errorf("--report-gather %s: ReportGather %v, error %v; want ok %v", in, cfg.ReportGather, err, ok)
		}
	}
}

// TestConfigFileKeysNamedAndTyped: a config key of the wrong type is
// refused by its line and key, every one at once (yaml's own error said
// "cannot unmarshal !!str `abc` into int" with a line only), and a number
// is not truncated to fit (cpu_workers: 2.5 ran 2 workers without a word).
// An unknown key says how keys are spelled.
func TestConfigFileKeysNamedAndTyped(t *testing.T) {
	for _, tt := range []struct {
		file string
		want []string // "": accepted
	}{
		{"cpu_workers: 2.5\n", []string{`config file line 1: cpu_workers: want a whole number, got "2.5"`}},
		{"cpu_workers: \"4\"\n", []string{`cpu_workers: want a whole number, got "4"`}},
		{"cpu_workers: abc\njoin: 10.0.0.1:7946\n", []string{`line 1: cpu_workers: want a whole number, got "abc"`,
			`line 2: join: want a list of host:port entries, like [10.0.0.1:7946, 10.0.0.2:7946], got "10.0.0.1:7946"`}},
		{"devices: [cpu, cuda:0]\n", []string{`devices: want one value, its entries comma-separated ("cpu,cuda:0"), got a list`}},
		{"ui: {on: true}\n", []string{"ui: want one value, got a mapping"}},
		{"join:\n  - [a, b]\n", []string{"line 2: join: want host:port entries, got a list"}},
		{"gossip-addr: 127.0.0.1:1\n", []string{`unknown key "gossip-addr"; write it gossip_addr`}},
		{"timming: local\n", []string{`line 1: unknown key "timming"; keys are the flag names with _ for -`}},
		{"- name: n1\n", []string{"want settings as key: value lines"}},
		{"cpu_workers: 3\nui: 1\njoin: []\nname:\n", nil},
		{"~\n", nil},
	} {
		var flags settings
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		addFlags(fs, &flags)
		s, err := resolve(fs, &flags, []byte(tt.file), lookup(nil))
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("config %q: %v", tt.file, err)
			} else if tt.file[0] == 'c' && (s.CPUWorkers != 3 || s.UI != "1" || len(s.Join) != 0) {
				t.Errorf("config %q: got %+v", tt.file, s)
			}
			continue
		}
		if err == nil {
			t.Errorf("config %q accepted: %+v", tt.file, s)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("config %q: error %q lacks %q", tt.file, err, w)
			}
		}
		if strings.Contains(err.Error(), "nodecmd.settings") || strings.Contains(err.Error(), "unmarshal") {
			t.Errorf("config %q: error %q speaks of Go types", tt.file, err)
		}
	}
}

// TestUIAskedForNeedsHTTPAddr: the live view is served at /ui/ of
// --http-addr; asked for (flag, variable or key) with no HTTP endpoint it
// was not served, without a word. Its default, and ui false, are fine
// without one.
func TestUIAskedForNeedsHTTPAddr(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		bad  bool
	}{
		{"flag", []string{"--ui", "true", "--http-addr", ""}, nil, "", true},
		{"variables", nil, map[string]string{"ACPP_UI": "yes", "ACPP_HTTP_ADDR": ""}, "", true},
		{"keys", nil, nil, "ui: true\nhttp_addr: \"\"\n", true},
		{"key with flag", []string{"--http-addr", ""}, nil, "ui: on\n", true},
		{"default", []string{"--http-addr", ""}, nil, "", false},
		{"off", []string{"--ui", "false", "--http-addr", ""}, nil, "", false},
		{"empty key is the default", []string{"--http-addr", ""}, nil, "ui: \"\"\n", false},
		{"with endpoint", []string{"--ui", "true"}, nil, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var flags settings
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			addFlags(fs, &flags)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			s, err := resolve(fs, &flags, []byte(tt.file), lookup(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			s.Name = "n1"
			_, err = s.nodeConfig(nil)
			if tt.bad && (err == nil || !strings.Contains(err.Error(), "the live view is served at /ui/ of --http-addr, which is empty")) {
				t.Errorf("error %v, want the live view refused without --http-addr", err)
			}
			if !tt.bad && err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}
