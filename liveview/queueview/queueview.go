// Package queueview serves the live view (package liveview) of a Go
// program's own queue: its devices and memory, the command groups running
// now, each buffer's page grid per allocation and the bytes per link,
// read through the queue's public API (acpp.Queue.PageStates, RunningGroups,
// Stats). It works for a queue of local devices (acpp.NewQueue) and for a
// cluster queue (acpp.Connect).
//
//	ui, err := queueview.Serve(ctx, q, "127.0.0.1:8090", queueview.Config{Title: "jacobi"})
//	if err != nil { … }
//	defer ui.Close() // open ui.URL() in a browser while the program runs
//
// It is a package of its own because package liveview must not import the
// API (acpp-node serves liveview pages, and acpp's tests use acpp-node).
package queueview

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/liveview"
)

// Config says how to show a queue (Snapshot, Serve). Every field is
// optional.
type Config struct {
	// Title names the view and its one job ("acpp queue" if empty).
	Title string
	// Names names buffers on the page by ID (Buffer.ID); a buffer not in
	// it shows the name its engine knows, else "buffer ID".
	Names map[acpp.BufferID]string
	// Progress reports the program's progress in Unit ("iterations");
	// without it the job shows the command groups submitted so far.
	Progress func() (done, planned int)
	// Unit names what Progress counts; Serve refuses a Unit without
	// Progress (it would show nothing).
	Unit string
	// Interval and Logger are as in liveview.Config.
	Interval time.Duration
	Logger   *slog.Logger
}

// Snapshot is a liveview.Config.Snapshot that shows q through its public API:
// the machine (or the cluster's nodes) with the queue's devices and memory
// budgets, one job with the running frontier (Queue.RunningGroups), every open
// buffer's page grid per allocation (Queue.PageStates) and the bytes per
// link (Queue.Stats). Once q is closed the job shows "done" and the
// buffers are gone.
func Snapshot(q *acpp.Queue, cfg Config) func() liveview.View {
	title := cmp.Or(cfg.Title, "acpp queue")
	source := "Go program, embedded runtime"
	cluster := q.ClusterDevices() != nil
	if cluster {
		source = "Go program, cluster (pages as the job's coordinator plans them)"
	}
	name := func(_ int, b acpp.BufferPages) string {
		if n := cfg.Names[b.ID]; n != "" {
			return n
		}
		return cmp.Or(b.Name, fmt.Sprintf("buffer %d", b.ID))
	}
	return func() liveview.View {
		st := q.Stats()
		job := liveview.Job{Name: title, Done: int(st.Groups), Unit: "groups submitted", State: "running"}
		if cfg.Progress != nil {
			job.Done, job.Planned = cfg.Progress()
			job.Unit = cfg.Unit
		}
		// Read at every view: a local queue's memory in use changes as
		// buffers are allocated and freed, and a cluster queue's job adds
		// the nodes that join the cluster while it runs.
		v := liveview.View{Title: title, Source: source, Members: Members(q)}
		for _, l := range st.Links {
			v.Links = append(v.Links, liveview.Link{From: l.From, To: l.To, Bytes: l.Bytes})
		}
		running, err := q.RunningGroups()
		if errors.Is(err, acpp.ErrClosed) {
			job.State = "done"
		}
		job.Frontier = liveview.Frontier(running)
		v.Jobs = []liveview.Job{job}
		v.Buffers, err = Buffers(q, name)
		if err != nil && !errors.Is(err, acpp.ErrClosed) {
			v.Notes = append(v.Notes, err.Error())
		}
		return v
	}
}

// Buffers is the page grids of q's open buffers (Queue.PageStates),
// in the order they were made, aggregated into cells; name names the i-th
// (nil: "buffer ID", or the name its engine knows).
func Buffers(q *acpp.Queue, name func(i int, b acpp.BufferPages) string) ([]liveview.Buffer, error) {
	all, err := q.PageStates()
	if err != nil {
		return nil, err
	}
	out := make([]liveview.Buffer, 0, len(all))
	for i, b := range all {
		n := ""
		if name != nil {
			n = name(i, b)
		}
		lb := liveview.NewBuffer(cmp.Or(n, b.Name, fmt.Sprintf("buffer %d", b.ID)), b.Pages)
		for _, a := range b.Allocs {
			lb.AddAlloc(a.Memory, a.Outdated, a.Moving)
		}
		out = append(out, lb)
	}
	return out, nil
}

// Members is what q runs on: this machine with the queue's devices
// and each memory's use against its budget, or, for a cluster queue
// (acpp.Connect), each node of the job with its devices (a node's memory
// is on its own page, acpp-node's /ui/).
func Members(q *acpp.Queue) []liveview.Member {
	if cd := q.ClusterDevices(); cd != nil {
		var out []liveview.Member
		at := map[string]int{}
		for _, d := range cd {
			node, dev, _ := strings.Cut(d, "/")
			i, ok := at[node]
			if !ok {
				i = len(out)
				at[node] = i
				out = append(out, liveview.Member{Name: node, Health: "alive"})
			}
			out[i].Devices = append(out[i].Devices, dev)
		}
		return out
	}
	host, _ := os.Hostname()
	m := liveview.Member{Name: cmp.Or(host, "this machine"), Health: "alive"}
	for _, d := range q.Devices() {
		m.Devices = append(m.Devices, d.ID.String()+" "+d.Name)
	}
	for _, b := range q.MemoryBudgets() {
		name := b.Device.String()
		if b.Host {
			name = "host"
		}
		m.Memory = append(m.Memory, liveview.Memory{Name: name, Used: b.Used, Budget: b.Budget, Size: b.Size})
	}
	return []liveview.Member{m}
}

// Serve serves the view of q (Snapshot) on addr, such as "127.0.0.1:8090"
// ("127.0.0.1:0" picks a free port: see Endpoint.URL), until ctx ends or
// the endpoint is closed (liveview.Serve). Close it before the queue, or
// the page shows the queue done and its buffers gone. The view has no
// authentication: bind it to loopback.
func Serve(ctx context.Context, q *acpp.Queue, addr string, cfg Config) (*liveview.Endpoint, error) {
	if q == nil {
		return nil, errors.New("queueview: Serve got a nil queue")
	}
	if cfg.Unit != "" && cfg.Progress == nil {
		return nil, fmt.Errorf("queueview: Config.Unit %q without Config.Progress: the job counts command groups; give Progress the function that counts %s, or leave Unit empty", cfg.Unit, cfg.Unit)
	}
	return liveview.Serve(ctx, addr, liveview.Config{Snapshot: Snapshot(q, cfg), Interval: cfg.Interval, Logger: cfg.Logger})
}
