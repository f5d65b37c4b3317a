package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
)

// things is a count with its noun: "1 step", "2 steps".
func things(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Summary is the human-readable report of a run: time, command groups and
// busy time per device and kernel, data moved per link, outputs.
func (res *Result) Summary() string {
	var b strings.Builder
	where := strings.Join(res.Devices, ", ")
	if res.Cluster != nil {
		where = fmt.Sprintf("cluster (%s: %s; %s)", things(len(res.Cluster.Nodes), "node"), strings.Join(res.Cluster.Nodes, ", "), things(len(res.Devices), "device"))
	}
	fmt.Fprintf(&b, "job %s: %s in %s on %s\n", res.Job.Name, things(res.Count, "command group"), round(res.Wall), where)
	perDev, perKernel, failed := res.PerDevice, res.PerStep, res.Failed
	ids := make([]string, 0, len(perDev))
	for id := range perDev {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	w := 10
	for _, id := range ids {
		w = max(w, len(id))
	}
	if res.Cluster != nil {
		fmt.Fprintf(&b, "  %-*s %7s %10s   %s\n", w, "device", "groups", "kernels", "by step (groups)")
	} else {
		fmt.Fprintf(&b, "  %-*s %7s %10s   %s\n", w, "device", "groups", "busy", "by step (groups, busy)")
	}
	for _, id := range ids {
		a := perDev[id]
		names := make([]string, 0, len(perKernel[id]))
		for n := range perKernel[id] {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool {
			ki, kj := perKernel[id][names[i]], perKernel[id][names[j]]
			if ki.Busy != kj.Busy {
				return ki.Busy > kj.Busy
			}
			return names[i] < names[j]
		})
		var parts []string
		for i, n := range names {
			if i == 4 {
				parts = append(parts, fmt.Sprintf("… %d more", len(names)-4))
				break
			}
			k := perKernel[id][n]
			if res.Cluster != nil {
				parts = append(parts, fmt.Sprintf("%s ×%d", n, k.N))
			} else {
				parts = append(parts, fmt.Sprintf("%s ×%d %s", n, k.N, round(k.Busy)))
			}
		}
		busy := a.Busy
		if res.Cluster != nil {
			// Groups are issued ahead and completions reach the client in
			// batches: the coordinator's per-device kernel time is the
			// closer figure.
			busy = res.Cluster.KernelTime[id]
		}
		fmt.Fprintf(&b, "  %-*s %7d %10s   %s\n", w, id, a.N, round(busy), strings.Join(parts, ", "))
	}
	if c := res.Cluster; c != nil {
		c.summary(&b)
	} else {
		s := res.Stats
		fmt.Fprintf(&b, "  data moved: host→device %s, device→host %s, %s in all; %d transfers of %d planned page boxes; %d device allocations\n",
			bytesStr(s.BytesHostToDevice), bytesStr(s.BytesDeviceToHost), bytesStr(s.BytesCopied), s.Copies, s.CopiesPlanned, s.Allocations)
		if len(s.Links) > 1 {
			parts := make([]string, 0, len(s.Links))
			for _, l := range s.Links {
				parts = append(parts, fmt.Sprintf("%s→%s %s (%d)", l.From, l.To, bytesStr(l.Bytes), l.Copies))
			}
			fmt.Fprintf(&b, "  per link: %s\n", strings.Join(parts, ", "))
		}
		if s.BytesCopied == 0 && allCPU(res.Devices) {
			b.WriteString("  (CPU devices use the host allocation itself: linked, no copies — L2)\n")
		}
	}
	for _, o := range res.Outputs {
		d := o.End.Sub(o.Start)
		rate := ""
		if d > 0 && o.Bytes > 0 {
			rate = fmt.Sprintf(", %s/s", bytesStr(int64(float64(o.Bytes)/d.Seconds())))
		}
		if o.Moved > 0 {
			// From a GPU's memory: through pinned slabs, which the queue's
			// counts above leave out, or into the host copy.
			rate += fmt.Sprintf(", %s read back", bytesStr(o.Moved))
		}
		fmt.Fprintf(&b, "  wrote %s (%s %v, %s, %s) in %s%s\n", o.Path, o.Type, o.Range, o.Format, bytesStr(int64(o.Bytes)), d.Round(10*time.Microsecond), rate)
	}
	if failed > 0 {
		fmt.Fprintf(&b, "  %s failed\n", things(failed, "command group"))
	}
	if n := splitSteps(res); n > 0 && res.Cluster == nil && res.SplitGroups == 0 {
		asks := things(n, "step") + " ask"
		if n == 1 {
			asks += "s"
		}
		fmt.Fprintf(&b, "  note: %s for split; they ran whole: the embedded runtime splits across several local devices of the default device's kind (GPUs), and this run had one (a cluster splits across its nodes' devices, --cluster)\n", asks)
	}
	return b.String()
}

// outputTrack is the trace track named name (thread tid) with a slice per
// output written, its bytes read back under movedKey.
func (res *Result) outputTrack(pid, tid int, name, movedKey string, us func(time.Time) float64) []traceEvent {
	if len(res.Outputs) == 0 {
		return nil
	}
	evs := []traceEvent{{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}}}
	for _, o := range res.Outputs {
		dur := float64(o.End.Sub(o.Start).Nanoseconds()) / 1e3
		evs = append(evs, traceEvent{Name: "output " + o.Buffer, Cat: "output", Ph: "X", Ts: us(o.Start), Dur: &dur, Pid: pid, Tid: tid,
			Args: map[string]any{"file": o.Path, "bytes": o.Bytes, movedKey: o.Moved, "format": string(o.Format)}})
	}
	return evs
}

// recoveryTrack is the client track of a cluster run's recoveries (from
// the loss being seen to the replay's end) and checkpoints (from their
// planning to their last page).
func (res *Result) recoveryTrack(pid, tid int, us func(time.Time) float64) []traceEvent {
	c := res.Cluster
	if len(c.Recoveries) == 0 && len(c.Checkpoints) == 0 {
		return nil
	}
	evs := []traceEvent{{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": "client: recovery and checkpoints"}}}
	for _, ck := range c.Checkpoints {
		dur := float64(ck.Took.Nanoseconds()) / 1e3
		evs = append(evs, traceEvent{Name: "checkpoint", Cat: "checkpoint", Ph: "X", Ts: us(ck.Start), Dur: &dur, Pid: pid, Tid: tid,
			Args: map[string]any{"after_group": ck.After, "bytes": ck.Bytes}})
	}
	for _, r := range c.Recoveries {
		dur := float64(r.Ended.Sub(r.Started).Nanoseconds()) / 1e3
		evs = append(evs, traceEvent{Name: "recovery: node " + r.Node + " lost", Cat: "recovery", Ph: "X", Ts: us(r.Started), Dur: &dur, Pid: pid, Tid: tid,
			Args: map[string]any{"how": r.How, "at_group": r.AtGroup, "lost_bytes": r.LostBytes, "restored_bytes": r.RestoredBytes, "rerun": r.Rerun,
				"detection_ms": float64(r.Detection.Microseconds()) / 1e3}})
	}
	return evs
}

// splitSteps counts the steps of the job file (not their repetitions) that
// ask for a split.
func splitSteps(res *Result) int {
	if res.Job == nil {
		return 0
	}
	var count func(steps []*jobfile.Step) int
	count = func(steps []*jobfile.Step) int {
		n := 0
		for _, s := range steps {
			if s.Split != nil {
				n++
			}
			n += count(s.Steps)
		}
		return n
	}
	return count(res.Job.Steps)
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func bytesStr(n int64) string {
	if n < 0 {
		return fmt.Sprintf("%d B", n)
	}
	return device.FormatBytes(uint64(n))
}

// ---- Chrome trace (Perfetto) ----

// traceEvent is one event of the Chrome trace event format
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"` // µs
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	ID   string         `json:"id,omitempty"`
	Bp   string         `json:"bp,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteTrace writes the run as a Chrome trace: a track per device with a
// slice per command group (its step, line, accesses and dependencies),
// arrows for the dependencies, and per-link counter tracks of the bytes
// moved so far (host→device, device→host), sampled as groups finish.
func (res *Result) WriteTrace(w io.Writer) error {
	const pid = 1
	mode := "embedded"
	if res.Cluster != nil {
		mode = "cluster"
	}
	evs := []traceEvent{{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": "acpp " + mode + " · job " + res.Job.Name}}}
	tids := map[string]int{}
	for i, d := range res.Devices {
		tids[d] = i + 1
		evs = append(evs, traceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: i + 1, Args: map[string]any{"name": "device " + d}},
			traceEvent{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: i + 1, Args: map[string]any{"sort_index": i}})
	}
	t0 := res.Start
	for _, g := range res.Groups {
		if !g.Timing.Submitted.IsZero() && g.Timing.Submitted.Before(t0) {
			t0 = g.Timing.Submitted
		}
	}
	us := func(t time.Time) float64 { return float64(t.Sub(t0).Nanoseconds()) / 1e3 }
	byID := map[uint64]*Group{}
	tidOf := func(dev string) int {
		tid, ok := tids[dev]
		if !ok {
			tid = len(tids) + 1
			tids[dev] = tid
			evs = append(evs, traceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": "device " + dev}})
		}
		return tid
	}
	for _, g := range res.Groups {
		byID[g.ID] = g
		// A split group is one slice per chunk, on its chunk's device.
		parts := g.Chunks
		if len(parts) == 0 {
			parts = []Chunk{{ID: g.ID, Device: g.Device, Timing: g.Timing}}
		}
		for _, c := range parts {
			tid := tidOf(c.Device)
			if c.Timing.Started.IsZero() || c.Timing.Ended.IsZero() {
				continue
			}
			dur := float64(c.Timing.Ended.Sub(c.Timing.Started).Nanoseconds()) / 1e3
			args := map[string]any{"group": g.ID, "step": g.Path, "line": g.Line, "accesses": strings.Join(g.Accesses, " "),
				"waited_us": float64(c.Timing.Started.Sub(c.Timing.Submitted).Nanoseconds()) / 1e3}
			if len(g.Chunks) > 0 {
				args["chunk"] = c.ID
			}
			if len(g.Deps) > 0 {
				args["deps"] = g.Deps
			}
			if len(g.RuntimeDeps) > 0 {
				args["waited_for"] = g.RuntimeDeps
			}
			if g.Err != nil {
				args["error"] = g.Err.Error()
			}
			evs = append(evs, traceEvent{Name: g.Label, Cat: g.Kind, Ph: "X", Ts: us(c.Timing.Started), Dur: &dur, Pid: pid, Tid: tid, Args: args})
		}
	}
	// Dependency arrows: from the end of each dependency to the start of
	// the group that waited for it.
	for _, g := range res.Groups {
		if g.Timing.Started.IsZero() {
			continue
		}
		for _, d := range g.Deps {
			dg := byID[d]
			if dg == nil || dg.Timing.Ended.IsZero() {
				continue
			}
			id := fmt.Sprintf("%d-%d", d, g.ID)
			evs = append(evs, traceEvent{Name: "dependency", Cat: "dep", Ph: "s", Ts: us(dg.Timing.Ended) - 0.001, Pid: pid, Tid: tidOf(lastDevice(dg)), ID: id},
				traceEvent{Name: "dependency", Cat: "dep", Ph: "f", Bp: "e", Ts: us(g.Timing.Started), Pid: pid, Tid: tidOf(firstDevice(g)), ID: id})
		}
	}
	if res.Cluster != nil {
		evs = append(evs, res.clusterLinkTracks(pid, us)...)
		evs = append(evs, res.transferTracks(pid, len(tids)+2, us)...) // the outputs track below is len(tids)+1
		evs = append(evs, res.outputTrack(pid, len(tids)+1, "client: outputs", "read_back", us)...)
		evs = append(evs, res.recoveryTrack(pid, len(tids)+3, us)...)
	} else {
		// Link tracks: cumulative bytes per direction.
		var h2d, d2h int64 = -1, -1
		evs = append(evs, traceEvent{Name: "link host→device (bytes)", Ph: "C", Ts: 0, Pid: pid, Args: map[string]any{"bytes": 0}},
			traceEvent{Name: "link device→host (bytes)", Ph: "C", Ts: 0, Pid: pid, Args: map[string]any{"bytes": 0}})
		for _, g := range res.Groups {
			if g.Timing.Ended.IsZero() {
				continue
			}
			s := g.StatsAfter
			if s.BytesHostToDevice != h2d {
				h2d = s.BytesHostToDevice
				evs = append(evs, traceEvent{Name: "link host→device (bytes)", Ph: "C", Ts: us(g.Timing.Ended), Pid: pid, Args: map[string]any{"bytes": h2d}})
			}
			if s.BytesDeviceToHost != d2h {
				d2h = s.BytesDeviceToHost
				evs = append(evs, traceEvent{Name: "link device→host (bytes)", Ph: "C", Ts: us(g.Timing.Ended), Pid: pid, Args: map[string]any{"bytes": d2h}})
			}
		}
		// Outputs: a host track with the read-backs, and the links' final
		// totals (they include the read-backs and buffer closes).
		evs = append(evs, res.outputTrack(pid, len(tids)+1, "host: outputs", "copied_to_host", us)...)
		for _, o := range res.Outputs {
			if o.Moved > 0 {
				d2h = max(d2h, 0) + o.Moved
				evs = append(evs, traceEvent{Name: "link device→host (bytes)", Ph: "C", Ts: us(o.End), Pid: pid, Args: map[string]any{"bytes": d2h}})
			}
		}
		end := us(res.Start.Add(res.Wall))
		evs = append(evs, traceEvent{Name: "link host→device (bytes)", Ph: "C", Ts: end, Pid: pid, Args: map[string]any{"bytes": res.Stats.BytesHostToDevice}},
			traceEvent{Name: "link device→host (bytes)", Ph: "C", Ts: end, Pid: pid, Args: map[string]any{"bytes": res.Stats.BytesDeviceToHost}})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(map[string]any{
		"traceEvents":     evs,
		"displayTimeUnit": "ms",
		"otherData": map[string]any{
			"job": res.Job.Name, "file": res.Job.File, "wall_ms": float64(res.Wall.Microseconds()) / 1e3,
			"bytes_copied": res.Stats.BytesCopied, "copies": res.Stats.Copies,
		},
	})
}

// clusterLinkTracks are counter tracks "link src→dst (bytes)" per link of
// a cluster run: the bytes planned on each link so far, sampled as groups
// finish, and the totals at the end.
func (res *Result) clusterLinkTracks(pid int, us func(time.Time) float64) []traceEvent {
	var evs []traceEvent
	name := func(l string) string { return "link " + strings.Replace(l, "->", "→", 1) + " (bytes)" }
	last := map[string]int64{}
	for _, l := range slices.Sorted(maps.Keys(res.Cluster.Bytes)) {
		evs = append(evs, traceEvent{Name: name(l), Ph: "C", Ts: 0, Pid: pid, Args: map[string]any{"bytes": 0}})
	}
	for _, g := range res.Groups {
		if g.Timing.Ended.IsZero() || g.Links == nil {
			continue
		}
		for _, l := range slices.Sorted(maps.Keys(g.Links)) {
			if n := g.Links[l]; n != last[l] {
				last[l] = n
				evs = append(evs, traceEvent{Name: name(l), Ph: "C", Ts: us(g.Timing.Ended), Pid: pid, Args: map[string]any{"bytes": n}})
			}
		}
	}
	end := us(res.Start.Add(res.Wall))
	for _, l := range slices.Sorted(maps.Keys(res.Cluster.Bytes)) {
		evs = append(evs, traceEvent{Name: name(l), Ph: "C", Ts: end, Pid: pid, Args: map[string]any{"bytes": res.Cluster.Bytes[l]}})
	}
	return evs
}

// transferTracks is a track per link ("link n0→n1"; "n0 copies" within a
// node) with a slice per transfer, named by its bytes, from tid0 on.
// Transfers on one link may overlap (pipelined): overlapping ones go to
// extra lanes of the link ("link n0→n1 #2"), since a track's slices must
// nest.
func (res *Result) transferTracks(pid, tid0 int, us func(time.Time) float64) []traceEvent {
	type lane struct {
		tid int
		end time.Time
	}
	var evs []traceEvent
	lanes := map[string][]*lane{}
	var links []string
	next := tid0
	for _, g := range res.Groups {
		for _, tr := range g.Transfers {
			if tr.Start.IsZero() || tr.End.Before(tr.Start) {
				continue
			}
			link := "link " + tr.From + "→" + tr.To
			if tr.From == tr.To {
				link = tr.From + " copies"
			}
			if _, ok := lanes[link]; !ok {
				links = append(links, link)
			}
			var ln *lane
			for _, l := range lanes[link] {
				if !l.end.After(tr.Start) {
					ln = l
					break
				}
			}
			if ln == nil {
				ln = &lane{tid: next}
				next++
				name := link
				if n := len(lanes[link]); n > 0 {
					name = fmt.Sprintf("%s #%d", link, n+1)
				}
				lanes[link] = append(lanes[link], ln)
				evs = append(evs, traceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: ln.tid, Args: map[string]any{"name": name}})
			}
			ln.end = tr.End
			dur := float64(tr.End.Sub(tr.Start).Nanoseconds()) / 1e3
			evs = append(evs, traceEvent{Name: tr.Kind + " " + bytesStr(tr.Bytes), Cat: "transfer", Ph: "X", Ts: us(tr.Start), Dur: &dur, Pid: pid, Tid: ln.tid,
				Args: map[string]any{"group": g.ID, "bytes": tr.Bytes, "from": tr.From, "to": tr.To, "step": g.Path}})
		}
	}
	slices.Sort(links)
	for i, l := range links {
		for _, ln := range lanes[l] {
			evs = append(evs, traceEvent{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: ln.tid, Args: map[string]any{"sort_index": 1000 + i}})
		}
	}
	return evs
}

// firstDevice and lastDevice are the devices of a group's first and last
// chunk (its device when it is not split), for dependency arrows.
func firstDevice(g *Group) string {
	if len(g.Chunks) > 0 {
		return g.Chunks[0].Device
	}
	return g.Device
}

func lastDevice(g *Group) string {
	if len(g.Chunks) > 0 {
		return g.Chunks[len(g.Chunks)-1].Device
	}
	return g.Device
}

// ---- DAG ----

// WriteDAG writes the command groups and their dependencies as a Graphviz
// digraph, in submission order (deterministic for a job).
func (res *Result) WriteDAG(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote("acpp job "+res.Job.Name))
	b.WriteString("  rankdir=TB;\n  node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=10];\n  edge [color=\"#555555\"];\n")
	for _, g := range res.Groups {
		label := fmt.Sprintf("#%d %s\n%s · %s\n%s", g.ID, g.Label, g.Kind, g.Device, strings.Join(g.Accesses, " "))
		attrs := ""
		switch g.Kind {
		case "init":
			attrs = `, color="#2a7ab0"`
		case "fill", "copy":
			attrs = `, color="#888888"`
		}
		if g.Err != nil {
			attrs += `, color=red, penwidth=2`
		}
		fmt.Fprintf(&b, "  g%d [label=%s%s];\n", g.ID, dotQuote(label), attrs)
	}
	for _, g := range res.Groups {
		for _, d := range g.Deps {
			fmt.Fprintf(&b, "  g%d -> g%d;\n", d, g.ID)
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
