package acpp

import (
	"slices"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator/coordtest"
)

// Each event reports the copies its group ran, per pair of memories, and
// the queue counts them by link (issue 14, item 7). Only outdated pages
// move (T3): the figures are the pages, not the buffer.
func TestEventAndLinkTransfers_T3(t *testing.T) {
	q, _ := gpuQueue(t)
	data := make([]float32, 4096)
	b := must(NewBufferFrom(q, data, R1(4096), PageSize(1024)))

	first := add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	want := []Transfer{{From: "host", To: "fake:0", Copies: 1, Bytes: 4096 * 4}}
	if got := first.Transfers(); !slices.Equal(got, want) {
		t.Fatalf("first use on the device: Transfers() = %+v, want %+v", got, want)
	}
	// Up to date there now: the next group on the device moves nothing.
	if got := add(t, q, b, 1, fakeID, false).Transfers(); len(got) != 0 {
		t.Fatalf("second use on the device: Transfers() = %+v, want none", got)
	}
	// Write pages 1 and 3 on the CPU: they come back from the device (two
	// boxes), then go out again to the device.
	for _, off := range []int{1024, 3072} {
		cpu := must(q.Submit(func(h *Handler) error {
			a := ReadWriteRange(h, b, R1(1024), I1(off))
			h.ParallelFor(R1(1024), func(it Item) { a.Set(it.ID(0), a.At(it.ID(0))+1) })
			return nil
		}, On(cpuID)))
		waitAll(t, q)
		want := []Transfer{{From: "fake:0", To: "host", Copies: 1, Bytes: 1024 * 4}}
		if got := cpu.Transfers(); !slices.Equal(got, want) {
			t.Fatalf("CPU group on page %d: Transfers() = %+v, want %+v", off/1024, got, want)
		}
	}
	back := add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	want = []Transfer{{From: "host", To: "fake:0", Copies: 2, Bytes: 2 * 1024 * 4}}
	if got := back.Transfers(); !slices.Equal(got, want) {
		t.Fatalf("device group after two host writes: Transfers() = %+v, want %+v", got, want)
	}

	st := q.Stats()
	wantLinks := []Transfer{
		{From: "fake:0", To: "host", Copies: 2, Bytes: 2 * 1024 * 4},
		{From: "host", To: "fake:0", Copies: 3, Bytes: 6 * 1024 * 4},
	}
	if !slices.Equal(st.Links, wantLinks) {
		t.Fatalf("Stats().Links = %+v, want %+v", st.Links, wantLinks)
	}
	var sum int64
	for _, l := range st.Links {
		sum += l.Bytes
	}
	if sum != st.BytesCopied || st.Link("host", "fake:0").Bytes != st.BytesHostToDevice {
		t.Fatalf("links %+v do not add up to BytesCopied %d / BytesHostToDevice %d", st.Links, st.BytesCopied, st.BytesHostToDevice)
	}
	if l := st.Link("fake:0", "fake:0"); l.Copies != 0 || l.Bytes != 0 {
		t.Fatalf("Link of a pair without copies = %+v, want zero counts", l)
	}
}

// Linked allocations (L2): groups on CPU devices use the host memory
// itself, so their events report no transfers at all.
func TestCPUGroupsTransferNothing_L2(t *testing.T) {
	q := newQueue(t, WithCPUDevices(2))
	data := make([]float32, 2048)
	b := must(NewBufferFrom(q, data, R1(2048), PageSize(512)))
	for i := range 2 {
		ev := must(q.Submit(func(h *Handler) error {
			a := ReadWrite(h, b)
			h.ParallelFor(R1(2048), func(it Item) { a.Set(it.ID(0), a.At(it.ID(0))+1) })
			return nil
		}, On(DeviceID{Kind: CPU, Index: i})))
		waitAll(t, q)
		if got := ev.Transfers(); len(got) != 0 {
			t.Fatalf("group on cpu:%d: Transfers() = %+v, want none (linked host allocation)", i, got)
		}
	}
	if st := q.Stats(); len(st.Links) != 0 || st.BytesCopied != 0 {
		t.Fatalf("Stats() = %+v, want no links", st)
	}
}

// On a cluster queue the events and the queue count the page transfers the
// nodes reported: the upload of the host data to the first node, the pages
// one node sends another (C3), the read-back to the client.
func TestClusterTransfers_C3(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	const n = 4096
	xs, ys := make([]float32, n), make([]float32, n)
	x := must(NewBufferFrom(q, xs, R1(n)))
	y := must(NewBufferFrom(q, ys, R1(n)))
	saxpy := func(node string) *Event {
		ev := must(q.Submit(func(h *Handler) error {
			h.Launch("saxpy", R1(n), Scalar(float32(2)), ReadRaw(h, x), ReadWriteRaw(h, y))
			return nil
		}, OnNode(node, DeviceID{Kind: CPU})))
		if err := ev.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	first := saxpy("n0")
	want := []Transfer{{From: "client", To: "n0", Copies: 2, Bytes: 2 * n * 4}}
	if got := first.Transfers(); !slices.Equal(got, want) {
		t.Fatalf("group on n0: Transfers() = %+v, want %+v (x and y uploaded)", got, want)
	}
	second := saxpy("n1")
	// x is still valid on the client, y only on n0 (the first group wrote
	// it); in either order of planning.
	got := sortTransfers(second.Transfers())
	want = []Transfer{{From: "client", To: "n1", Copies: 1, Bytes: n * 4}, {From: "n0", To: "n1", Copies: 1, Bytes: n * 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("group on n1: Transfers() = %+v, want %+v (x from the client, y from n0)", got, want)
	}
	if _, err := y.Read(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// The read-back is counted when the node's completion reaches the
	// coordinator, which may be just after Read returned.
	st := q.Stats()
	for deadline := time.Now().Add(10 * time.Second); st.Link("n1", "client").Copies == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		st = q.Stats()
	}
	for _, l := range []struct{ from, to string }{{"client", "n0"}, {"client", "n1"}, {"n0", "n1"}, {"n1", "client"}} {
		if got := st.Link(l.from, l.to); got.Copies == 0 || got.Bytes == 0 {
			t.Errorf("Stats().Link(%q, %q) = %+v, want copies (links: %+v)", l.from, l.to, got, st.Links)
		}
	}
	if st.Groups < 2 || st.Copies == 0 || st.BytesCopied < 5*n*4 {
		t.Errorf("Stats() = %+v, want at least 2 groups and 5 buffers' bytes copied", st)
	}
}
