package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
)

// ErrDoesNotFit marks a job whose buffers cannot fit the memory budgets
// of the machine or cluster it would run on (check).
var ErrDoesNotFit = errors.New("job does not fit")

// memBudget is one memory a job could use, with its budget (see
// acpp-node --max-bytes and acpp.WithMemoryLimit).
type memBudget struct {
	// Name says where it is: "host memory", "cuda:0", "n1 host memory".
	Name string
	Host bool
	// Budget is what allocations may hold in it (0: no budget); How says
	// how it was chosen.
	Budget uint64
	How    string
	// Node and JobLimit: the cluster member the memory belongs to and its
	// per-job limit (acpp-node --max-job-bytes; 0: none), which bounds
	// what one job holds in all of that node's memories together.
	Node     string
	JobLimit uint64
}

func (m memBudget) String() string {
	if m.Budget == 0 {
		return m.Name + ": no budget"
	}
	s := m.Name + ": " + bytesStr(int64(m.Budget))
	if m.How != "" {
		s += " (" + m.How + ")"
	}
	return s
}

// fit says why job cannot run on memories, or nothing when it can, as far
// as sizes tell: each buffer needs one allocation of its full size in
// some memory (B1), so it must fit one budget, and all of them together
// the sum of the budgets; outputs come back through host memory (hostOut,
// where they are read back: this machine's host memory; nil: not known).
// A job that passes may still fail when other jobs hold memory, or when
// its steps need a buffer in more than one memory at once.
func fit(job *jobfile.Job, mems []memBudget, where string, hostOut *memBudget) []string {
	var largest *memBudget
	var sum uint64
	unlimited := false
	perNode := map[string]uint64{} // budgets of one node's memories together
	limits := map[string]uint64{}  // nodes' per-job limits
	for i := range mems {
		m := &mems[i]
		if m.Budget == 0 {
			unlimited = true
			continue
		}
		if m.JobLimit > 0 {
			perNode[m.Node] += m.Budget
			limits[m.Node] = m.JobLimit
		} else {
			sum += m.Budget
		}
		if largest == nil || m.Budget > largest.Budget {
			largest = m
		}
	}
	for n, s := range perNode {
		sum += min(s, limits[n])
	}
	if unlimited || largest == nil {
		return nil // some memory has no budget: sizes tell nothing
	}
	var why []string
	var total uint64
	for _, b := range job.Buffers {
		n := uint64(b.Bytes())
		total += n
		if n > largest.Budget {
			why = append(why, fmt.Sprintf("buffer %s (%s %v) is %s, more than the largest memory budget of %s (%s)",
				b.Name, b.Type, b.Range, bytesStr(int64(n)), where, largest))
		}
	}
	if total > sum && len(job.Buffers) > 1 {
		why = append(why, fmt.Sprintf("its buffers are %s together, more than the memory budgets of %s together (%s)", bytesStr(int64(total)), where, bytesStr(int64(sum))))
	}
	if hostOut != nil && hostOut.Budget != 0 {
		for _, o := range job.Outputs {
			b := job.Buffer(o.Buffer)
			if b == nil {
				continue
			}
			if n := uint64(b.Bytes()); n > hostOut.Budget {
				why = append(why, fmt.Sprintf("output %s (buffer %s, %s) is read back into this machine's %s", o.File, b.Name, bytesStr(int64(n)), hostOut))
			}
		}
	}
	return why
}

// machineBudgets are the memory budgets of this machine's devices under
// limit, as an embedded run would have them.
func machineBudgets(ctx context.Context, limit acpp.MemoryLimit, devices []string) ([]memBudget, []device.Info, error) {
	opts := []acpp.Option{acpp.WithMemoryLimit(limit), acpp.WithLogger(slog.New(slog.DiscardHandler))}
	for _, d := range devices {
		o, err := deviceOption(d)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, o)
	}
	q, err := acpp.NewQueue(ctx, opts...)
	if err != nil {
		return nil, nil, openLocalError(devices, err)
	}
	defer q.Close()
	infos := q.Devices()
	var out []memBudget
	for _, b := range q.MemoryBudgets() {
		name := b.Device.String()
		if b.Host {
			name = "host memory"
		}
		out = append(out, memBudget{Name: name, Host: b.Host, Budget: b.Budget, How: b.How})
	}
	return out, infos, nil
}

// checkStepDevices refuses steps (and kernel initialisations) pinned to
// a device the embedded run would not have (infos), and kernel steps
// whose kernel none of those devices runs (a job's own PTX or CUDA C
// kernel on a machine without a GPU), as run would when it reaches them,
// after the steps before had run.
func checkStepDevices(job *jobfile.Job, infos []device.Info) error {
	var have []string
	var ids []device.ID
	for _, d := range infos {
		have = append(have, d.ID.String())
		ids = append(ids, d.ID)
	}
	own := map[string]bool{}
	for _, k := range job.Kernels {
		own[k.Name] = true
	}
	// runs says whether d runs the step's kernel: a job's own kernel is
	// PTX (or CUDA C compiled to PTX) only.
	runs := func(s *jobfile.Step, d device.Info) bool {
		if own[s.Kernel] {
			return d.Caps.Runs(device.FormPTX)
		}
		k, err := device.Kernels.Lookup(s.Kernel)
		return err != nil || d.Caps.RunsKernel(k) // an unknown kernel is reported by the parser
	}
	var errs jobfile.Errors
	eachDeclaredStep(job, func(s *jobfile.Step) {
		if s.Device != "" {
			id, err := jobfile.ParseDevice(s.Device)
			if err != nil {
				return
			}
			i := slices.Index(ids, id)
			if i < 0 {
				errs = append(errs, job.At(s.LineOf("device"), s.Path+".device", fmt.Errorf("no device %s here (devices: %s); pin the step to one of them, leave device: out, or run it with --cluster", id, strings.Join(have, ", "))))
			} else if s.Kind == jobfile.KernelStep && !runs(s, infos[i]) {
				errs = append(errs, job.At(s.LineOf("device"), s.Path+".device", fmt.Errorf("%s does not run kernel %q (no implementation for it); pin the step to a device that does, or leave device: out", id, s.Kernel)))
			}
			return
		}
		if s.Kind != jobfile.KernelStep || slices.ContainsFunc(infos, func(d device.Info) bool { return runs(s, d) }) {
			return
		}
		errs = append(errs, job.At(s.Line, s.Path, fmt.Errorf("no device here runs kernel %q (devices: %s): it has no implementation for them; run it on a machine with a device that does (a job's own PTX or CUDA C kernel needs a CUDA GPU) or with --cluster (%w)", s.Kernel, strings.Join(have, ", "), device.ErrNoImplementation)))
	})
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// eachDeclaredStep calls f on every step the job declares that submits
// work, once each: the buffers' kernel initialisations, then the steps,
// those of a repeat once however often it repeats.
func eachDeclaredStep(job *jobfile.Job, f func(s *jobfile.Step)) {
	var visit func(steps []*jobfile.Step)
	visit = func(steps []*jobfile.Step) {
		for _, s := range steps {
			if s.Kind == jobfile.RepeatStep {
				visit(s.Steps)
				continue
			}
			f(s)
		}
	}
	for _, b := range job.Buffers {
		if b.Init != nil && b.Init.Kernel != nil {
			visit([]*jobfile.Step{b.Init.Kernel})
		}
	}
	visit(job.Steps)
}

// hostBudget is this machine's host memory budget under the default
// limit, where read-backs of a cluster run land.
func hostBudget() *memBudget {
	size, _, err := cpu.HostMemory()
	if err != nil {
		return nil
	}
	b, how := acpp.MemoryLimit{}.Budget(size, true)
	return &memBudget{Name: "host memory", Host: true, Budget: b, How: how}
}

// clusterBudgets are the memory budgets of every alive member of the
// cluster (their inventories), and the members that did not answer.
func clusterBudgets(ctx context.Context, cfg *ClusterConfig) ([]memBudget, []string, error) {
	ctx, cl, ms, done, err := ask(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	var out []memBudget
	var missing []string
	invs := inventories(ctx, cl, ms.Members)
	for i, m := range ms.Members {
		if m.State != "alive" || m.Leaving || m.QUICAddr == "" {
			continue
		}
		inv, err := invs[i].inv, invs[i].err
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", m.Name, err))
			continue
		}
		for _, mem := range inv.Memories {
			name := m.Name + " " + mem.Device
			if mem.Host {
				name = m.Name + " host memory"
			}
			how := ""
			if mem.Bytes > 0 {
				how = "of " + bytesStr(int64(mem.Bytes))
			}
			b := memBudget{Name: name, Host: mem.Host, Budget: mem.Budget, How: how, Node: m.Name, JobLimit: inv.MaxJobBytes}
			if lim := inv.MaxJobBytes; lim > 0 && (b.Budget == 0 || lim < b.Budget) {
				// One job holds no more than the node's per-job limit.
				b.Budget, b.How = lim, fmt.Sprintf("%s's per-job limit, --max-job-bytes", m.Name)
			}
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, missing, fmt.Errorf("%w: no member answered with its memories (%s)", ErrCluster, strings.Join(missing, "; "))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, missing, nil
}

// budgetsLine lists memories for check's report.
func budgetsLine(mems []memBudget) string {
	parts := make([]string, len(mems))
	for i, m := range mems {
		parts[i] = m.String()
	}
	return strings.Join(parts, ", ")
}

// checkLaunches runs each kernel step's launch check (device.Kernel.Check:
// a work-group size or local memory the kernel cannot compute with, a
// range that runs past its buffers) for
// the kernels of this program's registry, as Submit would at run time.
// Steps whose range comes from their first accessor are left to run.
func checkLaunches(job *jobfile.Job) error {
	var errs jobfile.Errors
	eachDeclaredStep(job, func(s *jobfile.Step) {
		if s.Kind != jobfile.KernelStep || s.Range == nil {
			return
		}
		k, err := device.Kernels.Lookup(s.Kernel)
		if err != nil || k.Check == nil {
			return
		}
		nd := device.NDRange{Global: dims3(s.Range)}
		if s.WorkGroup != nil {
			nd.Local = dims3(s.WorkGroup)
		}
		args := make([]device.Arg, len(k.Params))
		for i, p := range k.Params {
			args[i] = device.Arg{Kind: p.Kind, Space: p.Space, ElemSize: p.ElemSize}
			for _, a := range s.Accessors {
				// The buffer's size, for the checks of launches that
				// would run past it (a swap keeps sizes: both sides
				// have one shape).
				if b := job.Buffer(a.Buffer); a.Param == p.Name && b != nil {
					switch p.Kind {
					case device.ArgAccessor, device.ArgRangedAccessor:
						args[i].Range = dims3(b.Range)
					case device.ArgPointer:
						args[i].Mem, args[i].ElemSize = &device.Mem{Bytes: b.Bytes()}, jobfile.Types[b.Type]
					}
				}
			}
			for _, sc := range s.Scalars {
				if sc.Param == p.Name && p.Kind == device.ArgScalar {
					args[i].Scalar, _ = sc.Value.Encode(sc.Type)
				}
			}
			for _, l := range s.Local {
				if l.Param == p.Name && p.Kind == device.ArgLocal {
					args[i].LocalBytes = l.Bytes
				}
			}
		}
		if err := device.CheckLaunch(k, nd, args); err != nil {
			errs = append(errs, job.At(s.Line, s.Path, err))
		}
	})
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// dims3 is an extent of 1–3 dimensions as an NDRange's three, the last
// dimension varying fastest (as acpp.Range does).
func dims3(e []int) [3]int {
	out := [3]int{1, 1, 1}
	copy(out[3-len(e):], e)
	return out
}
