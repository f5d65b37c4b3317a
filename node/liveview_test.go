package node_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/acpp/acpp/liveview"
	"github.com/acpp/acpp/node"
)

// The node serves the live view under /ui/ of its HTTP address (/ sends a
// browser there): members, its memory, open jobs, and the note that page
// validity is the coordinator's; with NoUI it serves none. An open event
// stream does not hold up the node's Close.
func TestNodeServesLiveView(t *testing.T) {
	nodes := startNodes(t, 2, func(i int, cfg *node.Config) {
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.NoUI = i == 1
	})
	waitAlive(t, nodes, 2)
	base := "http://" + nodes[0].HTTPAddr()
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/" || resp.StatusCode != http.StatusOK {
		t.Errorf("GET / ended at %s (%s), want /ui/ (200)", resp.Request.URL.Path, resp.Status)
	}
	resp, err = http.Get(base + "/ui/view.json")
	if err != nil {
		t.Fatal(err)
	}
	var v liveview.View
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Members) != 2 || len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "does not know which pages") {
		t.Errorf("view: members %+v, notes %q; want 2 members and the note on page validity", v.Members, v.Notes)
	}
	for _, m := range v.Members {
		if m.Name == nodes[0].Name() && (len(m.Memory) == 0 || len(m.Devices) == 0) {
			t.Errorf("the node's own member %+v: want its devices and memory", m)
		}
	}

	// A stream stays open across the node's Close.
	stream, err := http.Get(base + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if _, err := bufio.NewReader(stream.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	resp, err = http.Get("http://" + nodes[1].HTTPAddr() + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/ with NoUI: %s, want 404", resp.Status)
	}
	if err := nodes[0].Close(); err != nil {
		t.Errorf("Close with a live view stream open: %v", err)
	}
}

// TestHTTPEndpointMethodsAndTimeouts: /metrics and /healthz answer GET
// and HEAD and refuse other methods with 405 and Allow, as the live view
// does (they answered 200 to POST, PUT and DELETE); the server closes a
// kept-alive connection that idles and one whose client does not read
// its response (liveview.IdleTimeout, WriteTimeout; it had neither).
func TestHTTPEndpointMethodsAndTimeouts(t *testing.T) {
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.HTTPAddr = "127.0.0.1:0" })
	waitAlive(t, nodes, 1)
	base := "http://" + nodes[0].HTTPAddr()
	for _, path := range []string{"/metrics", "/healthz", "/ui/view.json"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			req, _ := http.NewRequest(m, base+path, strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "GET") {
				t.Errorf("%s %s: %s, Allow %q; want 405 and Allow: GET, HEAD", m, path, resp.Status, resp.Header.Get("Allow"))
			}
		}
		resp, err := http.Head(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD %s: %s, want 200", path, resp.Status)
		}
	}
	h := nodes[0].HTTPServerForTest()
	if h.ReadHeaderTimeout != liveview.ReadHeaderTimeout || h.IdleTimeout != liveview.IdleTimeout || h.WriteTimeout != liveview.WriteTimeout {
		t.Errorf("server timeouts: read header %v, idle %v, write %v; want %v, %v, %v", h.ReadHeaderTimeout, h.IdleTimeout, h.WriteTimeout,
			liveview.ReadHeaderTimeout, liveview.IdleTimeout, liveview.WriteTimeout)
	}
}
