package coherence

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmarks of docs/COHERENCE.md. Re-run with
//
//	go test -run='^$' -bench=. -benchmem ./coherence
//
// Figures there were taken on the 2-core development machine.

// bigCore returns a core with buffer 1 of n pages (1D, one element per page)
// whose only up-to-date copy is on host0, plus allocations on gpu1 and gpu2.
func bigCore(b testing.TB, n int) (*Core, *buffer) {
	geo, err := NewGeometry(Dims{1, 1, n}, 4, Dims{1, 1, 1})
	if err != nil {
		b.Fatal(err)
	}
	c := New(Config{})
	h := host0
	if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo, HostData: &h}); err != nil {
		b.Fatal(err)
	}
	buf := c.bufs[1]
	buf.addSlot(gpu1, c.newGen())
	buf.addSlot(gpu2, c.newGen())
	return c, buf
}

// BenchmarkPlanOneBox: plan the copies for a 4096-page one-box accessor on
// gpu1 of a buffer whose only valid copy is on the host (T3/T4 planning,
// no state change). Must not depend on the buffer's page count.
func BenchmarkPlanOneBox(b *testing.B) {
	for _, shift := range []int{16, 20, 24} {
		b.Run(fmt.Sprintf("pages=2^%d", shift), func(b *testing.B) {
			n := 1 << shift
			c, buf := bigCore(b, n)
			t, _ := buf.slotOf(gpu1)
			rng := rand.New(rand.NewPCG(1, 2))
			var copies []*copyAcc
			var planned []plannedTo
			var deps []CGID
			pages := 0
			b.ReportAllocs()
			for b.Loop() {
				lo := rng.IntN(n - 4096)
				copies, planned, deps = copies[:0], planned[:0], deps[:0]
				deps = c.planAccess(buf, span1(lo, lo+4096), t, &copies, &planned, deps)
				cp := makeCopy(buf, copies[0])
				pages += cp.Pages
			}
			b.ReportMetric(float64(pages)/float64(b.N), "pages/op")
		})
	}
}

// BenchmarkMarkWritten: the P3 update for a 4096-page accessor (valid only
// on the writer afterwards), alternating writers so every call changes state.
func BenchmarkMarkWritten(b *testing.B) {
	for _, shift := range []int{16, 20, 24} {
		b.Run(fmt.Sprintf("pages=2^%d", shift), func(b *testing.B) {
			n := 1 << shift
			_, buf := bigCore(b, n)
			rng := rand.New(rand.NewPCG(1, 2))
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				lo := rng.IntN(n - 4096)
				buf.states.update(lo, lo+4096, stateOp{kind: opSet, m: slotBit(i % 3)})
				i++
			}
		})
	}
}

// BenchmarkSubmitReadThenWrite: the whole Submit path for a 4096-page read on
// gpu1 (plan, allocation check, conflicts, marking valid) followed by a
// 4096-page discard write on the host that outdates it again; one op is the
// pair. Groups complete as they go.
func BenchmarkSubmitReadThenWrite(b *testing.B) {
	for _, shift := range []int{16, 20, 24} {
		b.Run(fmt.Sprintf("pages=2^%d", shift), func(b *testing.B) {
			n := 1 << shift
			c, _ := bigCore(b, n)
			rng := rand.New(rand.NewPCG(1, 2))
			id := CGID(0)
			moved := 0
			b.ReportAllocs()
			for b.Loop() {
				lo := rng.IntN(n - 4096)
				id++
				st, err := c.Submit(CommandGroup{ID: id, Accesses: []Access{acc(Read, gpu1, span1(lo, lo+4096))}})
				if err != nil {
					b.Fatal(err)
				}
				moved += totalPages(st.Copies)
				c.Complete(id)
				id++
				if _, err := c.Submit(CommandGroup{ID: id, Accesses: []Access{{Buffer: 1, Pages: span1(lo, lo+4096), Mode: Write, Discard: true, Target: host0}}}); err != nil {
					b.Fatal(err)
				}
				c.Complete(id)
			}
			b.ReportMetric(float64(moved)/float64(b.N), "pages-moved/op")
		})
	}
}

// BenchmarkRandomWorkload: 10^5 small accessors (1–8 pages, random modes)
// on a 2^20-page buffer over 8 devices, groups completing with a lag of 64.
// Reports the page-state memory in bits per page per allocation (≤ 2).
func BenchmarkRandomWorkload(b *testing.B) {
	const n, accesses, devices, lag = 1 << 20, 100_000, 8, 64
	var bitsPerPage float64
	var dense, regions int
	b.ReportAllocs()
	for b.Loop() {
		geo, _ := NewGeometry(Dims{1, 1, n}, 4, Dims{1, 1, 1})
		c := New(Config{})
		h := AllocID{Node: 0, Mem: 1}
		if err := c.AddBuffer(BufferSpec{ID: 1, Geometry: geo, HostData: &h}); err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		for i := 1; i <= accesses; i++ {
			lo := rng.IntN(n - 8)
			a := Access{Buffer: 1, Pages: span1(lo, lo+1+rng.IntN(8)),
				Mode:   []Mode{Read, Read, Write, ReadWrite}[rng.IntN(4)],
				Target: AllocID{Node: 0, Mem: MemID(1 + rng.IntN(devices))}}
			if _, err := c.Submit(CommandGroup{ID: CGID(i), Accesses: []Access{a}}); err != nil {
				b.Fatal(err)
			}
			if i > lag {
				c.Complete(CGID(i - lag))
			}
		}
		st := c.Stats()
		bitsPerPage, dense, regions = st.StateBitsPerPage(), st.DenseChunks, st.Regions
	}
	b.ReportMetric(bitsPerPage, "state-bits/page/alloc")
	b.ReportMetric(float64(dense), "dense-chunks")
	b.ReportMetric(float64(regions), "conflict-regions")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*accesses), "ns/access")
}

// BenchmarkConflictHistory: Submit of a command group with 4 accessors (two
// buffers, mixed modes, small ranges) against a history of 10^4 incomplete
// command groups; each iteration completes the oldest so the history stays
// at 10^4 (D1–D3 detection plus planning).
func BenchmarkConflictHistory(b *testing.B) {
	const n, history = 1 << 16, 10_000
	geo, _ := NewGeometry(Dims{1, 1, n}, 4, Dims{1, 1, 1})
	c := New(Config{})
	for id := BufferID(1); id <= 2; id++ {
		h := host0
		if err := c.AddBuffer(BufferSpec{ID: id, Geometry: geo, HostData: &h}); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	group := func(id CGID) CommandGroup {
		cg := CommandGroup{ID: id}
		dev := AllocID{Node: NodeID(rng.IntN(2)), Mem: MemID(1 + rng.IntN(4))}
		for k := range 4 {
			lo := rng.IntN(n - 16)
			cg.Accesses = append(cg.Accesses, Access{Buffer: BufferID(1 + k%2), Pages: span1(lo, lo+1+rng.IntN(16)),
				Mode: []Mode{Read, Read, Read, Write, ReadWrite}[rng.IntN(5)], Target: dev})
		}
		return cg
	}
	id := CGID(0)
	for range history {
		id++
		if _, err := c.Submit(group(id)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("detect", func(b *testing.B) {
		// Dependency detection alone (no recording), the D1 query.
		edges := 0
		b.ReportAllocs()
		for b.Loop() {
			edges += len(c.conflictDeps(group(id + 1)))
		}
		b.ReportMetric(float64(edges)/float64(b.N), "deps/op")
		b.ReportMetric(float64(c.Stats().Live), "live-groups")
	})
	b.Run("submit", func(b *testing.B) {
		// The whole Submit (detection, recording, transfer planning, in-flight
		// fills), completing the oldest group each time.
		oldest := CGID(1)
		for c.live.get(oldest) == nil {
			oldest++
		}
		edges := 0
		b.ReportAllocs()
		for b.Loop() {
			id++
			st, err := c.Submit(group(id))
			if err != nil {
				b.Fatal(err)
			}
			edges += len(st.Deps)
			c.Complete(oldest)
			oldest++
		}
		b.ReportMetric(float64(edges)/float64(b.N), "deps/op")
		b.ReportMetric(float64(c.Stats().Live), "live-groups")
	})
}

// BenchmarkWholeBuffer: a read of every page on a GPU followed by a discard
// write of every page on the host (one op = the pair), uniform states: the
// cost of big accessors grows with the page count (chunks touched), which
// the default 64 KiB page size keeps small (2^20 pages = 64 GiB).
func BenchmarkWholeBuffer(b *testing.B) {
	for _, shift := range []int{12, 16, 20} {
		b.Run(fmt.Sprintf("pages=2^%d", shift), func(b *testing.B) {
			n := 1 << shift
			c, _ := bigCore(b, n)
			id := CGID(0)
			b.ReportAllocs()
			for b.Loop() {
				id++
				if _, err := c.Submit(CommandGroup{ID: id, Accesses: []Access{acc(Read, gpu1, span1(0, n))}}); err != nil {
					b.Fatal(err)
				}
				c.Complete(id)
				id++
				if _, err := c.Submit(CommandGroup{ID: id, Accesses: []Access{{Buffer: 1, Pages: span1(0, n), Mode: Write, Discard: true, Target: host0}}}); err != nil {
					b.Fatal(err)
				}
				c.Complete(id)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/page")
		})
	}
}
