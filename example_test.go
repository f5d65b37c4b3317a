package acpp_test

import (
	"context"
	"fmt"

	"github.com/acpp/acpp"
)

// A saxpy over two slices used in place: the CPU works in the slices
// themselves (linked allocations), and Close writes back (a no-op here).
func ExampleQueue_Submit() {
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx)
	if err != nil {
		panic(err)
	}
	defer q.Close()
	xs := []float32{1, 2, 3, 4}
	ys := []float32{10, 20, 30, 40}
	x, _ := acpp.NewBufferFrom(q, xs, acpp.R1(4))
	y, _ := acpp.NewBufferFrom(q, ys, acpp.R1(4))
	ev, err := q.Submit(func(h *acpp.Handler) error {
		xa := acpp.Read(h, x)
		ya := acpp.ReadWrite(h, y)
		h.ParallelFor(acpp.R1(4), func(it acpp.Item) {
			i := it.ID(0)
			ya.Set(i, 2*xa.At(i)+ya.At(i))
		})
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := ev.Wait(ctx); err != nil {
		panic(err)
	}
	y.Close()
	fmt.Println(ys, q.Stats().BytesCopied)
	// Output: [12 24 36 48] 0
}

// Ranged accessors split a buffer between command groups that run in
// parallel, without subbuffers.
func ExampleWriteRange() {
	ctx := context.Background()
	q, _ := acpp.NewQueue(ctx)
	defer q.Close()
	b, _ := acpp.NewBuffer[int](q, acpp.R1(8), acpp.PageSize(4))
	for half := range 2 {
		q.Submit(func(h *acpp.Handler) error {
			a := acpp.WriteRange(h, b, acpp.R1(4), acpp.I1(4*half), acpp.NoInit)
			h.ParallelFor(acpp.R1(4), func(it acpp.Item) { a.Set(it.ID(0), 10*half+it.ID(0)) })
			return nil
		})
	}
	v, _ := b.Read(ctx)
	fmt.Println(v)
	// Output: [0 1 2 3 10 11 12 13]
}

// A work-group reduction with local memory and barriers (hierarchical
// form: returning from Items is the barrier).
func ExampleHandler_ParallelForND() {
	ctx := context.Background()
	q, _ := acpp.NewQueue(ctx)
	defer q.Close()
	data := make([]int, 16)
	for i := range data {
		data[i] = i
	}
	in, _ := acpp.NewBufferFrom(q, data, acpp.R1(16))
	sums, _ := acpp.NewBuffer[int](q, acpp.R1(4))
	q.Submit(func(h *acpp.Handler) error {
		x := acpp.Read(h, in)
		s := acpp.Write(h, sums, acpp.NoInit)
		loc := acpp.LocalAccessor[int](h, 4)
		h.ParallelForND(acpp.R1(16), acpp.R1(4), func(g acpp.Group) {
			l := loc.Slice(g)
			g.Items(func(it acpp.NDItem) { l[it.LocalID(0)] = x.At(it.GlobalID(0)) })
			s.Set(g.ID(0), l[0]+l[1]+l[2]+l[3])
		})
		return nil
	})
	v, _ := sums.Read(ctx)
	fmt.Println(v)
	// Output: [6 22 38 54]
}

// A host accessor blocks until the data is up to date on the host, and
// holds off conflicting command groups until it is closed.
func ExampleHostAccess() {
	ctx := context.Background()
	q, _ := acpp.NewQueue(ctx)
	defer q.Close()
	b, _ := acpp.NewBuffer[float64](q, acpp.R2(2, 3))
	q.Submit(func(h *acpp.Handler) error {
		acpp.Fill(h, acpp.Write(h, b, acpp.NoInit), 0.5)
		return nil
	})
	ha, err := acpp.HostAccess(ctx, b, acpp.ModeReadWrite)
	if err != nil {
		panic(err)
	}
	ha.Set2(1, 2, ha.At2(1, 2)+1)
	ha.Close()
	v, _ := b.Read(ctx)
	fmt.Println(v)
	// Output: [0.5 0.5 0.5 0.5 0.5 1.5]
}

// A read host accessor cannot write; with Within it brings only a region's
// pages to the host and holds just that region, indexed from its offset.
func ExampleHostRead() {
	ctx := context.Background()
	q, _ := acpp.NewQueue(ctx)
	defer q.Close()
	b, _ := acpp.NewBufferFrom(q, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, acpp.R2(3, 4))
	ha, err := acpp.HostRead(ctx, b, acpp.Within(acpp.I2(1, 1), acpp.R2(2, 2)))
	if err != nil {
		panic(err)
	}
	fmt.Println(ha.At2(0, 0), ha.Copy())
	ha.Close()
	// Output: 5 [5 6 9 10]
}

// USM allocations, ordered by events.
func ExampleMalloc() {
	ctx := context.Background()
	q, _ := acpp.NewQueue(ctx)
	defer q.Close()
	src, _ := acpp.Malloc[int32](q, 4, acpp.USMDevice)
	dst, _ := acpp.Malloc[int32](q, 4, acpp.USMHost)
	e1, _ := acpp.FillUSM(q, src, 7, 4)
	e2, _ := acpp.Memcpy(q, dst, src, 4, acpp.After(e1))
	e2.Wait(ctx)
	s, _ := dst.Host()
	fmt.Println(s)
	acpp.Free(q, src)
	acpp.Free(q, dst)
	// Output: [7 7 7 7]
}
