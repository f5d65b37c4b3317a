package nodecmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node"
)

// settings are acpp-node run's settings. Each comes, in order of
// precedence, from its flag, its ACPP_* environment variable, the YAML
// config file (--config), or its default. docs/OPERATIONS.md lists them.
type settings struct {
	Name          string   `yaml:"name"`
	Credentials   string   `yaml:"credentials"`
	GossipAddr    string   `yaml:"gossip_addr"`
	AdvertiseAddr string   `yaml:"advertise_addr"`
	QUICAddr      string   `yaml:"quic_addr"`
	Join          []string `yaml:"join"`
	JoinRetry     string   `yaml:"join_retry"`
	Devices       string   `yaml:"devices"`
	CPUWorkers    int      `yaml:"cpu_workers"`
	HTTPAddr      string   `yaml:"http_addr"`
	UI            string   `yaml:"ui"`
	MaxBytes      string   `yaml:"max_bytes"`
	MaxJobBytes   string   `yaml:"max_job_bytes"`
	JobLease      string   `yaml:"job_lease"`
	DrainTimeout  string   `yaml:"drain_timeout"`
	ReportGather  string   `yaml:"report_gather"`
	Timing        string   `yaml:"timing"`
	LogLevel      string   `yaml:"log_level"`
	LogFormat     string   `yaml:"log_format"`
}

// setting describes one flag: name, env var, help, and where it lives.
type setting struct {
	flag, env, help string
	str             *string
	list            *[]string
	num             *int
}

func (s *settings) table() []setting {
	return []setting{
		{"name", "ACPP_NAME", "node name, as in its certificate (default: the host name)", &s.Name, nil, nil},
		{"credentials", "ACPP_CREDENTIALS", "credentials directory: ca.crt, gossip.key, nodes/<name>.crt/.key", &s.Credentials, nil, nil},
		{"gossip-addr", "ACPP_GOSSIP_ADDR", "gossip (memberlist) bind host:port, UDP and TCP", &s.GossipAddr, nil, nil},
		{"advertise-addr", "ACPP_ADVERTISE_ADDR", "IP address peers use to reach this node (default: the bind address, or a private IP)", &s.AdvertiseAddr, nil, nil},
		{"quic-addr", "ACPP_QUIC_ADDR", "QUIC listener host:port (UDP) for pages and instructions", &s.QUICAddr, nil, nil},
		{"join", "ACPP_JOIN", "gossip host:port of a member to join; repeat the flag (env: comma-separated)", nil, &s.Join, nil},
		{"join-retry", "ACPP_JOIN_RETRY", "how long to keep retrying --join while no member answers, so nodes may start in any order (0: fail at once)", &s.JoinRetry, nil, nil},
		{"devices", "ACPP_DEVICES", "devices to expose: all, or a list of kinds and kind:index (cpu,cuda:0)", &s.Devices, nil, nil},
		{"cpu-workers", "ACPP_CPU_WORKERS", "worker goroutines of the CPU device (0: GOMAXPROCS)", nil, nil, &s.CPUWorkers},
		{"http-addr", "ACPP_HTTP_ADDR", "host:port serving /metrics, /healthz and the live view at /ui/ (empty: none); read-only and unauthenticated: keep it on loopback or a trusted network", &s.HTTPAddr, nil, nil},
		{"ui", "ACPP_UI", "serve the live view page (members, memory, jobs, bytes per peer) at /ui/ of --http-addr: true or false", &s.UI, nil, nil},
		{"max-bytes", "ACPP_MAX_BYTES", "memory budget: what all jobs together may allocate in each memory of this node (host memory, each GPU's), staging included; an allocation beyond it fails its job, not the node. auto: 75% of host memory (MemTotal or the cgroup limit) and 90% of each GPU's; a share like 50%; a size like 64GiB (each memory's budget, at most its size, and the node's total); 0: no budget (a buffer larger than memory crashes the node)", &s.MaxBytes, nil, nil},
		{"max-job-bytes", "ACPP_MAX_JOB_BYTES", "memory one job may allocate on this node (0: no limit but --max-bytes)", &s.MaxJobBytes, nil, nil},
		{"job-lease", "ACPP_JOB_LEASE", "how long a job survives without word from its client", &s.JobLease, nil, nil},
		{"drain-timeout", "ACPP_DRAIN_TIMEOUT", "on SIGTERM, how long running instructions may finish before they are failed", &s.DrainTimeout, nil, nil},
		{"report-gather", "ACPP_REPORT_GATHER", "how long a node that still has a job's instructions to run gathers that job's completions into one report (0: report each at once; at most 100ms)", &s.ReportGather, nil, nil},
		{"timing", "ACPP_TIMING", "failure detection preset: lan (about 5 s) or local (about 1 s, one machine)", &s.Timing, nil, nil},
		{"log-level", "ACPP_LOG_LEVEL", "debug, info, warn or error", &s.LogLevel, nil, nil},
		{"log-format", "ACPP_LOG_FORMAT", "text or json", &s.LogFormat, nil, nil},
	}
}

func defaultSettings() settings {
	return settings{
		Credentials: "/etc/acpp", GossipAddr: "0.0.0.0:7946", QUICAddr: "0.0.0.0:7947", Devices: "all",
		HTTPAddr: "127.0.0.1:9464", UI: "true", MaxBytes: "auto", MaxJobBytes: "0", JobLease: "30s", DrainTimeout: "10s", ReportGather: "200us", JoinRetry: "60s",
		Timing: "lan", LogLevel: "info", LogFormat: "text",
	}
}

// addFlags registers the flags with their defaults.
func addFlags(fs *pflag.FlagSet, s *settings) {
	d := defaultSettings()
	dt := d.table()
	for i, st := range s.table() {
		switch {
		case st.str != nil:
			fs.StringVar(st.str, st.flag, *dt[i].str, st.help+" ["+st.env+"]")
		case st.list != nil:
			fs.StringArrayVar(st.list, st.flag, nil, st.help+" ["+st.env+"]")
		case st.num != nil:
			fs.IntVar(st.num, st.flag, *dt[i].num, st.help+" ["+st.env+"]")
		}
	}
}

// resolve fills every setting whose flag was not given from the
// environment, then the config file, then the default.
func resolve(fs *pflag.FlagSet, flags *settings, file []byte, getenv func(string) string) (settings, error) {
	out := defaultSettings()
	if len(file) > 0 {
		var f settings
		dec := yaml.NewDecoder(bytes.NewReader(file))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			return out, fmt.Errorf("config file: %w (keys are the flag names with _ for -, e.g. gossip_addr)", err)
		}
		overlay(&out, &f)
	}
	ot, ft := out.table(), flags.table()
	for i, st := range ot {
		if fs != nil && fs.Changed(st.flag) {
			switch {
			case st.str != nil:
				*st.str = *ft[i].str
			case st.list != nil:
				*st.list = *ft[i].list
			case st.num != nil:
				*st.num = *ft[i].num
			}
			continue
		}
		v := getenv(st.env)
		if v == "" {
			continue
		}
		switch {
		case st.str != nil:
			*st.str = v
		case st.list != nil:
			*st.list = strings.Split(v, ",")
		case st.num != nil:
			n, err := strconv.Atoi(v)
			if err != nil {
				return out, fmt.Errorf("%s=%q: want a number", st.env, v)
			}
			*st.num = n
		}
	}
	return out, nil
}

// overlay copies the non-zero fields of f into s.
func overlay(s, f *settings) {
	st, ft := s.table(), f.table()
	for i := range st {
		switch {
		case st[i].str != nil && *ft[i].str != "":
			*st[i].str = *ft[i].str
		case st[i].list != nil && len(*ft[i].list) > 0:
			*st[i].list = *ft[i].list
		case st[i].num != nil && *ft[i].num != 0:
			*st[i].num = *ft[i].num
		}
	}
}

// parseBytes parses a size: a number of bytes with an optional unit (KiB,
// MiB, GiB, TiB, or KB, MB, GB, TB).
func parseBytes(s string) (uint64, error) { return device.ParseBytes(s) }

// parseMaxBytes sets the memory budget fields of cfg from --max-bytes:
// "auto" (the default budgets), a share ("50%"), a size, or 0 (none).
func parseMaxBytes(s string, cfg *node.Config) error {
	l, err := device.ParseMemoryLimit(s)
	cfg.MaxBytes, cfg.MemoryShare, cfg.NoMemoryBudget = l.Bytes, l.Share, l.Off
	return err
}

// nodeConfig turns settings into the node's Config; it reports every bad
// setting at once.
func (s settings) nodeConfig(log *slog.Logger) (node.Config, error) {
	var errs []error
	var cfg node.Config
	switch s.Timing {
	case "lan", "":
		cfg = node.DefaultConfig()
	case "local":
		cfg = node.DefaultLocalConfig()
	default:
		errs = append(errs, fmt.Errorf("timing %q: use lan or local", s.Timing))
	}
	cfg.Cluster.Timing = timingOf(s.Timing)
	cfg.Name = s.Name
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			errs = append(errs, errors.New("name: no --name and no host name; pass --name"))
		}
		cfg.Name = h
	}
	cfg.CredentialsDir = s.Credentials
	cfg.GossipAddr, cfg.AdvertiseAddr, cfg.QUICAddr = s.GossipAddr, s.AdvertiseAddr, s.QUICAddr
	cfg.Join = s.Join
	if d, err := time.ParseDuration(s.JoinRetry); err != nil || d < 0 {
		errs = append(errs, fmt.Errorf("join-retry %q: want a duration like 60s, or 0 to fail at once", s.JoinRetry))
	} else {
		cfg.Cluster.JoinRetry = d
	}
	cfg.Devices, cfg.CPUWorkers, cfg.HTTPAddr = s.Devices, s.CPUWorkers, s.HTTPAddr
	switch strings.ToLower(s.UI) {
	case "true", "on", "1", "yes":
	case "false", "off", "0", "no":
		cfg.NoUI = true
	default:
		errs = append(errs, fmt.Errorf("ui %q: want true or false", s.UI))
	}
	var err error
	if err := parseMaxBytes(s.MaxBytes, &cfg); err != nil {
		errs = append(errs, fmt.Errorf("max-bytes: %w", err))
	}
	if cfg.MaxJobBytes, err = parseBytes(s.MaxJobBytes); err != nil {
		errs = append(errs, fmt.Errorf("max-job-bytes: %w", err))
	}
	if cfg.JobLease, err = time.ParseDuration(s.JobLease); err != nil || cfg.JobLease <= 0 {
		errs = append(errs, fmt.Errorf("job-lease %q: want a positive duration like 30s", s.JobLease))
	}
	if cfg.DrainTimeout, err = time.ParseDuration(s.DrainTimeout); err != nil || cfg.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("drain-timeout %q: want a positive duration like 10s", s.DrainTimeout))
	}
	if d, err := time.ParseDuration(s.ReportGather); err != nil || d < 0 || d > node.MaxReportGather {
		errs = append(errs, fmt.Errorf("report-gather %q: want a duration from 0 to %v like 200us (0 reports each completion at once)", s.ReportGather, node.MaxReportGather))
	} else if d == 0 {
		cfg.ReportGather = -1 // node.Config's "each at once"
	} else {
		cfg.ReportGather = d
	}
	cfg.Logger = log
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	return cfg, errors.Join(errs...)
}

func timingOf(preset string) cluster.Timing {
	if preset == "local" {
		return cluster.DefaultLocalConfig().Timing
	}
	return cluster.DefaultLANConfig().Timing
}

// newLogger builds the process logger, writing to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		opts.ReplaceAttr = jsonValue
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log-format %q: use text or json", format)
}

// jsonValue makes JSON logs read like the text ones: a duration as "1.5s",
// not nanoseconds, and a value that names itself with String (a device
// ID, an instruction kind) as that string, not as a struct or a number.
// The node's own packages log such values as strings already; this covers
// whatever else logs through the process logger.
func jsonValue(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
	case slog.KindAny:
		v := a.Value.Any()
		if _, isErr := v.(error); isErr {
			break // the handler writes Error()
		}
		if s, ok := v.(fmt.Stringer); ok {
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
				break
			}
			a.Value = slog.StringValue(s.String())
		}
	}
	return a
}
