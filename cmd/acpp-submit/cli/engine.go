package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
)

// engine runs the command groups of a job through the public API, on an
// acpp.Queue: the embedded runtime of this machine (acpp.NewQueue) or a
// cluster of acpp-node agents (acpp.Connect, cluster.go). The runner
// (run.go) holds the job's semantics — buffers and their initialisation,
// steps in order, repeats unrolled, swaps as renames, the window of groups
// in flight, progress, outputs, the DAG and the summary — and the engine
// maps each step onto the queue once for both: Fill, Copy, Launch or
// LaunchND (split with SplitWith), HostRead for the outputs. What differs
// is what the queue offers: the devices a split may use, and on a cluster
// the coordinator's trace of each group (clusterRun), which times it.
//
// The runner calls it from one goroutine. Each submitting method sets
// g.ID (and g.Device where it is known) and returns a ticket the runner
// waits on, in submission order.
type engine struct {
	q *acpp.Queue
	// cluster collects a cluster queue's group traces; nil on the
	// embedded runtime.
	cluster *clusterRun
	splits  int // command groups submitted split
	// order is every buffer once, in declaration order (closed by close).
	order []buf
	// holder is, for each buffer written so far, the one device known to
	// hold all of its current contents ("cuda:0"), or "" when none is:
	// written in parts on several devices, by a split over several, or
	// not all of it by the same device (wrote). Outputs read a buffer that
	// a GPU holds from that GPU (output.go, readBackDevice).
	holder map[buf]string
}

// ticket is a submitted command group.
type ticket struct {
	ev   *acpp.Event
	devs []string // the device of each chunk of a split group (embedded)
}

func (t ticket) wait(ctx context.Context) error { return t.ev.Wait(ctx) }

// openEngine opens the queue of a run: cfg.Cluster's (openCluster) or the
// local devices cfg selects.
func openEngine(ctx context.Context, cfg Config, log *slog.Logger) (*engine, error) {
	if cfg.Cluster != nil {
		return openCluster(ctx, cfg, log)
	}
	var qopts []acpp.Option
	for _, d := range cfg.Devices {
		o, err := deviceOption(d)
		if err != nil {
			return nil, err
		}
		qopts = append(qopts, o)
	}
	if cfg.Workers > 0 {
		qopts = append(qopts, acpp.WithWorkers(cfg.Workers))
	}
	// Every local device, GPUs first (Config.Devices); a selection decides.
	qopts = append(qopts, acpp.WithLogger(log), acpp.WithAcceleratorsFirst(), acpp.WithMemoryLimit(cfg.MemoryLimit))
	qopts = append(qopts, cfg.queueOptions...)
	q, err := acpp.NewQueue(ctx, qopts...)
	if err != nil {
		return nil, openLocalError(cfg.Devices, err)
	}
	return &engine{q: q}, nil
}

// openLocalError is the error of opening this machine's devices: a
// --device selection that matches none of them names the flag (run and
// check say it alike).
func openLocalError(devices []string, err error) error {
	if len(devices) > 0 && errors.Is(err, acpp.ErrNoDevice) {
		// Say it without the Go API's advice (import a backend: this
		// command has them all): what this machine has, and where to look.
		have := "none that opens"
		if q, qerr := acpp.NewQueue(context.Background(), acpp.WithLogger(slog.New(slog.DiscardHandler))); qerr == nil {
			var ids []string
			for _, d := range q.Devices() {
				ids = append(ids, d.ID.String())
			}
			have = "it has " + strings.Join(ids, ", ")
			q.Close()
		}
		return noSuchDevice(fmt.Sprintf("--device %s: this machine has no such device: %s (acpp-submit devices lists them; a GPU needs the NVIDIA driver)",
			strings.Join(devices, ","), have))
	}
	return fmt.Errorf("open the local devices: %w", err)
}

// noSuchDevice is a --device that selects none of this machine's devices;
// it matches acpp.ErrNoDevice.
type noSuchDevice string

func (e noSuchDevice) Error() string { return string(e) }
func (e noSuchDevice) Unwrap() error { return acpp.ErrNoDevice }

// devices names the devices the job may run on ("cpu:0", "n1/cuda:0"),
// for the summary.
func (e *engine) devices() []string {
	if names := e.q.ClusterDevices(); names != nil {
		return names
	}
	var out []string
	for _, d := range e.q.Devices() {
		out = append(out, d.ID.String())
	}
	return out
}

// newBuffer makes the buffer of spec s; data, when not nil, is its
// initial contents.
func (e *engine) newBuffer(s *jobfile.Buffer, data []byte) (buf, error) {
	// The embedded runtime uses data in place (the buffer's host
	// allocation); a cluster job keeps it to upload from, and the buffer
	// needs no write-back into it at close.
	b, err := newBuf(e.q, s, data, e.cluster != nil)
	if err == nil {
		e.order = append(e.order, b)
	}
	return b, err
}

// submit submits one command group declared by cgf, on device dev ("":
// the queue's choice).
func (e *engine) submit(g *Group, dev string, cgf func(h *acpp.Handler), more ...acpp.SubmitOption) (ticket, error) {
	opts := append([]acpp.SubmitOption{acpp.Named(g.Label)}, more...)
	if dev != "" {
		id, err := jobfile.ParseDevice(dev)
		if err != nil {
			return ticket{}, fmt.Errorf("device: %w", err)
		}
		// On a cluster: the first node's device of that name (job files
		// name no nodes).
		opts = append(opts, acpp.On(id))
	}
	ev, err := e.q.Submit(func(h *acpp.Handler) error {
		cgf(h)
		return nil
	}, opts...)
	if err != nil {
		return ticket{}, err
	}
	g.ID = ev.ID()
	g.Device = ev.Device() // on a cluster known once it finished (record)
	var devs []string      // the device of each chunk, in chunk order
	for _, c := range ev.Chunks() {
		devs = append(devs, c.Device())
	}
	g.RuntimeDeps = ev.Deps()
	return ticket{ev: ev, devs: devs}, nil
}

// fill sets a region (nil: defaults) to the encoded value v; init is set
// for a buffer's value initialisation.
func (e *engine) fill(g *Group, b buf, off, rng []int, v []byte, dev string, init bool) (ticket, error) {
	if init && dev == "" && e.cluster != nil && len(v) == 4 {
		// On a cluster a value initialisation is spread over every device
		// (the nodes' fill_f32, which moves 4-byte elements of any type):
		// each then holds its part of the buffer, and nothing moves for it.
		return e.submit(g, "", func(h *acpp.Handler) { b.fillSplit(h, v) }, acpp.SplitWith(acpp.SplitOpts{}))
	}
	t, err := e.submit(g, dev, func(h *acpp.Handler) { b.fill(h, off, rng, v) })
	if err == nil {
		e.wrote(b, covers(b.spec(), off, rng), t)
	}
	return t, err
}

// copy copies the region (off, rng) of src into dst at dstOff.
func (e *engine) copy(g *Group, src buf, off, rng []int, dst buf, dstOff []int, dev string) (ticket, error) {
	t, err := e.submit(g, dev, func(h *acpp.Handler) { src.copyTo(h, off, rng, dst, dstOff) })
	if err == nil {
		e.wrote(dst, covers(dst.spec(), dstOff, regionOf(src, jobfile.Read, off, rng).rangeOf()), t)
	}
	return t, err
}

// wrote notes that the group of ticket t writes buffer b, all of it when
// whole, for holder.
func (e *engine) wrote(b buf, whole bool, t ticket) {
	if e.holder == nil {
		e.holder = map[buf]string{}
	}
	dev := t.ev.Device() // a split group's devices, comma-separated
	switch {
	case strings.Contains(dev, ","):
		dev = ""
	case !whole && e.holder[b] != dev:
		dev = "" // its other parts lie elsewhere (or were never written)
	}
	e.holder[b] = dev
}

// covers reports whether the region (off, rng) (nil: defaults) is all of
// buffer s.
func covers(s *jobfile.Buffer, off, rng []int) bool {
	for i, n := range s.Range {
		if off != nil && off[i] != 0 || rng != nil && rng[i] != n {
			return false
		}
	}
	return true
}

// kernel launches a kernel step; name is the registry name, k its
// declaration, bufs the current buffer names.
func (e *engine) kernel(g *Group, s *jobfile.Step, name string, k *device.Kernel, bufs map[string]buf, dev string) (ticket, error) {
	if dev == "" && e.cluster == nil && !e.q.Device().Caps.RunsKernel(k) {
		// A kernel the default device (a GPU) cannot run, such as a Go-only
		// one, goes to the first device that can. (A cluster's coordinator
		// places a group only on devices that run its kernel.)
		for _, d := range e.q.Devices() {
			if d.Caps.RunsKernel(k) {
				dev = d.ID.String()
				break
			}
		}
	}
	var t ticket
	var err error
	if sp := e.split(s, k, dev); sp != nil {
		e.splits++
		t, err = e.submit(g, "", func(h *acpp.Handler) { launch(h, s, name, k, bufs, true) }, acpp.SplitWith(*sp))
	} else {
		t, err = e.submit(g, dev, func(h *acpp.Handler) { launch(h, s, name, k, bufs, false) })
	}
	if err == nil {
		for _, a := range s.Accessors {
			if a.Mode != jobfile.Read {
				b := bufs[a.Buffer]
				e.wrote(b, covers(b.spec(), a.Offset, a.Range), t)
			}
		}
	}
	return t, err
}

// split is the queue's form of a step's split, or nil to run the step
// whole.
//
// The embedded runtime splits across the local devices of the default
// device's kind that run the kernel (on a GPU machine every GPU: a CPU
// chunk would hold the GPUs back), the first `devices` of them when the
// split names a count; one such device runs the step whole, and a step
// pinned to a device is not split.
//
// A cluster splits across the job's devices that run the kernel (the
// coordinator's choice for `devices: all`), the first `devices` of them
// for a count, whatever their kind; the step's device does not apply.
func (e *engine) split(s *jobfile.Step, k *device.Kernel, dev string) *acpp.SplitOpts {
	sp := s.Split
	if sp == nil || (dev != "" && e.cluster == nil) {
		return nil
	}
	limit := -1 // devices: all
	if sp.Devices != "all" {
		limit = 0
		fmt.Sscan(sp.Devices, &limit)
	}
	opts := &acpp.SplitOpts{Along: acpp.SplitDim(sp.Dim + 1), Borders: sp.Borders}
	if names := e.q.ClusterDevices(); names != nil {
		capable := 0
		for i, d := range e.q.Devices() {
			if !d.Caps.RunsKernel(k) {
				continue
			}
			capable++
			if limit >= 0 && len(opts.ClusterDevices) < limit {
				opts.ClusterDevices = append(opts.ClusterDevices, names[i])
			}
		}
		if sp.ChunksPerDevice > 1 {
			devs := len(opts.ClusterDevices)
			if devs == 0 { // all
				devs = capable
			}
			opts.Chunks = sp.ChunksPerDevice * max(devs, 1)
		}
		return opts
	}
	kind := e.q.Device().ID.Kind
	for _, d := range e.q.Devices() {
		if d.ID.Kind == kind && d.Caps.RunsKernel(k) {
			opts.Devices = append(opts.Devices, d.ID)
		}
	}
	if limit >= 0 {
		opts.Devices = opts.Devices[:min(limit, len(opts.Devices))]
	}
	if len(opts.Devices) < 2 {
		return nil
	}
	opts.Chunks = max(sp.ChunksPerDevice, 1) * len(opts.Devices)
	return opts
}

// launch declares a kernel step's arguments in the kernel's parameter
// order and launches it; split: the group is split (accessors take their
// range mappers).
func launch(h *acpp.Handler, s *jobfile.Step, name string, k *device.Kernel, bufs map[string]buf, split bool) {
	args := make([]acpp.KernelArg, len(k.Params))
	for i, p := range k.Params {
		switch p.Kind {
		case device.ArgScalar:
			for _, sc := range s.Scalars {
				if sc.Param == p.Name {
					v, _ := sc.Value.Encode(sc.Type)
					args[i] = scalarArg(v)
				}
			}
		case device.ArgLocal:
			for _, l := range s.Local {
				if l.Param == p.Name {
					args[i] = acpp.LocalAccessor[byte](h, l.Bytes)
				}
			}
		default:
			for _, a := range s.Accessors {
				if a.Param == p.Name {
					args[i] = bufs[a.Buffer].arg(h, p.Kind, a, split)
				}
			}
		}
	}
	rng := toRange(s.Range)
	if s.WorkGroup != nil {
		h.LaunchND(name, rng, toRange(s.WorkGroup), args...)
		return
	}
	h.Launch(name, rng, args...)
}

// record copies a finished group's timing, device and chunks (and, on a
// cluster, what its traces say) into g; it returns the group's failure,
// nil when it succeeded.
func (e *engine) record(g *Group, t ticket) error {
	ev := t.ev
	g.Timing = ev.Timing()
	g.StatsAfter = e.q.Stats()
	if g.Device == "" {
		g.Device = ev.Device()
	}
	for i, c := range ev.Chunks() {
		g.Chunks = append(g.Chunks, Chunk{ID: c.ID(), Device: t.devs[i], Timing: c.Timing()})
	}
	if e.cluster != nil {
		e.cluster.record(g, ev)
	}
	return ev.Err()
}

// toHost is the bytes a queue moved to this process so far: from devices
// to the host memory (embedded), from the nodes to the client (cluster).
func toHost(s acpp.Stats) int64 {
	n := s.BytesDeviceToHost
	for _, l := range s.Links {
		if l.To == "client" {
			n += l.Bytes
		}
	}
	return n
}

// write writes a buffer's contents to w, as they lie in memory (host byte
// order), and says how many bytes moved to the host for it: from the GPU
// that holds all of it through two pinned slabs (writeFrom), else from its
// host copy, read back first (writeTo: only pages outdated on the host
// move).
func (e *engine) write(ctx context.Context, b buf, w io.Writer) (int64, error) {
	before := toHost(e.q.Stats())
	var copied int64 // by the output's own copies, which the queue does not count
	var err error
	// (On a cluster the client reads through the coordinator: host reads.)
	if dev, ok := readBackDevice(b.spec(), e.holder[b], e.q.Devices()); ok && e.cluster == nil {
		copied, err = b.writeFrom(ctx, e.q, dev, w)
	} else {
		err = b.writeTo(ctx, w)
	}
	return toHost(e.q.Stats()) - before + copied, err
}

// close ends the engine: waits for what is in flight (failed or cancelled
// groups end quickly), frees the buffers, and records the queue's
// counters in res.
func (e *engine) close(res *Result) error {
	groups := e.q.Stats().Groups // before the buffers' releases (a cluster counts them)
	var err error
	for _, b := range e.order {
		if cerr := b.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if cerr := e.q.Close(); cerr != nil && err == nil {
		err = cerr
	}
	res.SplitGroups = e.splits
	if e.cluster != nil {
		if cerr := e.cluster.close(res, int(groups), e.q.Stats()); cerr != nil && err == nil {
			err = cerr
		}
		return err
	}
	res.Stats = e.q.Stats()
	return err
}

// allCPU reports whether every device named is a CPU, for the summary's
// notes.
func allCPU(names []string) bool {
	for _, n := range names {
		if !strings.HasPrefix(n[strings.LastIndex(n, "/")+1:], "cpu:") {
			return false
		}
	}
	return true
}
