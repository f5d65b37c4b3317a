package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// ErrCluster marks a failure to reach or use the cluster (no member
// answers, bad credentials): the message says what to check.
var ErrCluster = errors.New("cluster unreachable")

// ClusterConfig says which cluster a job runs on and as whom.
type ClusterConfig struct {
	// Addrs are QUIC addresses (host:port) of acpp-node agents. One
	// address is expanded to every alive member of its cluster (the node's
	// member list); several are used as given.
	Addrs []string
	// CredentialsDir holds ca.crt and clients/<Client>.crt/.key (made by
	// acpp-node credentials … client NAME).
	CredentialsDir string
	// Client is the client name of the credentials (required).
	Client string
	// Nodes and Kinds restrict the devices used (node names, device
	// kinds); empty means all.
	Nodes, Kinds []string
	// Placement is the coordinator's placement policy (zero: auto).
	Placement coordinator.Placement
	// client, when set (tests), is used instead of starting one.
	client *nodeclient.Client
}

// ClusterStats are what a cluster run adds to the summary.
type ClusterStats struct {
	// Nodes are the node names, in job order.
	Nodes []string
	// Bytes are the bytes moved per link "src->dst" (node names, "client"),
	// as the coordinator planned and issued them: pages travel only where
	// the plan sends them (C3).
	Bytes map[string]int64
	// KernelTime is the kernel time per device the coordinator observed.
	KernelTime map[string]time.Duration
	// Groups is the number of coordinator command groups (a split step
	// counts one per chunk); Gated those held back for ordering (D3).
	Groups, Gated int
	// HostOps counts steps done through the client (fills and copies of
	// element types without a node-side kernel).
	HostOps int
}

func (c *ClusterStats) summary(b *strings.Builder) {
	links := slices.Sorted(maps.Keys(c.Bytes))
	var between, up, down int64
	var parts []string
	for _, l := range links {
		n := c.Bytes[l]
		src, dst, _ := strings.Cut(l, "->")
		switch {
		case src == "client":
			up += n
		case dst == "client":
			down += n
		default:
			between += n
		}
		parts = append(parts, fmt.Sprintf("%s %s", strings.Replace(l, "->", "→", 1), bytesStr(n)))
	}
	fmt.Fprintf(b, "  data moved: between nodes %s, client→nodes %s, nodes→client %s; %d coordinator groups, %d gated\n",
		bytesStr(between), bytesStr(up), bytesStr(down), c.Groups, c.Gated)
	if len(parts) > 0 {
		fmt.Fprintf(b, "  per link: %s\n", strings.Join(parts, ", "))
	}
	if c.HostOps > 0 {
		fmt.Fprintf(b, "  note: %d fills or copies ran through the client (no node-side kernel for their element type)\n", c.HostOps)
	}
}

// Dial starts a node client with the credentials of cfg and connects to
// its addresses; with one address it asks that node for the members and
// returns every alive member's QUIC address, else the addresses as given.
// The caller closes the client.
func Dial(ctx context.Context, cfg *ClusterConfig, log *slog.Logger) (*nodeclient.Client, []string, *proto.Members, error) {
	if len(cfg.Addrs) == 0 {
		return nil, nil, nil, usageError{errors.New("--cluster needs at least one address (host:port) of an acpp-node's QUIC listener")}
	}
	cl := cfg.client
	own := false
	if cl == nil {
		if cfg.Client == "" {
			return nil, nil, nil, usageError{errors.New("--client NAME (or ACPP_CLIENT) is required with --cluster: the client name issued by acpp-node credentials --dir DIR client NAME")}
		}
		dir := cfg.CredentialsDir
		if dir == "" {
			dir = "/etc/acpp"
		}
		creds, err := credentials.LoadClient(dir, cfg.Client)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("load client credentials %q from %s: %w (make them with acpp-node credentials --dir %s client %s, or pass --credentials DIR)", cfg.Client, dir, err, dir, cfg.Client)
		}
		if cl, err = nodeclient.Start(nodeclient.Config{Credentials: creds, Logger: log, DialTimeout: 5 * time.Second}); err != nil {
			return nil, nil, nil, err
		}
		own = true
	}
	fail := func(err error) (*nodeclient.Client, []string, *proto.Members, error) {
		if own {
			cl.Close()
		}
		return nil, nil, nil, err
	}
	name, err := cl.Connect(ctx, cfg.Addrs[0])
	if err != nil {
		return fail(fmt.Errorf("%w: connect to %s: %w; is acpp-node running there (its --quic-addr), and are these credentials of its cluster?", ErrCluster, cfg.Addrs[0], err))
	}
	ms, err := cl.Members(ctx, name)
	if err != nil {
		return fail(fmt.Errorf("%w: ask node %s (%s) for the members: %w", ErrCluster, name, cfg.Addrs[0], err))
	}
	if len(cfg.Addrs) > 1 {
		return cl, cfg.Addrs, ms, nil
	}
	var addrs []string
	for _, m := range ms.Members {
		if m.State == "alive" && !m.Leaving && m.QUICAddr != "" {
			addrs = append(addrs, m.QUICAddr)
		}
	}
	// The address given first, so that its node is node 1.
	first := cfg.Addrs[0]
	for _, m := range ms.Members {
		if m.Name == name && m.QUICAddr != "" {
			first = m.QUICAddr
		}
	}
	addrs = slices.DeleteFunc(addrs, func(a string) bool { return a == first })
	return cl, append([]string{cfg.Addrs[0]}, addrs...), ms, nil
}

// ---- the cluster engine ----

type clusterEngine struct {
	job   *coordinator.Job
	cl    *nodeclient.Client
	ownCl bool
	stats ClusterStats
	devs  []coordinator.Device
	mu    sync.Mutex // guards done
	done  map[coordinator.GroupID]coordinator.GroupTrace
	// lastDone is, per device, the end of the last group recorded there:
	// groups are issued ahead, so a group's busy time starts at the later
	// of its issue and its predecessor's end on the device (the same
	// correction the coordinator's duration estimates make).
	lastDone map[string]time.Time
	// record: keep per-group link counters for the trace.
	record bool
	signal chan struct{} // receives a value when a group is done (buffer 1: wake-ups coalesce)
}

type cbuf struct {
	s *jobfile.Buffer
	b *coordinator.Buffer
}

func (c *cbuf) spec() *jobfile.Buffer { return c.s }

func openCluster(ctx context.Context, cfg Config, log *slog.Logger) (engine, error) {
	cc := cfg.Cluster
	cl, addrs, _, err := Dial(ctx, cc, log)
	if err != nil {
		return nil, err
	}
	e := &clusterEngine{cl: cl, ownCl: cc.client == nil, done: map[coordinator.GroupID]coordinator.GroupTrace{}, lastDone: map[string]time.Time{}, signal: make(chan struct{}, 1)}
	job, err := coordinator.Open(ctx, coordinator.Config{
		Nodes: addrs, Client: cl, Devices: coordinator.DeviceFilter{Nodes: cc.Nodes, Kinds: cc.Kinds},
		Placement: cc.Placement, Logger: log,
		OnGroupDone: func(tr coordinator.GroupTrace) {
			e.mu.Lock()
			e.done[tr.ID] = tr
			e.mu.Unlock()
			select {
			case e.signal <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		if e.ownCl {
			cl.Close()
		}
		if errors.Is(err, coordinator.ErrNoDevice) {
			return nil, fmt.Errorf("--nodes/--kinds: %w", err)
		}
		return nil, fmt.Errorf("%w: %w", ErrCluster, err)
	}
	e.job = job
	e.record = cfg.Record
	e.devs = job.Devices()
	for _, n := range job.Nodes() {
		e.stats.Nodes = append(e.stats.Nodes, n.Name)
	}
	return e, nil
}

func (e *clusterEngine) devices() []string {
	out := make([]string, len(e.devs))
	for i, d := range e.devs {
		out[i] = d.String()
	}
	return out
}

// dims pads a job-file extent (dimension 0 slowest, 1–3 entries) to the
// coordinator's three dimensions (dimension 2 fastest); pad fills the
// leading dimensions (1 for ranges, 0 for offsets).
func dims(e []int, n int, pad int) coordinator.Dims {
	d := coordinator.Dims{pad, pad, pad}
	for i := range n {
		if e != nil {
			d[3-n+i] = e[i]
		}
	}
	return d
}

// region resolves an accessor region against the buffer (nil: defaults)
// and says whether it is the whole buffer.
func region(s *jobfile.Buffer, off, rng []int) (coordinator.Dims, coordinator.Dims, bool) {
	n := len(s.Range)
	o := dims(off, n, 0)
	r := coordinator.Dims{1, 1, 1}
	whole := true
	for i := range n {
		k := 3 - n + i
		if rng != nil {
			r[k] = rng[i]
		} else {
			r[k] = s.Range[i] - o[k]
		}
		if o[k] != 0 || r[k] != s.Range[i] {
			whole = false
		}
	}
	return o, r, whole
}

func (e *clusterEngine) newBuffer(s *jobfile.Buffer, data []byte) (buf, error) {
	n := len(s.Range)
	spec := coordinator.BufferSpec{Name: s.Name, Range: dims(s.Range, n, 1), ElemSize: s.Bytes() / elems(s.Range), Init: data}
	if s.PageSize != nil {
		spec.PageSize = dims(s.PageSize, n, 1)
	}
	b, err := e.job.NewBuffer(spec)
	if err != nil {
		return nil, err
	}
	return &cbuf{s: s, b: b}, nil
}

func elems(r []int) int {
	n := 1
	for _, e := range r {
		n *= e
	}
	return n
}

// pin turns a step's device into the coordinator's form: "n1/cpu:0" is
// used as is; "cpu:0" pins to the first node's device of that name.
func (e *clusterEngine) pin(dev string) (string, error) {
	if dev == "" || strings.Contains(dev, "/") {
		return dev, nil
	}
	for _, d := range e.devs {
		if d.ID == dev {
			return d.String(), nil
		}
	}
	return "", fmt.Errorf("%w: no node of the job has device %s (devices: %s)", coordinator.ErrNoDevice, dev, strings.Join(e.devices(), ", "))
}

func (e *clusterEngine) submit(ctx context.Context, g *Group, cg coordinator.Group, dev string) (ticket, error) {
	d, err := e.pin(dev)
	if err != nil {
		return nil, err
	}
	cg.Device = d
	// The job file's PTX kernels (registerJobKernels) go to the nodes on first use.
	if err := e.job.ShipKernel(ctx, cg.Kernel); err != nil {
		return nil, err
	}
	ids, err := e.job.Submit(ctx, cg)
	if len(ids) > 0 {
		g.ID = uint64(ids[0])
	}
	if err != nil {
		return nil, err
	}
	return &clusterTicket{e: e, ids: ids}, nil
}

// hostTicket is a step the client did itself (synchronously).
type hostTicket struct{ start, end time.Time }

func (hostTicket) wait(context.Context) error { return nil }
func (t hostTicket) record(g *Group, _ *Result) error {
	g.Device = "client"
	g.Timing = acpp.Timing{Submitted: t.start, Started: t.start, Ended: t.end}
	return nil
}

func (e *clusterEngine) fill(ctx context.Context, g *Group, b buf, off, rng []int, v []byte, dev string, init bool) (ticket, error) {
	cb := b.(*cbuf)
	o, r, whole := region(cb.s, off, rng)
	if cb.s.Type != "float32" {
		// No node-side fill kernel for this type: the client writes the
		// region, and its pages are uploaded to where they are needed.
		start := time.Now()
		data := make([]byte, 0, r[0]*r[1]*r[2]*len(v))
		for range r[0] * r[1] * r[2] {
			data = append(data, v...)
		}
		e.stats.HostOps++
		if err := e.job.Write(ctx, cb.b, o, r, data); err != nil {
			return nil, err
		}
		return hostTicket{start, time.Now()}, nil
	}
	// As embedded: only a fill of the whole buffer discards; a partial fill
	// keeps the rest of its pages, and so runs where they are.
	acc := coordinator.Accessor{Buffer: cb.b, Mode: coordinator.Write, Offset: o, Range: r, NoInit: whole, Map: coordinator.OneToOne()}
	cg := coordinator.Group{Kernel: "fill_f32", Range: r, Offset: o, Args: []coordinator.Arg{coordinator.Acc(acc), coordinator.Scalar(v)}}
	if init && dev == "" {
		// A value initialisation is spread over every device: each then
		// holds its part of the buffer, and nothing moves for it.
		cg.Split = &coordinator.Split{}
	}
	return e.submit(ctx, g, cg, dev)
}

func (e *clusterEngine) copy(ctx context.Context, g *Group, src buf, off, rng []int, dst buf, dstOff []int, dev string) (ticket, error) {
	s, d := src.(*cbuf), dst.(*cbuf)
	so, sr, _ := region(s.s, off, rng)
	extent := make([]int, len(s.s.Range))
	for i := range extent {
		extent[i] = sr[3-len(extent)+i]
	}
	do, dr, whole := region(d.s, dstOff, extent)
	if s.s.Type != "float32" {
		start := time.Now()
		e.stats.HostOps++
		data, err := e.job.Read(ctx, s.b, so, sr)
		if err != nil {
			return nil, err
		}
		if err := e.job.Write(ctx, d.b, do, dr, data); err != nil {
			return nil, err
		}
		return hostTicket{start, time.Now()}, nil
	}
	cg := coordinator.Group{Kernel: "copy_f32", Range: sr, Args: []coordinator.Arg{
		coordinator.Acc(coordinator.Accessor{Buffer: s.b, Mode: coordinator.Read, Offset: so, Range: sr, Kind: device.ArgRangedAccessor}),
		coordinator.Acc(coordinator.Accessor{Buffer: d.b, Mode: coordinator.Write, Offset: do, Range: dr, NoInit: whole, Kind: device.ArgRangedAccessor}),
	}}
	return e.submit(ctx, g, cg, dev)
}

func (e *clusterEngine) kernel(ctx context.Context, g *Group, s *jobfile.Step, name string, k *device.Kernel, bufs map[string]buf, dev string) (ticket, error) {
	n := len(s.Range)
	cg := coordinator.Group{Kernel: name, Range: dims(s.Range, n, 1)}
	if s.WorkGroup != nil {
		cg.Local = dims(s.WorkGroup, n, 1)
	}
	if sp := s.Split; sp != nil {
		cg.Split = &coordinator.Split{Along: coordinator.SplitDim(3 - n + sp.Dim + 1)}
		if sp.Devices != "all" {
			var c int
			fmt.Sscan(sp.Devices, &c)
			for _, d := range e.devs {
				if len(cg.Split.Devices) < c && slices.Contains(d.Forms, formFor(k, d)) {
					cg.Split.Devices = append(cg.Split.Devices, d.String())
				}
			}
		}
		if sp.ChunksPerDevice > 1 {
			devs := len(cg.Split.Devices)
			if devs == 0 { // "all": every device that can run the kernel
				for _, d := range e.devs {
					if slices.Contains(d.Forms, formFor(k, d)) {
						devs++
					}
				}
			}
			cg.Split.Chunks = sp.ChunksPerDevice * max(devs, 1)
		}
		cg.Split.Borders = sp.Borders
	}
	cg.Args = make([]coordinator.Arg, len(k.Params))
	for i, p := range k.Params {
		switch p.Kind {
		case device.ArgScalar:
			for _, sc := range s.Scalars {
				if sc.Param == p.Name {
					v, _ := sc.Value.Encode(sc.Type)
					cg.Args[i] = coordinator.Scalar(v)
				}
			}
		case device.ArgLocal:
			for _, l := range s.Local {
				if l.Param == p.Name {
					cg.Args[i] = coordinator.LocalMem(l.Bytes)
				}
			}
		default:
			for _, a := range s.Accessors {
				if a.Param != p.Name {
					continue
				}
				cb := bufs[a.Buffer].(*cbuf)
				o, r, whole := region(cb.s, a.Offset, a.Range)
				acc := coordinator.Accessor{Buffer: cb.b, Mode: mode(a.Mode), Offset: o, Range: r, Kind: p.Kind,
					NoInit: a.NoInit && (whole || pageAligned(cb.s, a.Offset, a.Range))}
				switch a.Map {
				case "one_to_one":
					acc.Map = coordinator.OneToOne()
				case "neighbourhood":
					acc.Map = coordinator.Neighbourhood(a.MapRange)
				case "fixed":
					acc.Map = coordinator.Fixed(o, r)
				default: // "all", or none given: every chunk may touch all of it
					acc.Map = coordinator.All()
				}
				cg.Args[i] = coordinator.Acc(acc)
			}
		}
	}
	return e.submit(ctx, g, cg, dev)
}

// formFor is the kernel form device d would run k in ("go" for CPUs).
func formFor(k *device.Kernel, d coordinator.Device) string {
	if k.Has(device.FormGo) && slices.Contains(d.Forms, device.FormGo.String()) {
		return device.FormGo.String()
	}
	return device.FormPTX.String()
}

func mode(m jobfile.Mode) coordinator.Mode {
	switch m {
	case jobfile.Read:
		return coordinator.Read
	case jobfile.Write:
		return coordinator.Write
	}
	return coordinator.ReadWrite
}

func (e *clusterEngine) toClient() int64 {
	var n int64
	for l, b := range e.job.Stats().PlannedBytes {
		if strings.HasSuffix(l, "->client") {
			n += b
		}
	}
	return n
}

func (e *clusterEngine) write(ctx context.Context, b buf, w io.Writer) (int64, error) {
	before := e.toClient()
	data, err := e.job.Read(ctx, b.(*cbuf).b, coordinator.Dims{}, coordinator.Dims{})
	if err == nil {
		_, err = w.Write(data)
	}
	return e.toClient() - before, err
}

func (e *clusterEngine) close(res *Result) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := e.job.Stats()
	err := e.job.Close(ctx)
	if e.ownCl {
		if cerr := e.cl.Close(); err == nil {
			err = cerr
		}
	}
	e.stats.Bytes, e.stats.KernelTime, e.stats.Groups, e.stats.Gated = st.PlannedBytes, st.KernelTime, st.Groups, st.Gated
	c := e.stats
	res.Cluster = &c
	return err
}

// clusterTicket is one submitted step: one coordinator group, or one per
// chunk of a split step.
type clusterTicket struct {
	e   *clusterEngine
	ids []coordinator.GroupID
}

func (t *clusterTicket) finished() bool {
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	for _, id := range t.ids {
		if _, ok := t.e.done[id]; !ok {
			return false
		}
	}
	return true
}

func (t *clusterTicket) wait(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !t.finished() {
		if err := t.e.job.Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.e.signal: // a group finished (the runner is the only waiter)
		case <-tick.C: // the job may have failed
		}
	}
	return nil
}

func (t *clusterTicket) record(g *Group, _ *Result) error {
	t.e.mu.Lock()
	var trs []coordinator.GroupTrace
	for _, id := range t.ids {
		if tr, ok := t.e.done[id]; ok {
			trs = append(trs, tr)
			delete(t.e.done, id)
		}
	}
	t.e.mu.Unlock()
	timing := func(tr coordinator.GroupTrace) acpp.Timing {
		for _, in := range tr.Instrs {
			// The node's own times of the kernel, where it sent them.
			if in.Kind == "kernel" && !in.Start.IsZero() {
				start := in.Start
				if last := t.e.lastDone[tr.Device]; last.After(start) && last.Before(in.End) {
					start = last // it queued behind the previous kernel
				}
				t.e.lastDone[tr.Device] = in.End
				return acpp.Timing{Submitted: tr.Submitted, Started: start, Ended: in.End}
			}
		}
		start := tr.Issued
		if start.IsZero() {
			start = tr.Submitted
		}
		if last := t.e.lastDone[tr.Device]; last.After(start) && last.Before(tr.Done) {
			start = last
		}
		if tr.Done.After(t.e.lastDone[tr.Device]) {
			t.e.lastDone[tr.Device] = tr.Done
		}
		return acpp.Timing{Submitted: tr.Submitted, Started: start, Ended: tr.Done}
	}
	if len(t.ids) == 1 && len(trs) == 1 {
		g.Device, g.Timing = trs[0].Device, timing(trs[0])
	} else if len(trs) > 0 {
		var devs []string
		for _, tr := range trs {
			g.Chunks = append(g.Chunks, Chunk{ID: uint64(tr.ID), Device: tr.Device, Timing: timing(tr)})
			if !slices.Contains(devs, tr.Device) {
				devs = append(devs, tr.Device)
			}
		}
		sort.Slice(g.Chunks, func(i, j int) bool { return g.Chunks[i].ID < g.Chunks[j].ID })
		g.Device = strings.Join(devs, ",")
		g.Timing = acpp.Timing{Submitted: g.Chunks[0].Timing.Submitted, Started: g.Chunks[0].Timing.Started, Ended: g.Chunks[0].Timing.Ended}
		for _, c := range g.Chunks {
			if c.Timing.Started.Before(g.Timing.Started) {
				g.Timing.Started = c.Timing.Started
			}
			if c.Timing.Ended.After(g.Timing.Ended) {
				g.Timing.Ended = c.Timing.Ended
			}
		}
	}
	if t.e.record {
		g.Links = t.e.job.Stats().PlannedBytes
		for _, tr := range trs {
			g.Transfers = append(g.Transfers, transfersOf(tr.Instrs)...)
		}
	}
	if len(trs) < len(t.ids) {
		if err := t.e.job.Err(); err != nil {
			return err
		}
		return errors.New("did not finish")
	}
	return nil
}

// transfersOf pairs a group's sends with their recvs on the peer (the
// same bytes, in order) into moves from the sender's start to the
// receiver's end, and adds uploads, readbacks and copies within a node.
func transfersOf(instrs []coordinator.InstrTrace) []Transfer {
	var out []Transfer
	used := make([]bool, len(instrs))
	for _, in := range instrs {
		switch in.Kind {
		case "send":
			tr := Transfer{Kind: "send", From: in.Node, To: in.Peer, Bytes: in.Bytes, Start: in.Start, End: in.End}
			for k, r := range instrs {
				if !used[k] && r.Kind == "recv" && r.Node == in.Peer && r.Peer == in.Node && r.Bytes == in.Bytes {
					used[k] = true
					tr.End = maxTime(tr.End, r.End)
					break
				}
			}
			out = append(out, tr)
		case "upload":
			out = append(out, Transfer{Kind: "upload", From: "client", To: in.Node, Bytes: in.Bytes, Start: in.Start, End: in.End})
		case "readback":
			out = append(out, Transfer{Kind: "readback", From: in.Node, To: "client", Bytes: in.Bytes, Start: in.Start, End: in.End})
		case "copy":
			out = append(out, Transfer{Kind: "copy", From: in.Node, To: in.Node, Bytes: in.Bytes, Start: in.Start, End: in.End})
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
