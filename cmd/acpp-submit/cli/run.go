package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator"
	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/fileread"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/kernels"
	"github.com/acpp/acpp/proto"

	_ "github.com/acpp/acpp/cuda" // GPUs, where a driver is found
)

// Config is one run of a job.
type Config struct {
	// JobFile is the job file's path. Input files named in it are relative
	// to its directory.
	JobFile string
	// Params override the job's params (--set n=4096).
	Params map[string]string
	// OutDir is where outputs are written (created if missing); "" means
	// the current directory.
	OutDir string
	// Devices selects devices: "cpu", "cuda" (every device of a kind),
	// "cpu:0", "cuda:1". Empty means every local device, GPUs first (the
	// first is the default device of steps without a device:).
	Devices []string
	// Workers is the number of worker goroutines of the CPU device; 0 means
	// GOMAXPROCS.
	Workers int
	// Window bounds the command groups in flight ahead of the oldest
	// unfinished one; 0 means 1024.
	Window int
	// Cluster, when set, runs the job on a cluster of acpp-node agents
	// instead of the embedded runtime (see ClusterConfig).
	Cluster *ClusterConfig
	// Progress receives progress: called after each command group finishes
	// with the number done and the total; nil means none.
	Progress func(done, total int)
	// Notify receives a line for each event of a cluster run worth
	// telling while it happens: a node lost and the recovery, a node that
	// joined or drained. Nil means none (they are in the summary).
	Notify func(string)
	// Record keeps a record of every command group in Result.Groups (the
	// trace and the DAG need them); without it Run keeps only tallies.
	Record bool
	// Writes are the files the caller writes once the run ends, by the
	// flag that names them ("--trace": path): an output of the job at one
	// of them is refused before anything runs, as one would overwrite the
	// other.
	Writes map[string]string
	// Logger receives debug events; nil means discard.
	Logger *slog.Logger
	// MemoryLimit is the embedded runtime's memory budget (zero: the
	// default budgets; see acpp.WithMemoryLimit). A cluster run ignores
	// it: the nodes keep their own.
	MemoryLimit acpp.MemoryLimit
	// UI, when set, is a host:port where the run serves its live view
	// (package liveview: members, progress, page grids, links) while it
	// runs; UIReady, when set, is called with the page's URL once it
	// listens.
	UI      string
	UIReady func(url string)

	// snapshots is the live view's reader of a cluster job (set by Run).
	snapshots *coordinator.Snapshotter
	// queueOptions are extra options of the embedded queue (tests: several
	// CPU devices standing in for GPUs).
	queueOptions []acpp.Option
}

// Group is what Run records of one command group it submitted.
type Group struct {
	ID    uint64
	Label string // step name, kernel, or "init grid"
	Kind  string // kernel, fill, copy, init
	Path  string // the job field it came from: steps[1].repeat.steps[0]
	Line  int
	// Device is where it ran: "cpu:0" embedded, "n1/cpu:0" on a cluster;
	// for a split group the devices of its chunks, comma-separated.
	Device string
	// Chunks are the parts of a split group, each with its device and
	// timing.
	Chunks []Chunk
	// Accesses lists the buffers it touches: "grid:read".
	Accesses []string
	// Deps are the earlier groups this one must follow by the conflict
	// rules (D1–D3) on its accessors' regions: the job's logical DAG,
	// independent of timing.
	Deps []uint64
	// RuntimeDeps are the groups the runtime made it wait for: those of
	// Deps (at page granularity) that had not finished when it was
	// submitted.
	RuntimeDeps []uint64
	Timing      acpp.Timing
	// StatsAfter is the queue's counters when Run saw the group finish
	// (for the link tracks of the trace).
	StatsAfter acpp.Stats
	// Links are, on a cluster, the bytes per link "src->dst" the finished
	// groups had moved when Run saw the group finish (with Config.Record;
	// for the trace).
	Links map[string]int64
	// Transfers are the page moves made for the group (cluster only), as
	// the nodes timed them.
	Transfers []Transfer
	Err       error

	regions []access
}

// Transfer is one move of pages for a group on a cluster: between nodes
// (From and To are node names), from the client ("client") to a node, from
// a node to the client, or between two memories of one node (From == To).
// Start and End are node clock times (see coordinator.InstrTrace): a move
// between nodes runs from the sender's start to the receiver's end.
type Transfer struct {
	Kind       string // send, upload, readback, copy
	From, To   string
	Bytes      int64
	Start, End time.Time
}

// Chunk is one part of a split command group.
type Chunk struct {
	ID     uint64
	Device string
	Timing acpp.Timing
}

// OutputFile is one output written.
type OutputFile struct {
	Buffer string
	Path   string
	Format jobfile.Format
	Bytes  int
	Type   string
	Range  []int
	// Start and End bound reading the buffer back and writing the file;
	// Moved is the bytes the read-back copied to the host (0 when the
	// host copy was up to date).
	Start, End time.Time
	Moved      int64
}

// Tally counts command groups and their busy time (from start, when the
// dependencies were done, to end; copies included).
type Tally struct {
	N    int
	Busy time.Duration
}

// Result is what a run did.
type Result struct {
	Job *jobfile.Job
	// Devices are the devices the job could use ("cpu:0", "n1/cuda:0").
	Devices []string
	// Cluster is set for a run on a cluster: nodes and bytes per link.
	Cluster *ClusterStats
	Start   time.Time
	Wall    time.Duration
	// Count is the number of command groups submitted; Failed of those
	// that failed.
	Count, Failed int
	// SplitGroups is the number of groups submitted split: across several
	// local devices of the embedded runtime, or a cluster's devices.
	SplitGroups int
	// PerDevice and PerStep (by step label) tally the finished groups.
	PerDevice map[string]*Tally
	PerStep   map[string]map[string]*Tally
	// Groups has a record per command group when Config.Record is set
	// (for the trace and the DAG); nil otherwise, so that long jobs run in
	// constant memory.
	Groups []*Group
	// Stats are the embedded runtime's counters (zero on a cluster).
	Stats   acpp.Stats
	Outputs []OutputFile
}

// tally adds a finished group to the per-device and per-step counts.
func (res *Result) tally(g *Group) {
	if g.Err != nil {
		res.Failed++
	}
	if len(g.Chunks) == 0 {
		res.tallyOn(g.Device, g.Label, g.Timing.Duration())
	}
	for _, c := range g.Chunks {
		res.tallyOn(c.Device, g.Label, c.Timing.Duration())
	}
}

func (res *Result) tallyOn(dev, label string, d time.Duration) {
	if dev == "" {
		return // never placed (failed before it ran)
	}
	t := res.PerDevice[dev]
	if t == nil {
		t = &Tally{}
		res.PerDevice[dev] = t
		res.PerStep[dev] = map[string]*Tally{}
	}
	t.N++
	t.Busy += d
	k := res.PerStep[dev][label]
	if k == nil {
		k = &Tally{}
		res.PerStep[dev][label] = k
	}
	k.N++
	k.Busy += d
}

// Run executes the job in cfg.JobFile on the embedded runtime (or, with
// cfg.Cluster, on a cluster) and writes its outputs. The Result is returned
// also on failure, with the groups that ran (for a trace of what happened).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Cluster != nil { // the flags' policy: refused before any dial
		if _, _, err := recoveryPolicy(cfg.Cluster); err != nil {
			return nil, err
		}
	}
	cc, release, err := lendClient(cfg.Cluster, log)
	if err != nil {
		return nil, err
	}
	defer release()
	cfg.Cluster = cc
	src, err := kernelsFor(ctx, cfg.Cluster)
	if err != nil {
		return nil, err
	}
	job, err := loadWith(cfg.JobFile, cfg.Params, src)
	if err != nil {
		return nil, err
	}
	var view *ui
	if cfg.UI != "" {
		names := make([]string, len(job.Buffers))
		for i, b := range job.Buffers {
			names[i] = b.Name
		}
		if view, err = startUI(cfg.UI, cfg, job.Name, names, log); err != nil {
			return nil, err
		}
		defer view.close()
		view.progress(0, groupCount(job))
		cfg.snapshots = view.snaps
		if cfg.UIReady != nil {
			cfg.UIReady(view.URL())
		}
		prog := cfg.Progress
		cfg.Progress = func(done, total int) {
			view.progress(done, total)
			if prog != nil {
				prog(done, total)
			}
		}
	}
	r := &runner{cfg: cfg, job: job, log: log, dir: filepath.Dir(cfg.JobFile), bufs: map[string]buf{}, kernelNames: map[string]string{}, kernels: src}
	if r.cfg.Window <= 0 {
		r.cfg.Window = 1024
	}
	res := &Result{Job: job, PerDevice: map[string]*Tally{}, PerStep: map[string]map[string]*Tally{}}
	r.res = res
	// What check finds in the files the job names and in its launches,
	// before anything runs: a bad init file of the last buffer, or a launch
	// a later step cannot compute, would fail only after the groups before it.
	if err := joinJobErrors(checkFiles(job, r.dir), checkLaunches(job)); err != nil {
		return nil, err
	}
	if err := r.registerJobKernels(); err != nil {
		return nil, err
	}
	if cc := cfg.Cluster; cc != nil {
		// The flags decide; then the job file; then the defaults.
		if cc.OnNodeLoss == "" {
			cc.OnNodeLoss, cc.lossFromJob = job.Recovery.OnNodeLoss, job.Recovery.OnNodeLoss != ""
		}
		if cc.Checkpoint == "" {
			cc.Checkpoint, cc.checkpointFromJob = job.Recovery.Checkpoint, job.Recovery.Checkpoint != ""
		}
	}
	if err := checkOutputs(job, cfg.JobFile, cfg.OutDir, cfg.Writes); err != nil {
		return nil, err
	}
	if r.eng, err = openEngine(ctx, cfg, log); err != nil {
		return nil, err
	}
	if cfg.Cluster == nil {
		// What check finds, before anything runs: a step no local device
		// can run would fail only once the steps before it have run.
		if err := checkStepDevices(job, r.eng.q.Devices()); err != nil {
			_ = r.eng.close(res)
			return nil, err
		}
	}
	res.Devices = r.eng.devices()
	res.Start = time.Now()
	if view != nil {
		view.open(r.eng)
	}
	err = r.run(ctx)
	if view != nil {
		view.finish(err)
	}
	if cerr := r.eng.close(res); cerr != nil && err == nil {
		err = cerr
	}
	res.Wall = time.Since(res.Start)
	r.settle()
	return res, err
}

// Load reads and validates a job file against the kernel registry with the
// built-in kernels registered, with params overriding the job's params.
func Load(path string, params map[string]string) (*jobfile.Job, error) {
	if err := kernels.Register(); err != nil {
		return nil, err
	}
	return loadWith(path, params, device.Kernels)
}

// loadWith is Load against the kernels src knows (kernelsFor).
func loadWith(path string, params map[string]string, src jobfile.KernelSource) (*jobfile.Job, error) {
	if err := kernels.Register(); err != nil {
		return nil, err
	}
	data, err := readJobFile(path)
	if err != nil {
		return nil, err
	}
	job, err := jobfile.Parse(path, data, jobfile.Options{Kernels: src, ParamType: kernels.ParamType, Params: params})
	if setOnly(err) {
		return nil, usageError{err} // what is wrong is the command line
	}
	return job, err
}

// readJobFile reads at most jobfile.MaxFileBytes+1 bytes of path, so that
// a job file too large for Parse (or /dev/zero, which has no end) is
// refused without reading it all into memory; Parse names the bound.
func readJobFile(path string) ([]byte, error) {
	data, err := fileread.AtMost(path, jobfile.MaxFileBytes)
	switch {
	case errors.Is(err, fileread.ErrTooLarge):
		return nil, fmt.Errorf("%s: job file is larger than %d bytes; move data into init files", path, jobfile.MaxFileBytes)
	case err != nil:
		return nil, fmt.Errorf("read the job file: %w", err)
	}
	return data, nil
}

// setOnly reports whether every error of a job file's parse is about a
// --set flag (an undeclared param, a value that is no number): a usage
// error (exit 2), as a bad flag is.
func setOnly(err error) bool {
	var es jobfile.Errors
	if !errors.As(err, &es) || len(es) == 0 {
		return false
	}
	for _, e := range es {
		if !strings.HasPrefix(e.Path, "--set ") {
			return false
		}
	}
	return true
}

func deviceOption(s string) (acpp.Option, error) {
	switch s {
	case "cpu":
		return acpp.WithKind(acpp.CPU), nil
	case "cuda":
		return acpp.WithKind(acpp.CUDA), nil
	}
	id, err := jobfile.ParseDevice(s)
	if err != nil {
		return nil, usageError{fmt.Errorf("--device %q: use cpu or cuda (every device of the kind), or cpu:N or cuda:N (one device; acpp-submit devices lists them)", s)}
	}
	return acpp.WithDevice(id.Kind, id.Index), nil
}

// checkDevices refuses a malformed --device value before anything opens.
func checkDevices(devices []string) error {
	for _, d := range devices {
		if _, err := deviceOption(d); err != nil {
			return err
		}
	}
	return nil
}

type runner struct {
	cfg  Config
	job  *jobfile.Job
	log  *slog.Logger
	dir  string
	eng  *engine
	res  *Result
	bufs map[string]buf // by current name (swap exchanges entries)
	// kernelNames maps job-declared kernel names to their registry names.
	kernelNames map[string]string
	// kernels are the kernels steps may name: this program's registry,
	// and on a cluster the nodes' own (kernelsFor).
	kernels     jobfile.KernelSource
	pending     []*pendingGroup
	done, total int
	dag         dag
}

type pendingGroup struct {
	g *Group
	t ticket
}

func (r *runner) path(p string) string { return inDir(r.dir, p) }

// inDir is path p of a job file in directory dir: relative to dir unless
// absolute.
func inDir(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// registerJobKernels registers the kernels the job ships as PTX under a
// name unique to the module's content, after checking the module's entry
// against the declared parameters, and those it gives as CUDA C source
// (see jobKernel).
func (r *runner) registerJobKernels() error {
	var errs jobfile.Errors
	for _, k := range r.job.Kernels {
		def, err := jobKernel(r.job, r.dir, k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := device.Register(def); err != nil && !errors.Is(err, device.ErrDuplicateKernel) {
			errs = append(errs, r.job.At(k.Line, "kernels."+k.Name, err))
		}
		r.kernelNames[k.Name] = def.Name
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// readKernelFile reads a job's PTX module or CUDA C source, at most the
// size a node takes (proto.MaxKernelModule).
func readKernelFile(path string) ([]byte, error) {
	b, err := fileread.AtMost(path, proto.MaxKernelModule)
	if errors.Is(err, fileread.ErrTooLarge) {
		return nil, fmt.Errorf("%s is larger than %d MiB, the most a kernel module or source may be (nodes refuse more)", path, proto.MaxKernelModule>>20)
	}
	return b, err
}

// jobKernel reads a kernel the job declares (PTX or CUDA C, the path
// relative to the job file's directory dir) and makes its registry entry,
// named uniquely for its content, without registering it: check and run
// find the same mistakes. A PTX module's entry must exist and take the
// declared parameters. CUDA C is not compiled here: the CUDA backend
// compiles it with NVRTC where it runs, for each GPU (embedded), or each
// node for its GPUs when the kernel is shipped (--cluster), so the client
// needs no CUDA toolchain; compile errors come back at the source's
// file:line (the path as the job file gives it).
func jobKernel(job *jobfile.Job, dir string, k *jobfile.KernelDecl) (device.Kernel, *jobfile.Error) {
	params := k.DeviceParams()
	if max := proto.MaxKernelName - len("@") - 12; len(k.Name) > max {
		// Registered as name@<12 hex digits>, which a node takes up to
		// MaxKernelName bytes: refused here, not when shipped.
		return device.Kernel{}, job.At(k.Line, "kernels."+k.Name, fmt.Errorf("the kernel's name is %d bytes; at most %d (it is registered with @ and 12 hex digits added, and nodes take names up to %d bytes)", len(k.Name), max, proto.MaxKernelName))
	}
	if k.CUDA != "" {
		src, err := readKernelFile(inDir(dir, k.CUDA))
		if err != nil {
			return device.Kernel{}, job.At(k.LineOf("cuda"), "kernels."+k.Name+".cuda", fmt.Errorf("%w; the path is relative to the job file's directory", err))
		}
		if len(src) == 0 {
			return device.Kernel{}, job.At(k.LineOf("cuda"), "kernels."+k.Name+".cuda", fmt.Errorf("%s is empty", k.CUDA))
		}
		sum := sha256.Sum256(fmt.Appendf(src, "\x00%s\x00%s\x00%q\x00%v", k.Entry, k.CUDA, k.Options, params))
		return device.Kernel{Name: k.Name + "@" + hex.EncodeToString(sum[:6]), Params: params,
			CUDA: &device.CUDA{Source: src, Entry: k.Entry, File: k.CUDA, Options: k.Options}}, nil
	}
	mod, err := readKernelFile(inDir(dir, k.PTX))
	if err != nil {
		return device.Kernel{}, job.At(k.LineOf("ptx"), "kernels."+k.Name+".ptx", fmt.Errorf("%w; the path is relative to the job file's directory", err))
	}
	entries, err := ptxlib.Entries(mod)
	if err != nil {
		return device.Kernel{}, job.At(k.LineOf("ptx"), "kernels."+k.Name+".ptx", err)
	}
	var names []string
	for _, e := range entries {
		if e.Name == k.Entry {
			if err := ptxlib.CheckLayout(k.Name, e, params); err != nil {
				return device.Kernel{}, job.At(k.LineOf("params"), "kernels."+k.Name+".params", err)
			}
			sum := sha256.Sum256(append(append(mod, k.Entry...), fmt.Sprint(params)...))
			return device.Kernel{Name: k.Name + "@" + hex.EncodeToString(sum[:6]), Params: params,
				PTX: &device.PTX{Module: mod, Entry: k.Entry}}, nil
		}
		names = append(names, e.Name)
	}
	return device.Kernel{}, job.At(k.LineOf("entry"), "kernels."+k.Name+".entry", fmt.Errorf("entry %q is not in %s (entries: %s)", k.Entry, k.PTX, strings.Join(names, ", ")))
}

// checkFiles finds what run would find wrong in the files a job names
// (kernels' PTX and CUDA C, buffers' init files) without running it or
// reading init data past its header: check reports these with the job
// file's own mistakes.
func checkFiles(job *jobfile.Job, dir string) error {
	var errs jobfile.Errors
	for _, k := range job.Kernels {
		if _, err := jobKernel(job, dir, k); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range job.Buffers {
		if s.Init == nil || s.Init.File == "" {
			continue
		}
		f, _, err := openInit(inDir(dir, s.Init.File), s, s.Init.Format)
		if err != nil {
			errs = append(errs, job.At(s.Init.LineOf("file"), "buffers."+s.Name+".init.file", err))
			continue
		}
		f.Close()
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// joinJobErrors joins errors found by separate checks into one list of
// job file errors in line order (jobfile.Errors) when they all are;
// otherwise as errors.Join does.
func joinJobErrors(errs ...error) error {
	var all jobfile.Errors
	var other []error
	for _, err := range errs {
		switch e := err.(type) {
		case nil:
		case jobfile.Errors:
			all = append(all, e...)
		case *jobfile.Error:
			all = append(all, e)
		default:
			other = append(other, err)
		}
	}
	if len(other) > 0 {
		if len(all) > 0 {
			other = append([]error{all}, other...)
		}
		return errors.Join(other...)
	}
	if len(all) == 0 {
		return nil
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Line < all[j].Line })
	return all
}

// groupCount is the number of command groups a job submits: its steps'
// plus one per value or kernel initialisation.
func groupCount(job *jobfile.Job) int {
	n := job.CountSteps()
	for _, b := range job.Buffers {
		if b.Init != nil && (b.Init.Value != nil || b.Init.Kernel != nil) {
			n++
		}
	}
	return n
}

func (r *runner) run(ctx context.Context) error {
	r.total = groupCount(r.job)
	if err := r.makeBuffers(ctx); err != nil {
		return err
	}
	err := r.job.Walk(func(s *jobfile.Step) error { return r.step(ctx, s) })
	if err == nil {
		err = r.drain(ctx, 0)
	}
	if err != nil {
		return err
	}
	return r.outputs(ctx)
}

func (r *runner) makeBuffers(ctx context.Context) error {
	for _, s := range r.job.Buffers {
		var data []byte
		if s.Init != nil && s.Init.File != "" {
			d, err := readInit(r.path(s.Init.File), s, s.Init.Format)
			if err != nil {
				return r.job.At(s.Init.LineOf("file"), "buffers."+s.Name+".init.file", err)
			}
			data = d
		}
		b, err := r.eng.newBuffer(s, data)
		if err != nil {
			return r.job.At(s.Line, "buffers."+s.Name, err)
		}
		r.bufs[s.Name] = b
		switch {
		case s.Init == nil:
		case s.Init.Value != nil:
			v, _ := s.Init.Value.Encode(s.Type)
			g := &Group{Label: "init " + s.Name, Kind: "init", Path: "buffers." + s.Name + ".init", Line: s.Init.Line,
				Accesses: []string{s.Name + ":write"}}
			g.regions = []access{regionOf(b, jobfile.Write, nil, nil)}
			if err := r.submit(ctx, g, func() (ticket, error) { return r.eng.fill(g, b, nil, nil, v, "", true) }); err != nil {
				return err
			}
		case s.Init.Kernel != nil:
			if err := r.step(ctx, s.Init.Kernel); err != nil {
				return err
			}
		}
	}
	return nil
}

// step submits one step (never a repeat: Walk unrolls them).
func (r *runner) step(ctx context.Context, s *jobfile.Step) error {
	g := &Group{Label: s.Label(), Kind: string(s.Kind), Path: s.Path, Line: s.Line}
	switch s.Kind {
	case jobfile.SwapStep:
		a, b := s.Swap[0], s.Swap[1]
		r.bufs[a], r.bufs[b] = r.bufs[b], r.bufs[a]
		return nil
	case jobfile.FillStep:
		f := s.Fill
		b := r.bufs[f.Buffer]
		v, _ := f.Value.Encode(b.spec().Type)
		g.Accesses = []string{f.Buffer + ":write"}
		g.regions = []access{regionOf(b, jobfile.Write, f.Offset, f.Range)}
		return r.submit(ctx, g, func() (ticket, error) { return r.eng.fill(g, b, f.Offset, f.Range, v, s.Device, false) })
	case jobfile.CopyStep:
		c := s.Copy
		src, dst := r.bufs[c.From.Buffer], r.bufs[c.To.Buffer]
		g.Accesses = []string{c.From.Buffer + ":read", c.To.Buffer + ":write"}
		from := regionOf(src, jobfile.Read, c.From.Offset, c.From.Range)
		g.regions = []access{from, regionOf(dst, jobfile.Write, c.To.Offset, from.rangeOf())}
		return r.submit(ctx, g, func() (ticket, error) {
			return r.eng.copy(g, src, c.From.Offset, c.From.Range, dst, c.To.Offset, s.Device)
		})
	case jobfile.KernelStep:
		if s.Kind == jobfile.KernelStep && strings.HasPrefix(s.Path, "buffers.") {
			g.Kind, g.Label = "init", "init "+s.Accessors[0].Buffer+" ("+s.Kernel+")"
		}
		name := s.Kernel
		if n, ok := r.kernelNames[name]; ok {
			name = n
		}
		k, err := r.kernels.Lookup(name)
		if err != nil {
			return r.job.At(s.LineOf("kernel"), s.Path+".kernel", err)
		}
		for _, a := range s.Accessors {
			g.Accesses = append(g.Accesses, a.Buffer+":"+string(a.Mode))
			g.regions = append(g.regions, regionOf(r.bufs[a.Buffer], a.Mode, a.Offset, a.Range))
		}
		return r.submit(ctx, g, func() (ticket, error) { return r.eng.kernel(g, s, name, k, r.bufs, s.Device) })
	}
	return r.job.At(s.Line, s.Path, fmt.Errorf("step kind %q cannot run here", s.Kind))
}

// submit submits one command group through the engine and keeps the
// window of groups in flight.
func (r *runner) submit(ctx context.Context, g *Group, sub func() (ticket, error)) error {
	t, err := sub()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("job %s stopped: %w", r.job.Name, context.Cause(ctx))
		}
		return r.job.At(g.Line, g.Path, err)
	}
	r.res.Count++
	if r.cfg.Record {
		g.Deps = r.dag.add(g.ID, g.regions)
		r.res.Groups = append(r.res.Groups, g)
	} else {
		g.RuntimeDeps = nil
	}
	g.regions = nil
	r.pending = append(r.pending, &pendingGroup{g: g, t: t})
	return r.drain(ctx, r.cfg.Window)
}

// drain waits, in submission order, until at most keep groups are pending.
func (r *runner) drain(ctx context.Context, keep int) error {
	for len(r.pending) > keep {
		p := r.pending[0]
		r.pending = r.pending[1:]
		err := p.t.wait(ctx)
		if rerr := r.eng.record(p.g, p.t); err == nil {
			err = rerr
		}
		p.g.Err = err
		r.res.tally(p.g)
		r.done++
		if r.cfg.Progress != nil {
			r.cfg.Progress(r.done, r.total)
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("job %s stopped: %w", r.job.Name, context.Cause(ctx))
			}
			where := fmt.Sprintf("command group #%d", p.g.ID)
			if p.g.Device != "" { // a cluster group that failed before its trace came names no device
				where += " on " + p.g.Device
			}
			return r.job.At(p.g.Line, p.g.Path, fmt.Errorf("%s (%s) failed: %w", p.g.Label, where, err))
		}
	}
	return nil
}

// settle fills in the timing of groups that were still pending when the
// run stopped.
func (r *runner) settle() {
	for _, p := range r.pending {
		p.g.Err = r.eng.record(p.g, p.t)
		p.g.StatsAfter = r.res.Stats
		r.res.tally(p.g)
	}
	r.pending = nil
}

func (r *runner) outputs(ctx context.Context) error {
	if len(r.job.Outputs) == 0 {
		return nil
	}
	dir := r.cfg.OutDir
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the output directory: %w", err)
	}
	for _, o := range r.job.Outputs {
		b := r.bufs[o.Buffer]
		start := time.Now()
		p := o.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return r.job.At(o.LineOf("file"), o.Path+".file", err)
		}
		moved, err := writeOutput(ctx, r.eng, b, p, o.Format)
		if err != nil {
			return r.job.At(o.LineOf("file"), o.Path+".file", fmt.Errorf("write buffer %q to %s: %w", o.Buffer, p, err))
		}
		r.res.Outputs = append(r.res.Outputs, OutputFile{Buffer: o.Buffer, Path: p, Format: o.Format, Bytes: b.spec().Bytes(), Type: b.spec().Type, Range: b.spec().Range,
			Start: start, End: time.Now(), Moved: moved})
	}
	return nil
}
