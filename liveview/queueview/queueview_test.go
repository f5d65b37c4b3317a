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
