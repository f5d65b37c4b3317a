package acpp

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/engine/cluster"
)

// ErrClosureOnCluster: a command group of a cluster queue (Connect) declared
// a Go closure (ParallelFor, ParallelForChunks, SingleTask, ParallelForND).
// Only named kernels travel to the nodes; Copy, CopyToHost, CopyFromHost
// and Fill run there too (as built-in kernels, or through the client).
var ErrClosureOnCluster = engine.ErrClosureOnCluster

// ErrNotOnCluster: the operation needs local devices (USM, per-device
// release), which a cluster queue does not have.
var ErrNotOnCluster = engine.ErrNotOnCluster

// clusterConfig holds the options only Connect takes.
type clusterConfig struct {
	creds       *credentials.Credentials
	dir, client string
	dirSet      bool // WithCredentials was given
	nodes       []string
	labels      map[string][]string
	match       []string
	tunes       []func(*cluster.CoordinatorConfig)
	onLoss      NodeLossPolicy
	checkpoint  *int
	given       []string // the options given, by name, once each (NewQueue's error names them)
}

// NodeLossPolicy is what a cluster queue's job does when it loses a node
// (WithNodeLoss).
type NodeLossPolicy = cluster.NodeLossPolicy

const (
	// RecoverOnNodeLoss (the default): pages whose only copy was on the
	// lost node are rebuilt from the latest checkpoint by replaying the
	// command groups since then on the nodes left; groups that were
	// running there run again; the program's events complete as usual.
	RecoverOnNodeLoss NodeLossPolicy = cluster.RecoverOnLoss
	// FailOnNodeLoss: the job fails with an error matching
	// coordinator.ErrNodeLost (MPI's contract).
	FailOnNodeLoss NodeLossPolicy = cluster.FailOnLoss
)

// Checkpoint settings for WithCheckpoints.
const (
	// CheckpointAuto: at Young's interval, sqrt(2 × checkpoint time ×
	// the nodes' MTBF) (the default).
	CheckpointAuto = cluster.CheckpointAuto
	// CheckpointOff: none; a recovery replays from the job's start.
	CheckpointOff = cluster.CheckpointOff
)

// WithNodeLoss sets what a cluster queue's job does when it loses a node
// (RecoverOnNodeLoss, the default, or FailOnNodeLoss). Connect only.
func WithNodeLoss(p NodeLossPolicy) Option {
	return func(c *queueConfig) { c.clusterCfg("WithNodeLoss").onLoss = p }
}

// WithCheckpoints sets how often a recovering cluster queue copies every
// buffer to this process (its checkpoint): CheckpointAuto, CheckpointOff,
// or every n command groups (n ≥ 1) at most: one at a time, so with many
// groups submitted ahead of their execution they come further apart
// (coordinator.Config.Checkpoint). Connect only.
func WithCheckpoints(n int) Option {
	return func(c *queueConfig) { c.clusterCfg("WithCheckpoints").checkpoint = &n }
}

// clusterCfg returns the Connect-only options, noting that option was given.
func (c *queueConfig) clusterCfg(option string) *clusterConfig {
	if c.cluster == nil {
		c.cluster = &clusterConfig{}
	}
	if !slices.Contains(c.cluster.given, option) {
		c.cluster.given = append(c.cluster.given, option)
	}
	return c.cluster
}

// WithCredentials names the client credentials Connect uses: the directory
// made by `acpp-node credentials --dir DIR client NAME` and the client's
// name (acpp-submit's --credentials and --client). Connect only.
func WithCredentials(dir, client string) Option {
	return func(c *queueConfig) {
		cc := c.clusterCfg("WithCredentials")
		cc.dir, cc.client, cc.dirSet = dir, client, true
	}
}

// WithClientCredentials passes credentials already loaded with
// credentials.LoadClient. Connect only.
func WithClientCredentials(creds *credentials.Credentials) Option {
	return func(c *queueConfig) { c.clusterCfg("WithClientCredentials").creds = creds }
}

// WithNodes limits a cluster queue to the devices of the named nodes
// (acpp-submit's --nodes). Connect only; WithKind applies too. A name
// that no node reached at Connect has is logged as a warning (a typo, or
// a node not up yet: its devices join the job if it joins the cluster).
// An empty name, or none, is ErrOption.
func WithNodes(names ...string) Option {
	return func(c *queueConfig) { cc := c.clusterCfg("WithNodes"); cc.nodes = append(cc.nodes, names...) }
}

// WithLabels limits a cluster queue to the nodes that carry every label in
// match; labels maps node names to their labels (nodes do not publish
// labels: they come from the caller, e.g. a cluster file). Given several
// times, the labels of all add up and a node must carry every match of
// all. Connect only; it refuses labels with no label to match
// (ErrOption: they would select every node).
func WithLabels(labels map[string][]string, match ...string) Option {
	return func(c *queueConfig) {
		cc := c.clusterCfg("WithLabels")
		if cc.labels == nil {
			cc.labels = map[string][]string{}
		}
		for node, ls := range labels {
			cc.labels[node] = append(cc.labels[node], ls...)
		}
		cc.match = append(cc.match, match...)
	}
}

// WithCoordinator adjusts the job's coordinator.Config before Connect opens
// it (placement policy, loss detection times, a shared nodeclient.Client):
// f gets a *coordinator.Config (the parameter's type is an alias of it),
// after the other options have filled it in. Several WithCoordinator
// options all apply, in order. Connect only.
func WithCoordinator(f func(*cluster.CoordinatorConfig)) Option {
	return func(c *queueConfig) {
		if f != nil {
			cc := c.clusterCfg("WithCoordinator")
			cc.tunes = append(cc.tunes, f)
		}
	}
}

// OnNode runs the command group on device id of the named node of a
// cluster queue (a pinned device). On(id) alone picks the first device of
// the job with that kind and index. A queue of local devices has no nodes:
// there Submit refuses OnNode with ErrNoDevice (use On).
func OnNode(node string, id DeviceID) SubmitOption {
	return func(c *submitConfig) {
		if c.dev != nil && (*c.dev != id || c.node != node) {
			c.again("OnNode")
		}
		c.dev, c.node = &id, node
	}
}

// Connect opens a job on the acpp-node agents at addrs (their QUIC
// addresses; one address stands for the cluster: the job opens on every
// alive, non-draining member that node lists) and returns a queue over
// their devices: all of them, or those
// WithKind, WithNodes and WithLabels select. The job's coordinator runs in
// this process. Buffers, accessors, named kernels (h.Launch), Copy and
// Fill, host access, events, Wait and Close work as on NewQueue's queue;
// Go closures cannot travel and are refused at Submit (ErrClosureOnCluster).
// A kernel registered in this process with PTX or CUDA C only is sent to
// the nodes on its first use. A node lost during the job is recovered
// from (WithNodeLoss, WithCheckpoints): what only it held is rebuilt on
// the nodes left; with FailOnNodeLoss, or when no node is left, the
// groups fail with an error matching coordinator.ErrNodeLost
// (*coordinator.NodeLostError names the node and the lost ranges). Nodes
// that join the cluster while the job runs are added to it (when they
// pass WithKind, WithNodes, WithLabels); a node that drains hands over
// its pages before it leaves. ctx bounds the queue's life as for NewQueue. Split
// and Map work as on NewQueue's queue; the coordinator makes the chunks.
// Options of NewQueue only (WithDevice, WithCPUDevices, WithWorkers,
// WithDevices, WithAcceleratorsFirst, WithMemoryLimit) are refused with
// ErrOption.
func Connect(ctx context.Context, addrs []string, opts ...Option) (*Queue, error) {
	if ctx == nil {
		return nil, errors.New("acpp: Connect needs a context; pass context.Background() for a queue that lives until Close")
	}
	var cfg queueConfig
	for _, o := range opts {
		if o != nil { // a nil option is none, as in onlyOptions
			o(&cfg)
		}
	}
	var errs []error
	if cfg.cpus != 0 || cfg.workers != 0 || len(cfg.devices) > 0 {
		errs = append(errs, fmt.Errorf("%w: WithCPUDevices, WithWorkers and WithDevices apply to NewQueue only; the nodes' devices are configured on acpp-node", ErrOption))
	}
	if len(cfg.selected) > 0 {
		errs = append(errs, fmt.Errorf("%w: WithDevice applies to NewQueue only; select cluster devices with WithKind, WithNodes or WithLabels, and pin a group with acpp.OnNode", ErrOption))
	}
	if cfg.accFirst {
		errs = append(errs, fmt.Errorf("%w: WithAcceleratorsFirst applies to NewQueue only; the coordinator places each group of a cluster queue where its kernel runs (pin one with acpp.OnNode, select devices with WithKind)", ErrOption))
	}
	if cfg.memSet {
		errs = append(errs, fmt.Errorf("%w: WithMemoryLimit applies to NewQueue only; each node keeps budgets of its own (acpp-node --max-bytes)", ErrOption))
	}
	cc := cfg.cluster
	if cc == nil {
		cc = &clusterConfig{}
	}
	if err := checkKinds(cfg.kinds); err != nil {
		errs = append(errs, err)
	}
	if slices.Contains(cc.given, "WithNodes") && (len(cc.nodes) == 0 || slices.Contains(cc.nodes, "")) {
		errs = append(errs, fmt.Errorf("%w: WithNodes(%q) names no node (an empty name, or none): it would select nothing; give the nodes' names (acpp-submit nodes lists them), or leave WithNodes out for every node", ErrOption, cc.nodes))
	}
	if slices.Contains(cc.given, "WithLabels") && len(cc.match) == 0 {
		errs = append(errs, fmt.Errorf("%w: WithLabels names no label to match, so it would select every node whatever their labels; name the labels a node must carry (WithLabels(labels, \"gpu\"))", ErrOption))
	}
	if cc.onLoss != RecoverOnNodeLoss && cc.onLoss != FailOnNodeLoss {
		errs = append(errs, fmt.Errorf("%w: WithNodeLoss(%d) is unknown; pass acpp.RecoverOnNodeLoss or acpp.FailOnNodeLoss", ErrOption, cc.onLoss))
	}
	if cc.checkpoint != nil {
		switch n := *cc.checkpoint; {
		case n < CheckpointOff:
			errs = append(errs, fmt.Errorf("%w: WithCheckpoints(%d): pass acpp.CheckpointAuto, acpp.CheckpointOff or a number of command groups ≥ 1", ErrOption, n))
		case n > 0 && cc.onLoss == FailOnNodeLoss:
			errs = append(errs, fmt.Errorf("%w: WithCheckpoints(%d) has no effect with WithNodeLoss(FailOnNodeLoss): checkpoints are for recovery; drop one of them", ErrOption, n))
		}
	}
	creds := cc.creds
	switch {
	case creds != nil && cc.dirSet:
		errs = append(errs, fmt.Errorf("%w: WithCredentials and WithClientCredentials both name client credentials; pass one of them", ErrOption))
	case creds != nil:
	case cc.dirSet && (cc.dir == "" || cc.client == ""):
		errs = append(errs, fmt.Errorf("%w: WithCredentials(%q, %q): both the credentials directory and the client name are needed", ErrOption, cc.dir, cc.client))
	case cc.dirSet:
		c, err := credentials.LoadClient(cc.dir, cc.client)
		if err != nil {
			errs = append(errs, err)
		}
		creds = c
	default:
		errs = append(errs, errors.New("Connect needs client credentials: pass acpp.WithCredentials(dir, client) (made by acpp-node credentials --dir DIR client NAME) or acpp.WithClientCredentials"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("acpp: Connect: %w", err)
	}
	qctx, cancel := context.WithCancelCause(ctx)
	eng, err := cluster.Open[cgroup](qctx, cluster.Config{Addrs: addrs, Credentials: creds, Logger: cfg.log, Kinds: cfg.kinds,
		Nodes: cc.nodes, Labels: cc.labels, MatchLabels: cc.match, OnNodeLoss: cc.onLoss, Checkpoint: cc.checkpoint, Tune: tuneAll(cc.tunes)})
	if err != nil {
		cancel(err)
		return nil, err
	}
	return openQueue(eng, qctx, cancel, cfg.onError, false), nil
}

// tuneAll applies every WithCoordinator function in order (nil if none).
func tuneAll(fs []func(*cluster.CoordinatorConfig)) func(*cluster.CoordinatorConfig) {
	if len(fs) == 0 {
		return nil
	}
	return func(c *cluster.CoordinatorConfig) {
		for _, f := range fs {
			f(c)
		}
	}
}
