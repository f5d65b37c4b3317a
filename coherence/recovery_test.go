package coherence

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestRecoveryScripts runs testdata/*.rec: the golden commands (buffer,
// submit, complete, lose-node, outdated, allocations) plus
//
//	checkpoint            every group so far is in the checkpoint: the log restarts
//	plan left=N           PlanRecovery after the last lose-node, N nodes left
//
// covering C5 (issue 15): what a job does when it loses a node.
func TestRecoveryScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasSuffix(path, ".rec") {
			return
		}
		r := &recScript{golden: golden{c: New(Config{}), geos: map[BufferID]Geometry{}}, done: map[CGID]bool{}, srcs: map[CGID][]NodeID{}}
		datadriven.RunTest(t, path, r.run)
	})
}

type recScript struct {
	golden
	log      []LoggedGroup
	done     map[CGID]bool
	srcs     map[CGID][]NodeID // nodes a group's copies come from
	lost     []LostPages
	inflight []CGID
}

func (r *recScript) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "submit":
		id := CGID(atoi(t, mustArg(t, d.CmdArgs, "id").SingleVal(t)))
		lg := LoggedGroup{ID: id}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				lg.Accesses = append(lg.Accesses, r.access(t, line))
			}
		}
		st, err := r.c.Submit(CommandGroup{ID: id, Accesses: lg.Accesses})
		if err == nil {
			r.log = append(r.log, lg)
			for _, c := range st.Copies {
				r.srcs[id] = append(r.srcs[id], c.Src.Node)
			}
		}
		return formatStep(st, err)
	case "complete":
		for _, a := range d.CmdArgs {
			for _, v := range a.Vals {
				r.done[CGID(atoi(t, v))] = true
			}
		}
		return r.golden.run(t, d)
	case "checkpoint":
		var running []string
		for _, g := range r.log {
			if !r.done[g.ID] {
				running = append(running, strconv.Itoa(int(g.ID)))
			}
		}
		if len(running) > 0 {
			return "waits for groups " + strings.Join(running, " ") + " (a checkpoint copies what they write)\n"
		}
		n := len(r.log)
		r.log = nil
		return fmt.Sprintf("checkpoint: %d groups before it, the log restarts\n", n)
	case "lose-node":
		n := NodeID(atoi(t, mustArg(t, d.CmdArgs, "node").SingleVal(t)))
		r.lost = r.c.LoseNode(n)
		r.inflight = nil
		for _, g := range r.log {
			if r.done[g.ID] {
				continue
			}
			on := slices.ContainsFunc(g.Accesses, func(a Access) bool { return a.Target.Node == n })
			if on || slices.Contains(r.srcs[g.ID], n) {
				r.inflight = append(r.inflight, g.ID)
			}
		}
		var sb strings.Builder
		for _, lp := range r.lost {
			fmt.Fprintf(&sb, "lost: b%d %s (nodes %v)\n", lp.Buffer, boxesString(lp.Boxes), lp.Nodes)
		}
		if len(r.lost) == 0 {
			sb.WriteString("nothing lost\n")
		}
		if len(r.inflight) > 0 {
			fmt.Fprintf(&sb, "in flight: %s\n", ids(r.inflight))
		}
		return sb.String()
	case "plan":
		left := atoi(t, mustArg(t, d.CmdArgs, "left").SingleVal(t))
		log := slices.Clone(r.log)
		for i := range log {
			log[i].Done = r.done[log[i].ID]
		}
		p := PlanRecovery(RecoveryInput{Lost: r.lost, InFlight: r.inflight, Log: log, NodesLeft: left})
		out := "action: " + p.Action.String() + "\n"
		if p.Action == RecoverReplay {
			out += "rerun: " + ids(p.Rerun) + "\n"
			if len(p.Skipped) > 0 {
				out += "skipped: " + ids(p.Skipped) + "\n"
			}
			// The replay runs the groups again: they complete anew.
			for _, id := range p.Rerun {
				r.done[id] = true
			}
		}
		return out
	}
	return r.golden.run(t, d)
}

func ids(gs []CGID) string {
	if len(gs) == 0 {
		return "none"
	}
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = strconv.Itoa(int(g))
	}
	return strings.Join(s, " ")
}

// PlanReplay keeps a group whose write is read later, skips one whose
// every write is overwritten (Discard) unread, and always keeps groups
// not done.
func TestPlanReplayLiveness_C5(t *testing.T) {
	all := Box{Hi: Dims{1, 1, 8}}
	half := Box{Hi: Dims{1, 1, 4}}
	w := func(b BufferID, p Box) Access { return Access{Buffer: b, Pages: p, Mode: Write, Discard: true} }
	rd := func(b BufferID, p Box) Access { return Access{Buffer: b, Pages: p, Mode: Read} }
	log := []LoggedGroup{
		{ID: 1, Accesses: []Access{w(1, all)}, Done: true},             // overwritten unread by 3: skipped
		{ID: 2, Accesses: []Access{w(2, half)}, Done: true},            // read by 4: kept
		{ID: 3, Accesses: []Access{w(1, all)}, Done: true},             // final value of b1: kept
		{ID: 4, Accesses: []Access{rd(2, all), w(3, all)}, Done: true}, // final value of b3: kept
		{ID: 5, Accesses: []Access{rd(1, all)}, Done: false},           // read-only, not done: kept
		{ID: 6, Accesses: []Access{rd(1, all)}, Done: true},            // read-only, done: skipped
	}
	got := PlanReplay(log)
	want := []bool{false, true, true, true, true, false}
	if !slices.Equal(got, want) {
		t.Fatalf("PlanReplay = %v, want %v", got, want)
	}
	// A write without Discard keeps what it does not overwrite: the
	// earlier write stays live.
	log[2].Accesses[0].Discard = false
	if got := PlanReplay(log); !got[0] {
		t.Errorf("a partial write after group 1 must keep it: %v", got)
	}
}

// Box.Minus leaves exactly the pages of b outside h, as disjoint boxes.
func TestBoxMinus(t *testing.T) {
	b := Box{Hi: Dims{3, 4, 5}}
	for _, h := range []Box{{Lo: Dims{1, 1, 1}, Hi: Dims{2, 3, 4}}, {Hi: Dims{3, 4, 5}}, {Lo: Dims{5, 5, 5}, Hi: Dims{6, 6, 6}}, {Lo: Dims{0, 2, 0}, Hi: Dims{3, 9, 9}}} {
		parts := b.Minus(h)
		n := 0
		for i, p := range parts {
			n += p.Volume()
			if p.Overlaps(h) || p.Intersect(b) != p {
				t.Errorf("%v minus %v: part %v overlaps the hole or leaves b", b, h, p)
			}
			for _, q := range parts[i+1:] {
				if p.Overlaps(q) {
					t.Errorf("%v minus %v: parts %v and %v overlap", b, h, p, q)
				}
			}
		}
		if want := b.Volume() - b.Intersect(h).Volume(); n != want {
			t.Errorf("%v minus %v: %d pages, want %d", b, h, n, want)
		}
	}
}
