package acpp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator/coordtest"
)

// pagesOf is b's entry in q.PageStates, by ID.
func pagesOf(t *testing.T, q *Queue, id BufferID) BufferPages {
	t.Helper()
	all, err := q.PageStates()
	if err != nil {
		t.Fatal(err)
	}
	for _, bp := range all {
		if bp.ID == id {
			return bp
		}
	}
	t.Fatalf("PageStates = %+v: no buffer %d", all, id)
	return BufferPages{}
}

// outdatedOn is the outdated boxes of the allocation in memory mem; ok is
// false when the buffer has no allocation there.
func outdatedOn(bp BufferPages, mem string) (boxes []PageBox, ok bool) {
	for _, a := range bp.Allocs {
		if a.Memory == mem {
			return a.Outdated, true
		}
	}
	return nil, false
}

func pageBox(lo, hi int) PageBox {
	return PageBox{Lo: [3]int{0, 0, lo}, Hi: [3]int{1, 1, hi}}
}

// Queue.PageStates follows what the program's command groups do to a
// buffer of 4 pages on the host and a device with its own memory (a fake):
// a kernel that writes it on the device outdates every page on the host
// (P3); a host task that writes page 2 outdates that page on the device;
// a host read brings the host copy up to date (P4), page by page (P2).
func TestQueuePageStatesFollowGroups_P2_P3_P4(t *testing.T) {
	q, _ := gpuQueue(t)
	data := make([]float32, 4096)
	b := must(NewBufferFrom(q, data, R1(4096), PageSize(1024)))
	other := must(NewBuffer[float32](q, R1(16)))
	if b.ID() == other.ID() || b.ID() == 0 {
		t.Fatalf("IDs %d and %d: want two distinct nonzero IDs", b.ID(), other.ID())
	}

	// Made over the program's slice: one host allocation, all up to date.
	bp := pagesOf(t, q, b.ID())
	if bp.Pages != [3]int{1, 1, 4} || len(bp.Allocs) != 1 || bp.Allocs[0].Memory != "host" || len(bp.Allocs[0].Outdated) != 0 {
		t.Fatalf("new buffer's pages = %+v, want 1×1×4 pages, valid on the host alone", bp)
	}
	// The uninitialised one has no allocation yet (B5).
	if o := pagesOf(t, q, other.ID()); len(o.Allocs) != 0 {
		t.Errorf("uninitialised buffer's allocations = %+v, want none", o.Allocs)
	}

	add(t, q, b, 1, fakeID, false)
	waitAll(t, q)
	dev := fakeID.String()
	bp = pagesOf(t, q, b.ID())
	if got, _ := outdatedOn(bp, "host"); !slices.Equal(got, []PageBox{pageBox(0, 4)}) {
		t.Errorf("after a write on %s the host's outdated pages = %v, want all four", dev, got)
	} else if s := fmt.Sprint(got); s != "[[0,1)x[0,1)x[0,4)]" {
		// docs/API.md, "Watching a queue", prints them with fmt.Println.
		t.Errorf("fmt.Sprint(outdated boxes) = %q, want %q", s, "[[0,1)x[0,1)x[0,4)]")
	}
	if got, ok := outdatedOn(bp, dev); !ok || len(got) != 0 {
		t.Errorf("after a write on %s its outdated pages = %v (allocated %v), want none", dev, got, ok)
	}

	// A host task writes page 2: outdated on the device, valid on the host.
	must(q.Submit(func(h *Handler) error {
		a := ReadWriteRange(h, b, R1(1024), I1(2048))
		h.ParallelFor(R1(1024), func(it Item) { a.Set(it.ID(0), a.At(it.ID(0))+100) })
		return nil
	}, On(cpuID)))
	waitAll(t, q)
	bp = pagesOf(t, q, b.ID())
	if got, _ := outdatedOn(bp, dev); !slices.Equal(got, []PageBox{pageBox(2, 3)}) {
		t.Errorf("after a host write of page 2 the device's outdated pages = %v, want page 2", got)
	}
	if got, _ := outdatedOn(bp, "host"); !slices.Equal(got, []PageBox{pageBox(0, 2), pageBox(3, 4)}) {
		t.Errorf("after a host write of page 2 the host's outdated pages = %v, want 0-1 and 3", got)
	}

	// A host read brings the rest to the host; the device keeps its copy.
	v := hostValues(t, b)
	if v[0] != 1 || v[2048] != 101 {
		t.Fatalf("read v[0], v[2048] = %v, %v, want 1, 101", v[0], v[2048])
	}
	bp = pagesOf(t, q, b.ID())
	if got, _ := outdatedOn(bp, "host"); len(got) != 0 {
		t.Errorf("after a host read the host's outdated pages = %v, want none", got)
	}
	if got, _ := outdatedOn(bp, dev); !slices.Equal(got, []PageBox{pageBox(2, 3)}) {
		t.Errorf("after a host read the device's outdated pages = %v, want still page 2", got)
	}

	// A closed buffer leaves the list.
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	all := must(q.PageStates())
	if len(all) != 1 || all[0].ID != b.ID() {
		t.Errorf("after closing one buffer PageStates lists %+v, want only buffer %d", all, b.ID())
	}
}

// Queue.RunningGroups names a group while it runs, by device and name, and no
// longer once it is done; both calls answer ErrClosed after Close.
func TestQueueRunningGroups(t *testing.T) {
	q, err := NewQueue(context.Background(), WithCPUDevices(1))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	ev := must(q.Submit(func(h *Handler) error {
		h.SingleTask(func() { <-release })
		return nil
	}, Named("blocker")))
	want := cpuID.String() + ": blocker"
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := must(q.RunningGroups())
		if slices.Equal(got, []string{want}) {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("Running = %q for 10 s, want [%q]", got, want)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := ev.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := must(q.RunningGroups()); len(got) != 0 {
		t.Errorf("Running after the group ended = %q, want none", got)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PageStates(); !errors.Is(err, ErrClosed) {
		t.Errorf("PageStates after Close: %v, want ErrClosed", err)
	}
	if _, err := q.RunningGroups(); !errors.Is(err, ErrClosed) {
		t.Errorf("Running after Close: %v, want ErrClosed", err)
	}
}

// A cluster queue's PageStates are the job's, as its coordinator plans
// them, per (node, memory) and the client (C2), under the IDs the program's
// buffers have: a fill on a node outdates the client's copy (P3); a read
// brings it back (P4).
func TestClusterPageStatesFollowGroups_C2_P3_P4(t *testing.T) {
	c := coordtest.Start(t, 2, coordtest.Options{})
	q := connect(t, c)
	other := must(NewBuffer[float32](q, R2(4, 4), PageSize(1, 4)))
	b := must(NewBufferFrom(q, make([]float32, 4096), R1(4096), PageSize(1024)))
	if o := pagesOf(t, q, other.ID()); o.Pages != [3]int{1, 4, 1} || len(o.Allocs) != 0 {
		t.Errorf("uninitialised 4×4 buffer of 4 row pages = %+v, want 1×4×1 pages, no allocation", o)
	}
	bp := pagesOf(t, q, b.ID())
	if bp.Pages != [3]int{1, 1, 4} || len(bp.Allocs) != 1 || bp.Allocs[0].Memory != "client" || len(bp.Allocs[0].Outdated) != 0 {
		t.Fatalf("new buffer's pages = %+v, want 1×1×4 pages, valid on the client alone", bp)
	}

	ev := must(q.Submit(func(h *Handler) error { Fill(h, Write(h, b), 2); return nil }))
	if err := ev.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	bp = pagesOf(t, q, b.ID())
	var onNode []string
	for _, a := range bp.Allocs {
		switch {
		case a.Memory == "client":
			if !slices.Equal(a.Outdated, []PageBox{pageBox(0, 4)}) {
				t.Errorf("after a fill on a node the client's outdated pages = %v, want all four", a.Outdated)
			}
		case len(a.Outdated) == 0:
			onNode = append(onNode, a.Memory)
		}
	}
	if len(onNode) != 1 || !strings.Contains(onNode[0], "/m") {
		t.Errorf("after a fill, allocations up to date = %q (of %+v), want one node memory (\"node/mN\")", onNode, bp.Allocs)
	}

	if v := must(b.Read(testCtx(t))); v[4095] != 2 {
		t.Fatalf("read v[4095] = %v, want 2", v[4095])
	}
	if got, _ := outdatedOn(pagesOf(t, q, b.ID()), "client"); len(got) != 0 {
		t.Errorf("after a read the client's outdated pages = %v, want none", got)
	}
	if r, err := q.RunningGroups(); err != nil || len(r) != 0 {
		t.Errorf("Running with nothing submitted = %q, %v; want none", r, err)
	}
}
