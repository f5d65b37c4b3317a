package nodecmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/credentials"
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

	// given holds the flags of the settings that a flag, variable or
	// config key set (resolve), rather than their default: a setting
	// asked for may be refused where its default is not (--ui true
	// without --http-addr).
	given map[string]bool
}

// setting describes one flag: name, env var, help, and where it lives.
type setting struct {
	flag, env, help string
	str             *string
	list            *[]string
	num             *int
	// emptyOK: an empty value means something of its own (http-addr: no
	// HTTP endpoint; join: no one to join; devices: all), so an ACPP_*
	// variable that is set but empty, or a config key set to "" or [],
	// overrides what comes below it. For the other settings an empty
	// value is ignored (ACPP_JOB_LEASE= is the default, as if unset).
	emptyOK bool
}

// key is the setting's config file key: the flag name with _ for -.
func (st setting) key() string { return strings.ReplaceAll(st.flag, "-", "_") }

func (s *settings) table() []setting {
	return []setting{
		{"name", "ACPP_NAME", "node name, as in its certificate (default: the host name)", &s.Name, nil, nil, true},
		{"credentials", "ACPP_CREDENTIALS", "credentials directory: ca.crt, gossip.key, nodes/<name>.crt/.key", &s.Credentials, nil, nil, false},
		{"gossip-addr", "ACPP_GOSSIP_ADDR", "gossip (memberlist) bind IP:port, UDP and TCP", &s.GossipAddr, nil, nil, false},
		{"advertise-addr", "ACPP_ADVERTISE_ADDR", "IP address peers use to reach this node (default: the bind address, or a private IP)", &s.AdvertiseAddr, nil, nil, true},
		{"quic-addr", "ACPP_QUIC_ADDR", "QUIC listener host:port (UDP) for pages and instructions", &s.QUICAddr, nil, nil, false},
		{"join", "ACPP_JOIN", "gossip host:port of a member to join; repeat the flag (env: comma-separated). Give every node the same list, its own address included: a restarted node then finds the others at once", nil, &s.Join, nil, true},
		{"join-retry", "ACPP_JOIN_RETRY", "how long to keep retrying --join while no member answers, so nodes may start in any order (0: fail at once); a member that refuses this node's gossip key fails it at once", &s.JoinRetry, nil, nil, false},
		{"devices", "ACPP_DEVICES", "devices to expose: all, or a list of kinds and kind:index (cpu,cuda:0); an entry that matches no device of this machine is refused", &s.Devices, nil, nil, true},
		{"cpu-workers", "ACPP_CPU_WORKERS", "worker goroutines of the CPU device (0: GOMAXPROCS)", nil, nil, &s.CPUWorkers, false},
		{"http-addr", "ACPP_HTTP_ADDR", "host:port serving /metrics, /healthz and the live view at /ui/ (empty: none, also as ACPP_HTTP_ADDR= or http_addr: \"\"); read-only and unauthenticated: keep it on loopback or a trusted network", &s.HTTPAddr, nil, nil, true},
		{"ui", "ACPP_UI", "serve the live view page (members, memory, jobs, bytes per peer) at /ui/ of --http-addr: true or false", &s.UI, nil, nil, false},
		{"max-bytes", "ACPP_MAX_BYTES", "memory budget: what all jobs together may allocate in each memory of this node (host memory, each GPU's), staging included; an allocation beyond it fails its job, not the node. auto: 75% of host memory (MemTotal or the cgroup limit) and 90% of each GPU's; a share like 50%; a size like 64GiB (each memory's budget, at most its size, and the node's total); 0: no budget (a buffer larger than memory crashes the node)", &s.MaxBytes, nil, nil, false},
		{"max-job-bytes", "ACPP_MAX_JOB_BYTES", "memory one job may allocate on this node (0: no limit but --max-bytes)", &s.MaxJobBytes, nil, nil, false},
		{"job-lease", "ACPP_JOB_LEASE", "how long a job survives without word from its client", &s.JobLease, nil, nil, false},
		{"drain-timeout", "ACPP_DRAIN_TIMEOUT", "on SIGTERM, SIGINT or acpp-node drain: how long the node's jobs get to move the pages only this node holds and release it (their queued work here finishes first), then for running instructions to finish; what is left then fails", &s.DrainTimeout, nil, nil, false},
		{"report-gather", "ACPP_REPORT_GATHER", "how long a node that still has a job's instructions to run gathers that job's completions into one report (0: report each at once; at most 100ms)", &s.ReportGather, nil, nil, false},
		{"timing", "ACPP_TIMING", "failure detection preset: lan (about 5 s) or local (about 1 s, one machine)", &s.Timing, nil, nil, false},
		{"log-level", "ACPP_LOG_LEVEL", "debug, info, warn or error", &s.LogLevel, nil, nil, false},
		{"log-format", "ACPP_LOG_FORMAT", "text or json", &s.LogFormat, nil, nil, false},
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
// environment (lookupEnv, os.LookupEnv's form), then the config file, then
// the default. A variable or key that is set but empty counts where an
// empty value means something (setting.emptyOK). Lists (--join, ACPP_JOIN)
// are trimmed and empty entries dropped.
func resolve(fs *pflag.FlagSet, flags *settings, file []byte, lookupEnv func(string) (string, bool)) (settings, error) {
	out := defaultSettings()
	var keys map[string]any // the keys the file sets
	if len(file) > 0 {
		var f settings
		dec := yaml.NewDecoder(bytes.NewReader(file))
		var doc yaml.Node
		err := dec.Decode(&doc)
		if err != nil && !errors.Is(err, io.EOF) {
			return out, fmt.Errorf("config file: %w", err)
		}
		if err == nil {
			// Each key is checked against its setting first, so that an
			// error names it (yaml's own says "cannot unmarshal !!str into
			// int" with a line) and a number is not truncated to fit
			// (cpu_workers: 2.5 was 2).
			if err := checkConfigKeys(&doc); err != nil {
				return out, err
			}
			if err := doc.Decode(&f); err != nil {
				return out, fmt.Errorf("config file: %w", err)
			}
		}
		// Settings are read from the first YAML document only, so a second
		// one (a file made by concatenating two with "---") would be
		// ignored without a word: refuse it.
		if err == nil {
			// An empty one (a file that ends with "---", perhaps and a
			// comment, as generated files do) holds no setting.
			for {
				var next yaml.Node
				err := dec.Decode(&next)
				if errors.Is(err, io.EOF) {
					break
				}
				if err == nil && emptyDocument(&next) {
					continue
				}
				if err == nil {
					err = fmt.Errorf("a second YAML document at line %d", next.Line)
				}
				return out, fmt.Errorf("config file: %w: acpp-node reads one document; put every setting in it (no second \"---\")", err)
			}
		}
		// Which keys the file sets, so that `http_addr: ""` is told from
		// no http_addr at all.
		if err := yaml.Unmarshal(file, &keys); err != nil {
			return out, fmt.Errorf("config file: %w", err)
		}
		overlay(&out, &f, keys)
	}
	out.given = map[string]bool{}
	for _, st := range out.table() {
		if v, set := keys[st.key()]; set && v != nil && v != "" {
			out.given[st.flag] = true
		}
	}
	ot, ft := out.table(), flags.table()
	var empty []error
	for i, st := range ot {
		if fs != nil && fs.Changed(st.flag) {
			switch {
			case st.str != nil:
				// An empty value means nothing for this setting: given as a
				// flag (a script's "--timing $T" with T unset) it is refused,
				// not taken as the default, nor passed on to fail by
				// node.Config's field name (--credentials "").
				if *ft[i].str == "" && !st.emptyOK {
					empty = append(empty, fmt.Errorf("--%s is empty: give a value, or leave the flag out for its default, %s (acpp-node run --help)", st.flag, defaultOf(st.flag)))
					continue
				}
				*st.str = *ft[i].str
			case st.list != nil:
				*st.list = cleanList(*ft[i].list)
			case st.num != nil:
				*st.num = *ft[i].num
			}
			out.given[st.flag] = true
			continue
		}
		v, set := lookupEnv(st.env)
		if !set || v == "" && !st.emptyOK {
			continue
		}
		out.given[st.flag] = true
		switch {
		case st.str != nil:
			*st.str = v
		case st.list != nil:
			*st.list = cleanList(strings.Split(v, ","))
		case st.num != nil:
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return out, fmt.Errorf("%s=%q: want a number", st.env, v)
			}
			*st.num = n
		}
	}
	return out, errors.Join(empty...)
}

// defaultOf is the default of the setting with the given flag, as its
// help shows it.
func defaultOf(flag string) string {
	d := defaultSettings()
	for _, st := range d.table() {
		if st.flag == flag && st.str != nil {
			return strconv.Quote(*st.str)
		}
	}
	return "none"
}

// cleanList trims the entries of a list setting and drops empty ones
// ("a:1, b:2," is a:1 and b:2).
func cleanList(l []string) []string {
	out := make([]string, 0, len(l))
	for _, e := range l {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// overlay copies into s the fields of f whose keys the file sets: an empty
// value only where it means something (setting.emptyOK).
func overlay(s, f *settings, keys map[string]any) {
	st, ft := s.table(), f.table()
	for i := range st {
		if _, set := keys[st[i].key()]; !set {
			continue
		}
		switch {
		case st[i].str != nil && (*ft[i].str != "" || st[i].emptyOK):
			*st[i].str = *ft[i].str
		case st[i].list != nil:
			*st[i].list = cleanList(*ft[i].list)
		case st[i].num != nil:
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
	if err := credentials.CheckName("node", cfg.Name); cfg.Name != "" && err != nil {
		how := ""
		if s.Name == "" {
			how = " (the host name: pass --name)"
		}
		errs = append(errs, fmt.Errorf("name %q%s: %w", cfg.Name, how, err))
	}
	cfg.CredentialsDir = s.Credentials
	// Addresses are checked here, so that the error names the flag (a bad
	// value is not passed on, and node.Config.Validate does not name it a
	// second time by its field).
	if err := checkGossipAddr(s.GossipAddr); err != nil {
		errs = append(errs, fmt.Errorf("gossip-addr %q: %v", s.GossipAddr, err))
	} else {
		cfg.GossipAddr = s.GossipAddr
	}
	if a, err := netip.ParseAddr(s.AdvertiseAddr); s.AdvertiseAddr != "" && (err != nil || a.IsUnspecified()) {
		errs = append(errs, fmt.Errorf("advertise-addr %q: want the IP address peers reach this node at (not a host name, not 0.0.0.0), or nothing for the bind address", s.AdvertiseAddr))
	} else {
		cfg.AdvertiseAddr = s.AdvertiseAddr
	}
	if _, _, err := net.SplitHostPort(s.QUICAddr); err != nil {
		errs = append(errs, fmt.Errorf("quic-addr %q: want host:port: %v", s.QUICAddr, err))
	} else {
		cfg.QUICAddr = s.QUICAddr
	}
	for _, j := range s.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			errs = append(errs, fmt.Errorf("join %q: want host:port of a member's gossip port: %v", j, err))
		} else {
			cfg.Join = append(cfg.Join, j)
		}
	}
	if d, err := time.ParseDuration(s.JoinRetry); err != nil || d < 0 {
		errs = append(errs, fmt.Errorf("join-retry %q: want a duration like 60s, or 0 to fail at once", s.JoinRetry))
	} else {
		cfg.Cluster.JoinRetry = d
	}
	if err := node.CheckDevices(s.Devices); err != nil {
		errs = append(errs, fmt.Errorf("devices: %w", err))
	}
	if s.CPUWorkers < 0 {
		errs = append(errs, fmt.Errorf("cpu-workers %d: want a number of worker goroutines, or 0 for GOMAXPROCS", s.CPUWorkers))
	}
	cfg.Devices, cfg.CPUWorkers = s.Devices, s.CPUWorkers
	if _, _, err := net.SplitHostPort(s.HTTPAddr); s.HTTPAddr != "" && err != nil {
		errs = append(errs, fmt.Errorf("http-addr %q: want host:port, or empty for no HTTP endpoint: %v", s.HTTPAddr, err))
	} else {
		cfg.HTTPAddr = s.HTTPAddr
	}
	switch strings.ToLower(s.UI) {
	case "true", "on", "1", "yes":
		if s.given["ui"] && s.HTTPAddr == "" {
			// The page is served at /ui/ of the HTTP endpoint: asked for
			// with none, it was not served, without a word.
			errs = append(errs, fmt.Errorf("ui %q: the live view is served at /ui/ of --http-addr, which is empty (no HTTP endpoint); give --http-addr HOST:PORT, or leave ui out", s.UI))
		}
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
	} else if cfg.MaxBytes != 0 && cfg.MaxJobBytes > cfg.MaxBytes {
		errs = append(errs, fmt.Errorf("max-job-bytes %s is more than max-bytes %s: one job cannot hold more than the node's budget; lower --max-job-bytes or raise --max-bytes", s.MaxJobBytes, s.MaxBytes))
	}
	// A bad duration is not passed on: node.Config.Validate would report
	// it again, by its field.
	if d, err := time.ParseDuration(s.JobLease); err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("job-lease %q: want a positive duration like 30s", s.JobLease))
	} else {
		cfg.JobLease = d
	}
	if d, err := time.ParseDuration(s.DrainTimeout); err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("drain-timeout %q: want a positive duration like 10s", s.DrainTimeout))
	} else {
		cfg.DrainTimeout = d
	}
	if d, err := time.ParseDuration(s.ReportGather); err != nil || d < 0 || d > node.MaxReportGather {
		errs = append(errs, fmt.Errorf("report-gather %q: want a duration from 0 to %v like 200us (0 reports each completion at once)", s.ReportGather, node.MaxReportGather))
	} else if d == 0 {
		cfg.ReportGather = -1 // node.Config's "each at once"
	} else {
		cfg.ReportGather = d
	}
	cfg.Logger = log
	// Every setting is checked above, naming it as the operator typed it;
	// node.Config.Validate names node.Config's fields, so it only backs
	// those checks up.
	if len(errs) > 0 {
		return cfg, errors.Join(errs...)
	}
	return cfg, cfg.Validate()
}

// checkGossipAddr checks a gossip bind address: an IP (or nothing, for
// every interface) and a port (0 picks a free one).
func checkGossipAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want IP:port like 0.0.0.0:7946: %v", err)
	}
	if _, err := netip.ParseAddr(host); host != "" && err != nil {
		return fmt.Errorf("%q is not an IP address: memberlist binds an IP (0.0.0.0 for every interface)", host)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q must be a number from 0 to 65535 (0 picks a free one)", port)
	}
	return nil
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

// checkConfigKeys checks the config file's document: a mapping of
// settings by key (or nothing), each key a setting's, each value of its
// type. Every bad key is reported, by line and key.
func checkConfigKeys(doc *yaml.Node) error {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	switch {
	case root.Kind == yaml.ScalarNode && root.Tag == "!!null":
		return nil // "~" or nothing: no setting
	case root.Kind != yaml.MappingNode:
		return fmt.Errorf("config file line %d: want settings as key: value lines (keys are the flag names with _ for -, e.g. gossip_addr), got %s", root.Line, yamlKind(root))
	}
	var s settings
	byKey := map[string]setting{}
	for _, st := range s.table() {
		byKey[st.key()] = st
	}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		for v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		st, ok := byKey[k.Value]
		if !ok {
			hint := "keys are the flag names with _ for -, e.g. gossip_addr (acpp-node run --help lists the flags)"
			if _, dashed := byKey[strings.ReplaceAll(k.Value, "-", "_")]; dashed {
				hint = fmt.Sprintf("write it %s: keys are the flag names with _ for -", strings.ReplaceAll(k.Value, "-", "_"))
			}
			errs = append(errs, fmt.Errorf("config file line %d: unknown key %q; %s", k.Line, k.Value, hint))
			continue
		}
		null := v.Kind == yaml.ScalarNode && v.Tag == "!!null"
		var want string
		got := v
		switch {
		case null:
		case st.str != nil && v.Kind != yaml.ScalarNode:
			want = "one value"
			if st.flag == "devices" {
				want = `one value, its entries comma-separated ("cpu,cuda:0")`
			}
		case st.list != nil && v.Kind == yaml.SequenceNode:
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode && want == "" {
					want, got = "host:port entries", e
				}
			}
		case st.list != nil:
			want = "a list of host:port entries, like [10.0.0.1:7946, 10.0.0.2:7946]"
		case st.num != nil && (v.Kind != yaml.ScalarNode || v.Tag != "!!int"):
			want = "a whole number"
		}
		if want != "" {
			errs = append(errs, fmt.Errorf("config file line %d: %s: want %s, got %s", got.Line, k.Value, want, yamlKind(got)))
		}
	}
	return errors.Join(errs...)
}

// yamlKind describes a YAML value for an error: a quoted scalar, or what
// kind of collection it is.
func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// emptyDocument reports whether a YAML document holds nothing: no
// content, or a lone null scalar (what "---" followed by nothing or a
// comment decodes to).
func emptyDocument(n *yaml.Node) bool {
	if n.Kind != yaml.DocumentNode {
		return false
	}
	for _, c := range n.Content {
		if c.Kind != yaml.ScalarNode || c.Tag != "!!null" || c.Value != "" {
			return false
		}
	}
	return true
}
