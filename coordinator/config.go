package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node/nodeclient"
)

// Placement is the policy that picks a device for a command group that is
// neither pinned nor split.
type Placement uint8

const (
	// PlaceAuto (the default) chooses the device with the earliest
	// estimated finish: time to move the pages it lacks (from the page
	// directory) plus its queue (estimated from past kernel durations) plus
	// the kernel's own estimate; devices that cannot run the kernel are
	// never chosen. Ties go to the device holding most of the data, then
	// to the first device in job order.
	PlaceAuto Placement = iota
	// PlaceRoundRobin cycles through the devices that can run the kernel,
	// ignoring data and load: the baseline PlaceAuto is measured against.
	PlaceRoundRobin
)

func (p Placement) String() string {
	switch p {
	case PlaceAuto:
		return "auto"
	case PlaceRoundRobin:
		return "round-robin"
	}
	return fmt.Sprintf("placement(%d)", p)
}

// DeviceFilter selects the devices a job uses. Each non-empty list must
// match (they combine with AND); an empty filter selects every device of
// every node.
type DeviceFilter struct {
	// Kinds are device kinds ("cpu", "cuda").
	Kinds []string
	// Nodes are node names.
	Nodes []string
	// Devices are devices by their full name "node/kind:index"
	// ("n1/cuda:0").
	Devices []string
	// Labels maps a node name to its labels ("gpu", "rack-a"); a device
	// is selected when its node carries every label in MatchLabels. Nodes
	// do not publish labels; the caller (acpp-submit, from its cluster
	// file) supplies them.
	Labels      map[string][]string
	MatchLabels []string
}

func (f DeviceFilter) match(d Device) bool {
	if len(f.Kinds) > 0 && !slices.Contains(f.Kinds, d.Kind) {
		return false
	}
	if len(f.Nodes) > 0 && !slices.Contains(f.Nodes, d.Node) {
		return false
	}
	if len(f.Devices) > 0 && !slices.Contains(f.Devices, d.String()) {
		return false
	}
	for _, l := range f.MatchLabels {
		if !slices.Contains(f.Labels[d.Node], l) {
			return false
		}
	}
	return true
}

// Config configures a job. Start from the zero value and set Nodes and
// Credentials.
type Config struct {
	// Nodes are the QUIC addresses (host:port) of the acpp-node agents the
	// job runs on (required). Node IDs in the page directory are 1, 2, …
	// in this order; ClientNode (0) is the client itself. One address
	// (without Static or a negative MembershipInterval) stands for the
	// cluster: Open asks that node for the members and opens the job on
	// every alive one that is not draining too, after it.
	Nodes []string
	// Credentials are the client's certificate and key and the cluster CA
	// (required; credentials.LoadClient).
	Credentials *credentials.Credentials
	// Client, when set, is a nodeclient.Client the job uses instead of
	// starting its own (Credentials are then ignored). Several jobs of one
	// process must share one client per identity: nodes send read-back
	// pages to an identity over one connection, so a second client of the
	// same identity would not receive them. The job does not close it.
	Client *nodeclient.Client
	// Devices selects the devices of those nodes the job may use; the
	// zero value selects all of them.
	Devices DeviceFilter
	// Placement is the placement policy; the zero value is PlaceAuto.
	Placement Placement
	// JobID is the job's ID on every node; 0 picks one from the clock.
	JobID uint64
	// Lease is the job lease to ask the nodes for; 0 means each node's
	// default (30 s). The job renews it while it is open.
	Lease time.Duration
	// MaxBytes asks each node for a per-job memory limit (0: the node's).
	MaxBytes uint64
	// LostTimeout is how long a node may stay unreachable (its completion
	// feed failing) before the job treats it as lost; 0 means 5 seconds. Most losses are seen
	// sooner: the nodes' membership reports a peer that stops answering
	// gossip as failed in about 1 s with the local preset (5 s on a LAN),
	// and the job acts on that at once.
	LostTimeout time.Duration
	// PollInterval bounds one long poll of a node's completion feed; 0
	// means 2 seconds. A hung node is noticed within LostTimeout +
	// PollInterval.
	PollInterval time.Duration
	// NetworkBandwidth and LocalBandwidth (bytes per second) convert bytes
	// to move into time for placement; 0 means 500 MB/s between nodes and
	// 5 GB/s within a node.
	NetworkBandwidth, LocalBandwidth float64
	// OnNodeLoss is what the job does when it loses a node whose pages
	// had no other copy, or that was running groups: RecoverOnLoss (the
	// default) restores from the latest checkpoint and replays on the
	// nodes left; FailOnLoss fails with a *NodeLostError.
	OnNodeLoss NodeLossPolicy
	// Checkpoint is how often the job copies every buffer to the client
	// for recovery: CheckpointAuto (0, Young's interval from the last
	// checkpoint's time and NodeMTBF), CheckpointOff (-1), or every N
	// command groups (N > 0) at most: one is taken at a time, so the next
	// starts at the first Submit at least N groups after the last one
	// started and after it finished. A checkpoint finishes once the groups
	// submitted before it have run, so with many groups submitted ahead of
	// their execution they come further apart. Only with RecoverOnLoss.
	Checkpoint int
	// NodeMTBF is the mean time between failures of one node, for the
	// automatic checkpoint interval; 0 means 24 hours.
	NodeMTBF time.Duration
	// OnRecovery, when set, is called when a recovery starts and when it
	// ends (RecoveryReport.Done). It must not block and must not call the
	// Job.
	OnRecovery func(RecoveryReport)
	// OnCheckpoint, when set, is called when a checkpoint completes. It
	// must not block and must not call the Job.
	OnCheckpoint func(CheckpointReport)
	// MembershipInterval is how often the job asks a node for the
	// cluster's members: nodes that joined are offered to the job
	// (through Devices), nodes that drain hand their pages over and leave
	// it, nodes seen failed are lost. 0 means 500 ms; negative turns it
	// off (and with it joins and drains).
	MembershipInterval time.Duration
	// Static: nodes that join the cluster later are not added to the job.
	Static bool
	// OnNodeEvent, when set, is called when a node joins the job, starts
	// draining, has drained or is lost (once per node, however the loss
	// was found), from one goroutine of the job, in the order the events
	// happened; events after the job ended are dropped. It must not block
	// and must not call the Job.
	OnNodeEvent func(NodeEvent)
	// OnGroupDone, when set, is called once per finished command group
	// (progress bars, traces), from the job's goroutines, in completion
	// order per node. It must not block and must not call the Job.
	OnGroupDone func(GroupTrace)
	// Snapshots, when set, is bound to the job when Open returns: a live
	// view reads the job through it (snapshot.go), read-only.
	Snapshots *Snapshotter
	// Logger receives the job's events; nil discards them.
	Logger *slog.Logger
}

// Validate reports every bad field at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Nodes) == 0 {
		errs = append(errs, errors.New("Nodes is empty: give the QUIC address (host:port) of at least one acpp-node"))
	}
	seen := map[string]bool{}
	for i, a := range c.Nodes {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" {
			errs = append(errs, fmt.Errorf("Nodes[%d] = %q is not host:port", i, a))
		} else if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			errs = append(errs, fmt.Errorf("Nodes[%d] = %q: port %q must be in [1, 65535]", i, a, port))
		}
		if seen[a] {
			errs = append(errs, fmt.Errorf("Nodes[%d] = %q is listed twice", i, a))
		}
		seen[a] = true
	}
	if c.Credentials == nil && c.Client == nil {
		errs = append(errs, errors.New("Credentials are required: load them with credentials.LoadClient(dir, name)"))
	}
	if c.Placement > PlaceRoundRobin {
		errs = append(errs, fmt.Errorf("Placement %d is unknown; use PlaceAuto or PlaceRoundRobin", c.Placement))
	}
	if c.LostTimeout < 0 || c.PollInterval < 0 || c.Lease < 0 {
		errs = append(errs, errors.New("LostTimeout, PollInterval and Lease must not be negative"))
	}
	if c.OnNodeLoss > FailOnLoss {
		errs = append(errs, fmt.Errorf("OnNodeLoss %d is unknown; use RecoverOnLoss or FailOnLoss", c.OnNodeLoss))
	}
	if c.Checkpoint < CheckpointOff {
		errs = append(errs, fmt.Errorf("Checkpoint %d: want CheckpointAuto (0), CheckpointOff (-1) or a number of groups ≥ 1", c.Checkpoint))
	}
	if c.OnNodeLoss == FailOnLoss && c.Checkpoint > 0 {
		errs = append(errs, fmt.Errorf("Checkpoint %d has no effect with OnNodeLoss FailOnLoss (checkpoints are for recovery); leave it at CheckpointAuto or CheckpointOff, or recover", c.Checkpoint))
	}
	if c.NodeMTBF < 0 {
		errs = append(errs, errors.New("NodeMTBF must not be negative"))
	}
	for i, k := range c.Devices.Kinds {
		if _, err := device.ParseKind(k); err != nil {
			errs = append(errs, fmt.Errorf("Devices.Kinds[%d] = %q is no device kind; use cpu or cuda", i, k))
		}
	}
	for _, bw := range []struct {
		name string
		v    float64
	}{{"NetworkBandwidth", c.NetworkBandwidth}, {"LocalBandwidth", c.LocalBandwidth}} {
		if bw.v < 0 || math.IsNaN(bw.v) || math.IsInf(bw.v, 0) {
			errs = append(errs, fmt.Errorf("%s %v must be a finite number of bytes per second ≥ 0 (0 means the default)", bw.name, bw.v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c *Config) populate() {
	if c.LostTimeout == 0 {
		c.LostTimeout = 5 * time.Second
	}
	if c.NodeMTBF == 0 {
		c.NodeMTBF = 24 * time.Hour
	}
	if c.MembershipInterval == 0 {
		c.MembershipInterval = 500 * time.Millisecond
	}
	if c.PollInterval == 0 {
		c.PollInterval = 2 * time.Second
	}
	if c.NetworkBandwidth == 0 {
		c.NetworkBandwidth = 500e6
	}
	if c.LocalBandwidth == 0 {
		c.LocalBandwidth = 5e9
	}
	if c.JobID == 0 {
		c.JobID = uint64(time.Now().UnixNano())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}
