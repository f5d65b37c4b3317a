package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
)

// engine executes the command groups of a job. The runner (run.go) holds
// the job's semantics — buffers and their initialisation, steps in order,
// repeats unrolled, swaps as renames, the window of groups in flight,
// progress, outputs, the DAG and the summary — and drives one of two
// engines: the embedded runtime of this machine (embeddedEngine, through
// the root package) or a cluster of acpp-node agents (clusterEngine,
// through package coordinator).
//
// The runner calls an engine from one goroutine. Each submitting method
// sets g.ID (and may set g.Device) and returns a ticket the runner waits
// on, in submission order.
type engine interface {
	// devices names the devices the job may run on ("cpu:0",
	// "n1/cuda:0"), for the summary.
	devices() []string
	// newBuffer makes the buffer of spec s; data, when not nil, is its
	// initial contents.
	newBuffer(s *jobfile.Buffer, data []byte) (buf, error)
	// fill sets a region (nil: defaults) to the encoded value v; init is
	// set for a buffer's value initialisation.
	fill(ctx context.Context, g *Group, b buf, off, rng []int, v []byte, dev string, init bool) (ticket, error)
	// copy copies the region (off, rng) of src into dst at dstOff.
	copy(ctx context.Context, g *Group, src buf, off, rng []int, dst buf, dstOff []int, dev string) (ticket, error)
	// kernel launches a kernel step; name is the registry name, k its
	// declaration, bufs the current buffer names.
	kernel(ctx context.Context, g *Group, s *jobfile.Step, name string, k *device.Kernel, bufs map[string]buf, dev string) (ticket, error)
	// write writes a buffer's contents to w, as they lie in memory (host
	// byte order), reading them back first (only pages outdated on the
	// host move), and says how many bytes moved to the host for it.
	write(ctx context.Context, b buf, w io.Writer) (int64, error)
	// close ends the engine: waits for what is in flight, frees buffers,
	// and records the engine's counters in res.
	close(res *Result) error
}

// ticket is a submitted command group.
type ticket interface {
	// wait blocks until the group finished or failed.
	wait(ctx context.Context) error
	// record copies its timing (and device, or chunks of a split group)
	// into g; err is the group's failure, nil when it succeeded.
	record(g *Group, res *Result) (err error)
}

// ---- the embedded engine ----

type embeddedEngine struct {
	q      *acpp.Queue
	splits int // command groups submitted split
	// order is every buffer once, in declaration order (closed by close).
	order []ebuf
}

type embeddedTicket struct {
	q    *acpp.Queue
	ev   *acpp.Event
	devs []string // the device of each chunk of a split group
}

func (t embeddedTicket) wait(ctx context.Context) error { return t.ev.Wait(ctx) }

func (t embeddedTicket) record(g *Group, _ *Result) error {
	g.Timing = t.ev.Timing()
	g.StatsAfter = t.q.Stats()
	for i, c := range t.ev.Chunks() {
		g.Chunks = append(g.Chunks, Chunk{ID: c.ID(), Device: t.devs[i], Timing: c.Timing()})
	}
	return t.ev.Err()
}

func (e *embeddedEngine) devices() []string {
	var out []string
	for _, d := range e.q.Devices() {
		out = append(out, d.ID.String())
	}
	return out
}

func (e *embeddedEngine) newBuffer(s *jobfile.Buffer, data []byte) (buf, error) {
	b, err := newBuf(e.q, s, data)
	if err == nil {
		e.order = append(e.order, b)
	}
	return b, err
}

func (e *embeddedEngine) submit(g *Group, dev string, record bool, cgf func(h *acpp.Handler), more ...acpp.SubmitOption) (ticket, error) {
	opts := append([]acpp.SubmitOption{acpp.Named(g.Label)}, more...)
	if dev != "" {
		id, err := jobfile.ParseDevice(dev)
		if err != nil {
			return nil, fmt.Errorf("device: %w", err)
		}
		opts = append(opts, acpp.On(id))
	}
	ev, err := e.q.Submit(func(h *acpp.Handler) error {
		cgf(h)
		return nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	g.ID = ev.ID()
	g.Device = ev.Device()
	var devs []string // the device of each chunk, in chunk order
	for _, c := range ev.Chunks() {
		devs = append(devs, c.Device())
	}
	if record {
		g.RuntimeDeps = ev.Deps()
	}
	return embeddedTicket{q: e.q, ev: ev, devs: devs}, nil
}

func (e *embeddedEngine) fill(_ context.Context, g *Group, b buf, off, rng []int, v []byte, dev string, _ bool) (ticket, error) {
	eb := b.(ebuf)
	return e.submit(g, dev, true, func(h *acpp.Handler) { eb.fill(h, off, rng, v) })
}

func (e *embeddedEngine) copy(_ context.Context, g *Group, src buf, off, rng []int, dst buf, dstOff []int, dev string) (ticket, error) {
	s, d := src.(ebuf), dst.(ebuf)
	return e.submit(g, dev, true, func(h *acpp.Handler) { s.copyTo(h, off, rng, d, dstOff) })
}

func (e *embeddedEngine) kernel(_ context.Context, g *Group, s *jobfile.Step, name string, k *device.Kernel, bufs map[string]buf, dev string) (ticket, error) {
	if dev == "" && !e.q.Device().Caps.RunsKernel(k) {
		// A kernel the default device (a GPU) cannot run, such as a Go-only
		// one, goes to the first device that can.
		for _, d := range e.q.Devices() {
			if d.Caps.RunsKernel(k) {
				dev = d.ID.String()
				break
			}
		}
	}
	if sp := e.split(s, k, dev); sp != nil {
		e.splits++
		return e.submit(g, "", true, func(h *acpp.Handler) { launch(h, s, name, k, bufs, true) }, acpp.SplitWith(*sp))
	}
	return e.submit(g, dev, true, func(h *acpp.Handler) { launch(h, s, name, k, bufs, false) })
}

// split is the embedded form of a step's split, or nil to run the step
// whole. It splits across the local devices of the default device's kind
// that run the kernel (on a GPU machine every GPU: a CPU chunk would hold
// the GPUs back), the first `devices` of them when the split names a
// count; one such device runs the step whole. A step pinned to a device
// is not split.
func (e *embeddedEngine) split(s *jobfile.Step, k *device.Kernel, dev string) *acpp.SplitOpts {
	sp := s.Split
	if sp == nil || dev != "" {
		return nil
	}
	kind := e.q.Device().ID.Kind
	var ids []acpp.DeviceID
	for _, d := range e.q.Devices() {
		if d.ID.Kind == kind && d.Caps.RunsKernel(k) {
			ids = append(ids, d.ID)
		}
	}
	if sp.Devices != "all" {
		var c int
		fmt.Sscan(sp.Devices, &c)
		ids = ids[:min(c, len(ids))]
	}
	if len(ids) < 2 {
		return nil
	}
	return &acpp.SplitOpts{Devices: ids, Chunks: max(sp.ChunksPerDevice, 1) * len(ids), Along: acpp.SplitDim(sp.Dim + 1), Borders: sp.Borders}
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
					args[i] = bufs[a.Buffer].(ebuf).arg(h, p.Kind, a, split)
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

func (e *embeddedEngine) write(ctx context.Context, b buf, w io.Writer) (int64, error) {
	before := e.q.Stats().BytesDeviceToHost
	err := b.(ebuf).writeTo(ctx, w)
	return e.q.Stats().BytesDeviceToHost - before, err
}

func (e *embeddedEngine) close(res *Result) error {
	// Closing waits for what is still in flight (failed or cancelled
	// groups end quickly) and frees the buffers.
	var err error
	for _, b := range e.order {
		if cerr := b.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if cerr := e.q.Close(); cerr != nil && err == nil {
		err = cerr
	}
	res.Stats = e.q.Stats()
	res.SplitGroups = e.splits
	return err
}

// deviceKinds returns the kinds of the devices, for the summary's notes.
func allCPU(names []string) bool {
	for _, n := range names {
		if !strings.HasPrefix(n[strings.LastIndex(n, "/")+1:], "cpu:") {
			return false
		}
	}
	return true
}
