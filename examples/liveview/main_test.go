package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/liveview"
)

// The example serves its own queue's view: while it lingers after the
// run, /view.json shows the job's iterations done and both grids by the
// names the program gave them; the view ends with the program's context.
func TestLiveViewExample(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := make(chan string, 1)
	var out bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- runConfig(ctx, config{addr: "127.0.0.1:0", n: 64, iters: 50, report: 10, linger: time.Minute,
			started: func(u string) { urls <- u }}, &out)
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-errc:
		t.Fatalf("run ended before serving: %v", err)
	}
	var v liveview.View
	for deadline := time.Now().Add(20 * time.Second); ; {
		r, err := http.Get(url + "view.json")
		if err != nil {
			t.Fatal(err)
		}
		v = liveview.View{}
		err = json.NewDecoder(r.Body).Decode(&v)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Jobs) == 1 && v.Jobs[0].Done == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("view for 20 s: jobs %+v, want jacobi at 50 of 50 iterations", v.Jobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j := v.Jobs[0]; j.Name != "jacobi" || j.Planned != 50 || j.Unit != "iterations" {
		t.Errorf("job = %+v, want jacobi, 50 iterations planned", j)
	}
	if len(v.Buffers) != 2 || v.Buffers[0].Name != "grid" || v.Buffers[1].Name != "next" {
		t.Fatalf("buffers = %+v, want grid and next", v.Buffers)
	}
	for _, b := range v.Buffers {
		if b.Pages != [3]int{1, 64, 1} || len(b.Allocs) == 0 {
			t.Errorf("%s: %d×%d×%d pages, %d allocations; want 64 row pages and an allocation", b.Name, b.Pages[0], b.Pages[1], b.Pages[2], len(b.Allocs))
		}
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not end 10 s after its context")
	}
	if !strings.Contains(out.String(), "iteration 50: cell (3, 32)") {
		t.Errorf("output %q, want the last iteration's row", out.String())
	}
}
