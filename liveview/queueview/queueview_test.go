package queueview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/liveview"
	"github.com/acpp/acpp/liveview/queueview"
)

func getView(t *testing.T, url string) liveview.View {
	t.Helper()
	r, err := http.Get(url + "view.json")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var v liveview.View
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
		t.Fatalf("decode view.json: %v", err)
	}
	return v
}

// A Go program serves the view of its own queue: /view.json shows this
// machine with the queue's devices, the group running now and each open
// buffer's page grid by the names the program gave, until the endpoint
// closes with the program's context.
func TestServeQueueShowsProgramsBuffers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q, err := acpp.NewQueue(ctx, acpp.WithCPUDevices(2))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	grid, err := acpp.NewBufferFrom(q, make([]float32, 64*64), acpp.R2(64, 64), acpp.PageSize(4, 64))
	if err != nil {
		t.Fatal(err)
	}
	scratch, err := acpp.NewBuffer[int32](q, acpp.R1(100))
	if err != nil {
		t.Fatal(err)
	}
	ui, err := queueview.Serve(ctx, q, "127.0.0.1:0", queueview.Config{Title: "heat",
		Names: map[acpp.BufferID]string{grid.ID(): "grid"}, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Close()

	// A group that holds cpu:1 until the view has seen it.
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	ev, err := q.Submit(func(h *acpp.Handler) error {
		acpp.WriteRange(h, grid, acpp.R2(8, 64), acpp.I2(8, 0))
		h.SingleTask(func() { <-release })
		return nil
	}, acpp.On(acpp.DeviceID{Kind: acpp.CPU, Index: 1}), acpp.Named("hold"))
	if err != nil {
		t.Fatal(err)
	}
	var v liveview.View
	for deadline := time.Now().Add(10 * time.Second); ; {
		v = getView(t, ui.URL())
		if len(v.Jobs) == 1 && slices.Equal(v.Jobs[0].Frontier, []string{"cpu:1: hold"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("view.json for 10 s: jobs %+v, want heat running cpu:1: hold", v.Jobs)
		}
	}
	close(release)
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	if v.Title != "heat" || !strings.Contains(v.Source, "embedded") {
		t.Errorf("title, source = %q, %q; want heat, an embedded run", v.Title, v.Source)
	}
	if len(v.Members) != 1 || len(v.Members[0].Devices) != 2 || len(v.Members[0].Memory) == 0 {
		t.Errorf("members = %+v, want this machine with 2 devices and its memory", v.Members)
	}
	if j := v.Jobs[0]; j.Name != "heat" || j.Done != 1 || j.State != "running" {
		t.Errorf("job = %+v, want heat running, 1 group submitted", j)
	}
	unnamed := fmt.Sprintf("buffer %d", scratch.ID())
	if len(v.Buffers) != 2 || v.Buffers[0].Name != "grid" || v.Buffers[1].Name != unnamed {
		t.Fatalf("buffers = %+v, want grid and %s", v.Buffers, unnamed)
	}
	// grid: 16 row pages, valid on the host (the CPU devices share it);
	// the uninitialised buffer has no allocation yet.
	g := v.Buffers[0]
	if g.Pages != [3]int{1, 16, 1} || len(g.Allocs) != 1 || g.Allocs[0].Name != "host" || g.Allocs[0].ValidPages != 16 {
		t.Errorf("grid = %+v, want 16 pages, all valid on the host", g)
	}
	if s := v.Buffers[1]; len(s.Allocs) != 0 {
		t.Errorf("uninitialised buffer's allocations = %+v, want none", s.Allocs)
	}

	// The program's context ends: so does the view.
	cancel()
	for deadline := time.Now().Add(5 * time.Second); ; {
		r, err := http.Get(ui.URL())
		if err != nil {
			break
		}
		r.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("GET %s answers %s 5 s after the context ended, want no server", ui.URL(), r.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ui.Close(); err != nil {
		t.Errorf("Close after the context ended: %v", err)
	}
}

// A cluster queue's view: the job's nodes with their devices, and the
// program's buffer with the client's copy and the node memory a fill
// wrote, as the job's coordinator plans them.
func TestServeClusterQueue(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	base := c.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := acpp.Connect(ctx, c.Addrs(), acpp.WithCredentials(c.Dir, "alice"), acpp.WithCoordinator(func(cfg *coordinator.Config) {
		cfg.Client, cfg.Logger, cfg.LostTimeout, cfg.PollInterval = base.Client, base.Logger, base.LostTimeout, base.PollInterval
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	b, err := acpp.NewBufferFrom(q, make([]float32, 1024), acpp.R1(1024), acpp.PageSize(256))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := q.Submit(func(h *acpp.Handler) error { acpp.Fill(h, acpp.Write(h, b), 1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	ui, err := queueview.Serve(ctx, q, "127.0.0.1:0", queueview.Config{Names: map[acpp.BufferID]string{b.ID(): "b"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Close()
	v := getView(t, ui.URL())
	if !strings.Contains(v.Source, "cluster") || len(v.Members) != 2 {
		t.Fatalf("source %q, members %+v; want a cluster view of 2 nodes", v.Source, v.Members)
	}
	for _, m := range v.Members {
		if len(m.Devices) == 0 || strings.Contains(m.Devices[0], "/") {
			t.Errorf("member %+v, want a node with its devices (kind:index)", m)
		}
	}
	if len(v.Buffers) != 1 || v.Buffers[0].Name != "b" {
		t.Fatalf("buffers = %+v, want b", v.Buffers)
	}
	valid := map[string]int{}
	for _, a := range v.Buffers[0].Allocs {
		valid[a.Name] = a.ValidPages
	}
	nodeValid := 0
	for name, n := range valid {
		if name != "client" && n == 4 {
			nodeValid++
		}
	}
	if c, ok := valid["client"]; !ok || c != 0 || nodeValid != 1 {
		t.Errorf("valid pages per allocation = %v, want the client's 0 of 4 and one node memory's 4", valid)
	}
}

// A node that joins the cluster while a cluster queue's job runs is added
// to the job (docs/API.md, "Running on a cluster"); the view shows it
// among the members, with its devices, from then on.
func TestClusterViewShowsJoinedNode(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{Later: 1})
	base := c.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// n1 starts once the job runs on n0: it joins the job through the
	// job's membership watch.
	q, err := acpp.Connect(ctx, c.Addrs()[:1], acpp.WithCredentials(c.Dir, "alice"), acpp.WithCoordinator(func(cfg *coordinator.Config) {
		cfg.Client, cfg.Logger, cfg.LostTimeout, cfg.PollInterval = base.Client, base.Logger, base.LostTimeout, base.PollInterval
		cfg.MembershipInterval = 50 * time.Millisecond
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ui, err := queueview.Serve(ctx, q, "127.0.0.1:0", queueview.Config{Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Close()
	if v := getView(t, ui.URL()); len(v.Members) != 1 || v.Members[0].Name != "n0" {
		t.Fatalf("members before the join: %+v, want n0", v.Members)
	}
	c.StartLater()
	for len(q.ClusterDevices()) < 2 {
		if ctx.Err() != nil {
			t.Fatalf("n1 did not join the job: devices %v", q.ClusterDevices())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var names []string
	for _, m := range getView(t, ui.URL()).Members {
		names = append(names, m.Name)
	}
	if !slices.Equal(names, []string{"n0", "n1"}) {
		t.Errorf("members after n1 joined the job: %v, want [n0 n1]", names)
	}
}

// Each view reads the memory in use now: a buffer allocated after the
// view was set up shows in the host memory's Used (the view read the
// budgets once, at Snapshot, and showed that figure for the whole run).
func TestSnapshotMemoryUseIsCurrent(t *testing.T) {
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithCPUDevices(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	snap := queueview.Snapshot(q, queueview.Config{})
	hostUsed := func(v liveview.View) uint64 {
		t.Helper()
		if len(v.Members) != 1 {
			t.Fatalf("members = %+v, want this machine", v.Members)
		}
		for _, m := range v.Members[0].Memory {
			if m.Name == "host" {
				return m.Used
			}
		}
		t.Fatalf("memory = %+v, want the host's", v.Members[0].Memory)
		return 0
	}
	before := hostUsed(snap())
	const n = 1 << 20
	b, err := acpp.NewBuffer[float32](q, acpp.R1(n))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Submit(func(h *acpp.Handler) error {
		w := acpp.WriteRaw(h, b, acpp.NoInit)
		h.ParallelFor(acpp.R1(n), func(it acpp.Item) { w.Set(it.ID(0), 1) })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	budgetUsed := uint64(0)
	for _, m := range q.MemoryBudgets() {
		if m.Host {
			budgetUsed = m.Used
		}
	}
	if budgetUsed < before+4*n {
		t.Fatalf("MemoryBudgets host Used = %d after a 4 MiB buffer, was %d: the queue does not count it", budgetUsed, before)
	}
	if after := hostUsed(snap()); after != budgetUsed {
		t.Errorf("view's host memory in use = %d, want %d (MemoryBudgets now; %d before the buffer)", after, budgetUsed, before)
	}
}

// Config.Unit names what Progress counts: without Progress there is
// nothing for it to name, and Serve says so rather than ignoring it.
func TestServeRefusesUnitWithoutProgress(t *testing.T) {
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithCPUDevices(1))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ui, err := queueview.Serve(ctx, q, "127.0.0.1:0", queueview.Config{Unit: "iterations"})
	if err == nil {
		ui.Close()
		t.Fatal("Serve with Unit and no Progress = nil error")
	}
	if !strings.Contains(err.Error(), "Progress") {
		t.Errorf("error %q, want it to name Progress", err)
	}
	ui, err = queueview.Serve(ctx, q, "127.0.0.1:0", queueview.Config{Unit: "iterations", Progress: func() (int, int) { return 3, 10 }})
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Close()
	if j := getView(t, ui.URL()).Jobs; len(j) != 1 || j[0].Done != 3 || j[0].Planned != 10 || j[0].Unit != "iterations" {
		t.Errorf("jobs = %+v, want 3 of 10 iterations", j)
	}
}

// A view of a closed queue shows its job done and no buffers, with no
// error note (docs/LIVEVIEW.md: close the endpoint before the queue).
func TestSnapshotOfClosedQueue(t *testing.T) {
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithCPUDevices(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acpp.NewBufferFrom(q, make([]float32, 64), acpp.R1(64)); err != nil {
		t.Fatal(err)
	}
	snap := queueview.Snapshot(q, queueview.Config{Title: "t"})
	v := snap()
	if len(v.Jobs) != 1 || v.Jobs[0].State != "running" || len(v.Buffers) != 1 {
		t.Fatalf("open queue: jobs %+v, %d buffers; want t running with 1 buffer", v.Jobs, len(v.Buffers))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	v = snap()
	if len(v.Jobs) != 1 || v.Jobs[0].State != "done" || len(v.Buffers) != 0 || len(v.Notes) != 0 {
		t.Errorf("closed queue: jobs %+v, buffers %+v, notes %q; want t done, no buffers, no notes", v.Jobs, v.Buffers, v.Notes)
	}
}
