package devicetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acpp/acpp/device"
)

// FakeConfig configures a Fake. The zero value is a non-unified device
// fake:0 with one queue and no local memory limit.
type FakeConfig struct {
	Index int
	// HostUnified makes device memory host-visible (Mem.Host set), like a
	// CPU or integrated GPU.
	HostUnified bool
	// Queues is reported in Capabilities; 0 means 1.
	Queues int
	// LocalMemBytes is reported in Capabilities; 0 means no limit.
	LocalMemBytes int
	// Forms are the kernel forms it runs; nil means FormGo.
	Forms []device.Form
	// Shareable lets its device memory be exported (device.MemSharer)
	// to other Fakes in the process, as CUDA IPC does between processes.
	Shareable bool
	// InOrder makes it claim in-order queues (device.InOrderQueuer), which
	// a Fake keeps anyway: it runs every op in Enqueue order.
	InOrder bool
	// DoneLatency, when positive, reports each finished op through a
	// goroutine of its own no sooner than this after the op ran, as a GPU
	// whose completions reach the host late does: the ops still run back
	// to back, in order, and the done calls come in the same order.
	DoneLatency time.Duration
	// SpinWait, when positive, asks the Fake's waiters to spin that long
	// before they park (device.SpinWaiter), as the CUDA backend does under
	// CompletionSpin; 0 waits as for any device.
	SpinWait time.Duration
}

// Stats counts what a Fake did.
type Stats struct {
	Allocs, Frees, Copies, Fills, Launches int64
	CopyBytes                              int64
}

// Fake is an in-memory device.Device. Memory of kind MemDevice is not
// host-visible unless HostUnified; ops run one at a time, in Enqueue order,
// on the Fake's goroutine.
type Fake struct {
	info      device.Info
	shareable bool
	inOrder   bool
	lost      atomic.Pointer[error] // set by Lose

	mu     sync.Mutex
	cond   *sync.Cond
	closed bool     // guarded by mu
	holds  int      // Hold calls not yet released: run takes no op; guarded by mu
	work   []func() // ops for run(), unbounded so Enqueue never waits; guarded by mu
	done   chan struct{}

	latency  time.Duration
	spin     time.Duration // FakeConfig.SpinWait
	notes    chan note     // finished ops for notifier (DoneLatency)
	notified chan struct{} // closed when notifier has returned

	nextAddr atomic.Uint64
	allocs   atomic.Int64
	frees    atomic.Int64
	copies   atomic.Int64
	fills    atomic.Int64
	launches atomic.Int64
	bytes    atomic.Int64
}

type fakeMem struct{ b []byte }

// note is a finished op whose done the notifier calls at due.
type note struct {
	done func(error)
	err  error
	due  time.Time
}

// NewFake starts a Fake.
func NewFake(cfg FakeConfig) *Fake {
	q := cfg.Queues
	if q == 0 {
		q = 1
	}
	forms := cfg.Forms
	if forms == nil {
		forms = []device.Form{device.FormGo}
	}
	f := &Fake{
		info: device.Info{
			ID:   device.ID{Kind: device.KindFake, Index: cfg.Index},
			Name: fmt.Sprintf("fake device %d", cfg.Index),
			Caps: device.Capabilities{
				HostUnified:   cfg.HostUnified,
				Queues:        q,
				LocalMemBytes: cfg.LocalMemBytes,
				USMKinds:      []device.MemKind{device.MemDevice, device.MemHost, device.MemShared},
				KernelForms:   forms,
			},
		},
		done:      make(chan struct{}),
		shareable: cfg.Shareable,
		inOrder:   cfg.InOrder,
		latency:   cfg.DoneLatency,
		spin:      cfg.SpinWait,
	}
	f.cond = sync.NewCond(&f.mu)
	f.nextAddr.Store(0x7f00_0000_0000)
	if f.latency > 0 {
		f.notes = make(chan note, 4096)
		f.notified = make(chan struct{})
		go f.notifier()
	}
	go f.run()
	return f
}

// finished reports an op's result: at once, or through the notifier.
func (f *Fake) finished(done func(error), err error) {
	if f.latency <= 0 {
		done(err)
		return
	}
	f.notes <- note{done: done, err: err, due: time.Now().Add(f.latency)}
}

// notifier calls the done of finished ops, each no sooner than its due.
func (f *Fake) notifier() {
	defer close(f.notified)
	for n := range f.notes {
		if d := time.Until(n.due); d > 0 {
			time.Sleep(d)
		}
		n.done(n.err)
	}
}

func (f *Fake) run() {
	defer close(f.done)
	if f.notes != nil {
		defer close(f.notes)
	}
	for {
		f.mu.Lock()
		for (len(f.work) == 0 || f.holds > 0) && !f.closed {
			f.cond.Wait()
		}
		if len(f.work) == 0 {
			f.mu.Unlock()
			return
		}
		w := f.work[0]
		f.work[0] = nil
		f.work = f.work[1:]
		f.mu.Unlock()
		w()
	}
}

// Info implements device.Device.
func (f *Fake) Info() device.Info { return f.info }

// InOrderQueues implements device.InOrderQueuer: FakeConfig.InOrder.
func (f *Fake) InOrderQueues() bool { return f.inOrder }

// SpinWait implements device.SpinWaiter: FakeConfig.SpinWait.
func (f *Fake) SpinWait() time.Duration { return f.spin }

// Hold stops the Fake from starting ops (the one running finishes) until
// release is called, so that a test can see what was enqueued while
// nothing completes. Close runs the held ops anyway.
func (f *Fake) Hold() (release func()) {
	f.mu.Lock()
	f.holds++
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.holds--
			f.cond.Broadcast()
			f.mu.Unlock()
		})
	}
}

// Queued is the number of ops enqueued and not yet started.
func (f *Fake) Queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.work)
}

// Stats returns the counters.
func (f *Fake) Stats() Stats {
	return Stats{Allocs: f.allocs.Load(), Frees: f.frees.Load(), Copies: f.copies.Load(),
		Fills: f.fills.Load(), Launches: f.launches.Load(), CopyBytes: f.bytes.Load()}
}

var _ device.Health = (*Fake)(nil)

// Lose makes the Fake lost, as a GPU whose context a faulting kernel made
// unusable: from then on Lost reports why (matching device.ErrDeviceLost)
// and Enqueue and Alloc refuse with it. Ops already queued still run.
func (f *Fake) Lose(why string) {
	err := fmt.Errorf("%w: %s: %s", device.ErrDeviceLost, f.info.ID, why)
	f.lost.CompareAndSwap(nil, &err)
}

// Lost implements device.Health.
func (f *Fake) Lost() error {
	if p := f.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// Alloc implements device.Device.
func (f *Fake) Alloc(kind device.MemKind, bytes int) (*device.Mem, error) {
	if err := f.Lost(); err != nil {
		return nil, err
	}
	if bytes < 0 {
		return nil, fmt.Errorf("%w: alloc of %d bytes", device.ErrBadOp, bytes)
	}
	if !f.info.Caps.Supports(kind) {
		return nil, fmt.Errorf("%w: %s memory", device.ErrUnsupported, kind)
	}
	fm := &fakeMem{b: make([]byte, bytes)}
	m := &device.Mem{Device: f.info.ID, Kind: kind, Bytes: bytes, Handle: fm}
	m.Addr = f.nextAddr.Add(uint64(bytes+4095) &^ 4095) // distinct, stable
	if kind != device.MemDevice || f.info.Caps.HostUnified {
		m.Host = fm.b
	}
	f.allocs.Add(1)
	return m, nil
}

// Free implements device.Device.
func (f *Fake) Free(m *device.Mem) error {
	if m == nil || m.Device != f.info.ID {
		return fmt.Errorf("%w: free of memory not allocated by %s", device.ErrBadOp, f.info.ID)
	}
	f.frees.Add(1)
	freeShared(m)
	return nil
}

// Bytes returns the memory behind m, host-visible or not: the fake's own
// memory, or Mem.Host of memory from another device.
func Bytes(m *device.Mem) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil memory", device.ErrBadOp)
	}
	if m.Host != nil {
		return m.Host, nil
	}
	if fm, ok := m.Handle.(*fakeMem); ok {
		return fm.b, nil
	}
	return nil, fmt.Errorf("%w: memory of %s is not reachable from a fake", device.ErrUnsupported, m.Device)
}

// Enqueue implements device.Device.
func (f *Fake) Enqueue(queue int, op device.Op, done func(error)) error {
	if err := f.Lost(); err != nil {
		return err
	}
	var run func() error
	switch op := op.(type) {
	case device.CopyOp:
		if err := op.Validate(); err != nil {
			return err
		}
		src, err := Bytes(op.Src.Mem)
		if err != nil {
			return err
		}
		dst, err := Bytes(op.Dst.Mem)
		if err != nil {
			return err
		}
		run = func() error {
			device.CopyHost(dst, src, op)
			f.copies.Add(1)
			f.bytes.Add(int64(op.Bytes()))
			return nil
		}
	case device.FillOp:
		if err := op.Validate(); err != nil {
			return err
		}
		dst, err := Bytes(op.Dst)
		if err != nil {
			return err
		}
		run = func() error { device.FillHost(dst, op); f.fills.Add(1); return nil }
	case device.LaunchOp:
		fn := op.Func
		if op.Kernel != nil {
			fn = op.Kernel.Go
		}
		if fn == nil || !f.info.Caps.Runs(device.FormGo) {
			return fmt.Errorf("%w: %q on %s", device.ErrNoImplementation, op.Name, f.info.ID)
		}
		if err := op.Range.Validate(); err != nil {
			return err
		}
		// As every backend does: a kernel refuses launches it cannot
		// compute as documented (device.Kernel.Check).
		if err := device.CheckLaunch(op.Kernel, op.Range, op.Args); err != nil {
			return err
		}
		data := make([][]byte, len(op.Args))
		for i, a := range op.Args {
			if a.Mem != nil {
				b, err := Bytes(a.Mem)
				if err != nil {
					return err
				}
				if a.Offset < 0 || a.Offset > len(b) {
					return fmt.Errorf("%w: kernel %q argument %d offset %d outside its allocation of %d bytes", device.ErrBadOp, op.Name, i, a.Offset, len(b))
				}
				data[i] = b[a.Offset:]
			}
		}
		run = func() error { f.launches.Add(1); return RunSerial(fn, op, data) }
	default:
		return fmt.Errorf("%w: op %T", device.ErrUnsupported, op)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return device.ErrClosed
	}
	f.work = append(f.work, func() { f.finished(done, run()) })
	f.cond.Signal()
	return nil
}

// RunSerial runs a Go kernel over the whole launch on the calling goroutine:
// one Work for a flat launch, one per work-group (with fresh local memory)
// for a grouped one. A panic becomes an error wrapping ErrKernelPanic.
func RunSerial(fn device.GoFunc, op device.LaunchOp, data [][]byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", device.ErrKernelPanic, op.Name, r)
		}
	}()
	w := &device.Work{Range: op.Range, Args: op.Args, Data: data}
	if !op.Range.Grouped() {
		w.Hi = op.Range.Global
		fn(w)
		return nil
	}
	var groups [3]int
	for d := range groups {
		groups[d] = op.Range.Global[d] / op.Range.Local[d]
	}
	w.Local = make([][]byte, len(op.Args))
	for g0 := 0; g0 < groups[0]; g0++ {
		for g1 := 0; g1 < groups[1]; g1++ {
			for g2 := 0; g2 < groups[2]; g2++ {
				w.Group = [3]int{g0, g1, g2}
				for d := range 3 {
					w.Lo[d] = w.Group[d] * op.Range.Local[d]
					w.Hi[d] = w.Lo[d] + op.Range.Local[d]
				}
				for i, a := range op.Args {
					if a.Kind == device.ArgLocal {
						w.Local[i] = make([]byte, a.LocalBytes)
					}
				}
				fn(w)
			}
		}
	}
	return nil
}

// Close implements device.Device.
func (f *Fake) Close() error {
	f.mu.Lock()
	f.closed = true
	f.cond.Broadcast()
	f.mu.Unlock()
	<-f.done
	if f.notified != nil {
		<-f.notified
	}
	return nil
}
