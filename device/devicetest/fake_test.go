package devicetest

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/acpp/acpp/device"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func wait(t *testing.T, d device.Device, op device.Op) error {
	t.Helper()
	ch := make(chan error, 1)
	if err := d.Enqueue(0, op, func(err error) { ch <- err }); err != nil {
		return err
	}
	return <-ch
}

func TestFakeCopyFillLaunch(t *testing.T) {
	f := NewFake(FakeConfig{})
	defer f.Close()
	host := NewFake(FakeConfig{Index: 1, HostUnified: true})
	defer host.Close()
	dm, err := f.Alloc(device.MemDevice, 16)
	if err != nil {
		t.Fatal(err)
	}
	if dm.Host != nil {
		t.Fatal("non-unified device memory is host-visible")
	}
	hm, _ := host.Alloc(device.MemDevice, 16)
	if hm.Host == nil {
		t.Fatal("unified device memory is not host-visible")
	}
	if err := wait(t, f, device.FillOp{Dst: dm, Bytes: 16, Pattern: []byte{7}}); err != nil {
		t.Fatal(err)
	}
	lin := func(m *device.Mem) device.Region { return device.Region{Mem: m, Extent: [3]int{1, 1, 16}} }
	if err := wait(t, f, device.CopyOp{Src: lin(dm), Dst: lin(hm), Size: [3]int{1, 1, 16}, ElemSize: 1}); err != nil {
		t.Fatal(err)
	}
	if hm.Host[15] != 7 {
		t.Fatalf("copied byte = %d, want 7", hm.Host[15])
	}
	k := &device.Kernel{Name: "inc", Go: func(w *device.Work) {
		for i := w.Lo[2]; i < w.Hi[2]; i++ {
			w.Data[0][i]++
		}
	}}
	op := device.LaunchOp{Name: "inc", Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, 16}},
		Args: []device.Arg{{Kind: device.ArgPointer, Mem: dm, ElemSize: 1}}}
	if err := wait(t, f, op); err != nil {
		t.Fatal(err)
	}
	b, _ := Bytes(dm)
	if b[3] != 8 {
		t.Fatalf("after kernel = %d, want 8", b[3])
	}
	st := f.Stats()
	if st.Copies != 1 || st.CopyBytes != 16 || st.Fills != 1 || st.Launches != 1 || st.Allocs != 1 {
		t.Errorf("Stats() = %+v", st)
	}
}

func TestFakeGroupedLocalMemory_A3(t *testing.T) {
	f := NewFake(FakeConfig{})
	defer f.Close()
	out, _ := f.Alloc(device.MemHost, 4)
	// Each group of 4 items sums its ids in local memory, then item 0
	// writes the sum (a two-phase kernel: barrier between phases).
	k := &device.Kernel{Name: "sum", Go: func(w *device.Work) {
		loc := w.Local[1]
		for i := w.Lo[2]; i < w.Hi[2]; i++ {
			loc[0] += byte(i)
		}
		w.Data[0][w.Group[2]] = loc[0]
	}}
	op := device.LaunchOp{Name: "sum", Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, 16}, Local: [3]int{1, 1, 4}},
		Args: []device.Arg{{Kind: device.ArgPointer, Mem: out}, {Kind: device.ArgLocal, LocalBytes: 1}}}
	if err := wait(t, f, op); err != nil {
		t.Fatal(err)
	}
	for g, want := range []byte{6, 22, 38, 54} {
		if out.Host[g] != want {
			t.Errorf("group %d sum = %d, want %d (local memory must be fresh per group)", g, out.Host[g], want)
		}
	}
}

func TestFakeKernelPanic(t *testing.T) {
	f := NewFake(FakeConfig{})
	defer f.Close()
	op := device.LaunchOp{Name: "boom", Func: func(*device.Work) { panic("index out of range") }, Range: device.NDRange{Global: [3]int{1, 1, 1}}}
	if err := wait(t, f, op); !errors.Is(err, device.ErrKernelPanic) {
		t.Fatalf("launch = %v, want ErrKernelPanic", err)
	}
	// The device still works.
	if err := wait(t, f, device.LaunchOp{Name: "ok", Func: func(*device.Work) {}, Range: device.NDRange{Global: [3]int{1, 1, 1}}}); err != nil {
		t.Fatal(err)
	}
}

func TestFakeNoImplementationAndClosed(t *testing.T) {
	f := NewFake(FakeConfig{Forms: []device.Form{device.FormPTX}})
	op := device.LaunchOp{Name: "k", Func: func(*device.Work) {}, Range: device.NDRange{Global: [3]int{1, 1, 1}}}
	if err := f.Enqueue(0, op, func(error) {}); !errors.Is(err, device.ErrNoImplementation) {
		t.Errorf("Enqueue(go kernel on ptx-only device) = %v, want ErrNoImplementation", err)
	}
	f.Close()
	f.Close()
	m := &device.Mem{Bytes: 1, Host: []byte{0}}
	if err := f.Enqueue(0, device.FillOp{Dst: m, Bytes: 1, Pattern: []byte{1}}, func(error) {}); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Enqueue after Close = %v, want ErrClosed", err)
	}
}

func TestFaulty(t *testing.T) {
	f := NewFake(FakeConfig{})
	defer f.Close()
	boom := errors.New("boom")
	d := NewFaulty(f, FailNth(2, boom))
	m, err := d.Alloc(device.MemDevice, 4)
	if err != nil {
		t.Fatal(err)
	}
	fill := device.FillOp{Dst: m, Bytes: 4, Pattern: []byte{1}}
	if err := wait(t, d, fill); !errors.Is(err, boom) {
		t.Fatalf("second call = %v, want injected error", err)
	}
	if err := wait(t, d, fill); err != nil {
		t.Fatalf("third call = %v, want success", err)
	}
	if _, err := NewFaulty(f, FailNth(1, boom)).Alloc(device.MemDevice, 1); !errors.Is(err, boom) {
		t.Fatalf("alloc = %v, want injected error", err)
	}
	d.AtEnqueue = true
	d.fault = FailOps(func(op device.Op) bool { _, ok := op.(device.FillOp); return ok }, boom)
	if err := d.Enqueue(0, fill, func(error) { t.Error("done called for a refused op") }); !errors.Is(err, boom) {
		t.Fatalf("Enqueue = %v, want injected error", err)
	}
}

// TestFakeRefusesMalformedLaunches: like the backends, the Fake runs a
// kernel's Check before the launch (device.Kernel.Check: "backends call
// it") and refuses an argument offset outside its allocation with
// ErrBadOp from Enqueue, without calling done (it ran the kernel anyway,
// and panicked on the offset, before).
func TestFakeRefusesMalformedLaunches(t *testing.T) {
	f := NewFake(FakeConfig{HostUnified: true})
	defer f.Close()
	m, err := f.Alloc(device.MemDevice, 16)
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("work-groups of 4 only")
	ran := false
	k := &device.Kernel{Name: "k", Go: func(*device.Work) { ran = true },
		Check: func(nd device.NDRange, _ []device.Arg) error {
			if nd.Local != [3]int{4, 1, 1} {
				return refused
			}
			return nil
		}}
	grouped := device.NDRange{Global: [3]int{8, 1, 1}, Local: [3]int{2, 1, 1}}
	for _, c := range []struct {
		name string
		op   device.LaunchOp
		want error
	}{
		{"check refuses", device.LaunchOp{Name: "k", Kernel: k, Range: grouped}, device.ErrBadArg},
		{"offset past the end", device.LaunchOp{Name: "f", Func: func(*device.Work) { ran = true }, Range: device.NDRange{Global: [3]int{1, 1, 1}},
			Args: []device.Arg{{Kind: device.ArgPointer, Mem: m, Offset: 17}}}, device.ErrBadOp},
		{"negative offset", device.LaunchOp{Name: "f", Func: func(*device.Work) { ran = true }, Range: device.NDRange{Global: [3]int{1, 1, 1}},
			Args: []device.Arg{{Kind: device.ArgPointer, Mem: m, Offset: -1}}}, device.ErrBadOp},
	} {
		err := f.Enqueue(0, c.op, func(error) { t.Errorf("%s: done called for a refused op", c.name) })
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Enqueue = %v, want %v", c.name, err, c.want)
		}
	}
	if err := wait(t, f, device.LaunchOp{Name: "k", Kernel: k, Range: device.NDRange{Global: [3]int{8, 1, 1}, Local: [3]int{4, 1, 1}}}); err != nil || !ran {
		t.Fatalf("a launch Check accepts: err %v, ran %v", err, ran)
	}
}
