package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/liveview"
	"github.com/acpp/acpp/liveview/queueview"
	"github.com/acpp/acpp/proto"
)

// ui serves the live view of one run (Config.UI, --ui ADDR): the page,
// its event stream and the view as JSON, read-only, for as long as Run
// runs. Its snapshot reads the run's queue through the public API
// (devices, memory budgets, links; for an embedded run the page states
// and the running groups too: Queue.PageStates, Queue.RunningGroups), a cluster
// run's members and page states from the job's coordinator (a
// coordinator.Snapshotter bound through Config.Snapshots, which also
// knows the nodes' addresses and pending work), and the progress from the
// runner.
type ui struct {
	addr  string
	log   *slog.Logger
	lv    *liveview.Server
	http  *http.Server
	ln    net.Listener
	snaps *coordinator.Snapshotter // a cluster run's; nil for an embedded one
	names []string                 // the job's buffers in declaration order
	title string

	mu        sync.Mutex // guards what follows
	eng       *engine    // nil until open and once the run has ended
	done, all int        // command groups done and planned
	state     string     // "opening", "running", "done", "failed"
	final     *liveview.View
	// A cluster run's node inventories (memory used against budget),
	// refreshed at most every 2 s by one goroutine at a time.
	inv      map[string]*proto.Inventory
	invAt    time.Time
	invBusy  bool
	invWG    sync.WaitGroup
	invStop  context.Context
	invClose context.CancelFunc
}

// startUI listens on addr and serves the view of the run of job.
func startUI(addr string, cfg Config, title string, names []string, log *slog.Logger) (*ui, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--ui %s: %w (is the port in use? pass host:port, e.g. 127.0.0.1:8090)", addr, err)
	}
	u := &ui{addr: ln.Addr().String(), log: log, ln: ln, names: names, title: title, state: "opening"}
	if cfg.Cluster != nil {
		u.snaps = &coordinator.Snapshotter{}
	}
	u.invStop, u.invClose = context.WithCancel(context.Background())
	u.lv = liveview.Start(liveview.Config{Snapshot: u.snapshot, Logger: log})
	u.http = liveview.NewHTTPServer(u.lv.Handler())
	go func() {
		if err := u.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("live view server stopped", "error", err)
		}
	}()
	return u, nil
}

// URL is where the page is.
func (u *ui) URL() string { return "http://" + u.addr + "/" }

func (u *ui) open(e *engine) {
	u.mu.Lock()
	u.eng, u.state = e, "running"
	u.mu.Unlock()
}

func (u *ui) progress(done, total int) {
	u.mu.Lock()
	u.done, u.all = done, total
	u.mu.Unlock()
}

// finish freezes the view at the run's end, before the queue closes.
func (u *ui) finish(err error) {
	u.mu.Lock()
	u.state = "done"
	if err != nil {
		u.state = "failed"
	}
	u.mu.Unlock()
	v := u.snapshot()
	u.mu.Lock()
	u.final, u.eng = &v, nil
	u.mu.Unlock()
}

// close stops serving; it waits for the streams and the inventory reads.
func (u *ui) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	u.lv.Close()
	u.http.Shutdown(ctx)
	u.invClose()
	u.invWG.Wait()
}

// snapshot is the view now (the liveview server's goroutine).
func (u *ui) snapshot() liveview.View {
	u.mu.Lock()
	e, done, all, state, final := u.eng, u.done, u.all, u.state, u.final
	u.mu.Unlock()
	if final != nil {
		return *final
	}
	v := liveview.View{Title: u.title, Source: "acpp-submit run, embedded runtime"}
	job := liveview.Job{Name: u.title, Done: done, Planned: all, State: state}
	if u.snaps != nil {
		v.Source = "acpp-submit run, cluster (pages as the job's coordinator plans them)"
	}
	if e == nil {
		v.Jobs = []liveview.Job{job}
		return v
	}
	q := e.q
	for _, l := range q.Stats().Links {
		v.Links = append(v.Links, liveview.Link{From: l.From, To: l.To, Bytes: l.Bytes})
	}
	if u.snaps == nil {
		v.Members = queueview.Members(q)
		v.Buffers, _ = queueview.Buffers(q, func(i int, _ acpp.BufferPages) string { return u.bufferName(i, "") })
		running, _ := q.RunningGroups()
		job.Frontier = liveview.Frontier(running)
		v.Jobs = []liveview.Job{job}
		return v
	}
	js, ok := u.snaps.Snapshot(true)
	if !ok {
		v.Jobs = []liveview.Job{job}
		return v
	}
	job.Detail = fmt.Sprintf("%d coordinator groups, %d completed", js.Groups, js.Completed)
	job.Frontier = liveview.Frontier(js.Running)
	v.Jobs = []liveview.Job{job}
	inv := u.inventories(e, js.Nodes)
	for _, n := range js.Nodes {
		m := liveview.Member{Name: n.Name, Addr: n.Addr, Health: "alive", Pending: n.Pending}
		if n.Lost {
			m.Health = "lost"
		} else if n.Pending > 0 {
			m.Health = "busy"
		}
		for _, d := range js.Devices {
			if d.Node == n.Name {
				m.Devices = append(m.Devices, d.ID)
			}
		}
		if in := inv[n.Name]; in != nil {
			if in.Draining {
				m.Health = "draining"
			}
			for _, mem := range in.Memories {
				m.Memory = append(m.Memory, liveview.Memory{Name: fmt.Sprintf("m%d (%s)", mem.ID, mem.Device), Used: mem.Used, Budget: mem.Budget, Size: mem.Bytes})
			}
		}
		v.Members = append(v.Members, m)
	}
	for i, b := range js.Buffers {
		lb := liveview.NewBuffer(u.bufferName(i, b.Name), b.Pages)
		for _, a := range b.Allocs {
			lb.AddAlloc(a.Name, a.Outdated, a.Moving)
		}
		v.Buffers = append(v.Buffers, lb)
	}
	return v
}

// bufferName names the i-th buffer the engine knows (in the order they
// were made: the job's declaration order; swaps rename them in the job,
// not here).
func (u *ui) bufferName(i int, name string) string {
	switch {
	case name != "":
		return name
	case i < len(u.names):
		return u.names[i]
	}
	return fmt.Sprintf("buffer %d", i+1)
}

// inventories returns the newest node inventories and, every 2 s, asks
// the nodes for new ones in the background (never on the view's path).
func (u *ui) inventories(e *engine, nodes []coordinator.NodeStatus) map[string]*proto.Inventory {
	u.mu.Lock()
	defer u.mu.Unlock()
	if e.cluster == nil || u.invBusy || time.Since(u.invAt) < 2*time.Second || u.invStop.Err() != nil {
		return u.inv
	}
	u.invBusy = true
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if !n.Lost {
			names = append(names, n.Name)
		}
	}
	cl := e.cluster.cl
	u.invWG.Add(1)
	go func() {
		defer u.invWG.Done()
		got := map[string]*proto.Inventory{}
		for _, n := range names {
			ctx, cancel := context.WithTimeout(u.invStop, time.Second)
			in, err := cl.Inventory(ctx, n)
			cancel()
			if err == nil {
				got[n] = in
			}
		}
		u.mu.Lock()
		u.inv, u.invAt, u.invBusy = got, time.Now(), false
		u.mu.Unlock()
	}()
	return u.inv
}
