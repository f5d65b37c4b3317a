package coherence

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestGolden runs the scenarios in testdata/*.txt. Each file starts with a
// "# covers:" line naming the requirement IDs it shows. Regenerate the
// expected output with
//
//	go test ./coherence -run TestGolden -rewrite
//
// and review the diff like code.
//
// Commands:
//
//	buffer id=1 range=(64,64) elem=4 [page=(4,64)] [host=n0/host]
//	submit id=N            one access per input line:
//	  read|write|read_write|reduce b=1 [off=(..)] [range=(..)] on=n0/m1 [discard] [op=add]
//	  (off/range are element coordinates, 1–3 values, padded like Dims;
//	  range defaults to the whole buffer)
//	complete id=N [id=M...]
//	release id=N b=1 alloc=n0/m1
//	lose-node node=1
//	outdated b=1 alloc=n0/m1
//	allocations b=1
func TestGolden(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasSuffix(path, ".txt") {
			return
		}
		g := &golden{c: New(Config{}), geos: map[BufferID]Geometry{}}
		datadriven.RunTest(t, path, g.run)
	})
}

type golden struct {
	c    *Core
	geos map[BufferID]Geometry
}

func parseAlloc(t testing.TB, s string) AllocID {
	var n, m uint64
	node, mem, ok := strings.Cut(s, "/")
	if !ok || !strings.HasPrefix(node, "n") {
		t.Fatalf("bad allocation %q, want n<node>/host or n<node>/m<mem>", s)
	}
	n, err := strconv.ParseUint(node[1:], 10, 32)
	if err != nil {
		t.Fatalf("bad allocation %q: %v", s, err)
	}
	if mem != "host" {
		if m, err = strconv.ParseUint(strings.TrimPrefix(mem, "m"), 10, 32); err != nil {
			t.Fatalf("bad allocation %q: %v", s, err)
		}
	}
	return AllocID{Node: NodeID(n), Mem: MemID(m)}
}

// dims pads 1–3 values to Dims with pad in the leading dimensions.
func dims(t testing.TB, vals []string, pad int) Dims {
	d := Dims{pad, pad, pad}
	if len(vals) < 1 || len(vals) > 3 {
		t.Fatalf("want 1–3 values, got %v", vals)
	}
	for i, v := range vals {
		x, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			t.Fatalf("bad number %q", v)
		}
		d[3-len(vals)+i] = x
	}
	return d
}

func arg(args []datadriven.CmdArg, key string) (datadriven.CmdArg, bool) {
	for _, a := range args {
		if a.Key == key {
			return a, true
		}
	}
	return datadriven.CmdArg{}, false
}

func mustArg(t testing.TB, args []datadriven.CmdArg, key string) datadriven.CmdArg {
	a, ok := arg(args, key)
	if !ok {
		t.Fatalf("missing argument %s", key)
	}
	return a
}

func atoi(t testing.TB, s string) int {
	x, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("bad number %q", s)
	}
	return x
}

var reduceOps = map[string]ReduceOp{"add": 1, "mul": 2, "min": 3, "max": 4}

func opName(op ReduceOp) string {
	for k, v := range reduceOps {
		if v == op {
			return k
		}
	}
	return fmt.Sprint(uint32(op))
}

func (g *golden) access(t testing.TB, line string) Access {
	cmd, args, err := datadriven.ParseLine(line)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	var a Access
	switch cmd {
	case "read":
		a.Mode = Read
	case "write":
		a.Mode = Write
	case "read_write":
		a.Mode = ReadWrite
	case "reduce":
		a.Mode = Reduce
		a.Op = reduceOps[mustArg(t, args, "op").SingleVal(t)]
	default:
		t.Fatalf("unknown access %q", cmd)
	}
	a.Buffer = BufferID(atoi(t, mustArg(t, args, "b").SingleVal(t)))
	geo, ok := g.geos[a.Buffer]
	if !ok {
		geo, _ = NewGeometry(Dims{1, 1, 1}, 1, Dims{}) // unknown buffer: let Submit say so
	}
	off, rng := Dims{}, geo.Range
	if x, ok := arg(args, "off"); ok {
		off = dims(t, x.Vals, 0)
	}
	if x, ok := arg(args, "range"); ok {
		rng = dims(t, x.Vals, 1)
	} else if _, ok := arg(args, "off"); ok {
		for d := range 3 {
			rng[d] -= off[d]
		}
	}
	if a.Pages, err = geo.PageRange(off, rng); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	a.Target = parseAlloc(t, mustArg(t, args, "on").SingleVal(t))
	_, a.Discard = arg(args, "discard")
	return a
}

func (g *golden) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "buffer":
		id := BufferID(atoi(t, mustArg(t, d.CmdArgs, "id").SingleVal(t)))
		rng := dims(t, mustArg(t, d.CmdArgs, "range").Vals, 1)
		elem := atoi(t, mustArg(t, d.CmdArgs, "elem").SingleVal(t))
		var ps Dims
		if x, ok := arg(d.CmdArgs, "page"); ok {
			ps = dims(t, x.Vals, 1)
		}
		geo, err := NewGeometry(rng, elem, ps)
		if err != nil {
			return "error: " + err.Error()
		}
		spec := BufferSpec{ID: id, Geometry: geo}
		if x, ok := arg(d.CmdArgs, "host"); ok {
			h := parseAlloc(t, x.SingleVal(t))
			spec.HostData = &h
		}
		if err := g.c.AddBuffer(spec); err != nil {
			return "error: " + err.Error()
		}
		g.geos[id] = geo
		return fmt.Sprintf("b%d: range %v, %d B elements, page %v, %d pages %v, %d B\n",
			id, geo.Range, geo.ElemSize, geo.PageSize, geo.NumPages(), geo.Pages(), geo.Bytes())
	case "submit":
		cg := CommandGroup{ID: CGID(atoi(t, mustArg(t, d.CmdArgs, "id").SingleVal(t)))}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				cg.Accesses = append(cg.Accesses, g.access(t, line))
			}
		}
		st, err := g.c.Submit(cg)
		return formatStep(st, err)
	case "complete":
		var ids []string
		for _, a := range d.CmdArgs {
			for _, v := range a.Vals {
				g.c.Complete(CGID(atoi(t, v)))
				ids = append(ids, v)
			}
		}
		return "completed " + strings.Join(ids, " ") + "\n"
	case "release":
		st, err := g.c.Release(CGID(atoi(t, mustArg(t, d.CmdArgs, "id").SingleVal(t))),
			BufferID(atoi(t, mustArg(t, d.CmdArgs, "b").SingleVal(t))),
			parseAlloc(t, mustArg(t, d.CmdArgs, "alloc").SingleVal(t)))
		return formatStep(st, err)
	case "lose-node":
		lost := g.c.LoseNode(NodeID(atoi(t, mustArg(t, d.CmdArgs, "node").SingleVal(t))))
		if len(lost) == 0 {
			return "nothing lost\n"
		}
		var sb strings.Builder
		for _, lp := range lost {
			fmt.Fprintf(&sb, "lost: b%d %s (nodes %v)\n", lp.Buffer, boxesString(lp.Boxes), lp.Nodes)
		}
		return sb.String()
	case "outdated":
		id := BufferID(atoi(t, mustArg(t, d.CmdArgs, "b").SingleVal(t)))
		a := parseAlloc(t, mustArg(t, d.CmdArgs, "alloc").SingleVal(t))
		boxes, err := g.c.Outdated(id, a, g.geos[id].All())
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		if len(boxes) == 0 {
			return "up to date\n"
		}
		return "outdated: " + boxesString(boxes) + "\n"
	case "allocations":
		id := BufferID(atoi(t, mustArg(t, d.CmdArgs, "b").SingleVal(t)))
		var s []string
		for _, a := range g.c.Allocations(id) {
			s = append(s, a.String())
		}
		return strings.Join(s, " ") + "\n"
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

func boxesString(bs []Box) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.String()
	}
	return strings.Join(s, " ")
}

func formatStep(st Step, err error) string {
	var sb strings.Builder
	if err != nil {
		fmt.Fprintf(&sb, "error: %v\n", err)
	}
	if st.ID == 0 && err != nil {
		return sb.String()
	}
	if len(st.Deps) == 0 {
		sb.WriteString("deps: none\n")
	} else {
		ds := make([]string, len(st.Deps))
		for i, d := range st.Deps {
			ds[i] = strconv.FormatUint(uint64(d), 10)
		}
		fmt.Fprintf(&sb, "deps: %s\n", strings.Join(ds, " "))
	}
	for _, a := range st.Allocate {
		fmt.Fprintf(&sb, "allocate: b%d on %v (%d B)\n", a.Buffer, a.Alloc, a.Bytes)
	}
	for _, c := range st.Copies {
		fmt.Fprintf(&sb, "copy: b%d %v -> %v %s (%d pages, %d transfers)\n", c.Buffer, c.Src, c.Dst, boxesString(c.Boxes), c.Pages, len(c.Boxes))
	}
	for _, a := range st.Free {
		fmt.Fprintf(&sb, "free: b%d on %v\n", a.Buffer, a.Alloc)
	}
	for _, lp := range st.Lost {
		fmt.Fprintf(&sb, "lost: b%d %s (nodes %v)\n", lp.Buffer, boxesString(lp.Boxes), lp.Nodes)
	}
	return sb.String()
}

var _ = slices.Sort[[]int]
