package acpp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/kernels"
)

func registerBuiltins(t testing.TB) {
	t.Helper()
	if err := kernels.Register(); err != nil {
		t.Fatal(err)
	}
}

// isSplit reports whether opts split the group.
func isSplit(opts []SubmitOption) bool {
	var c submitConfig
	for _, o := range opts {
		o(&c)
	}
	return c.split != nil
}

func readAll[T any](t testing.TB, b *Buffer[T]) []T {
	t.Helper()
	got, err := b.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// saxpyRun runs y = a*x + y three times over n items, as a Go closure
// (closure) or the built-in saxpy kernel, with the submit options opts
// (nil: unsplit); mapped adds range mappers to the accessors.
func saxpyRun(t *testing.T, q *Queue, n int, closure bool, opts ...SubmitOption) []float32 {
	t.Helper()
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i)*0.37+0.25, float32(n-i)/3
	}
	x := must(NewBufferFrom(q, xs, R1(n), CopyData(), PageSize(64)))
	y := must(NewBufferFrom(q, ys, R1(n), CopyData(), PageSize(64)))
	var m []AccessOption
	if isSplit(opts) {
		m = append(m, Map(OneToOne()))
	}
	for _, a := range []float32{1.5, -0.25, 3} {
		if _, err := q.Submit(func(h *Handler) error {
			if closure {
				xa, ya := Read(h, x, m...), ReadWrite(h, y, m...)
				h.ParallelFor(R1(n), func(it Item) {
					i := it.ID(0)
					ya.Set(i, float32(a*xa.At(i))+ya.At(i))
				})
				return nil
			}
			h.Launch("saxpy", R1(n), Scalar(a), ReadRaw(h, x, m...), ReadWriteRaw(h, y, m...))
			return nil
		}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	return readAll(t, y)
}

// jacobiRun runs iters 5-point Jacobi sweeps over rows×cols (one row per
// page), as a Go closure or the built-in jacobi2d kernel.
func jacobiRun(t *testing.T, q *Queue, rows, cols, iters int, closure bool, opts ...SubmitOption) []float32 {
	t.Helper()
	in := make([]float32, rows*cols)
	for i := range in {
		in[i] = float32((i*7919)%1000) / 10
	}
	a := must(NewBufferFrom(q, in, R2(rows, cols), CopyData(), PageSize(1, cols)))
	b := must(NewBuffer[float32](q, R2(rows, cols), PageSize(1, cols)))
	var rd, wr []AccessOption
	wr = append(wr, NoInit)
	if isSplit(opts) {
		rd = append(rd, Map(Neighbourhood(1)))
		wr = append(wr, Map(OneToOne()))
	}
	for range iters {
		src, dst := a, b
		if _, err := q.Submit(func(h *Handler) error {
			if !closure {
				h.Launch("jacobi2d", R2(rows, cols), Read(h, src, rd...), Write(h, dst, wr...))
				return nil
			}
			ra, wb := Read(h, src, rd...), Write(h, dst, wr...)
			h.ParallelFor(R2(rows, cols), func(it Item) {
				i, j := it.ID(0), it.ID(1)
				if i == 0 || j == 0 || i == rows-1 || j == cols-1 {
					wb.Set2(i, j, ra.At2(i, j))
					return
				}
				s := ra.At2(i-1, j) + ra.At2(i+1, j)
				s += ra.At2(i, j-1)
				s += ra.At2(i, j+1)
				wb.Set2(i, j, 0.25*s)
			})
			return nil
		}, opts...); err != nil {
			t.Fatal(err)
		}
		a, b = b, a
	}
	return readAll(t, a)
}

// C4: a ParallelFor or Launch split across several CPU devices, in every
// form of SplitOpts, gives bit for bit the unsplit result, for saxpy
// (one-to-one) and a Jacobi stencil (neighbourhood halo).
func TestSplitEqualsUnsplitEmbedded_C4(t *testing.T) {
	registerBuiltins(t)
	q := newQueue(t, WithCPUDevices(3), WithWorkers(2))
	const n, rows, cols, iters = 3001, 37, 29, 4
	cpu := func(i int) DeviceID { return DeviceID{Kind: CPU, Index: i} }
	splits := map[string]SubmitOption{
		"all devices":            Split(),
		"two named":              Split(cpu(2), cpu(0)),
		"7 chunks":               SplitWith(SplitOpts{Chunks: 7}),
		"7 chunks interleave":    SplitWith(SplitOpts{Chunks: 7, Interleave: true}),
		"more chunks than items": SplitWith(SplitOpts{Chunks: 5000}),
		"along dimension 0":      SplitWith(SplitOpts{Along: SplitDim0, Chunks: 4}),
		"border chunks of 3":     SplitWith(SplitOpts{Borders: 3}),
	}
	for _, closure := range []bool{false, true} {
		wantS := saxpyRun(t, q, n, closure)
		wantJ := jacobiRun(t, q, rows, cols, iters, closure)
		for name, opt := range splits {
			if got := saxpyRun(t, q, n, closure, opt); !slices.Equal(got, wantS) {
				t.Errorf("closure=%v %s: split saxpy differs from unsplit", closure, name)
			}
			if got := jacobiRun(t, q, rows, cols, iters, closure, opt); !slices.Equal(got, wantJ) {
				t.Errorf("closure=%v %s: split Jacobi differs from unsplit", closure, name)
			}
		}
		// Splitting the columns of the stencil (the inner dimension).
		if got := jacobiRun(t, q, rows, cols, iters, closure, SplitWith(SplitOpts{Along: SplitDim1})); !slices.Equal(got, wantJ) {
			t.Errorf("closure=%v: Jacobi split along the columns differs from unsplit", closure)
		}
	}
	if err := q.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// C4: chunks go to their own devices: with three CPU devices the group
// runs as three groups, one per device (Event.Chunks), the command-group
// function runs once (the record is split, not the function re-run), and
// the kernel sees only its chunk's items, with global ids.
func TestSplitChunksRunOnTheirDevices_C4(t *testing.T) {
	q := newQueue(t, WithCPUDevices(3), WithWorkers(1))
	const n = 90
	b := must(NewBuffer[int32](q, R1(n), PageSize(10)))
	type span struct{ lo, hi int }
	var mu sync.Mutex
	var ran []span
	calls := 0
	ev, err := q.Submit(func(h *Handler) error {
		calls++
		w := Write(h, b, NoInit, Map(OneToOne()))
		h.ParallelForChunks(R1(n), func(lo, hi ID) {
			mu.Lock()
			ran = append(ran, span{lo[0], hi[0]})
			mu.Unlock()
			for i := lo[0]; i < hi[0]; i++ {
				w.Set(i, int32(i/30))
			}
		})
		return nil
	}, Split())
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("the command-group function ran %d times, want once", calls)
	}
	if ev.Status() != Complete || ev.Timing().Ended.IsZero() || ev.Timing().Started.IsZero() {
		t.Errorf("split event: status %v, timing %+v", ev.Status(), ev.Timing())
	}
	chunks := ev.Chunks()
	if len(chunks) != 3 {
		t.Fatalf("a 3-way split has %d chunk events", len(chunks))
	}
	for i, c := range chunks {
		if c.Status() != Complete || c.ID() == 0 || (i > 0 && c.ID() <= chunks[i-1].ID()) {
			t.Errorf("chunk %d: status %v, ID %d", i, c.Status(), c.ID())
		}
	}
	got := readAll(t, b)
	for i, v := range got {
		if want := int32(i / 30); v != want {
			t.Fatalf("element %d = %d, want %d: %v", i, v, want, got)
		}
	}
	slices.SortFunc(ran, func(a, b span) int { return a.lo - b.lo })
	next := 0
	for _, s := range ran {
		// WithWorkers(1): each device runs its chunk in one piece.
		if s.lo != next || s.hi <= s.lo || s.lo/30 != (s.hi-1)/30 {
			t.Fatalf("kernel ran items [%d, %d); want contiguous thirds: %v", s.lo, s.hi, ran)
		}
		next = s.hi
	}
	if next != n {
		t.Fatalf("kernel covered [0, %d), want [0, %d)", next, n)
	}
	if g := q.Stats().Groups; g < 3 {
		t.Errorf("a 3-way split made %d groups", g)
	}
}

// C4: split across a discrete device (a fake, not host-visible) and the
// CPU, every chunk's accessors bring only their own region to their device
// (the halo rows after the first sweep), and the result is the unsplit one.
func TestSplitAcrossDiscreteAndCPU_C4_T3(t *testing.T) {
	registerBuiltins(t)
	q, fake := gpuQueue(t)
	const rows, cols, iters = 40, 64, 6
	want := jacobiRun(t, newQueue(t), rows, cols, iters, false)
	before := fake.Stats()
	got := jacobiRun(t, q, rows, cols, iters, false, Split(fakeID, cpuID))
	if !slices.Equal(got, want) {
		t.Fatalf("Jacobi split over fake+cpu differs from unsplit")
	}
	st := fake.Stats()
	if l := st.Launches - before.Launches; l != iters {
		t.Errorf("the fake ran %d launches, want one per sweep (%d)", l, iters)
	}
	// The fake's chunk is the top 20 rows: the first sweep brings rows
	// 0..20 (neighbourhood); later sweeps move only halo rows each way,
	// and the final read brings its 20 rows back. A whole-buffer copy per
	// sweep would be iters*rows*cols*4 bytes.
	row := int64(cols * 4)
	if moved := st.CopyBytes - before.CopyBytes; moved > (21+2*iters+20+4)*row {
		t.Errorf("the fake moved %d bytes (%d rows); chunks should move their halos only", moved, moved/row)
	}
	if err := q.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// C4: a split ParallelForND keeps work-group and global ids: each chunk
// is whole work-groups with the unsplit numbering.
func TestSplitParallelForNDKeepsIDs_C4(t *testing.T) {
	q := newQueue(t, WithCPUDevices(3), WithWorkers(1))
	const n, l = 96, 8
	run := func(opts ...SubmitOption) []int32 {
		b := must(NewBuffer[int32](q, R1(n)))
		var m []AccessOption
		if len(opts) > 0 {
			m = append(m, Map(OneToOne()))
		}
		if _, err := q.Submit(func(h *Handler) error {
			w := Write(h, b, append([]AccessOption{NoInit}, m...)...)
			h.ParallelForND(R1(n), R1(l), func(g Group) {
				g.Items(func(it NDItem) {
					w.Set(it.GlobalID(0), int32(g.ID(0)*10000+it.LocalID(0)*100+g.Groups(0)))
				})
			})
			return nil
		}, opts...); err != nil {
			t.Fatal(err)
		}
		return readAll(t, b)
	}
	want := run()
	for _, o := range []SubmitOption{Split(), SplitWith(SplitOpts{Chunks: 5, Interleave: true})} {
		if got := run(o); !slices.Equal(got, want) {
			t.Errorf("split ParallelForND ids differ:\n got %v\nwant %v", got, want)
		}
	}
}

// C4: the event of a split group fails with the first failing chunk's
// error (in chunk order) once every chunk has finished; the other chunks'
// work is done, and Wait reports the failure too.
func TestSplitEventCarriesFirstError_C4(t *testing.T) {
	q := newQueue(t, WithCPUDevices(3), WithWorkers(1))
	const n = 30
	b := must(NewBuffer[int32](q, R1(n)))
	ev, err := q.Submit(func(h *Handler) error {
		w := Write(h, b, NoInit, Map(OneToOne()))
		h.ParallelFor(R1(n), func(it Item) {
			if it.ID(0) >= 10 && it.ID(0)%10 == 5 {
				panic("chunk " + string(rune('0'+it.ID(0)/10)))
			}
			w.Set(it.ID(0), 7)
		})
		return nil
	}, Split())
	if err != nil {
		t.Fatal(err)
	}
	err = ev.Wait(context.Background())
	if !errors.Is(err, ErrKernelPanic) || !strings.Contains(err.Error(), "chunk 1") || ev.Status() != Failed || ev.Err() != err {
		t.Fatalf("split event: %v (status %v), want chunk 1's panic", err, ev.Status())
	}
	if werr := q.Wait(context.Background()); !errors.Is(werr, ErrKernelPanic) {
		t.Errorf("Wait after a failed chunk: %v", werr)
	}
	if got := readAll(t, b); got[0] != 7 || got[9] != 7 {
		t.Errorf("chunk 0 did not run: %v", got[:10])
	}
}

// C4, D1: a split group's event reports what its chunks do: Deps are the
// earlier groups the chunks waited for (not the chunks themselves), Status
// is Submitted while every chunk waits, Running once one started, and
// Timing's Started is the first chunk's start.
func TestSplitEventStatusAndDeps_C4_D1(t *testing.T) {
	q := newQueue(t, WithCPUDevices(3), WithWorkers(1))
	const n = 30
	b := must(NewBuffer[int32](q, R1(n), PageSize(10)))
	release := make(chan struct{})
	writer := must(q.Submit(func(h *Handler) error {
		w := Write(h, b, NoInit)
		h.SingleTask(func() {
			<-release
			for i := range n {
				w.Set(i, int32(i))
			}
		})
		return nil
	}))
	inKernel, finish := make(chan struct{}, 3), make(chan struct{})
	out := must(NewBuffer[int32](q, R1(n), PageSize(10)))
	ev := must(q.Submit(func(h *Handler) error {
		r := Read(h, b, Map(OneToOne()))
		w := Write(h, out, NoInit, Map(OneToOne()))
		h.ParallelForChunks(R1(n), func(lo, hi ID) {
			inKernel <- struct{}{}
			<-finish
			for i := lo[0]; i < hi[0]; i++ {
				w.Set(i, 2*r.At(i))
			}
		})
		return nil
	}, Split()))
	if got, want := ev.Deps(), []uint64{writer.ID()}; !slices.Equal(got, want) {
		t.Errorf("split event Deps %v, want the writer's ID %v", got, want)
	}
	if st, tm := ev.Status(), ev.Timing(); st != Submitted || !tm.Started.IsZero() {
		t.Errorf("split event while its input is written: status %v, started %v; want Submitted, zero", st, tm.Started)
	}
	close(release)
	select {
	case <-inKernel:
	case <-time.After(10 * time.Second):
		t.Fatal("no chunk started within 10 s of its input being written")
	}
	if st, tm := ev.Status(), ev.Timing(); st != Running || tm.Started.IsZero() || !tm.Ended.IsZero() {
		t.Errorf("split event with a chunk in its kernel: status %v, timing %+v; want Running, started, not ended", st, tm)
	}
	close(finish)
	if err := ev.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := ev.Status(); st != Complete {
		t.Errorf("split event after Wait: status %v, want Complete", st)
	}
	chunks := ev.Chunks()
	if len(chunks) != 3 || chunks[0].ID() != ev.ID() {
		t.Fatalf("split event over 3 devices has %d chunk events (first %v, the group %d)", len(chunks), chunks, ev.ID())
	}
	for i, c := range chunks {
		if c.Status() != Complete || c.Timing().Started.Before(ev.Timing().Started) || c.Chunks() != nil {
			t.Errorf("chunk %d: status %v, started %v (the group at %v)", i, c.Status(), c.Timing().Started, ev.Timing().Started)
		}
		if i > 0 && c.ID() <= chunks[i-1].ID() {
			t.Errorf("chunk IDs %d, %d not in chunk order", chunks[i-1].ID(), c.ID())
		}
	}
	if writer.Chunks() != nil {
		t.Errorf("an unsplit group has chunk events")
	}
	for i, v := range readAll(t, out) {
		if v != int32(2*i) {
			t.Fatalf("out[%d] = %d, want %d", i, v, 2*i)
		}
	}
}

// submitCase is a Submit that must fail with want and a message holding msg
// (want nil: it must succeed).
type submitCase struct {
	name string
	cgf  func(h *Handler) error
	opts []SubmitOption
	want error
	msg  string
}

// C4: bad input is refused at Submit with ErrSplit (or ErrNoDevice) and a
// message that says what to do; nothing is submitted.
func TestSplitRefusesBadInput_C4(t *testing.T) {
	registerBuiltins(t)
	q := newQueue(t, WithCPUDevices(2))
	b := must(NewBuffer[float32](q, R1(64)))
	b2 := must(NewBuffer[float32](q, R2(8, 8)))
	pf := func(opts ...AccessOption) func(h *Handler) error {
		return func(h *Handler) error {
			w := Write(h, b, opts...)
			h.ParallelFor(R1(64), func(it Item) { w.Set(it.ID(0), 1) })
			return nil
		}
	}
	one := Map(OneToOne())
	for _, tc := range []submitCase{
		{"mapper on an unsplit group", pf(one), nil, ErrSplit, "not split; submit it with acpp.Split"},
		{"no mapper", pf(), []SubmitOption{Split()}, ErrSplit, "without a range mapper"},
		{"negative chunk count", pf(one), []SubmitOption{SplitWith(SplitOpts{Chunks: -1})}, ErrSplit, "Chunks is -1; it must be >= 1"},
		{"borders with many chunks", pf(one), []SubmitOption{SplitWith(SplitOpts{Borders: 1, Chunks: 7})}, ErrSplit, "whole blocks per device"},
		{"borders with interleave", pf(one), []SubmitOption{SplitWith(SplitOpts{Borders: 1, Interleave: true})}, ErrSplit, "whole blocks per device (Chunks 0 or a multiple of the devices, and no Interleave), but Interleave"},
		{"borders with 3 chunks on 2 devices", pf(one), []SubmitOption{SplitWith(SplitOpts{Borders: 1, Chunks: 3})}, ErrSplit, "Chunks is 3, not a multiple of the 2 devices"},
		{"negative borders", pf(one), []SubmitOption{SplitWith(SplitOpts{Borders: -1})}, ErrSplit, "Borders -1 is negative"},
		{"empty range", func(h *Handler) error { h.ParallelFor(R1(0), func(Item) {}); return nil }, []SubmitOption{Split()}, ErrSplit, "is empty"},
		{"unknown device", pf(one), []SubmitOption{Split(DeviceID{Kind: CPU, Index: 7})}, ErrNoDevice, "cpu:7"},
		{"single task", func(h *Handler) error { h.SingleTask(func() {}); return nil }, []SubmitOption{Split()}, ErrSplit, "only ParallelFor"},
		{"fill", func(h *Handler) error { Fill(h, Write(h, b, one), 1); return nil }, []SubmitOption{Split()}, ErrSplit, "declares fill"},
		{"ranged accessor", func(h *Handler) error {
			w := WriteRange(h, b, R1(8), I1(0), one)
			h.ParallelFor(R1(8), func(it Item) { w.Set(it.ID(0), 1) })
			return nil
		}, []SubmitOption{Split()}, ErrSplit, "without a range or Within"},
		{"within", func(h *Handler) error {
			w := WriteRaw(h, b, Within(I1(0), R1(8)), one)
			h.ParallelFor(R1(8), func(it Item) { w.Set(it.ID(0), 1) })
			return nil
		}, []SubmitOption{Split()}, ErrSplit, "without a range or Within"},
		{"one-to-one across dimensions", func(h *Handler) error {
			w := Write(h, b2, one)
			h.ParallelFor(R1(64), func(it Item) { w.Set(it.ID(0), 1) })
			return nil
		}, []SubmitOption{Split()}, ErrSplit, "1-dimensional kernel range onto a 2-dimensional buffer"},
		{"neighbourhood extents", pf(Map(Neighbourhood(1, 1))), []SubmitOption{Split()}, ErrSplit, "2 extents for a 1-dimensional buffer"},
		{"neighbourhood none", pf(Map(Neighbourhood())), []SubmitOption{Split()}, ErrSplit, "1 to 3 extents"},
		{"custom mapper, wrong dimensions", pf(Map(MapFunc(func(c Chunk, _ Range) (ID, Range) { return ID{}, R2(1, 1) }))), []SubmitOption{Split()}, ErrSplit, "without the buffer's 1 dimensions"},
		{"along beyond the range", pf(one), []SubmitOption{SplitWith(SplitOpts{Along: SplitDim1})}, ErrSplit, "dimension 1 of a 1-dimensional range"},
		{"split and On", pf(one), []SubmitOption{Split(), On(cpuID)}, ErrSplit, "On and Split both choose devices"},
		{"cluster devices", pf(one), []SubmitOption{SplitWith(SplitOpts{ClusterDevices: []string{"n0/cpu:0"}})}, ErrSplit, "cluster queue"},
		{"a valid ND split (control)", func(h *Handler) error {
			w := Write(h, b, one)
			h.ParallelForND(R1(64), R1(16), func(g Group) { g.Items(func(it NDItem) { w.Set(it.GlobalID(0), 1) }) })
			return nil
		}, []SubmitOption{SplitWith(SplitOpts{Chunks: 2})}, nil, ""},
		{"launch twice", func(h *Handler) error {
			h.Launch("fill_f32", R1(64), Write(h, b, one), Scalar(float32(1)))
			h.Launch("fill_f32", R1(64), Write(h, b, one), Scalar(float32(1)))
			return nil
		}, []SubmitOption{Split()}, ErrNoKernel, "after launch fill_f32"},
	} {
		if err := q.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		before := q.Stats().Groups
		_, err := q.Submit(tc.cgf, tc.opts...)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: Submit = %v, want %v with %q", tc.name, err, tc.want, tc.msg)
		}
		if err := q.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if after := q.Stats().Groups; after != before {
			t.Errorf("%s: a refused split submitted %d groups", tc.name, after-before)
		}
	}
}

// C4: custom, fixed and all mappers on an embedded split: a row-sum that
// reads a whole table (All), a fixed coefficient row (Fixed) and writes
// through a custom mapper equals the unsplit result.
func TestSplitMappers_C4(t *testing.T) {
	q := newQueue(t, WithCPUDevices(3), WithWorkers(1))
	const rows, cols = 12, 10
	tab := make([]float32, rows*cols)
	for i := range tab {
		tab[i] = float32(i%17) * 0.5
	}
	run := func(opts ...SubmitOption) []float32 {
		t0 := must(NewBufferFrom(q, slices.Clone(tab), R2(rows, cols), CopyData(), PageSize(1, cols)))
		out := must(NewBuffer[float32](q, R2(rows, 2), PageSize(1, 2)))
		var all, fix, own []AccessOption
		if len(opts) > 0 {
			all = append(all, Map(All()))
			fix = append(fix, Map(Fixed(I2(3, 0), R2(1, cols))))
			own = append(own, Map(MapFunc(func(c Chunk, buf Range) (ID, Range) {
				// rows of the chunk, both columns of out
				return I2(c.Offset[0], 0), R2(c.Range.Size(0), buf.Size(1))
			})))
		}
		if _, err := q.Submit(func(h *Handler) error {
			a, f, o := Read(h, t0, all...), Read(h, t0, fix...), Write(h, out, append(own, NoInit)...)
			h.ParallelFor(R1(rows), func(it Item) {
				i := it.ID(0)
				var s, d float32
				for j := range cols {
					s += a.At2(i, j)
					d += f.At2(3, j) * a.At2(rows-1-i, j)
				}
				o.Set2(i, 0, s)
				o.Set2(i, 1, d)
			})
			return nil
		}, opts...); err != nil {
			t.Fatal(err)
		}
		return readAll(t, out)
	}
	want := run()
	if got := run(Split()); !slices.Equal(got, want) {
		t.Errorf("split with All/Fixed/MapFunc mappers differs:\n got %v\nwant %v", got, want)
	}
}

func ExampleSplit() {
	q, err := NewQueue(context.Background(), WithCPUDevices(2))
	if err != nil {
		panic(err)
	}
	defer q.Close()
	const n = 8
	in := must(NewBufferFrom(q, []float32{1, 2, 3, 4, 5, 6, 7, 8}, R1(n), CopyData()))
	out := must(NewBuffer[float32](q, R1(n)))
	// Each chunk reads its own items and one neighbour on each side, and
	// writes its own items; item ids stay global.
	_, err = q.Submit(func(h *Handler) error {
		src := Read(h, in, Map(Neighbourhood(1)))
		dst := Write(h, out, NoInit, Map(OneToOne()))
		h.ParallelFor(R1(n), func(it Item) {
			i := it.ID(0)
			l, r := src.At(max(i-1, 0)), src.At(min(i+1, n-1))
			dst.Set(i, (l+src.At(i)+r)/3)
		})
		return nil
	}, Split())
	if err != nil {
		panic(err)
	}
	got, _ := out.Read(context.Background())
	fmt.Println(got)
	// Output: [1.3333334 2 3 4 5 6 7 7.6666665]
}

// BenchmarkSplitSubmit is the cost of a split against an unsplit group:
// submit and wait for a small saxpy closure over three CPU devices.
func BenchmarkSplitSubmit(b *testing.B) {
	q := newQueue(b, WithCPUDevices(3), WithWorkers(1))
	const n = 3 * 1024
	x := must(NewBuffer[float32](q, R1(n), PageSize(256)))
	y := must(NewBuffer[float32](q, R1(n), PageSize(256)))
	for _, tc := range []struct {
		name string
		opts []SubmitOption
	}{{"unsplit", nil}, {"split3", []SubmitOption{Split()}}} {
		b.Run(tc.name, func(b *testing.B) {
			var m []AccessOption
			if tc.opts != nil {
				m = append(m, Map(OneToOne()))
			}
			b.ReportAllocs()
			for b.Loop() {
				ev, err := q.Submit(func(h *Handler) error {
					xa, ya := Read(h, x, m...), ReadWrite(h, y, m...)
					h.ParallelForChunks(R1(n), func(lo, hi ID) {
						for i := lo[0]; i < hi[0]; i++ {
							ya.Set(i, 2*xa.At(i)+ya.At(i))
						}
					})
					return nil
				}, tc.opts...)
				if err != nil {
					b.Fatal(err)
				}
				if err := ev.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// C4, P5: mapped accessors of reshaped views split like those of buffers:
// saxpy through 1D raw views of 2D buffers, split across a discrete
// device and the CPU, equals the unsplit result; each chunk's region is
// the bounding pages of its part of the view.
func TestSplitViews_C4_P5(t *testing.T) {
	registerBuiltins(t)
	q, _ := gpuQueue(t)
	const rows, cols = 12, 50
	run := func(opts ...SubmitOption) []float32 {
		xs, ys := make([]float32, rows*cols), make([]float32, rows*cols)
		for i := range xs {
			xs[i], ys[i] = float32(i)*0.3, float32(i%11)
		}
		x := must(NewBufferFrom(q, xs, R2(rows, cols), CopyData(), PageSize(1, cols)))
		y := must(NewBufferFrom(q, ys, R2(rows, cols), CopyData(), PageSize(1, cols)))
		xv, yv := must(x.Reshape(R1(rows*cols))), must(y.Reshape(R1(rows*cols)))
		var m []AccessOption
		if isSplit(opts) {
			m = append(m, Map(OneToOne()))
		}
		for _, a := range []float32{2, -0.5} {
			if _, err := q.Submit(func(h *Handler) error {
				h.Launch("saxpy", R1(rows*cols), Scalar(a), ReadRaw(h, xv, m...), ReadWriteRaw(h, yv, m...))
				return nil
			}, opts...); err != nil {
				t.Fatal(err)
			}
		}
		return readAll(t, y)
	}
	want := run(On(cpuID))
	for _, o := range []SubmitOption{Split(fakeID, cpuID), SplitWith(SplitOpts{Devices: []DeviceID{cpuID, fakeID}, Chunks: 7})} {
		if got := run(o); !slices.Equal(got, want) {
			t.Errorf("split saxpy through views differs from unsplit")
		}
	}
}

// C4: a split Go closure runs only on devices that share the memory its
// accessors index (the recorded device's): a device with memory of its own
// (a discrete fake that runs Go) gets no chunk of it, and naming one is
// refused; the result is right either way (review of 2026-11-25: the fake
// chunk wrote the host memory and its stale copy overwrote it).
func TestSplitClosureOnlyOnSharedMemory_C4(t *testing.T) {
	f := devicetest.NewFake(devicetest.FakeConfig{})
	t.Cleanup(func() { f.Close() })
	q := newQueue(t, WithDevices(f))
	const n = 64
	b := must(NewBuffer[int32](q, R1(n)))
	ev, err := q.Submit(func(h *Handler) error {
		w := Write(h, b, NoInit, Map(OneToOne()))
		h.ParallelFor(R1(n), func(it Item) { w.Set(it.ID(0), int32(it.ID(0)+1)) })
		return nil
	}, Split())
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ev.Device(), "fake") {
		t.Errorf("a chunk of the closure ran on %s", ev.Device())
	}
	for i, v := range readAll(t, b) {
		if v != int32(i+1) {
			t.Fatalf("element %d = %d, want %d", i, v, i+1)
		}
	}
	_, err = q.Submit(func(h *Handler) error {
		w := Write(h, b, Map(OneToOne()))
		h.ParallelFor(R1(n), func(it Item) { w.Set(it.ID(0), 0) })
		return nil
	}, Split(cpuID, fakeID))
	if !errors.Is(err, ErrSplit) || !strings.Contains(err.Error(), "memory of its own") {
		t.Fatalf("a closure split naming a device with its own memory: %v, want ErrSplit", err)
	}
}
