package coherence

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Buffers with more than 64 allocations (issue 17: 64 members and the
// client's host copy): slot masks span several words.

// TestSlotMaskOps checks slotMask's set operations on slots of every word.
func TestSlotMaskOps(t *testing.T) {
	slots := []int{0, 1, 62, 64, 65, 127, 128, 191, 192, 254, 255}
	var m slotMask
	for _, s := range slots {
		m.add(s)
	}
	if got := slices.Collect(m.all()); !slices.Equal(got, slots) {
		t.Fatalf("all() = %v, want %v", got, slots)
	}
	if m.count() != len(slots) || m.first() != 0 || m.firstFree() != 2 {
		t.Fatalf("count, first, firstFree = %d, %d, %d; want %d, 0, 2", m.count(), m.first(), m.firstFree(), len(slots))
	}
	for i, s := range slots {
		if got := m.countBelow(s); got != i {
			t.Errorf("countBelow(%d) = %d, want %d", s, got, i)
		}
		if !m.has(s) || s+2 < maskWords*64 && m.has(s+2) != slices.Contains(slots, s+2) {
			t.Errorf("has(%d) or has(%d) wrong", s, s+2)
		}
		if !slotBit(s).single() || !m.meets(slotBit(s)) {
			t.Errorf("slotBit(%d): single or meets wrong", s)
		}
	}
	if m.hasReal() != true || lostBit.hasReal() || !lostBit.has(lostSlot) || lostBit.real() != (slotMask{}) {
		t.Fatalf("lost pseudo-slot: %v", lostBit)
	}
	if got := m.andNot(slotBit(64)).or(slotBit(200)); got.has(64) || !got.has(200) || got.count() != len(slots) {
		t.Fatalf("andNot/or: %v", got)
	}
	var full slotMask
	for s := range maskWords * 64 {
		if s != lostSlot {
			full.add(s)
		}
	}
	if full.firstFree() != maskWords*64 || full.count() != maxSlots || full.has(lostSlot) {
		t.Fatalf("full mask: firstFree %d count %d", full.firstFree(), full.count())
	}
	if got := slotBit(64).or(lostBit).String(); got != "{lost,64}" {
		t.Fatalf("String() = %q", got)
	}
}

// TestCoreAgainstNaiveModelWideSlots_P2_P3_P4_T1_T2_T3_D1_D2_D3_C5 runs the
// naive-model comparison (model_test.go) on buffers whose first slots are
// taken by filler allocations that hold nothing, so that the model's six
// allocations sit across a word boundary of the slot masks (61 fillers) or
// in the last slots below the lost pseudo-slot (249 fillers: 255 in all).
// Fillers are released like any allocation; the freed slots are reused.
func TestCoreAgainstNaiveModelWideSlots_P2_P3_P4_T1_T2_T3_D1_D2_D3_C5(t *testing.T) {
	for _, fillers := range []int{61, 249} {
		t.Run(fmt.Sprintf("fillers=%d", fillers), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				// The model walks every allocation for every page: with 67
				// or 255 of them, run one case in four (CI runs this under
				// -race; the other cases return at once).
				if rapid.IntRange(0, 3).Draw(t, "sample") != 0 {
					return
				}
				m := &model{t: t, c: New(Config{}), byID: map[CGID]*mGroup{}, next: 1}
				for n := range 3 {
					for mem := range 2 {
						m.allocs = append(m.allocs, AllocID{Node: NodeID(n), Mem: MemID(mem)})
					}
				}
				nb := rapid.IntRange(1, 2).Draw(t, "buffers")
				for i := range nb {
					geo := drawGeometry(t)
					b := &mBuf{id: BufferID(i + 1), geo: geo, p: geo.Pages(), n: geo.NumPages(), valid: map[AllocID][]bool{}, sim: map[AllocID][]val{}, made: map[AllocID]CGID{}}
					b.lost, b.init, b.lv = make([]bool, b.n), make([]bool, b.n), make([]val, b.n)
					spec := BufferSpec{ID: b.id, Geometry: geo}
					if rapid.Bool().Draw(t, "hostdata") {
						h := AllocID{}
						spec.HostData = &h
						m.ensure(b, h)
						simAlloc(t, b, h)
						for p := range b.n {
							b.valid[h][p] = true
							b.init[p] = true
							b.sim[h][p] = val{}
						}
					}
					if err := m.c.AddBuffer(spec); err != nil {
						t.Fatal(err)
					}
					m.bufs = append(m.bufs, b)
					// Fillers on nodes the model never targets or loses: an
					// empty read creates the allocation and holds no page
					// (one group makes them all: cheap enough for -race).
					cg := CommandGroup{ID: m.next}
					for k := range fillers {
						f := AllocID{Node: NodeID(1000 + k)}
						cg.Accesses = append(cg.Accesses, Access{Buffer: b.id, Mode: Read, Target: f})
						m.ensure(b, f)
						simAlloc(t, b, f)
					}
					if _, err := m.c.Submit(cg); err != nil {
						t.Fatalf("fillers: %v", err)
					}
					m.c.Complete(m.next)
					m.next++
				}
				steps := rapid.IntRange(1, 40).Draw(t, "steps")
				for range steps {
					switch op := rapid.IntRange(0, 19).Draw(t, "op"); {
					case op < 11:
						m.submit(t)
					case op < 18:
						if r := m.ready(); len(r) > 0 {
							m.execute(t, rapid.SampledFrom(r).Draw(t, "run"))
						}
					case op < 19:
						m.release(t)
					default:
						m.loseNode(t)
					}
					m.checkStates(t)
				}
				m.drain(t)
			})
		})
	}
}

// TestHaloExchange65Allocations: a buffer split over 64 nodes plus the
// host copy (65 allocations, the case that failed with 63 slots): each node
// writes its rows, then reads a halo row from each neighbour, which is
// copied from that neighbour; losing a node loses exactly its rows.
func TestHaloExchange65Allocations(t *testing.T) {
	const nodes, rows = 64, 4
	c := New(Config{})
	geo, err := NewGeometry(Dims{1, nodes * rows, 8}, 4, Dims{1, 1, 8})
	if err != nil {
		t.Fatal(err)
	}
	host := AllocID{}
	if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo, HostData: &host}); err != nil {
		t.Fatal(err)
	}
	on := func(n int) AllocID { return AllocID{Node: NodeID(n + 1)} }
	rowBox := func(lo, hi int) Box { return Box{Lo: Dims{0, lo, 0}, Hi: Dims{1, hi, 1}} }
	id := CGID(0)
	for n := range nodes {
		id++
		st, err := c.Submit(CommandGroup{ID: id, Accesses: []Access{{Buffer: 1, Pages: rowBox(n*rows, (n+1)*rows), Mode: ReadWrite, Target: on(n)}}})
		if err != nil {
			t.Fatalf("node %d writes its rows: %v", n, err)
		}
		if len(st.Copies) != 1 || st.Copies[0].Src != host || st.Copies[0].Pages != rows {
			t.Fatalf("node %d: copies %+v, want %d pages from the host", n, st.Copies, rows)
		}
	}
	if got := len(c.Allocations(1)); got != nodes+1 {
		t.Fatalf("%d allocations, want %d", got, nodes+1)
	}
	for n := range nodes {
		c.Complete(CGID(n + 1))
	}
	for n := range nodes {
		id++
		lo, hi := max(0, n*rows-1), min(nodes*rows, (n+1)*rows+1)
		st, err := c.Submit(CommandGroup{ID: id, Accesses: []Access{{Buffer: 1, Pages: rowBox(lo, hi), Mode: Read, Target: on(n)}}})
		if err != nil {
			t.Fatalf("node %d reads its halo: %v", n, err)
		}
		var srcs []AllocID
		for _, cp := range st.Copies {
			if cp.Pages != 1 {
				t.Fatalf("node %d: copy %+v, want one halo row", n, cp)
			}
			srcs = append(srcs, cp.Src)
		}
		var want []AllocID
		if n > 0 {
			want = append(want, on(n-1))
		}
		if n < nodes-1 {
			want = append(want, on(n+1))
		}
		slices.SortFunc(srcs, compareAlloc)
		if !slices.Equal(srcs, want) {
			t.Fatalf("node %d: halo sources %v, want %v", n, srcs, want)
		}
	}
	for g := CGID(nodes + 1); g <= id; g++ {
		c.Complete(g)
	}
	// The last node holds slot 65 (the host has slot 0, 63 is the lost
	// pseudo-slot): its rows but the
	// one node 62 read as halo have no other copy.
	infos := c.Buffers()
	for _, a := range infos[0].Allocations {
		want := rows + 2 // its rows and a halo row on each side
		switch a.Alloc {
		case host:
			want = 0
		case on(0), on(nodes - 1):
			want = rows + 1
		}
		if a.ValidPages != want {
			t.Fatalf("Buffers: %v holds %d valid pages, want %d", a.Alloc, a.ValidPages, want)
		}
	}
	lost := c.LoseNode(on(nodes - 1).Node)
	want := []LostPages{{Buffer: 1, Boxes: []Box{rowBox(nodes*rows-rows+1, nodes*rows)}, Nodes: []NodeID{on(nodes - 1).Node}}}
	if !slices.EqualFunc(lost, want, func(x, y LostPages) bool {
		return x.Buffer == y.Buffer && slices.Equal(x.Boxes, y.Boxes) && slices.Equal(x.Nodes, y.Nodes)
	}) {
		t.Fatalf("LoseNode(last) = %+v, want %+v", lost, want)
	}
	if got := len(c.Allocations(1)); got != nodes {
		t.Fatalf("%d allocations after the loss, want %d", got, nodes)
	}
}

// TestDenseLoseWideSlot: in a dense chunk holding slots 1 and 64, losing
// slot 64 makes its pages lost; the lost bitmap, added part-way through
// the update, sits between the two slots' bitmaps, so the rest of the
// update must find slot 64's bitmap one place up.
func TestDenseLoseWideSlot(t *testing.T) {
	ps := newPageStates(chunkLen, slotBit(1))
	for p := 1; p < chunkLen; p += 2 {
		ps.update(p, p+1, stateOp{kind: opSet, m: slotBit(64)})
	}
	if ps.denseChunks() != 1 || !ps.wide {
		t.Fatalf("dense chunks %d, wide %v; want a dense wide chunk", ps.denseChunks(), ps.wide)
	}
	ps.update(0, chunkLen, stateOp{kind: opLose, m: slotBit(64)})
	if err := ps.check(); err != nil {
		t.Fatal(err)
	}
	ps.visit(0, chunkLen, func(a, b int, m slotMask) {
		for p := a; p < b; p++ {
			want := slotBit(1)
			if p%2 == 1 {
				want = lostBit
			}
			if m != want {
				t.Fatalf("page %d: %v, want %v", p, m, want)
			}
		}
	})
}
