package acpp

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator/coordtest"
)

// deviceOnly makes a 1D float32 buffer of n elements whose element i is
// i+0.5 and whose only valid copy is on the fake device (a discrete GPU
// stand-in): written on the host, then updated there.
func deviceOnly(t *testing.T, q *Queue, n int, opts ...BufferOption) *Buffer[float32] {
	t.Helper()
	ctx := context.Background()
	b := must(NewBuffer[float32](q, R1(n), opts...))
	init := make([]float32, n)
	for i := range init {
		init[i] = float32(i)
	}
	if err := b.Write(ctx, init); err != nil {
		t.Fatal(err)
	}
	if err := add(t, q, b, 0.5, fakeID, false).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// A ranged host read of 1 MiB of a 4 MiB buffer that is valid only on a
// device moves only that 1 MiB (the pages of the range, T3) and holds
// exactly the range's elements; the rest moves only when asked for.
func TestHostReadWithinMovesOnlyItsPages_T3(t *testing.T) {
	ctx := context.Background()
	q, f := gpuQueue(t)
	const n = 1 << 20 // 4 MiB of float32, 64 KiB pages
	const off, cnt = 1 << 18, 1 << 18
	b := deviceOnly(t, q, n)

	before, fb := q.Stats(), f.Stats().CopyBytes
	ha, err := HostRead(ctx, b, Within(I1(off), R1(cnt)))
	if err != nil {
		t.Fatal(err)
	}
	moved, fmoved := q.Stats().BytesDeviceToHost-before.BytesDeviceToHost, f.Stats().CopyBytes-fb
	if moved != 4*cnt || fmoved != 4*cnt {
		t.Errorf("ranged host read of %d bytes moved %d bytes (device counted %d), want only the range's pages", 4*cnt, moved, fmoved)
	}
	if ha.Range() != R1(cnt) || ha.Offset() != I1(off) {
		t.Errorf("Range, Offset = %v, %v, want %v, %v", ha.Range(), ha.Offset(), R1(cnt), I1(off))
	}
	got := ha.Copy()
	if len(got) != cnt {
		t.Fatalf("Copy has %d elements, want the range's %d", len(got), cnt)
	}
	for i, v := range got {
		if want := float32(off+i) + 0.5; v != want {
			t.Fatalf("element %d of the range = %v, want %v", i, v, want)
		}
	}
	if ha.At(0) != float32(off)+0.5 || ha.At(cnt-1) != float32(off+cnt-1)+0.5 {
		t.Errorf("At(0), At(%d) = %v, %v: not relative to the offset", cnt-1, ha.At(0), ha.At(cnt-1))
	}
	k := 0
	for i, v := range ha.All() {
		if i != k || v != got[i] {
			t.Fatalf("All yields (%d, %v) at step %d, want (%d, %v)", i, v, k, k, got[k])
		}
		k++
	}
	if k != cnt {
		t.Errorf("All yielded %d elements, want %d", k, cnt)
	}
	mustPanic(t, "At past the range", func() { ha.At(cnt) })
	ha.Close()

	// Buffer.Read of a range does the same, and a read of the whole buffer
	// then moves only the pages not on the host yet.
	before = q.Stats()
	part := must(b.Read(ctx, Within(I1(3*off), R1(cnt))))
	if d := q.Stats().BytesDeviceToHost - before.BytesDeviceToHost; d != 4*cnt || len(part) != cnt || part[0] != float32(3*off)+0.5 {
		t.Errorf("ranged Buffer.Read: moved %d bytes, %d elements starting %v; want %d bytes, %d elements starting %v", d, len(part), part[0], 4*cnt, cnt, float32(3*off)+0.5)
	}
	before = q.Stats()
	all := must(b.Read(ctx))
	if d := q.Stats().BytesDeviceToHost - before.BytesDeviceToHost; d != 4*(n-2*cnt) || len(all) != n {
		t.Errorf("whole read after two ranged ones moved %d bytes, want %d (the rest)", d, 4*(n-2*cnt))
	}
}

// Ranged host access of a 2D buffer: indices relative to the offset, the
// region row-major, and only the region's pages move; a write through a
// ranged HostAccess or Buffer.Write changes only the region.
func TestHostAccessWithin2D_T3(t *testing.T) {
	ctx := context.Background()
	q, _ := gpuQueue(t)
	const rows, cols = 16, 64
	b := must(NewBuffer[float32](q, R2(rows, cols), PageSize(1, 16))) // 4 pages per row
	init := make([]float32, rows*cols)
	for i := range init {
		init[i] = float32(i)
	}
	if err := b.Write(ctx, init); err != nil {
		t.Fatal(err)
	}
	add(t, q, b, 0.5, fakeID, false)

	// Rows 2–5, columns 16–47: 4 rows × 2 pages of 16 elements.
	before := q.Stats()
	ha := must(HostRead(ctx, b, Within(I2(2, 16), R2(4, 32))))
	if d := q.Stats().BytesDeviceToHost - before.BytesDeviceToHost; d != 4*4*32 {
		t.Errorf("2D ranged read moved %d bytes, want %d", d, 4*4*32)
	}
	var want []float32
	for i := 2; i < 6; i++ {
		for j := 16; j < 48; j++ {
			want = append(want, float32(i*cols+j)+0.5)
		}
	}
	if got := ha.Copy(); !slices.Equal(got, want) {
		t.Errorf("Copy of the 2D region = %v, want %v", got, want)
	}
	if got := slices.Collect(ha.Values()); !slices.Equal(got, want) {
		t.Errorf("Values of the 2D region differ from its elements")
	}
	if ha.At2(1, 3) != float32(3*cols+19)+0.5 || ha.At(33) != want[33] {
		t.Errorf("At2(1, 3), At(33) = %v, %v, want %v, %v", ha.At2(1, 3), ha.At(33), float32(3*cols+19)+0.5, want[33])
	}
	small := make([]float32, 5)
	if n := ha.CopyTo(small); n != 5 || !slices.Equal(small, want[:5]) {
		t.Errorf("CopyTo of 5 = %d, %v", n, small)
	}
	mustPanic(t, "At2 outside the region", func() { ha.At2(0, 32) })
	ha.Close()

	// A ranged read-write host access writes only its region.
	hw := must(HostAccess(ctx, b, ModeReadWrite, Within(I2(1, 0), R2(1, 16))))
	hw.Set(3, -1)
	hw.Set2(0, 4, -2)
	s := hw.Slice() // one row, one page: contiguous
	if len(s) != 16 || s[3] != -1 {
		t.Errorf("Slice of a one-row region = %d elements, s[3] = %v", len(s), s[3])
	}
	hw.Close()
	// Buffer.Write of a region replaces just it.
	if err := b.Write(ctx, []float32{7, 8, 9}, Within(I2(15, 61), R2(1, 3))); err != nil {
		t.Fatal(err)
	}
	got := must(b.Read(ctx))
	for i := range init {
		w := init[i] + 0.5
		switch i {
		case cols + 3:
			w = -1
		case cols + 4:
			w = -2
		case 15*cols + 61, 15*cols + 62, 15*cols + 63:
			w = float32(i-(15*cols+61)) + 7
		}
		if got[i] != w {
			t.Fatalf("element %d = %v, want %v", i, got[i], w)
		}
	}
	// A region that is not contiguous has no single slice.
	hw = must(HostAccess(ctx, b, ModeReadWrite, Within(I2(0, 0), R2(2, 16))))
	mustPanic(t, "Slice of a region of two partial rows", func() { hw.Slice() })
	if n := hw.CopyFrom(make([]float32, 40)); n != 32 {
		t.Errorf("CopyFrom of 40 into a region of 32 copied %d", n)
	}
	hw.Close()
}

// An option that cannot apply to a host access is an error, never ignored.
func TestHostAccessRefusesOptionsThatCannotApply_T3(t *testing.T) {
	ctx := context.Background()
	q := newQueue(t)
	b := must(NewBuffer[float32](q, R2(8, 8)))
	for _, tc := range []struct {
		name string
		run  func() error
		want error
		text string
	}{
		{"Within past the end", func() error { _, err := HostRead(ctx, b, Within(I2(4, 0), R2(8, 8))); return err }, ErrBadRange, "leaves the buffer"},
		{"Within negative offset", func() error { _, err := HostRead(ctx, b, Within(I2(-1, 0), R2(1, 8))); return err }, ErrBadRange, "leaves the buffer"},
		{"Within of other dimensions", func() error { _, err := HostRead(ctx, b, Within(I1(0), R1(8))); return err }, ErrBadRange, "dimensions"},
		{"NoInit read", func() error { _, err := HostRead(ctx, b, NoInit); return err }, ErrMode, "NoInit"},
		{"Map on a host access", func() error { _, err := HostRead(ctx, b, Map(OneToOne())); return err }, ErrSplit, "Within"},
		{"HostAccess with no mode", func() error { _, err := HostAccess(ctx, b, 0); return err }, ErrMode, "ModeWrite"},
		{"Within past the end, writable", func() error {
			_, err := HostAccess(ctx, b, ModeWrite, Within(I2(0, 4), R2(1, 8)))
			return err
		}, ErrBadRange, "leaves the buffer"},
		{"Buffer.Read NoInit", func() error { _, err := b.Read(ctx, NoInit); return err }, ErrMode, "NoInit"},
		{"Buffer.Read Within past the end", func() error { _, err := b.Read(ctx, Within(I2(0, 0), R2(9, 1))); return err }, ErrBadRange, "leaves the buffer"},
		{"Buffer.Write of the wrong length for the region", func() error {
			return b.Write(ctx, make([]float32, 64), Within(I2(0, 0), R2(2, 8)))
		}, ErrBadRange, "region of 16"},
	} {
		err := tc.run()
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: error %v, want %v saying %q", tc.name, err, tc.want, tc.text)
		}
	}
	waitAll(t, q)
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

// On a cluster queue a ranged host read brings back only the range's pages
// from the node that holds them (T3), a ranged write sends back only its
// region, and a region of a view of another shape reads its pages' element
// box.
func TestClusterHostAccessWithin_T3(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	ctx := testCtx(t)
	const n = 1 << 20 // 4 MiB of float32
	const off, cnt = 1 << 18, 1 << 18
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i), 0.5
	}
	x := must(NewBufferFrom(q, xs, R1(n), CopyData()))
	y := must(NewBufferFrom(q, ys, R1(n), CopyData()))
	saxpy := func() { // y += x on n0: the client's copy of y is then stale
		t.Helper()
		ev, err := q.Submit(func(h *Handler) error {
			h.Launch("saxpy", R1(n), Scalar(float32(1)), ReadRaw(h, x), ReadWriteRaw(h, y))
			return nil
		}, OnNode("n0", DeviceID{Kind: CPU}))
		if err != nil {
			t.Fatal(err)
		}
		if err := ev.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The bytes n0 read back to the client since before. A host read's
	// transfers are counted when the nodes report its read-backs done, at
	// once, which may be just after the read returned: wait for them.
	readBack := func(before int64) int64 {
		t.Helper()
		for {
			if d := q.Stats().Link("n0", "client").Bytes - before; d != 0 {
				return d
			}
			select {
			case <-ctx.Done():
				t.Fatal("the read-backs of a host read were never counted")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	saxpy()

	before := q.Stats().Link("n0", "client").Bytes
	ha, err := HostRead(ctx, y, Within(I1(off), R1(cnt)))
	if err != nil {
		t.Fatal(err)
	}
	if d := readBack(before); d != 4*cnt {
		t.Errorf("ranged host read of %d bytes read back %d bytes", 4*cnt, d)
	}
	got := ha.Copy()
	ha.Close()
	if len(got) != cnt {
		t.Fatalf("Copy has %d elements, want the range's %d", len(got), cnt)
	}
	for i, v := range got {
		if want := float32(off+i) + 0.5; v != want {
			t.Fatalf("element %d of the range = %v, want %v", i, v, want)
		}
	}
	before = q.Stats().Link("n0", "client").Bytes
	part := must(y.Read(ctx, Within(I1(3*off), R1(cnt))))
	if d := readBack(before); d != 4*cnt || len(part) != cnt || part[cnt-1] != float32(3*off+cnt-1)+0.5 {
		t.Errorf("ranged Buffer.Read read back %d bytes, %d elements; want %d bytes, %d elements", d, len(part), 4*cnt, cnt)
	}
	if _, err := HostRead(ctx, y, Within(I1(n-1), R1(2))); !errors.Is(err, ErrBadRange) {
		t.Errorf("HostRead Within past the end = %v, want ErrBadRange", err)
	}

	// A region of a 2D view (another shape than the buffer's) reads the
	// element box of its pages.
	saxpy()
	v := must(y.Reshape(R2(1024, 1024)))
	before = q.Stats().Link("n0", "client").Bytes
	vr := must(HostRead(ctx, v, Within(I2(512, 0), R2(256, 1024))))
	if d := readBack(before); d != 4*cnt {
		t.Errorf("ranged host read of a view read back %d bytes, want %d", d, 4*cnt)
	}
	if vr.At2(0, 0) != float32(2*off)*2+0.5 || vr.At2(255, 1023) != float32(3*off-1)*2+0.5 {
		t.Errorf("view region: At2(0, 0), At2(255, 1023) = %v, %v", vr.At2(0, 0), vr.At2(255, 1023))
	}
	vr.Close()

	// Ranged writes change only their region.
	hw := must(HostAccess(ctx, y, ModeReadWrite, Within(I1(10), R1(4))))
	hw.Set(0, -1)
	hw.Set(3, -4)
	hw.Close()
	if err := y.Write(ctx, []float32{-7}, Within(I1(n-1), R1(1))); err != nil {
		t.Fatal(err)
	}
	vw := must(HostAccess(ctx, v, ModeWrite, Within(I2(1, 1), R2(1, 2))))
	vw.Set2(0, 1, -9) // element 1024+2 of the buffer
	vw.Close()
	all := must(y.Read(ctx))
	for i, v := range all {
		want := float32(i)*2 + 0.5
		switch i {
		case 10:
			want = -1
		case 13:
			want = -4
		case 1026:
			want = -9
		case n - 1:
			want = -7
		}
		if v != want {
			t.Fatalf("element %d = %v, want %v", i, v, want)
		}
	}
}

// writeLog records each Write: its length and whether it failed.
type writeLog struct {
	data  []byte
	calls []int
	fail  int // fail the call with this index (1-based); 0 never
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.calls = append(w.calls, len(p))
	if len(w.calls) == w.fail {
		return len(p) / 2, errors.New("disk full")
	}
	w.data = append(w.data, p...)
	return len(p), nil
}

// WriteTo writes a region's bytes as Copy holds its elements, straight from
// the host copy: a contiguous region (whole buffer, whole rows) in one
// Write, other regions run by run; a writer's error stops it and the count
// says what went out.
func TestHostWriteTo(t *testing.T) {
	ctx := context.Background()
	q, _ := gpuQueue(t)
	b := must(NewBuffer[float32](q, R3(4, 6, 8), PageSize(1, 1, 8)))
	init := make([]float32, 4*6*8)
	for i := range init {
		init[i] = float32(i)
	}
	if err := b.Write(ctx, init); err != nil {
		t.Fatal(err)
	}
	add(t, q, b, 0.5, fakeID, false) // valid only on the device: the read brings it back
	for _, tc := range []struct {
		name   string
		opts   []AccessOption
		writes int
	}{
		{"whole buffer", nil, 1},
		{"whole planes", []AccessOption{Within(I3(1, 0, 0), R3(2, 6, 8))}, 1},
		{"whole rows of one plane", []AccessOption{Within(I3(2, 1, 0), R3(1, 3, 8))}, 1},
		{"whole rows of two planes", []AccessOption{Within(I3(1, 1, 0), R3(2, 3, 8))}, 2},
		{"part rows", []AccessOption{Within(I3(1, 1, 2), R3(2, 3, 4))}, 6},
		{"empty", []AccessOption{Within(I3(1, 1, 2), R3(0, 3, 4))}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ha := must(HostRead(ctx, b, tc.opts...))
			defer ha.Close()
			var w writeLog
			n, err := ha.WriteTo(&w)
			want := bytesOf(ha.Copy())
			if err != nil || n != int64(len(want)) || !slices.Equal(w.data, want) {
				t.Fatalf("WriteTo = %d, %v and %d bytes equal %v; want %d, nil and the bytes of Copy", n, err, len(w.data), slices.Equal(w.data, want), len(want))
			}
			if len(w.calls) != tc.writes {
				t.Errorf("WriteTo made %d writes %v, want %d", len(w.calls), w.calls, tc.writes)
			}
		})
	}
	ha := must(HostRead(ctx, b, Within(I3(1, 1, 2), R3(2, 3, 4))))
	defer ha.Close()
	w := writeLog{fail: 2}
	if n, err := ha.WriteTo(&w); err == nil || n != 16+8 || len(w.calls) != 2 {
		t.Errorf("WriteTo into a writer failing its second call = %d, %v after %d calls; want 24 bytes, the error, 2 calls", n, err, len(w.calls))
	}
}
