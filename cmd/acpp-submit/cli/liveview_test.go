package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/liveview"
)

// run --ui serves the live view of an embedded run while it runs: the
// machine with its devices and memory, the job's progress, and each
// buffer's page grid from the embedded engine's coherence core.
func TestRunServesLiveView(t *testing.T) {
	var url string
	var mid liveview.View
	var got bool
	cfg := Config{JobFile: "../../../examples/jobs/jacobi.yaml", Params: map[string]string{"n": "64", "iters": "40"}, OutDir: t.TempDir(),
		UI: "127.0.0.1:0", UIReady: func(u string) { url = u }, Window: 4,
		queueOptions: []acpp.Option{acpp.WithCPUDevices(2)}}
	cfg.Progress = func(done, total int) {
		if got || done < total/2 {
			return
		}
		got = true
		resp, err := http.Get(url + "view.json")
		if err != nil {
			t.Errorf("GET view.json: %v", err)
			return
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&mid); err != nil {
			t.Errorf("decode view.json: %v", err)
		}
	}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if url == "" || !got {
		t.Fatalf("UIReady called with %q, view read %v; want a URL and a view", url, got)
	}
	if len(mid.Members) != 1 || len(mid.Members[0].Devices) != 2 || len(mid.Members[0].Memory) == 0 {
		t.Errorf("members = %+v, want this machine with 2 devices and its memory", mid.Members)
	}
	if len(mid.Jobs) != 1 || mid.Jobs[0].Name != "jacobi" || mid.Jobs[0].Done == 0 || mid.Jobs[0].Planned != 42 || mid.Jobs[0].State != "running" {
		t.Errorf("jobs = %+v, want jacobi running, some of 42 groups done", mid.Jobs)
	}
	if len(mid.Buffers) != 2 || mid.Buffers[0].Name != "grid" || mid.Buffers[1].Name != "next" {
		t.Fatalf("buffers = %+v, want grid and next", mid.Buffers)
	}
	b := mid.Buffers[0]
	if len(b.Allocs) == 0 || len(b.Allocs[0].Valid) != b.Cols*b.Rows || b.Allocs[0].ValidPages == 0 {
		t.Errorf("grid's allocations = %+v (%d×%d cells), want its page grid", b.Allocs, b.Cols, b.Rows)
	}
	// The server is gone with the run.
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s after Run returned: %s, want no server", url, resp.Status)
	}
}
