package exec

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

// aheadRig is a runtime over a CPU device (host memory) and a fake
// accelerator with in-order queues (devicetest.FakeConfig.InOrder), which
// gets issue-ahead unless off.
type aheadRig struct {
	rt   *Runtime
	cpu  *cpu.Device
	fake *devicetest.Fake
}

func newAheadRig(t testing.TB, off bool, fc devicetest.FakeConfig) *aheadRig {
	t.Helper()
	return newAheadRigOf(t, off, fc, nil)
}

// newAheadRigOf is newAheadRig with the runtime seeing the fake through
// wrap (nil: as it is).
func newAheadRigOf(t testing.TB, off bool, fc devicetest.FakeConfig, wrap func(*devicetest.Fake) device.Device) *aheadRig {
	t.Helper()
	fc.InOrder = true
	if fc.Queues == 0 {
		fc.Queues = 4
	}
	r, _ := newFakeRig(t, Config{NoIssueAhead: off}, fc, wrap)
	return r
}

// newFakeRig is a runtime made with cfg over a CPU device and a Fake made
// with fc, which the runtime sees through wrap (nil: as it is); all three
// close when the test ends. It returns the device the runtime sees too.
func newFakeRig(t testing.TB, cfg Config, fc devicetest.FakeConfig, wrap func(*devicetest.Fake) device.Device) (*aheadRig, device.Device) {
	t.Helper()
	c := cpu.New(0, 2)
	f := devicetest.NewFake(fc)
	var d device.Device = f
	if wrap != nil {
		d = wrap(f)
	}
	cfg.Devices = []device.Device{c, d}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
		f.Close()
		c.Close()
	})
	return &aheadRig{rt: rt, cpu: c, fake: f}, d
}

// buffer adds a buffer of n uint32 holding 0, 1, ..., n-1 in host memory
// (the user's data), and returns it with its allocation on the fake, made
// now as the API makes accessors' allocations before the group is
// submitted.
func (r *aheadRig) buffer(t testing.TB, n int) (coherence.BufferID, coherence.Geometry, *device.Mem) {
	t.Helper()
	geo, err := coherence.NewGeometry(coherence.Dims{1, 1, n}, 4, coherence.Dims{})
	if err != nil {
		t.Fatal(err)
	}
	host := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(host[4*i:], uint32(i))
	}
	user := &device.Mem{Device: r.cpu.Info().ID, Kind: device.MemDevice, Bytes: len(host), Host: host}
	id, err := r.rt.AddBuffer(geo, user, r.rt.HostAlloc())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.rt.Alloc(id, r.rt.MemOf(r.fake.Info().ID))
	if err != nil {
		t.Fatal(err)
	}
	return id, geo, m
}

// step is a group on the fake that reads and writes the whole buffer: it
// runs f over the buffer's bytes.
func (r *aheadRig) step(buf coherence.BufferID, geo coherence.Geometry, m *device.Mem, name string, f func(b []byte)) Group {
	return Group{Name: name, Device: r.fake,
		Accesses: []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.ReadWrite, Target: r.rt.MemOf(r.fake.Info().ID)}},
		Ops: []device.Op{device.LaunchOp{Name: name, Range: device.NDRange{Global: [3]int{1, 1, 1}},
			Args: []device.Arg{{Kind: device.ArgPointer, Mem: m}},
			Func: func(w *device.Work) { f(w.Data[0]) }}}}
}

// readBack copies the buffer to the host through a host task and returns
// its first word.
func (r *aheadRig) readBack(t testing.TB, buf coherence.BufferID, geo coherence.Geometry) uint32 {
	t.Helper()
	var got uint32
	n, err := r.rt.Submit(Group{Name: "read", Accesses: []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.Read, Target: r.rt.HostAlloc()}},
		Host: func(done func(error)) {
			m, err := r.rt.Alloc(buf, r.rt.HostAlloc())
			if err == nil {
				got = binary.LittleEndian.Uint32(m.Host)
			}
			done(err)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	return got
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// On a device with in-order queues, a chain of dependent groups is enqueued
// while its first group has not even started (the device is held), each
// group on the queue of the one before; none finishes before the device
// runs them, they run in submission order, and each finishes only after
// the one it depends on. With issue-ahead off only the first is enqueued.
func TestIssueAheadEnqueuesDependentChain_D3(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			r := newAheadRig(t, off, devicetest.FakeConfig{})
			buf, geo, m := r.buffer(t, 64)
			// The first group brings the data to the fake; the chain then
			// has no copies.
			first, err := r.rt.Submit(r.step(buf, geo, m, "first", func([]byte) {}))
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			release := r.fake.Hold()
			defer release()
			const n = 20
			var mu sync.Mutex
			var order []int
			nodes := make([]*Node, n)
			for i := range n {
				nodes[i], err = r.rt.Submit(r.step(buf, geo, m, fmt.Sprintf("step%d", i), func(b []byte) {
					v := binary.LittleEndian.Uint32(b)
					binary.LittleEndian.PutUint32(b, v*3+uint32(i))
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
				}))
				if err != nil {
					t.Fatal(err)
				}
			}
			want := n
			if off {
				want = 1
			}
			waitFor(t, fmt.Sprintf("%d ops are queued on the held fake", want), func() bool { return r.fake.Queued() >= want })
			time.Sleep(20 * time.Millisecond) // nothing more may come
			if q := r.fake.Queued(); q != want {
				t.Fatalf("%d ops queued on the held device, want %d", q, want)
			}
			for i, nd := range nodes {
				if nd.Finished() {
					t.Fatalf("step %d finished before the device ran anything", i)
				}
			}
			// Finishing order: record when each node finished, by a waiter
			// per node.
			var fmu sync.Mutex
			var finished []int
			var wg sync.WaitGroup
			for i, nd := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-nd.Done()
					for _, d := range nd.Deps() {
						if i > 0 && d == nodes[i-1].Seq && !nodes[i-1].Finished() {
							t.Errorf("step %d finished before its dependency step %d", i, i-1)
						}
					}
					fmu.Lock()
					finished = append(finished, i)
					fmu.Unlock()
				}()
			}
			release()
			if err := r.rt.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for i, nd := range nodes {
				if nd.Err() != nil || nd.State() != Complete {
					t.Fatalf("step %d: state %v, error %v", i, nd.State(), nd.Err())
				}
			}
			for i := range order {
				if order[i] != i {
					t.Fatalf("steps ran in order %v, want submission order", order)
				}
			}
			if len(order) != n || len(finished) != n {
				t.Fatalf("%d steps ran and %d finished, want %d", len(order), len(finished), n)
			}
			// Same value as the plain loop: x := 0; x = 3x + i.
			var x uint32
			for i := range n {
				x = x*3 + uint32(i)
			}
			if got := r.readBack(t, buf, geo); got != x {
				t.Fatalf("result %d, want %d", got, x)
			}
		})
	}
}

// A group issued ahead whose kernel fails takes the error; the groups
// after it, queued behind it, still run (SYCL: a failure does not poison
// the queue) and complete without error, and the failure is reported once.
func TestIssueAheadErrorOnItsOwnGroup_D3(t *testing.T) {
	r := newAheadRig(t, false, devicetest.FakeConfig{})
	buf, geo, m := r.buffer(t, 16)
	first, err := r.rt.Submit(r.step(buf, geo, m, "first", func([]byte) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	release := r.fake.Hold()
	const n, bad = 8, 3
	ran := make([]bool, n)
	nodes := make([]*Node, n)
	for i := range n {
		nodes[i], err = r.rt.Submit(r.step(buf, geo, m, fmt.Sprintf("step%d", i), func([]byte) {
			ran[i] = true
			if i == bad {
				panic("step 3 fails")
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the chain is queued", func() bool { return r.fake.Queued() == n })
	release()
	if err := r.rt.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, nd := range nodes {
		if !ran[i] {
			t.Errorf("step %d did not run", i)
		}
		if i == bad {
			if !errors.Is(nd.Err(), device.ErrKernelPanic) || nd.State() != Failed {
				t.Errorf("step %d: state %v, error %v; want Failed with a kernel panic", i, nd.State(), nd.Err())
			}
			continue
		}
		if nd.Err() != nil || nd.State() != Complete {
			t.Errorf("step %d: state %v, error %v; want Complete", i, nd.State(), nd.Err())
		}
	}
	if errs := r.rt.TakeErrors(); len(errs) != 1 || !errors.Is(errs[0], device.ErrKernelPanic) {
		t.Errorf("asynchronous errors %v, want the one kernel panic", errs)
	}
}

// A host task (a host accessor) between device groups is never overtaken:
// the group after it is enqueued only once the host task has run, and sees
// what it wrote; the device groups before it are all done by then.
func TestIssueAheadWaitsForHostTask_D3(t *testing.T) {
	r := newAheadRig(t, false, devicetest.FakeConfig{})
	buf, geo, m := r.buffer(t, 16)
	release := r.fake.Hold()
	var mu sync.Mutex
	var events []string
	log := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	a, err := r.rt.Submit(r.step(buf, geo, m, "a", func(b []byte) {
		binary.LittleEndian.PutUint32(b, 7)
		log("a")
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.rt.Submit(Group{Name: "host", Accesses: []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.ReadWrite, Target: r.rt.HostAlloc()}},
		Host: func(done func(error)) {
			h, err := r.rt.Alloc(buf, r.rt.HostAlloc())
			if err == nil {
				v := binary.LittleEndian.Uint32(h.Host)
				binary.LittleEndian.PutUint32(h.Host, v*10)
				log(fmt.Sprintf("host saw %d", v))
			}
			done(err)
		}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.rt.Submit(r.step(buf, geo, m, "b", func(b []byte) {
		log(fmt.Sprintf("b saw %d", binary.LittleEndian.Uint32(b)))
	})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	// a's copy in (its data is on the host) and its kernel are queued;
	// nothing of the host task's or of b.
	if q := r.fake.Queued(); q != 2 {
		t.Fatalf("%d ops queued on the held device, want a's copy and kernel (2)", q)
	}
	if a.Finished() {
		t.Fatal("a finished on a held device")
	}
	release()
	if err := r.rt.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "host saw 7", "b saw 70"}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("events %q, want %q", events, want)
	}
}

// A group issued ahead with copies of its own: the copies that bring
// another buffer's host data to the device go on the same queue before its
// kernel, which sees the data; the counters count them.
func TestIssueAheadWithCopies_T4(t *testing.T) {
	r := newAheadRig(t, false, devicetest.FakeConfig{})
	x, gx, mx := r.buffer(t, 16)
	y, gy, my := r.buffer(t, 16)
	first, err := r.rt.Submit(r.step(x, gx, mx, "first", func([]byte) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := r.rt.Stats()
	release := r.fake.Hold()
	if _, err := r.rt.Submit(r.step(x, gx, mx, "a", func(b []byte) { binary.LittleEndian.PutUint32(b, 5) })); err != nil {
		t.Fatal(err)
	}
	// b adds y[1] (1, on the host until now) to x[0].
	g := r.step(x, gx, mx, "b", nil)
	g.Accesses = append(g.Accesses, coherence.Access{Buffer: y, Pages: gy.All(), Mode: coherence.Read, Target: r.rt.MemOf(r.fake.Info().ID)})
	g.Ops = []device.Op{device.LaunchOp{Name: "b", Range: device.NDRange{Global: [3]int{1, 1, 1}},
		Args: []device.Arg{{Kind: device.ArgPointer, Mem: mx}, {Kind: device.ArgPointer, Mem: my}},
		Func: func(w *device.Work) {
			v := binary.LittleEndian.Uint32(w.Data[0]) + binary.LittleEndian.Uint32(w.Data[1][4:])
			binary.LittleEndian.PutUint32(w.Data[0], v)
		}}}
	b, err := r.rt.Submit(g)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's kernel, b's copy and kernel are queued", func() bool { return r.fake.Queued() == 3 })
	release()
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.readBack(t, x, gx); got != 6 {
		t.Fatalf("x[0] = %d, want 5 + 1", got)
	}
	st := r.rt.Stats()
	if st.Copies-before.Copies < 2 || st.Copies != st.CopiesPlanned {
		t.Fatalf("copies run %d (before %d), planned %d: want b's copy in and x's copy out, all planned ones run", st.Copies, before.Copies, st.CopiesPlanned)
	}
}

// BenchmarkDependentChain: a chain of dependent groups (each reads and
// writes one buffer, as Jacobi's steps do) on a fake device with in-order
// queues whose completions reach the host 20 µs after the op ran
// (devicetest.FakeConfig.DoneLatency), as a GPU's do. wait: issue-ahead
// off, each group enqueued once the one before has completed; ahead: the
// chain enqueued as it is submitted. The two run interleaved, a chain of
// each per iteration; wait-ns/group and ahead-ns/group are per group,
// from the first submission to the last completion, and ahead/wait their
// ratio (the CPU side of issue 16 item 2: it needs no GPU).
func BenchmarkDependentChain(b *testing.B) {
	const chain = 64
	var rigs [2]*aheadRig // wait, ahead
	var groups [2]Group
	for i, off := range []bool{true, false} {
		r := newAheadRig(b, off, devicetest.FakeConfig{DoneLatency: 20 * time.Microsecond})
		buf, geo, m := r.buffer(b, 16)
		rigs[i], groups[i] = r, r.step(buf, geo, m, "step", func(b []byte) { b[0]++ })
	}
	ctx := context.Background()
	var took [2]time.Duration
	for b.Loop() {
		for i, r := range rigs {
			start := time.Now()
			for range chain {
				if _, err := r.rt.Submit(groups[i]); err != nil {
					b.Fatal(err)
				}
			}
			if err := r.rt.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
		}
	}
	n := float64(b.N * chain)
	b.ReportMetric(float64(took[0].Nanoseconds())/n, "wait-ns/group")
	b.ReportMetric(float64(took[1].Nanoseconds())/n, "ahead-ns/group")
	b.ReportMetric(float64(took[1])/float64(took[0]), "ahead/wait")
}

// A random program of command groups over three buffers — groups on two
// fake devices with in-order queues, and host tasks, each reading some
// buffers and updating others — leaves the same bits with issue-ahead as
// without, and both the same as running the groups one after another in
// submission order (D3: conflicting groups keep their order; the rest may
// run in any order without changing the result). The devices are held
// now and then, so that chains queue up behind them and are issued ahead,
// copies between the devices and the host included.
func TestIssueAheadRandomProgramMatchesSequential_D3(t *testing.T) {
	const nbuf, words, groups = 3, 16, 300
	type access struct {
		buf   int
		write bool
	}
	type group struct {
		on  int // 0, 1: fake devices; 2: host task
		acc []access
	}
	rng := rand.New(rand.NewPCG(7, 11))
	prog := make([]group, groups)
	for i := range prog {
		g := group{on: rng.IntN(5) % 3} // devices twice as often as the host
		for b := range nbuf {
			switch rng.IntN(3) {
			case 1:
				g.acc = append(g.acc, access{b, false})
			case 2:
				g.acc = append(g.acc, access{b, true})
			}
		}
		if len(g.acc) == 0 {
			g.acc = append(g.acc, access{rng.IntN(nbuf), true})
		}
		prog[i] = g
	}
	// step is group i's work over its buffers' words (in access order):
	// each written word becomes a mix of itself, the words read and i.
	step := func(i int, data [][]byte, acc []access) {
		for w := range words {
			var sum uint32
			for k, a := range acc {
				if !a.write {
					sum = sum*17 + binary.LittleEndian.Uint32(data[k][4*w:])
				}
			}
			for k, a := range acc {
				if a.write {
					v := binary.LittleEndian.Uint32(data[k][4*w:])
					binary.LittleEndian.PutUint32(data[k][4*w:], v*31+sum+uint32(i)+uint32(k))
				}
			}
		}
	}
	want := make([][]byte, nbuf)
	for b := range want {
		want[b] = make([]byte, 4*words)
		for w := range words {
			binary.LittleEndian.PutUint32(want[b][4*w:], uint32(b*1000+w))
		}
	}
	for i, g := range prog {
		data := make([][]byte, len(g.acc))
		for k, a := range g.acc {
			data[k] = want[a.buf]
		}
		step(i, data, g.acc)
	}

	for _, off := range []bool{true, false} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			c := cpu.New(0, 2)
			fakes := []*devicetest.Fake{
				devicetest.NewFake(devicetest.FakeConfig{Index: 0, InOrder: true, Queues: 4}),
				devicetest.NewFake(devicetest.FakeConfig{Index: 1, InOrder: true, Queues: 2}),
			}
			rt, err := New(Config{Devices: []device.Device{c, fakes[0], fakes[1]}, NoIssueAhead: off})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := rt.Close(context.Background()); err != nil {
					t.Error(err)
				}
				fakes[0].Close()
				fakes[1].Close()
				c.Close()
			}()
			geo, err := coherence.NewGeometry(coherence.Dims{1, 1, words}, 4, coherence.Dims{1, 1, 4})
			if err != nil {
				t.Fatal(err)
			}
			bufs := make([]coherence.BufferID, nbuf)
			for b := range bufs {
				host := make([]byte, 4*words)
				for w := range words {
					binary.LittleEndian.PutUint32(host[4*w:], uint32(b*1000+w))
				}
				user := &device.Mem{Device: c.Info().ID, Kind: device.MemDevice, Bytes: len(host), Host: host}
				if bufs[b], err = rt.AddBuffer(geo, user, rt.HostAlloc()); err != nil {
					t.Fatal(err)
				}
			}
			var release [2]func()
			hold := rng.Int()
			for i, g := range prog {
				if i%37 == 0 { // hold or let go of the devices now and then
					for f := range fakes {
						if release[f] != nil {
							release[f]()
							release[f] = nil
						}
						if (hold>>(i%7+f))&1 == 1 {
							release[f] = fakes[f].Hold()
						}
					}
				}
				gr := Group{Name: fmt.Sprintf("g%d", i)}
				var target coherence.AllocID
				if g.on == 2 {
					target = rt.HostAlloc()
				} else {
					gr.Device = fakes[g.on]
					target = rt.MemOf(fakes[g.on].Info().ID)
				}
				var args []device.Arg
				for _, a := range g.acc {
					mode := coherence.Read
					if a.write {
						mode = coherence.ReadWrite
					}
					gr.Accesses = append(gr.Accesses, coherence.Access{Buffer: bufs[a.buf], Pages: geo.All(), Mode: mode, Target: target})
					m, err := rt.Alloc(bufs[a.buf], target)
					if err != nil {
						t.Fatal(err)
					}
					args = append(args, device.Arg{Kind: device.ArgPointer, Mem: m})
				}
				if g.on == 2 {
					gr.Host = func(done func(error)) {
						data := make([][]byte, len(args))
						for k, a := range args {
							data[k] = a.Mem.Host
						}
						step(i, data, g.acc)
						done(nil)
					}
				} else {
					gr.Ops = []device.Op{device.LaunchOp{Name: gr.Name, Range: device.NDRange{Global: [3]int{1, 1, 1}}, Args: args,
						Func: func(w *device.Work) { step(i, w.Data, g.acc) }}}
				}
				if _, err := rt.Submit(gr); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range release {
				if r != nil {
					r()
				}
			}
			if err := rt.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if errs := rt.TakeErrors(); len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			for b := range bufs {
				var got []byte
				n, err := rt.Submit(Group{Name: "read", Accesses: []coherence.Access{{Buffer: bufs[b], Pages: geo.All(), Mode: coherence.Read, Target: rt.HostAlloc()}},
					Host: func(done func(error)) {
						m, err := rt.Alloc(bufs[b], rt.HostAlloc())
						if err == nil {
							got = append([]byte(nil), m.Host...)
						}
						done(err)
					}})
				if err != nil {
					t.Fatal(err)
				}
				if err := n.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[b]) {
					t.Fatalf("buffer %d differs from the sequential run", b)
				}
			}
		})
	}
}

// TestIssueAheadEnvironment: ACPP_ISSUE_AHEAD=0 turns issue-ahead off, 1
// or unset leaves it on, and any other value refuses to make the runtime
// with an error that names the variable (never silently ignored).
func TestIssueAheadEnvironment(t *testing.T) {
	for _, c := range []struct {
		v  string
		on bool
	}{{"", true}, {"1", true}, {"0", false}} {
		t.Setenv(IssueAheadEnv, c.v)
		f := devicetest.NewFake(devicetest.FakeConfig{InOrder: true})
		host := cpu.New(0, 1)
		rt, err := New(Config{Devices: []device.Device{host, f}})
		if err != nil {
			t.Fatalf("%s=%q: %v", IssueAheadEnv, c.v, err)
		}
		if on := len(rt.inOrder) > 0; on != c.on {
			t.Errorf("%s=%q: issue-ahead on = %v, want %v", IssueAheadEnv, c.v, on, c.on)
		}
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
		f.Close()
		host.Close()
	}
	t.Setenv(IssueAheadEnv, "nah")
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), IssueAheadEnv) {
		t.Fatalf("%s=nah: New = %v, want an error naming the variable", IssueAheadEnv, err)
	}
}

// queueLog records the queue each launch was enqueued on.
type queueLog struct {
	*devicetest.Fake
	mu sync.Mutex
	q  map[string]int
}

func (l *queueLog) Enqueue(q int, op device.Op, done func(error)) error {
	if lo, ok := op.(device.LaunchOp); ok {
		l.mu.Lock()
		l.q[lo.Name] = q
		l.mu.Unlock()
	}
	return l.Fake.Enqueue(q, op, done)
}

func (l *queueLog) queueOf(name string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q, ok := l.q[name]
	return q, ok
}

// A group dispatched as usual (its dependencies have finished) does not go
// onto a queue that holds work issued ahead: that work waits for
// dependencies still running, and the ready group, often on the critical
// path (a split's halo copy and edge chunk), would wait behind it. Here the
// ready group's own queue (by its ID) is the one "ahead" was issued onto.
func TestReadyGroupAvoidsQueueWithWorkIssuedAhead_D3(t *testing.T) {
	var l *queueLog
	r := newAheadRigOf(t, false, devicetest.FakeConfig{Queues: 4}, func(f *devicetest.Fake) device.Device {
		l = &queueLog{Fake: f, q: map[string]int{}}
		return l
	})
	rt, f := r.rt, r.fake
	x, gx, mx := r.buffer(t, 4)
	y, gy, my := r.buffer(t, 4)
	on := func(g Group) Group { g.Device = l; return g }
	t.Cleanup(f.Hold())
	first, err := rt.Submit(on(r.step(x, gx, mx, "first", func([]byte) {})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Submit(on(r.step(x, gx, mx, "ahead", func([]byte) {}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dependent group is issued ahead", func() bool { _, ok := l.queueOf("ahead"); return ok })
	qf, _ := l.queueOf("first")
	qa, _ := l.queueOf("ahead")
	if qa%4 != qf%4 {
		t.Fatalf("ahead went to queue %d, first to %d: want it issued behind first", qa, qf)
	}
	// Groups with nothing to do, until the next ID maps to ahead's queue.
	for next := first.Seq + 2; next%4 != first.Seq%4; next++ {
		if _, err := rt.Submit(Group{Name: "nothing"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.Submit(on(r.step(y, gy, my, "ready", func([]byte) {}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ready group is enqueued", func() bool { _, ok := l.queueOf("ready"); return ok })
	if qr, _ := l.queueOf("ready"); qr%4 == qa%4 {
		t.Errorf("the ready group went to queue %d, behind the work issued ahead there", qr%4)
	}
}
