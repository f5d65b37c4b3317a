package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/kernels"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
)

// Nodes prints one row per cluster member, as the first reachable address
// of cfg sees the membership: name, state, QUIC address, devices per kind
// with their memory.
func Nodes(ctx context.Context, cfg *ClusterConfig, w io.Writer) error {
	_, _, ms, done, err := ask(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tQUIC ADDRESS\tDEVICES")
	for _, m := range ms.Members {
		state := m.State
		if m.Leaving && state == "alive" {
			state = "draining"
		}
		addr := m.QUICAddr
		if addr == "" {
			addr = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, state, addr, deviceSummary(m.Devices))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s (as node %s sees them)\n", memberCounts(ms, "members, all alive"), ms.Node)
	return nil
}

// memberCounts counts the members by state: "2 alive, 1 left", "3 alive, 1
// draining, 1 failed". Draining members are alive (they count in the node's
// /healthz members=N, which counts alive ones) and said so. When every
// member is alive and none drains it is "3 " + allAlive.
func memberCounts(ms *proto.Members, allAlive string) string {
	var alive, draining int
	other := map[string]int{}
	var states []string // other states, in the order met
	for _, m := range ms.Members {
		switch {
		case m.State == "alive":
			alive++
			if m.Leaving {
				draining++
			}
		default:
			if other[m.State] == 0 {
				states = append(states, m.State)
			}
			other[m.State]++
		}
	}
	if len(states) == 0 && draining == 0 {
		if alive == 1 { // "1 member, all alive" reads oddly: say what it is
			return "1 member, alone in its cluster"
		}
		return fmt.Sprintf("%d %s", alive, allAlive)
	}
	sort.Strings(states) // failed, left
	parts := []string{fmt.Sprintf("%d alive", alive)}
	if draining > 0 {
		parts[0] += fmt.Sprintf(" (%d draining)", draining)
	}
	for _, st := range states {
		parts = append(parts, fmt.Sprintf("%d %s", other[st], st))
	}
	return strings.Join(parts, ", ")
}

func deviceSummary(ds []proto.DeviceSummary) string {
	if len(ds) == 0 {
		return "-"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		s := fmt.Sprintf("%s×%d", d.Kind, d.Count)
		if d.MemBytes > 0 {
			s += " " + bytesStr(int64(d.MemBytes))
		}
		if d.Unified {
			s += " (host-unified)"
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}

// Status prints one row per member with what its inventory says: open
// jobs, memory they hold, its memory budgets and per-job limit, whether it
// drains; then one row per (job, node) with the job's client, the bytes
// and allocations it holds there and its instructions pending, running
// and remembered. A
// node lists a client's own jobs only, an operator's every client's (C6);
// the first line says which view this is.
func Status(ctx context.Context, cfg *ClusterConfig, w io.Writer) error {
	ctx, cl, ms, done, err := ask(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	// The table goes to a buffer: the view line above it is known once
	// every node has answered.
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tJOBS\tALLOCATED\tBUDGET\tDEVICES")
	var jobs, unreachable int
	ownOnly := false
	type jobRow struct {
		node string
		j    proto.JobInv
	}
	var rows []jobRow
	invs := inventories(ctx, cl, ms.Members)
	for i, m := range ms.Members {
		if m.State != "alive" || m.QUICAddr == "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\n", m.Name, m.State)
			continue
		}
		inv, err := invs[i].inv, invs[i].err
		if err != nil {
			unreachable++
			fmt.Fprintf(tw, "%s\tunreachable\t-\t-\t-\t%v\n", m.Name, err)
			continue
		}
		state := "serving"
		if inv.Draining {
			state = "draining"
		}
		limit := memoryBudgets(inv)
		if inv.MaxJobBytes > 0 {
			limit += ", " + bytesStr(int64(inv.MaxJobBytes)) + "/job"
		}
		devs := make([]string, len(inv.Devices))
		for i, d := range inv.Devices {
			devs[i] = d.ID
		}
		// A device lost while the node runs (a GPU whose context a
		// faulting kernel made unusable) is out of service until the
		// node restarts.
		for _, l := range inv.Lost {
			id, _, _ := strings.Cut(l, ": ")
			devs = append(devs, id+"(lost)")
			if state == "serving" {
				state = "degraded"
			}
		}
		jobs += inv.Jobs
		ownOnly = ownOnly || inv.OwnJobsOnly
		for _, j := range inv.JobList {
			rows = append(rows, jobRow{m.Name, j})
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", m.Name, state, inv.Jobs, bytesStr(int64(inv.Allocated)), limit, strings.Join(devs, " "))
	}
	if len(rows) > 0 {
		sort.SliceStable(rows, func(a, b int) bool { return rows[a].j.ID < rows[b].j.ID })
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "JOB\tNODE\tCLIENT\tHOLDS\tALLOCATIONS\tPENDING\tRUNNING\tINSTRUCTIONS KNOWN")
		for _, r := range rows {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.j.ID, r.node, r.j.Client, bytesStr(int64(r.j.Bytes)), r.j.Allocs, r.j.Pending, r.j.Running, r.j.Known)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ownOnly {
		fmt.Fprintf(w, "Jobs of %s only: a client sees its own jobs (JOBS and ALLOCATED count every client's); an operator (acpp-node credentials operator NAME) sees all.\n", cl.Identity())
	} else {
		fmt.Fprintf(w, "Jobs of every client (as %s).\n", cl.Identity())
	}
	if _, err := w.Write(table.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s; %d job openings (a job counts once per node it runs on)", memberCounts(ms, "members"), jobs)
	if ownOnly {
		fmt.Fprintf(w, ", %d of them yours", len(rows))
	}
	if unreachable > 0 {
		fmt.Fprintf(w, "; %d unreachable", unreachable)
	}
	fmt.Fprintln(w)
	return nil
}

// ask dials the cluster for a command that asks its members something
// (nodes, status, kernels): at most 15 s, the member list, and done to
// call when finished (it closes the client unless the config lent one).
func ask(ctx context.Context, cfg *ClusterConfig) (context.Context, *nodeclient.Client, *proto.Members, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	cl, _, ms, err := Dial(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		return ctx, nil, nil, func() {}, err
	}
	return ctx, cl, ms, func() {
		if cfg.client == nil {
			cl.Close()
		}
		cancel()
	}, nil
}

// lendClient starts the node client once for a command that asks the
// cluster several things (run: the kernels' declarations, then the job;
// check: the declarations, then the budgets): it returns cfg with that
// client lent to each, and done to close it. A cfg that has a client
// already (tests) is returned as it is.
func lendClient(cfg *ClusterConfig, log *slog.Logger) (*ClusterConfig, func(), error) {
	if cfg == nil || cfg.client != nil {
		return cfg, func() {}, nil
	}
	creds, err := clusterCredentials(cfg)
	if err != nil {
		return nil, func() {}, err
	}
	cl, err := nodeclient.Start(nodeclient.Config{Credentials: creds, Logger: log, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, func() {}, err
	}
	lent := *cfg
	lent.client = cl
	return &lent, func() { cl.Close() }, nil
}

type inventoryClient interface {
	Connect(ctx context.Context, addr string) (string, error)
	Inventory(ctx context.Context, node string) (*proto.Inventory, error)
}

// invAnswer is one member's inventory, or why not.
type invAnswer struct {
	inv *proto.Inventory
	err error
}

// inventories asks every alive member of ms with a QUIC address for its
// inventory, all at once (3 s each), and returns the answers in ms's order
// (zero for the others). Members listed alive but hung cost 3 s once, not
// 3 s each in turn (five in turn would run out the commands' 15 s, and
// the members after them would show unreachable).
func inventories(ctx context.Context, cl inventoryClient, ms []proto.Member) []invAnswer {
	out := make([]invAnswer, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		if m.State != "alive" || m.QUICAddr == "" {
			continue
		}
		wg.Go(func() { out[i].inv, out[i].err = inventory(ctx, cl, m) })
	}
	wg.Wait()
	return out
}

func inventory(ctx context.Context, cl inventoryClient, m proto.Member) (*proto.Inventory, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	name, err := cl.Connect(ctx, m.QUICAddr)
	if err != nil {
		return nil, err
	}
	return cl.Inventory(ctx, name)
}

// memoryBudgets is a node's memory budgets for status: "host 17.66 GiB"
// and one entry per GPU memory ("cuda:0 71.26 GiB"), "none" where a
// memory has none (acpp-node --max-bytes 0), and the node's total where
// --max-bytes set one.
func memoryBudgets(inv *proto.Inventory) string {
	var parts []string
	for _, m := range inv.Memories {
		name := m.Device
		if m.Host {
			name = "host"
		}
		b := "none"
		if m.Budget > 0 {
			b = bytesStr(int64(m.Budget))
		}
		parts = append(parts, name+" "+b)
	}
	if len(parts) == 0 {
		parts = []string{"none"} // a node from before budgets
	}
	if inv.MaxBytes > 0 && len(inv.Memories) > 1 {
		parts = append(parts, "total "+bytesStr(int64(inv.MaxBytes)))
	}
	return strings.Join(parts, " ")
}

// KernelsOnCluster lists the kernels the cluster's alive nodes advertise,
// each with the nodes that have it ("every node" when all do): a node's
// own binary may carry kernels of its own, and the coordinator places a
// group only on nodes that have its kernel.
func KernelsOnCluster(ctx context.Context, cfg *ClusterConfig, w io.Writer) error {
	ctx, cl, ms, done, err := ask(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	have := map[string][]string{} // kernel → nodes
	var nodes, unreachable []string
	invs := inventories(ctx, cl, ms.Members)
	for i, m := range ms.Members {
		if m.State != "alive" || m.QUICAddr == "" {
			continue
		}
		inv, err := invs[i].inv, invs[i].err
		if err != nil {
			unreachable = append(unreachable, fmt.Sprintf("%s (%v)", m.Name, err))
			continue
		}
		nodes = append(nodes, m.Name)
		for _, k := range inv.Kernels {
			have[k] = append(have[k], m.Name)
		}
	}
	names := make([]string, 0, len(have))
	for k := range have {
		names = append(names, k)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KERNEL\tNODES")
	for _, k := range names {
		on := strings.Join(have[k], ", ")
		if len(have[k]) == len(nodes) && len(nodes) > 1 {
			on = "every node"
		}
		fmt.Fprintf(tw, "%s\t%s\n", k, on)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s on %s (%s)\n", things(len(names), "kernel"), things(len(nodes), "node"), strings.Join(nodes, ", "))
	if len(unreachable) > 0 {
		return fmt.Errorf("%w: no answer from %s", ErrCluster, strings.Join(unreachable, "; "))
	}
	return nil
}

// kernelSource is this program's kernel registry and the kernels a
// cluster's nodes declare that it lacks (a custom node's own, built on
// node/nodecmd): a job file names those like built-ins, and a group runs
// on the nodes that have them.
type kernelSource struct {
	nodes   map[string]*device.Kernel // declared by the nodes, not registered here
	on      map[string][]string       // kernel → the nodes that have it
	members []string                  // the nodes asked
	ptx     []string                  // the nodes with a device that runs PTX (a GPU)
}

// Where says where the kernels were looked for (jobfile's unknown-kernel
// error).
func (s kernelSource) Where() string {
	return fmt.Sprintf("neither this job nor any node of the cluster (%s) declares it", strings.Join(s.members, ", "))
}

// Lookup is the registry's kernel, else the nodes' declaration.
func (s kernelSource) Lookup(name string) (*device.Kernel, error) {
	k, err := device.Kernels.Lookup(name)
	if err == nil {
		return k, nil
	}
	if k, ok := s.nodes[name]; ok {
		return k, nil
	}
	return nil, err
}

// Names lists both, sorted.
func (s kernelSource) Names() []string {
	out := device.Kernels.Names()
	for n := range s.nodes {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// kernelsFor is the kernels a job may name: the built-ins (and what this
// program registers); with a cluster, also the kernels its alive nodes
// declare (parameters only: the nodes run them).
func kernelsFor(ctx context.Context, cfg *ClusterConfig) (jobfile.KernelSource, error) {
	if err := kernels.Register(); err != nil {
		return nil, err
	}
	if cfg == nil {
		return device.Kernels, nil
	}
	ctx, cl, ms, done, err := ask(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	src := kernelSource{nodes: map[string]*device.Kernel{}, on: map[string][]string{}}
	invs := inventories(ctx, cl, ms.Members)
	for i, m := range ms.Members {
		if m.State != "alive" || m.QUICAddr == "" {
			continue
		}
		inv, err := invs[i].inv, invs[i].err
		if err != nil {
			continue // the job's own Connect says which node does not answer
		}
		src.members = append(src.members, m.Name)
		for _, d := range inv.Devices {
			if slices.Contains(d.Forms, device.FormPTX.String()) && !slices.Contains(src.ptx, m.Name) {
				src.ptx = append(src.ptx, m.Name)
			}
		}
		for _, k := range inv.Kernels {
			src.on[k] = append(src.on[k], m.Name)
		}
		for _, d := range inv.KernelDecls {
			if _, err := device.Kernels.Lookup(d.Name); err == nil {
				continue
			}
			if _, ok := src.nodes[d.Name]; !ok {
				src.nodes[d.Name] = &device.Kernel{Name: d.Name, Params: proto.Params(d.Params)}
			}
		}
	}
	return src, nil
}

// onCluster says, for each kernel the job's steps launch, which nodes have
// it ("every node" when all do), and lists the kernels no node has (the
// job's own kernels travel with it and are not counted).
func (s kernelSource) onCluster(job *jobfile.Job) (line string, missing []string) {
	own := map[string]bool{}
	for _, k := range job.Kernels {
		own[k.Name] = true
	}
	var parts []string
	seen := map[string]bool{}
	// Buffer inits first, then the steps, those inside repeats too.
	eachDeclaredStep(job, func(st *jobfile.Step) {
		if st.Kind != jobfile.KernelStep || seen[st.Kernel] {
			return
		}
		if own[st.Kernel] {
			// The job's own kernels travel with it, as PTX or CUDA C:
			// they run on the nodes' GPUs only.
			seen[st.Kernel] = true
			if len(s.ptx) == 0 {
				missing = append(missing, fmt.Sprintf("kernel %s is the job's own (PTX or CUDA C), which runs on GPUs, and no node has one (asked %s)", st.Kernel, strings.Join(s.members, ", ")))
				parts = append(parts, st.Kernel+" on no node (no GPU)")
			} else {
				parts = append(parts, st.Kernel+" (the job's) on "+strings.Join(s.ptx, ", "))
			}
			return
		}
		seen[st.Kernel] = true
		on := s.on[st.Kernel]
		switch {
		case len(on) == 0:
			missing = append(missing, fmt.Sprintf("kernel %s is on no node (asked %s; a node of your own registers it: node/nodecmd, examples/custom-node)", st.Kernel, strings.Join(s.members, ", ")))
			parts = append(parts, st.Kernel+" on no node")
		case len(on) == len(s.members) && len(on) > 1:
			parts = append(parts, st.Kernel+" on every node")
		default:
			parts = append(parts, st.Kernel+" on "+strings.Join(on, ", "))
		}
	})
	return strings.Join(parts, "; "), missing
}
