package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// Config configures one cluster member. Build it from a preset
// ([DefaultLANConfig] for a real cluster, [DefaultLocalConfig] for loopback
// tests), set Name, GossipKeys and the addresses, and pass it to [Start].
// Every field documents what its zero value means; a zero Config plus a Name
// and a key is a valid LAN member on port 7946 of every interface.
type Config struct {
	// Name is this member's name, unique in the cluster; it is the node ID
	// that peers, the coordinator and the `nodes` table use, and it is
	// advertised in the metadata. At most MaxNameLen bytes of UTF-8 without
	// control characters. Empty means the host name (os.Hostname); Validate
	// fails if that is empty too.
	Name string

	// ClusterName separates clusters that share a network: members of
	// different clusters drop each other's gossip, even with the same key.
	// At most 255 bytes. Empty means "acpp". It travels in clear text (a
	// memberlist label, authenticated when encryption is on); it is not a
	// secret.
	ClusterName string

	// BindAddr is the IP address the gossip listeners (UDP and TCP) bind to.
	// Empty means 0.0.0.0 (every IPv4 interface).
	BindAddr string

	// BindPort is the gossip port (UDP and TCP). 0 picks a free port; read
	// the port actually bound with [Cluster.Addr]. The LAN preset sets
	// 7946 (memberlist's default).
	BindPort int

	// AdvertiseAddr is the IP address other members use to reach this one.
	// Empty means: BindAddr if it is a specific address, otherwise a private
	// IP address of this machine (Start fails if there is none: then set it).
	AdvertiseAddr string

	// AdvertisePort is the port other members use to reach this one. 0 means
	// the bound port. It needs a fixed BindPort (a NAT mapping to a port
	// chosen at random cannot be configured in advance).
	AdvertisePort int

	// QUICAddr is the host:port of this node's QUIC transport, advertised
	// in the metadata for peers and clients to dial. Empty means this member
	// serves no QUIC endpoint (a pure observer, or a test); node/ always sets
	// it.
	QUICAddr string

	// BootID identifies this run of the member: peers that see the name
	// come back with another boot ID know it restarted (its state is gone).
	// node/ passes the Instance its transport announces, so that a
	// membership event names the run whose connections to close. 0 means a
	// random number.
	BootID uint64

	// ProtocolVersion is the acpp wire protocol version (proto.Version) this
	// node speaks, advertised so peers can skip incompatible nodes before
	// dialing. 0 means "not advertised".
	ProtocolVersion uint16

	// Devices is the compact device summary advertised in the metadata, one
	// entry per device kind; update it at run time with
	// [Cluster.UpdateDevices]. Nil means no devices.
	Devices []DeviceSummary

	// GossipKeys are the AES keys (16, 24 or 32 bytes: AES-128/192/256) that
	// encrypt and authenticate gossip (C6). The first is the primary key,
	// used to encrypt; all are tried to decrypt, which is what makes key
	// rotation possible (see docs/CLUSTER.md). Empty is an error unless
	// InsecureNoEncryption is set.
	GossipKeys [][]byte

	// InsecureNoEncryption turns gossip encryption off. Any process that can
	// reach the gossip port can then join and forge membership: use it only
	// in tests. False (the default) requires GossipKeys.
	InsecureNoEncryption bool

	// Join lists members to join at Start ("host:port", or "host" for the
	// port of this member's BindPort). Start fails if none of them can be
	// joined. This member's own address may be in the list, so that every
	// member can get the same one: when only that address answers, Start
	// begins a new cluster, and the maintenance loop joins the others every
	// second for a minute, then every ReconnectInterval, while this member
	// is alone. Empty means: start a new cluster (join later with
	// [Cluster.Join]).
	Join []string

	// JoinRetry is how long Start keeps retrying Join while none of its
	// addresses can be joined (members started together, the seed not up
	// yet), with a backoff from 100ms to 2s between rounds; Start's context
	// bounds it too. A member that refuses this one's gossip key
	// (ErrGossipKey) ends it at once. 0 means no retry: Start fails if the
	// first round joins nobody.
	JoinRetry time.Duration

	// ReconnectInterval is how often this member tries to reach a member it
	// saw fail (one at a time, a random one among those still retained,
	// see DepartedRetention), and, when it is alone, the Join addresses.
	// This heals partitions that outlast Timing.GossipToTheDeadTime, after
	// which memberlist itself stops talking to the other side. Members that
	// left gracefully, or failed more than 24h ago, are not retried. For
	// the first minute after a member departs (left or failed), or after
	// this member finds itself alone, it tries every second instead (a
	// restarted member is back within about a second). 0 means 30s;
	// negative disables both.
	ReconnectInterval time.Duration

	// Logger receives this package's logs and memberlist's own (at debug
	// level, except gossip that could not be decrypted, which is a warning:
	// it usually means a wrong key). Nil means discard.
	Logger *slog.Logger

	// Timing holds the failure-detection and gossip timings. Zero fields
	// take memberlist's LAN defaults.
	Timing Timing

	// EventBuffer is the number of events a subscription queues for a slow
	// reader before it coalesces them into one resync event (see
	// [Subscription]). 0 means 256.
	EventBuffer int

	// DepartedRetention is how many departed (left or failed) members the
	// snapshot keeps, so that a late reader can still see who left and how;
	// the oldest are forgotten first, and a member that rejoins replaces its
	// old entry. 0 means 256; negative means keep none.
	DepartedRetention int
}

// Timing are memberlist's failure-detection and dissemination knobs. Every
// zero field means memberlist's LAN default, given in its comment.
// [Config.FailureDetectionTimeout] turns them into a time bound.
type Timing struct {
	// ProbeInterval is the time between two probes of a random member.
	// 0 means 1s.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its ack before
	// trying indirect probes: the 99th percentile RTT. 0 means 500ms.
	ProbeTimeout time.Duration
	// IndirectChecks is how many members are asked to probe a member that
	// did not answer. 0 means 3.
	IndirectChecks int
	// SuspicionMult scales how long a member stays suspect before it is
	// declared failed: SuspicionMult × max(1, log10(N)) × ProbeInterval.
	// 0 means 4.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion time when too few peers
	// confirm the suspicion: SuspicionMaxTimeoutMult × the suspicion time.
	// 0 means 6.
	SuspicionMaxTimeoutMult int
	// GossipInterval is the time between gossip rounds. 0 means 200ms.
	GossipInterval time.Duration
	// GossipNodes is how many members each gossip round sends to. 0 means 3.
	GossipNodes int
	// GossipToTheDeadTime is how long a failed member still receives gossip,
	// so that it can refute its death. 0 means 30s.
	GossipToTheDeadTime time.Duration
	// RetransmitMult scales how often a broadcast is retransmitted:
	// RetransmitMult × ceil(log10(N+1)). 0 means 4.
	RetransmitMult int
	// PushPullInterval is the time between full state syncs with a random
	// member (over TCP). 0 means 30s.
	PushPullInterval time.Duration
	// TCPTimeout bounds a stream connection (join, push/pull, TCP probe).
	// It also bounds each address of [Cluster.Join] and, when the context
	// has no deadline, [Cluster.Leave] and [Cluster.UpdateDevices]. 0 means
	// 10s.
	TCPTimeout time.Duration
}

// lanTiming are memberlist's DefaultLANConfig values.
var lanTiming = Timing{
	ProbeInterval:           time.Second,
	ProbeTimeout:            500 * time.Millisecond,
	IndirectChecks:          3,
	SuspicionMult:           4,
	SuspicionMaxTimeoutMult: 6,
	GossipInterval:          200 * time.Millisecond,
	GossipNodes:             3,
	GossipToTheDeadTime:     30 * time.Second,
	RetransmitMult:          4,
	PushPullInterval:        30 * time.Second,
	TCPTimeout:              10 * time.Second,
}

// localTiming is tuned for loopback: a silent member is declared failed in
// about a second, yet a member stalled by a loaded 2-core CI machine has
// time to refute (ProbeTimeout of 100ms, three probe rounds of suspicion).
// Push/pull runs every second: when many members join at once, gossip
// occasionally fails to bring one member the news of another, and only a
// full state sync repairs that (see docs/CLUSTER.md, "Convergence").
var localTiming = Timing{
	ProbeInterval:           200 * time.Millisecond,
	ProbeTimeout:            100 * time.Millisecond,
	IndirectChecks:          2,
	SuspicionMult:           3,
	SuspicionMaxTimeoutMult: 4,
	GossipInterval:          30 * time.Millisecond,
	GossipNodes:             3,
	GossipToTheDeadTime:     2 * time.Second,
	RetransmitMult:          4,
	PushPullInterval:        time.Second,
	TCPTimeout:              2 * time.Second,
}

// withDefaults fills zero fields with the LAN defaults.
func (t Timing) withDefaults() Timing {
	d := lanTiming
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&t.ProbeInterval, d.ProbeInterval)
	setDur(&t.ProbeTimeout, d.ProbeTimeout)
	setInt(&t.IndirectChecks, d.IndirectChecks)
	setInt(&t.SuspicionMult, d.SuspicionMult)
	setInt(&t.SuspicionMaxTimeoutMult, d.SuspicionMaxTimeoutMult)
	setDur(&t.GossipInterval, d.GossipInterval)
	setInt(&t.GossipNodes, d.GossipNodes)
	setDur(&t.GossipToTheDeadTime, d.GossipToTheDeadTime)
	setInt(&t.RetransmitMult, d.RetransmitMult)
	setDur(&t.PushPullInterval, d.PushPullInterval)
	setDur(&t.TCPTimeout, d.TCPTimeout)
	return t
}

// DefaultLANConfig is the preset for a real cluster: gossip on port 7946 of
// every interface, memberlist's LAN timings (a silent member is declared
// failed after about 5s in a small cluster, see
// [Config.FailureDetectionTimeout]). Set Name (or rely on the host name),
// GossipKeys, QUICAddr and Join.
func DefaultLANConfig() Config {
	return Config{
		BindAddr: "0.0.0.0",
		BindPort: 7946,
		Timing:   lanTiming,
	}
}

// DefaultLocalConfig is the preset for clusters on one machine and tests:
// 127.0.0.1, a free port, and fast probe and gossip intervals (a silent
// member is declared failed in about a second). Encryption is still required:
// set GossipKeys, or InsecureNoEncryption in a test that is not about C6.
func DefaultLocalConfig() Config {
	return Config{
		BindAddr: "127.0.0.1",
		BindPort: 0,
		Timing:   localTiming,
	}
}

// Limits on configuration and metadata fields.
const (
	// MaxNameLen bounds a member name (and so the node ID in the metadata).
	MaxNameLen = 128
	// MaxClusterNameLen is memberlist's label limit.
	MaxClusterNameLen = 255
	// DefaultClusterName is used when Config.ClusterName is empty.
	DefaultClusterName = "acpp"
	defaultEventBuffer = 256
	defaultRetention   = 256
	defaultReconnect   = 30 * time.Second
)

// withDefaults returns c with every zero field that has a default filled in.
// It does not validate.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = defaultReconnect
	}
	if c.EventBuffer == 0 {
		c.EventBuffer = defaultEventBuffer
	}
	if c.DepartedRetention == 0 {
		c.DepartedRetention = defaultRetention
	}
	// A negative DepartedRetention (keep none) stays negative: Config()
	// gives back what is in use, and 0 would read as the default.
	c.Timing = c.Timing.withDefaults()
	return c
}

// Validate reports every invalid field at once (joined with errors.Join),
// each naming the field, the value and the bound. The result wraps
// [ErrInvalidConfig]. Zero fields are checked after their defaults apply.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if err := checkName(c.Name); err != nil {
		bad("Name %q: %v; set a unique name per node", c.Name, err)
	}
	if len(c.ClusterName) > MaxClusterNameLen {
		bad("ClusterName is %d bytes, must be at most %d", len(c.ClusterName), MaxClusterNameLen)
	}
	if _, err := netip.ParseAddr(c.BindAddr); err != nil {
		bad("BindAddr %q is not an IP address (use 0.0.0.0 for every interface)", c.BindAddr)
	}
	if c.BindPort < 0 || c.BindPort > math.MaxUint16 {
		bad("BindPort %d must be in [0, 65535] (0 picks a free port)", c.BindPort)
	}
	if c.AdvertiseAddr != "" {
		if a, err := netip.ParseAddr(c.AdvertiseAddr); err != nil {
			bad("AdvertiseAddr %q is not an IP address", c.AdvertiseAddr)
		} else if a.IsUnspecified() {
			bad("AdvertiseAddr %q is unspecified; give an address other members can reach", c.AdvertiseAddr)
		}
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > math.MaxUint16 {
		bad("AdvertisePort %d must be in [0, 65535] (0 means the bound port)", c.AdvertisePort)
	} else if c.AdvertisePort != 0 && c.BindPort == 0 {
		bad("AdvertisePort %d needs a fixed BindPort (BindPort 0 picks a port at random)", c.AdvertisePort)
	}
	if c.QUICAddr != "" {
		if err := checkHostPort(c.QUICAddr); err != nil {
			bad("QUICAddr %q: %v", c.QUICAddr, err)
		}
	}
	if err := checkDevices(c.Devices); err != nil {
		bad("Devices: %v", err)
	}
	if c.InsecureNoEncryption {
		if len(c.GossipKeys) > 0 {
			bad("GossipKeys given with InsecureNoEncryption; drop one of them")
		}
	} else if len(c.GossipKeys) == 0 {
		bad("GossipKeys is empty: gossip encryption is required (C6); generate a key with the credentials subcommand, or set InsecureNoEncryption in tests")
	}
	for i, k := range c.GossipKeys {
		if err := checkKey(k); err != nil {
			bad("GossipKeys[%d]: %v", i, err)
		}
		for j := range i {
			if bytes.Equal(c.GossipKeys[j], k) {
				bad("GossipKeys[%d] repeats GossipKeys[%d]", i, j)
				break
			}
		}
	}
	for i, a := range c.Join {
		if a == "" {
			bad("Join[%d] is empty; give host:port of a running member", i)
		}
	}
	if c.JoinRetry < 0 {
		bad("JoinRetry %v must not be negative (0 means no retry)", c.JoinRetry)
	}
	if c.EventBuffer < 1 {
		bad("EventBuffer %d must be at least 1", c.EventBuffer)
	}
	errs = append(errs, c.Timing.validate()...)
	// The metadata must fit, whatever the fields above say.
	if len(errs) == 0 {
		if _, err := c.meta(0).Encode(); err != nil {
			bad("metadata: %w", err)
		}
	}
	return errors.Join(errs...)
}

func (t Timing) validate() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	pos := func(name string, d time.Duration) {
		if d < 0 {
			bad("Timing.%s %v must not be negative (0 means the LAN default)", name, d)
		}
	}
	posInt := func(name string, v int) {
		if v < 0 {
			bad("Timing.%s %d must not be negative (0 means the LAN default)", name, v)
		}
	}
	pos("ProbeInterval", t.ProbeInterval)
	pos("ProbeTimeout", t.ProbeTimeout)
	pos("GossipInterval", t.GossipInterval)
	pos("GossipToTheDeadTime", t.GossipToTheDeadTime)
	pos("PushPullInterval", t.PushPullInterval)
	pos("TCPTimeout", t.TCPTimeout)
	posInt("IndirectChecks", t.IndirectChecks)
	posInt("SuspicionMult", t.SuspicionMult)
	posInt("SuspicionMaxTimeoutMult", t.SuspicionMaxTimeoutMult)
	posInt("GossipNodes", t.GossipNodes)
	posInt("RetransmitMult", t.RetransmitMult)
	if t.ProbeTimeout > 0 && t.ProbeInterval > 0 && t.ProbeTimeout > t.ProbeInterval {
		bad("Timing.ProbeTimeout %v must not exceed Timing.ProbeInterval %v", t.ProbeTimeout, t.ProbeInterval)
	}
	return errs
}

// FailureDetectionTimeout estimates, for a cluster of the given number of
// members, how long after a member goes silent (crash, SIGKILL, network
// cut) every live member has declared it failed: one full round of probes
// by its peers, one probe's timeouts, the suspicion time (at its maximum
// when the cluster is too large for the suspicion to be confirmed quickly)
// and a few gossip rounds to spread the verdict. Waiters on a node (C5) use
// it as their deadline. It is an estimate for a healthy network, not a
// guarantee: a degraded member backs off its probes.
func (c Config) FailureDetectionTimeout(members int) time.Duration {
	t := c.Timing.withDefaults()
	n := max(members, 1)
	// memberlist: min = SuspicionMult × max(1, log10(n)) × ProbeInterval; it
	// waits for SuspicionMult-2 confirmations, and uses the minimum from the
	// start when the cluster has too few other members to give them.
	scale := math.Max(1, math.Log10(float64(n)))
	suspicion := time.Duration(float64(t.SuspicionMult) * scale * float64(t.ProbeInterval))
	if k := t.SuspicionMult - 2; n-2 >= k && k > 0 {
		suspicion *= time.Duration(t.SuspicionMaxTimeoutMult)
	}
	// Each peer probes members in a shuffled round robin: the silent member
	// is probed by some peer at least once every (n-1) intervals.
	probe := time.Duration(max(n-1, 1)) * t.ProbeInterval
	return probe + t.ProbeInterval + suspicion + 3*t.GossipInterval
}

func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxNameLen:
		return fmt.Errorf("%d bytes, must be at most %d", len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return errors.New("contains a control character")
		}
	}
	return nil
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("not host:port: %v", err)
	}
	if host == "" {
		return errors.New("empty host; give an address other nodes can dial")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return fmt.Errorf("port %q must be in [1, 65535]", port)
	}
	if len(s) > MaxQUICAddrLen {
		return fmt.Errorf("%d bytes, must be at most %d", len(s), MaxQUICAddrLen)
	}
	return nil
}

func checkKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("key is %d bytes, must be 16, 24 or 32 (AES-128/192/256)", len(k))
}
