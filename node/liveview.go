package node

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/acpp/acpp/liveview"
)

// uiNote is what the node's view cannot show, on the page.
const uiNote = "A node does not know which pages are valid where: the job's coordinator, in the client, does. " +
	"Run the job with acpp-submit run --ui ADDR to see its page grids."

// mountUI serves the live view (package liveview) under /ui/ of the
// node's HTTP address, with / sending a browser there; nil with
// Config.NoUI. The caller closes the returned server when HTTP stops.
// It is read-only, like /metrics: whoever reaches the address reads it.
func (n *Node) mountUI(mux *http.ServeMux) *liveview.Server {
	if n.cfg.NoUI {
		return nil
	}
	lv := liveview.Start(liveview.Config{Snapshot: n.uiView, Logger: n.log})
	mux.Handle("/ui/", http.StripPrefix("/ui", lv.Handler()))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	return lv
}

// uiView is the node's view now: the members as it sees them (its own
// memory in use against its budgets), its open jobs with their
// instruction counts and allocations, and the bytes it moved per peer.
func (n *Node) uiView() liveview.View {
	v := liveview.View{Title: "node " + n.cfg.Name, Source: "acpp-node " + n.cfg.Name, Notes: []string{uiNote}}
	if !n.ready.Load() { // starting (or stopped): devices and membership are not there
		v.Notes = append(v.Notes, "The node is starting: it has not joined the cluster yet.")
		return v
	}
	inv := n.Inventory()
	for _, m := range n.Members().Members {
		lm := liveview.Member{Name: m.Name, Addr: m.QUICAddr, Health: m.State}
		if m.Leaving && m.State == "alive" {
			lm.Health = "draining"
		}
		if m.Name == n.cfg.Name {
			for _, d := range inv.Devices {
				lm.Devices = append(lm.Devices, d.ID+" "+d.Name)
			}
			for _, mem := range inv.Memories {
				lm.Memory = append(lm.Memory, liveview.Memory{Name: fmt.Sprintf("m%d (%s)", mem.ID, mem.Device), Used: mem.Used, Budget: mem.Budget, Size: mem.Bytes})
			}
		} else {
			for _, d := range m.Devices {
				lm.Devices = append(lm.Devices, fmt.Sprintf("%s ×%d", d.Kind, d.Count))
			}
		}
		v.Members = append(v.Members, lm)
	}
	for _, j := range inv.JobList {
		v.Jobs = append(v.Jobs, liveview.Job{Name: fmt.Sprintf("job %d (%s)", j.ID, j.Client), Done: j.Known - j.Pending, Planned: j.Known,
			Unit: "instructions", State: "open",
			Detail: fmt.Sprintf("%d pending, %d running; %d allocations, %s", j.Pending, j.Running, j.Allocs, bytesStr(j.Bytes))})
	}
	v.Links = n.uiLinks()
	return v
}

// uiLinks are the page bytes this node sent to and received from each
// peer (acpp_node_page_bytes_total).
func (n *Node) uiLinks() []liveview.Link {
	mfs, err := n.met.reg.Gather()
	if err != nil {
		return nil
	}
	var out []liveview.Link
	for _, mf := range mfs {
		if mf.GetName() != "acpp_node_page_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var dir, peer string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "direction":
					dir = l.GetValue()
				case "peer":
					peer = l.GetValue()
				}
			}
			l := liveview.Link{From: n.cfg.Name, To: peer, Bytes: int64(m.GetCounter().GetValue())}
			if dir == "received" {
				l.From, l.To = peer, n.cfg.Name
			}
			out = append(out, l)
		}
	}
	return out
}

// bytesStr is n bytes in the largest binary unit that keeps it >= 1.
func bytesStr(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0") + " " + units[i]
}
