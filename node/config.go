package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
)

// Config configures a node. Start from DefaultConfig (a LAN node) or
// DefaultLocalConfig (loopback, fast failure detection); every field says
// what its zero value means.
type Config struct {
	// Name is the node's name in the cluster and in its certificate
	// (required; the credentials are those of node Name).
	Name string

	// CredentialsDir holds ca.crt, nodes/<Name>.crt/.key and gossip.key
	// (see package credentials). Required unless Credentials and GossipKeys
	// are set directly.
	CredentialsDir string
	// Credentials, when set, are used instead of loading them from
	// CredentialsDir.
	Credentials *credentials.Credentials
	// GossipKeys, when set, are used instead of CredentialsDir/gossip.key.
	GossipKeys [][]byte

	// GossipAddr is the host:port memberlist binds (UDP and TCP). Empty
	// means the cluster preset's (0.0.0.0:7946 for LAN, 127.0.0.1 and a
	// free port for local).
	GossipAddr string
	// AdvertiseAddr is the IP address peers use for gossip; empty means
	// memberlist's choice (the bind address, or a private IP).
	AdvertiseAddr string
	// QUICAddr is the UDP host:port of the node's QUIC listener. Empty
	// means 0.0.0.0:7947 (LAN) or 127.0.0.1 and a free port (local). The
	// advertised address is the bound one; a listener on 0.0.0.0 advertises
	// AdvertiseAddr's host, or 127.0.0.1 when that is empty too.
	QUICAddr string
	// Join lists gossip addresses (host:port) of members to join; empty
	// starts a new cluster.
	Join []string

	// Devices restricts the devices the node exposes: a comma-separated
	// list of kinds ("cpu", "cuda") and devices ("cuda:1"). Empty or "all"
	// means every device of every registered backend. Host memory is
	// always available.
	Devices string
	// CPUWorkers is the number of worker goroutines of the CPU device; 0
	// means GOMAXPROCS.
	CPUWorkers int
	// ExtraDevices are opened devices added to the node (tests use
	// devicetest fakes); the node closes them. Nil means none.
	ExtraDevices []device.Device

	// HTTPAddr serves /metrics (Prometheus) and /healthz; empty serves
	// nothing.
	HTTPAddr string
	// NoUI turns off the live view page that HTTPAddr serves under /ui/
	// (members, memory, jobs, bytes per peer; liveview.go).
	NoUI bool

	// MaxBytes bounds the bytes all jobs together may allocate on this
	// node (host and device memory alike, staging included), and is the
	// budget of each of its memories (capped by the memory's size). 0 means
	// each memory's default budget (see MemoryShare) and no bound on the
	// total besides their sum.
	//
	// Allocations are admitted against the budget of their memory before
	// they are made: one that does not fit fails its instruction with
	// ErrMemoryLimit (proto.CodeMemoryLimit) and the node carries on. Go
	// cannot recover from a failed allocation, so without a budget a
	// buffer larger than the machine's memory would crash the node.
	MaxBytes uint64
	// MemoryShare is each memory's budget as a fraction of its size (0 <
	// MemoryShare <= 1) when MaxBytes is 0. 0 means
	// device.DefaultHostShare (75%) of host memory (cpu.HostMemory: MemTotal,
	// or the process's cgroup limit where lower) and
	// device.DefaultDeviceShare (90%) of each GPU's memory.
	MemoryShare float64
	// NoMemoryBudget turns the memory budgets off (MaxBytes and MemoryShare
	// must then be 0): allocations are bounded by MaxJobBytes only, and one
	// larger than the machine's memory crashes the node. Only for nodes
	// whose memory is overcommitted on purpose.
	NoMemoryBudget bool
	// MaxJobBytes bounds the bytes one job may allocate; 0 means no limit
	// besides the budgets.
	MaxJobBytes uint64
	// JobLease is the default lease of a job: how long the node keeps a
	// job whose client it has not heard from. 0 means 30 seconds.
	JobLease time.Duration
	// MaxJobLease caps the lease a client may ask for. 0 means 10 minutes.
	MaxJobLease time.Duration

	// DrainTimeout bounds how long Run's drain waits for running
	// instructions before failing them. 0 means 10 seconds.
	DrainTimeout time.Duration

	// ReportGather is how long the node gathers a job's completion
	// events before it answers the job's feed, while it still has
	// instructions of that job to run: one report for several
	// completions, less CPU on the node and the client. A node with none
	// left reports at once. 0 means DefaultReportGather; a negative value
	// reports every completion at once. At most MaxReportGather.
	ReportGather time.Duration

	// FeedLimit bounds the completion events a job keeps that its client
	// has not read yet (memory a client that stops reading would
	// otherwise grow). Past it the node stops recording events; their
	// numbers still advance, so the client sees the gap and asks for the
	// instructions' state instead (coordinator: the feed's catch-up).
	// 0 means DefaultFeedLimit; negative is refused.
	FeedLimit int

	// MaxJobInstrs bounds the instruction records one job keeps on the
	// node: those not finished, and finished ones its client has not let
	// the node forget (Submit.Forget; the coordinator does every 4096).
	// A batch past it is refused (CodeTooLarge), so that a client that
	// submits without end cannot exhaust the node's memory. 0 means
	// DefaultMaxJobInstrs; negative is refused.
	MaxJobInstrs int

	// MaxClientJobs bounds the jobs one client (by identity) may hold
	// open on the node at once; a JobOpen past it is refused
	// (CodeTooLarge): every open job costs memory until its lease ends.
	// 0 means DefaultMaxClientJobs; negative is refused.
	MaxClientJobs int

	// Cluster is the membership preset the node starts from; the node sets
	// its Name, addresses, keys, devices and Join on it. Zero value:
	// cluster.DefaultLANConfig().
	Cluster cluster.Config
	// Local selects cluster.DefaultLocalConfig as the preset (when Cluster
	// is zero) and loopback defaults for QUICAddr.
	Local bool

	// ReloadKeys, when not nil, makes Run reload the gossip keys from
	// CredentialsDir/gossip.key at every receive (acpp-node sends on
	// SIGHUP): key rotation without a restart.
	ReloadKeys <-chan struct{}

	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig is a LAN node: gossip on 0.0.0.0:7946, QUIC on
// 0.0.0.0:7947, memberlist's LAN failure detection (about 5 s).
func DefaultConfig() Config { return Config{Cluster: cluster.DefaultLANConfig()} }

// DefaultLocalConfig is a node for a cluster on one machine: loopback
// addresses, free ports, failure detection in about a second.
func DefaultLocalConfig() Config {
	return Config{Cluster: cluster.DefaultLocalConfig(), Local: true}
}

func (c Config) withDefaults() Config {
	d := c
	if d.JobLease == 0 {
		d.JobLease = 30 * time.Second
	}
	if d.MaxJobLease == 0 {
		d.MaxJobLease = 10 * time.Minute
	}
	if d.DrainTimeout == 0 {
		d.DrainTimeout = 10 * time.Second
	}
	if d.ReportGather == 0 {
		d.ReportGather = DefaultReportGather
	}
	if d.FeedLimit == 0 {
		d.FeedLimit = DefaultFeedLimit
	}
	if d.MaxJobInstrs == 0 {
		d.MaxJobInstrs = DefaultMaxJobInstrs
	}
	if d.MaxClientJobs == 0 {
		d.MaxClientJobs = DefaultMaxClientJobs
	}
	if d.Cluster.Timing == (cluster.Timing{}) && d.Cluster.BindAddr == "" && d.Cluster.BindPort == 0 {
		if d.Local {
			d.Cluster = cluster.DefaultLocalConfig()
		} else {
			d.Cluster = cluster.DefaultLANConfig()
		}
	}
	if d.QUICAddr == "" {
		if d.Local {
			d.QUICAddr = "127.0.0.1:0"
		} else {
			d.QUICAddr = "0.0.0.0:7947"
		}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}

// DefaultMaxJobInstrs is Config.MaxJobInstrs's default: a few hundred MB
// of records at most, far above what a coordinator keeps out (its window
// of groups, and finished instructions until it lets the node forget).
const DefaultMaxJobInstrs = 1 << 20

// DefaultMaxClientJobs is Config.MaxClientJobs's default.
const DefaultMaxClientJobs = 1024

// DefaultFeedLimit is Config.FeedLimit's default.
const DefaultFeedLimit = 1 << 16

// DefaultReportGather is Config.ReportGather's default. On a chain of
// small command groups between two nodes on a 2-core machine it took
// 10-15 % of each hop's CPU away (docs/PERFORMANCE.md, "Cluster hop").
const DefaultReportGather = 200 * time.Microsecond

// MaxReportGather bounds Config.ReportGather: completions reach the
// client (and the groups gated on them start) at most this late.
const MaxReportGather = 100 * time.Millisecond

// Validate reports every bad field at once.
func (c Config) Validate() error {
	var errs []error
	if c.MaxClientJobs < 0 {
		errs = append(errs, fmt.Errorf("MaxClientJobs %d: give a positive number of jobs, or 0 for %d", c.MaxClientJobs, DefaultMaxClientJobs))
	}
	if c.MaxJobInstrs < 0 {
		errs = append(errs, fmt.Errorf("MaxJobInstrs %d: give a positive number of instructions, or 0 for %d", c.MaxJobInstrs, DefaultMaxJobInstrs))
	}
	if c.FeedLimit < 0 {
		errs = append(errs, fmt.Errorf("FeedLimit %d: give a positive number of events, or 0 for %d", c.FeedLimit, DefaultFeedLimit))
	}
	if c.ReportGather > MaxReportGather {
		errs = append(errs, fmt.Errorf("ReportGather %v: at most %v (0 means %v, negative reports each completion at once)", c.ReportGather, MaxReportGather, DefaultReportGather))
	}
	if c.Name == "" {
		errs = append(errs, errors.New("Name is required: the node's name, as in its certificate (nodes/<name>.crt)"))
	} else if err := credentials.CheckName("node", c.Name); err != nil {
		errs = append(errs, fmt.Errorf("Name: %w", err))
	}
	if c.CredentialsDir == "" && (c.Credentials == nil || len(c.GossipKeys) == 0) {
		errs = append(errs, errors.New("CredentialsDir is required: create it with `acpp-node credentials init` and `acpp-node credentials node`"))
	}
	for _, a := range []struct{ name, v string }{{"GossipAddr", c.GossipAddr}, {"QUICAddr", c.QUICAddr}, {"HTTPAddr", c.HTTPAddr}} {
		if a.v == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("%s (%q) must be host:port: %v", a.name, a.v, err))
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			errs = append(errs, fmt.Errorf("Join address %q must be host:port of a member's gossip port: %v", j, err))
		}
	}
	if _, err := parseDeviceFilter(c.Devices); err != nil {
		errs = append(errs, fmt.Errorf("Devices: %w", err))
	}
	if c.CPUWorkers < 0 {
		errs = append(errs, fmt.Errorf("CPUWorkers (%d) must be >= 0", c.CPUWorkers))
	}
	if c.JobLease < 0 || c.MaxJobLease < 0 || c.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("JobLease (%v), MaxJobLease (%v) and DrainTimeout (%v) must be >= 0", c.JobLease, c.MaxJobLease, c.DrainTimeout))
	}
	if c.MaxBytes != 0 && c.MaxJobBytes > c.MaxBytes {
		errs = append(errs, fmt.Errorf("MaxJobBytes (%d) must be <= MaxBytes (%d)", c.MaxJobBytes, c.MaxBytes))
	}
	if err := c.memoryLimit().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("MaxBytes (%d), MemoryShare (%v), NoMemoryBudget (%v): %w", c.MaxBytes, c.MemoryShare, c.NoMemoryBudget, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// memoryLimit is how the budget of each memory is chosen.
func (c Config) memoryLimit() device.MemoryLimit {
	return device.MemoryLimit{Bytes: c.MaxBytes, Share: c.MemoryShare, Off: c.NoMemoryBudget}
}
