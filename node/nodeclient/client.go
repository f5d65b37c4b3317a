package nodeclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// Config configures a Client.
type Config struct {
	// Credentials are the client's certificate, key and cluster CA
	// (required; credentials.LoadClient).
	Credentials *credentials.Credentials
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// DialTimeout bounds connection set-up; 0 means 10 seconds.
	DialTimeout time.Duration
}

// ErrNodeLost matches an *InstrFailedError with a failure caused by the
// loss of a node.
var ErrNodeLost = errors.New("nodeclient: a node was lost")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("nodeclient: closed")

// InstrFailedError lists the instructions of a job on a node that failed.
type InstrFailedError struct {
	Node   string
	Job    uint64
	Failed []proto.InstrError
}

func (e *InstrFailedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nodeclient: %d instruction(s) of job %d failed on node %s", len(e.Failed), e.Job, e.Node)
	for i, f := range e.Failed {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-3)
			break
		}
		fmt.Fprintf(&b, "; %d: %s", f.ID, f.Message)
	}
	return b.String()
}

// Is matches ErrNodeLost when a failure was a node loss.
func (e *InstrFailedError) Is(target error) bool {
	return target == ErrNodeLost && len(e.LostNodes()) > 0
}

// LostNodes names the nodes whose loss failed instructions, sorted.
func (e *InstrFailedError) LostNodes() []string {
	var out []string
	for _, f := range e.Failed {
		if f.Code == proto.CodeNodeLost && f.Node != "" && !slices.Contains(out, f.Node) {
			out = append(out, f.Node)
		}
	}
	slices.Sort(out)
	return out
}

// Client talks to nodes. Start it with Start; Close it.
type Client struct {
	tr *transport.Transport

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	reads  map[readKey]*readback
	ticket uint32
	closed bool
}

type readKey struct {
	node   string
	job    uint64
	ticket uint32
}

type readback struct {
	runs [][]byte
	done chan error
}

// Start opens the client's QUIC endpoint (it listens on nothing).
func Start(cfg Config) (*Client, error) {
	if cfg.Credentials == nil {
		return nil, errors.New("nodeclient: Credentials are required: load them with credentials.LoadClient(dir, name)")
	}
	tr, err := transport.Start(transport.Config{Credentials: cfg.Credentials, Logger: cfg.Logger, DialTimeout: cfg.DialTimeout, Software: "acpp-nodeclient"})
	if err != nil {
		return nil, fmt.Errorf("nodeclient: %w", err)
	}
	c := &Client{tr: tr, reads: map[readKey]*readback{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	tr.HandlePages(c.onPages)
	return c, nil
}

// Identity is the client's identity.
func (c *Client) Identity() credentials.Identity { return c.tr.Identity() }

// Connect dials the node at addr (its QUIC address) and returns its name.
func (c *Client) Connect(ctx context.Context, addr string) (string, error) {
	id, err := c.tr.DialAddr(ctx, addr)
	if err != nil {
		return "", err
	}
	return id.Name, nil
}

// Inventory asks node for its devices, memories and load.
func (c *Client) Inventory(ctx context.Context, node string) (*proto.Inventory, error) {
	var inv proto.Inventory
	if err := c.tr.Call(ctx, credentials.Node(node), proto.MsgInventory, nil, &inv); err != nil {
		return nil, err
	}
	return &inv, nil
}

// Members asks node for the cluster members it sees, with their QUIC
// addresses and device summaries (discovery from one address).
func (c *Client) Members(ctx context.Context, node string) (*proto.Members, error) {
	var ms proto.Members
	if err := c.tr.Call(ctx, credentials.Node(node), proto.MsgMembers, nil, &ms); err != nil {
		return nil, err
	}
	return &ms, nil
}

// Drain asks node to drain and leave, as SIGTERM would (operators only:
// the client's certificate must have the operator role).
func (c *Client) Drain(ctx context.Context, node, reason string) (*proto.NodeDraining, error) {
	var r proto.NodeDraining
	if err := c.tr.Call(ctx, credentials.Node(node), proto.MsgNodeDrain, &proto.NodeDrain{Reason: reason}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Ping measures a round trip to node.
func (c *Client) Ping(ctx context.Context, node string) (time.Duration, error) {
	return c.tr.Ping(ctx, credentials.Node(node))
}

// Close closes every job's renewal and the connections. Jobs left open are
// freed by the nodes when their leases run out.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	return c.tr.Close()
}

func (c *Client) onPages(_ context.Context, from credentials.Identity, h *proto.PageHeader) (transport.PageSink, error) {
	c.mu.Lock()
	rb := c.reads[readKey{from.Name, h.Job, h.Mem}]
	delete(c.reads, readKey{from.Name, h.Job, h.Mem})
	c.mu.Unlock()
	if rb == nil {
		return transport.PageSink{}, &proto.ErrorReply{Code: proto.CodeRefused, Message: fmt.Sprintf("no read back of job %d with ticket %d is expected from %s", h.Job, h.Mem, from)}
	}
	var n uint64
	for _, r := range rb.runs {
		n += uint64(len(r))
	}
	if total, err := h.Validate(0); err != nil || total != n {
		rb.done <- fmt.Errorf("nodeclient: read back from %s: header for %d bytes, expected %d (%v)", from, total, n, err)
		return transport.PageSink{}, &proto.ErrorReply{Code: proto.CodeRefused, Message: "unexpected size"}
	}
	return transport.PageSink{Dst: rb.runs, Done: func(err error) error {
		rb.done <- err
		return nil
	}}, nil
}

// JobOptions tune a job on one node.
type JobOptions struct {
	// Lease is the lease to ask for; 0 means the node's default. The job
	// renews it at a third of what the node granted.
	Lease time.Duration
	// MaxBytes asks for a memory limit below the node's (0: the node's).
	MaxBytes uint64
	// Recovery numbers the job's recoveries when it is opened again after
	// losing a node (0: a first open); the node counts these.
	Recovery uint32
}

// Job is an open job on one node.
type Job struct {
	c       *Client
	node    string
	id      uint64
	granted proto.JobOpened
	stop    chan struct{}
	once    sync.Once
	// events is the completion feed's session: one stream for every poll.
	events *transport.Session
}

// Open opens job id on node and starts renewing its lease.
func (c *Client) Open(ctx context.Context, node string, id uint64, opts JobOptions) (*Job, error) {
	j := &Job{c: c, node: node, id: id, stop: make(chan struct{}), events: c.tr.Session(credentials.Node(node), proto.MsgEvents)}
	if err := c.tr.Call(ctx, credentials.Node(node), proto.MsgJobOpen, &proto.JobOpen{Job: id, Lease: int64(opts.Lease), MaxBytes: opts.MaxBytes, Recovery: opts.Recovery}, &j.granted); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go j.renew()
	return j, nil
}

// Node is the job's node; ID its ID.
func (j *Job) Node() string { return j.node }

// ID is the job's ID.
func (j *Job) ID() uint64 { return j.id }

// Lease is the lease the node granted.
func (j *Job) Lease() time.Duration { return time.Duration(j.granted.Lease) }

// MaxBytes is the job's memory limit on the node (0: none).
func (j *Job) MaxBytes() uint64 { return j.granted.MaxBytes }

// Boot is the boot ID of the node's run that holds the job (0: the node
// did not say).
func (j *Job) Boot() uint64 { return j.granted.Boot }

func (j *Job) renew() {
	defer j.c.wg.Done()
	every := max(j.Lease()/3, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-j.c.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(j.c.ctx, every)
			err := j.c.tr.Call(ctx, credentials.Node(j.node), proto.MsgJobRenew, &proto.JobRef{Job: j.id}, nil)
			cancel()
			var re *transport.RemoteError
			if errors.As(err, &re) && re.Code == proto.CodeNoJob {
				return // closed on the node; nothing left to renew
			}
		}
	}
}

// Submit submits instructions (at most proto.MaxBatch per call are sent
// in one message; longer lists are split). It returns the number of the
// job's unfinished instructions on the node.
func (j *Job) Submit(ctx context.Context, instrs ...proto.Instr) (int, error) {
	var out proto.Submitted
	for len(instrs) > 0 {
		n := min(len(instrs), proto.MaxBatch)
		if err := j.c.tr.Call(ctx, credentials.Node(j.node), proto.MsgSubmit, &proto.Submit{Job: j.id, Instrs: instrs[:n]}, &out); err != nil {
			return 0, err
		}
		instrs = instrs[n:]
	}
	return out.Pending, nil
}

// Forget tells the node that no later instruction or wait names a
// finished instruction with an ID below id, so it may drop their records
// (long jobs call it now and then). It takes effect with the next batch
// (an empty Submit is sent).
func (j *Job) Forget(ctx context.Context, id uint64) error {
	return j.c.tr.Call(ctx, credentials.Node(j.node), proto.MsgSubmit, &proto.Submit{Job: j.id, Forget: id}, nil)
}

// Poll returns the state of ids now, or once they all finished if that is
// before ctx's deadline.
func (j *Job) Poll(ctx context.Context, ids ...uint64) (proto.WaitResult, error) {
	var r proto.WaitResult
	err := j.c.tr.Call(ctx, credentials.Node(j.node), proto.MsgWait, &proto.Wait{Job: j.id, IDs: ids}, &r)
	return r, err
}

// Wait waits until ids have finished. It returns an *InstrFailedError if
// any failed, or the context's error.
func (j *Job) Wait(ctx context.Context, ids ...uint64) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := j.Poll(pctx, ids...)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return err
		}
		if len(r.Pending) == 0 {
			if len(r.Failed) > 0 {
				return &InstrFailedError{Node: j.node, Job: j.id, Failed: r.Failed}
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Events returns completion events after `after` (acknowledging those up
// to it), waiting for at least one until shortly before ctx's deadline.
func (j *Job) Events(ctx context.Context, after uint64, limit int) ([]proto.Event, error) {
	var r proto.EventsReply
	err := j.events.Call(ctx, &proto.EventsRequest{Job: j.id, After: after, Max: limit}, &r)
	return r.Events, err
}

// Upload sends boxes of a buffer into the job's allocation in memory mem
// on the node, reading them from host, a host image of the whole buffer
// (range rng, elemSize-byte elements, row-major). The node must have an
// InstrUpload with the same buffer, memory and boxes; Upload returns when
// the bytes are on the node.
func (j *Job) Upload(ctx context.Context, buffer uint64, mem uint32, rng [3]uint64, elemSize uint32, boxes []proto.Box, host []byte) error {
	var runs [][]byte
	var err error
	for _, b := range boxes {
		if runs, err = proto.AppendBoxRuns(runs, host, rng, elemSize, b); err != nil {
			return fmt.Errorf("nodeclient: upload: %w", err)
		}
	}
	h := &proto.PageHeader{Job: j.id, Buffer: buffer, Mem: mem, ElemSize: elemSize, Boxes: boxes}
	return j.c.tr.SendPages(ctx, credentials.Node(j.node), h, runs)
}

// ReadBack submits an InstrReadBack (ID id, after deps) of boxes of
// buffer's allocation in memory mem and writes the pages into host, a host
// image of the whole buffer (range rng, elemSize-byte elements). It
// returns when they are there.
func (j *Job) ReadBack(ctx context.Context, id uint64, deps []uint64, buffer uint64, mem uint32, rng [3]uint64, elemSize uint32, boxes []proto.Box, host []byte) error {
	var runs [][]byte
	var err error
	for _, b := range boxes {
		if runs, err = proto.AppendBoxRuns(runs, host, rng, elemSize, b); err != nil {
			return fmt.Errorf("nodeclient: read back: %w", err)
		}
	}
	rb := &readback{runs: runs, done: make(chan error, 2)}
	c := j.c
	c.mu.Lock()
	c.ticket++
	if c.ticket == 0 {
		c.ticket++
	}
	key := readKey{j.node, j.id, c.ticket}
	c.reads[key] = rb
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.reads, key)
		c.mu.Unlock()
	}()
	in := proto.Instr{ID: id, Kind: proto.InstrReadBack, Deps: deps, Buffer: buffer, Mem: mem, Boxes: boxes, Ticket: key.ticket}
	if _, err := j.Submit(ctx, in); err != nil {
		return err
	}
	if err := j.Wait(ctx, id); err != nil {
		return err
	}
	select {
	case err := <-rb.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the job on the node (freeing everything it held there) and
// stops renewing its lease.
func (j *Job) Close(ctx context.Context) error {
	j.Abandon()
	return j.c.tr.Call(ctx, credentials.Node(j.node), proto.MsgJobClose, &proto.JobRef{Job: j.id}, nil)
}

// Abandon stops renewing the job's lease and following its events without
// a word to the node, for a node the client gave up on (lost: it may not
// answer): if it is alive after all, it frees the job when the lease runs
// out. Close after Abandon still closes the job on the node.
func (j *Job) Abandon() {
	j.once.Do(func() { close(j.stop) })
	_ = j.events.Close()
}
