package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/liveview"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

func (n *Node) registerHandlers() {
	n.registerDrain()
	transport.HandleFunc(n.tr, proto.MsgJobOpen, n.handleOpen)
	transport.HandleFunc(n.tr, proto.MsgJobRenew, func(_ context.Context, from credentials.Identity, req *proto.JobRef) (*proto.JobOpened, error) {
		j, err := n.jobFor(from, req.Job)
		if err != nil {
			return nil, err
		}
		j.touch()
		return &proto.JobOpened{Lease: int64(j.lease), MaxBytes: j.maxBytes, Node: n.cfg.Name, Boot: n.tr.Identity().Instance}, nil
	})
	transport.HandleFunc(n.tr, proto.MsgJobClose, func(_ context.Context, from credentials.Identity, req *proto.JobRef) (*proto.JobClosed, error) {
		j, err := n.jobFor(from, req.Job)
		if err != nil {
			return nil, err
		}
		freed := n.closeJob(j, fmt.Errorf("job %d closed by its client", j.id))
		return &proto.JobClosed{Freed: freed}, nil
	})
	transport.HandleFunc(n.tr, proto.MsgSubmit, func(_ context.Context, from credentials.Identity, req *proto.Submit) (*proto.Submitted, error) {
		j, err := n.jobFor(from, req.Job)
		if err != nil {
			return nil, err
		}
		// A draining node still runs its open jobs' instructions: their
		// clients move the pages only it holds elsewhere before closing
		// the job here (issue 15); new jobs are refused.
		j.touch()
		for i := range req.Instrs {
			if l := req.Instrs[i].Launch; l != nil && l.Replay {
				n.met.replayed.Inc()
			}
		}
		pending, err := j.submit(req.Instrs, req.Forget)
		if err != nil {
			return nil, err
		}
		return &proto.Submitted{Pending: pending}, nil
	})
	transport.HandleFunc(n.tr, proto.MsgWait, n.handleWait)
	transport.HandleFunc(n.tr, proto.MsgEvents, n.handleEvents)
	transport.HandleFunc(n.tr, proto.MsgInventory, func(_ context.Context, from credentials.Identity, _ *struct{}) (*proto.Inventory, error) {
		return n.inventoryFor(from), nil
	})
	transport.HandleFunc(n.tr, proto.MsgMembers, func(context.Context, credentials.Identity, *struct{}) (*proto.Members, error) {
		return n.Members(), nil
	})
	transport.HandleFunc(n.tr, proto.MsgJobKernels, n.handleJobKernels) // kernels.go
	transport.HandleFunc(n.tr, proto.MsgUnmapRef, n.handleUnmapRef)     // pageref.go
	n.tr.HandlePages(n.onPages)
}

// Members is the cluster membership this node sees (MsgMembers), for
// clients that know one address and need every member's QUIC address.
func (n *Node) Members() *proto.Members {
	out := &proto.Members{Node: n.cfg.Name}
	cl := n.clp.Load()
	if cl == nil { // still starting: no membership yet
		return out
	}
	snap := cl.Members()
	for _, m := range snap.Members {
		pm := proto.Member{Name: m.Name, State: m.State.String(), Leaving: m.Meta.Leaving, QUICAddr: m.Meta.QUICAddr, GossipAddr: m.Addr.String()}
		if m.MetaErr == nil {
			pm.Boot = m.Meta.BootID
		}
		for _, d := range m.Meta.Devices {
			pm.Devices = append(pm.Devices, proto.DeviceSummary{Kind: d.Kind.String(), Count: d.Count, MemBytes: d.MemBytes, Unified: d.Unified})
		}
		out.Members = append(out.Members, pm)
	}
	return out
}

// inventoryFor is the node's inventory (MsgInventory) as from may see it
// (C6): an operator or a node sees every job; a client sees its own jobs
// only (OwnJobsOnly), and of the others no more than the node's totals
// (Jobs, Allocated).
func (n *Node) inventoryFor(from credentials.Identity) *proto.Inventory {
	inv := n.Inventory()
	if from.Role == proto.RoleOperator || from.Role == proto.RoleNode {
		return inv
	}
	// Ownership is the whole identity (role and name); JobInv carries the
	// name only, so take the IDs of from's jobs from the job table.
	n.mu.Lock()
	mine := make(map[uint64]bool)
	for id, j := range n.jobs {
		if ownedBy(j, from) {
			mine[id] = true
		}
	}
	n.mu.Unlock()
	own := make([]proto.JobInv, 0, len(mine))
	for _, ji := range inv.JobList {
		if mine[ji.ID] && ji.Client == from.Name {
			own = append(own, ji)
		}
	}
	inv.JobList, inv.OwnJobsOnly = own, true
	return inv
}

// ownedBy reports whether from may use j: it is the client or operator
// that opened it.
func ownedBy(j *job, from credentials.Identity) bool {
	return from.IsClient() && from.Role == j.owner.Role && from.Name == j.owner.Name
}

func (n *Node) handleOpen(_ context.Context, from credentials.Identity, req *proto.JobOpen) (*proto.JobOpened, error) {
	if !from.IsClient() {
		return nil, reply(proto.CodeNotOwner, "%s is not a client; only clients and operators open jobs", from)
	}
	if n.draining.Load() {
		return nil, reply(proto.CodeDraining, "node %s is shutting down and takes no new jobs; use another node", n.cfg.Name)
	}
	if req.Job == 0 {
		return nil, reply(proto.CodeBadInstr, "job ID 0 is reserved; pick a random non-zero ID")
	}
	if req.Recovery > 0 {
		n.met.recoveries.Inc()
	}
	lease := time.Duration(req.Lease)
	if lease <= 0 {
		lease = n.cfg.JobLease
	}
	lease = min(lease, n.cfg.MaxJobLease)
	limit := n.cfg.MaxJobBytes
	if req.MaxBytes != 0 && (limit == 0 || req.MaxBytes < limit) {
		limit = req.MaxBytes
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, reply(proto.CodeDraining, "node %s is closed", n.cfg.Name)
	}
	if j, ok := n.jobs[req.Job]; ok {
		if !ownedBy(j, from) {
			return nil, reply(proto.CodeNotOwner, "job %d is in use by another client; pick another job ID", req.Job)
		}
		j.touch()
		return &proto.JobOpened{Lease: int64(j.lease), MaxBytes: j.maxBytes, Node: n.cfg.Name, Boot: n.tr.Identity().Instance}, nil
	}
	held := 0
	for _, o := range n.jobs {
		if ownedBy(o, from) {
			held++
		}
	}
	if held >= n.cfg.MaxClientJobs {
		jobs := "jobs"
		if held == 1 {
			jobs = "job"
		}
		return nil, reply(proto.CodeTooLarge, "client %s holds %d %s open on node %s, at most %d: close the jobs it no longer needs (a job whose lease is not renewed ends by itself)", from.Name, held, jobs, n.cfg.Name, n.cfg.MaxClientJobs)
	}
	j := newJob(n, req.Job, from, lease, limit)
	n.jobs[req.Job] = j
	n.met.jobs.Set(float64(len(n.jobs)))
	n.log.Info("job opened", "job", jobID(req.Job), "client", from.Name, "lease", lease.String(), "max_bytes", limit)
	return &proto.JobOpened{Lease: int64(lease), MaxBytes: limit, Node: n.cfg.Name, Boot: n.tr.Identity().Instance}, nil
}

// jobFor returns the job if from owns it.
func (n *Node) jobFor(from credentials.Identity, id uint64) (*job, error) {
	n.mu.Lock()
	j := n.jobs[id]
	n.mu.Unlock()
	if j == nil {
		return nil, reply(proto.CodeNoJob, "job %d is not open on node %s (never opened, closed, its lease expired, or the node restarted since it was opened: a restart loses its jobs; run the job again)", id, n.cfg.Name)
	}
	if !ownedBy(j, from) {
		return nil, reply(proto.CodeNotOwner, "job %d belongs to another client; %s may not use it", id, from)
	}
	return j, nil
}

// closeJob removes j and closes it; it returns the bytes it held.
func (n *Node) closeJob(j *job, cause error) uint64 {
	n.mu.Lock()
	if n.jobs[j.id] == j {
		delete(n.jobs, j.id)
	}
	n.met.jobs.Set(float64(len(n.jobs)))
	n.mu.Unlock()
	freed := j.close(cause)
	n.log.Info("job closed", "job", jobID(j.id), "freed_bytes", freed, "cause", cause)
	return freed
}

// pollUntil is how long a long poll may wait: until shortly before the
// caller's deadline, at most 30 s.
func pollUntil(ctx context.Context) time.Time {
	limit := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok {
		margin := min(time.Until(dl)/10, 200*time.Millisecond)
		if t := dl.Add(-margin); t.Before(limit) {
			limit = t
		}
	}
	return limit
}

func (n *Node) handleWait(ctx context.Context, from credentials.Identity, req *proto.Wait) (*proto.WaitResult, error) {
	j, err := n.jobFor(from, req.Job)
	if err != nil {
		return nil, err
	}
	j.touch()
	timer := time.NewTimer(time.Until(pollUntil(ctx)))
	defer timer.Stop()
	for {
		r, done, changed, err := j.waitResult(req.IDs)
		if err != nil || done {
			return &r, err
		}
		select {
		case <-changed:
		case <-timer.C:
			return &r, nil
		case <-ctx.Done():
			return &r, nil
		}
	}
}

func (n *Node) handleEvents(ctx context.Context, from credentials.Identity, req *proto.EventsRequest) (*proto.EventsReply, error) {
	j, err := n.jobFor(from, req.Job)
	if err != nil {
		return nil, err
	}
	j.touch()
	limit := req.Max
	if limit <= 0 || limit > 1024 {
		limit = 1024
	}
	timer := time.NewTimer(time.Until(pollUntil(ctx)))
	defer timer.Stop()
	var gather *time.Timer // running once events wait to be gathered
	defer func() {
		if gather != nil {
			gather.Stop()
		}
	}()
	for {
		evs, changed, busy := j.eventsAfter(req.After, limit)
		if len(evs) > 0 {
			// Report now when nothing more of the job is to run here,
			// the reply is full, gathering is off, or its time is up.
			if !busy || len(evs) >= limit || n.cfg.ReportGather < 0 {
				return &proto.EventsReply{Events: evs}, nil
			}
			if gather == nil {
				gather = time.NewTimer(n.cfg.ReportGather)
			}
		}
		var gathered <-chan time.Time
		if gather != nil {
			gathered = gather.C
		}
		select {
		case <-changed:
		case <-gathered:
			evs, _, _ := j.eventsAfter(req.After, limit)
			return &proto.EventsReply{Events: evs}, nil
		case <-timer.C:
			evs, _, _ := j.eventsAfter(req.After, limit)
			return &proto.EventsReply{Events: evs}, nil
		case <-ctx.Done():
			return &proto.EventsReply{Events: evs}, nil
		}
	}
}

func (n *Node) startHTTP() error {
	ln, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("node: --http-addr %s: %w (is the port in use? pick another, or \"\" for no HTTP endpoint)", n.cfg.HTTPAddr, err)
	}
	n.hln = ln
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.met.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		var lost []lostDevice
		if n.ready.Load() {
			lost = n.devs.lost()
		}
		switch {
		case n.stopped.Load():
			http.Error(w, "stopped", http.StatusServiceUnavailable)
		case !n.ready.Load():
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case n.draining.Load():
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case n.tr != nil && n.tr.Panics() > 0:
			// A handler's panic was recovered, but what it held (a job's
			// lock, a half-made change) stays as it was: serve on, and
			// ask to be restarted.
			http.Error(w, fmt.Sprintf("degraded %s: %d message handler panics recovered (a bug: the log has each stack); restart acpp-node", n.cfg.Name, n.tr.Panics()), http.StatusServiceUnavailable)
		case len(lost) > 0:
			var why []string
			for _, l := range lost {
				why = append(why, fmt.Sprintf("%s lost (%v)", l.id, l.err))
			}
			http.Error(w, fmt.Sprintf("degraded %s: %s; restart acpp-node to use it again", n.cfg.Name, strings.Join(why, "; ")), http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ok %s members=%d jobs=%d\n", n.cfg.Name, len(n.clp.Load().Members().Alive()), n.Jobs())
		}
	})
	ui := n.mountUI(mux)                 // liveview.go; nil with NoUI
	n.http = liveview.NewHTTPServer(mux) // liveview.ReadHeaderTimeout, WriteTimeout, IdleTimeout
	if ui != nil {
		n.http.RegisterOnShutdown(ui.Close) // ends its event streams, which Shutdown would wait for
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.http.Serve(ln); err != nil && err != http.ErrServerClosed {
			n.log.Error("metrics server stopped", "error", err)
		}
	}()
	return nil
}
