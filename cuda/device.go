package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// Device is one GPU. It implements device.Device.
type Device struct {
	cfg     Config
	log     *slog.Logger
	lib     *driver.Lib
	attrs   Attributes
	dev     driver.Device
	ctx     driver.Context
	info    device.Info
	linked  bool   // L2/L3: MemDevice is mapped pinned host memory
	linkWhy string // the reason, for the log
	group   *group // the devices opened together; read-only after Open

	// peers[o] is true when this device's context may access device o's
	// memory (cuCtxEnablePeerAccess succeeded). Written by Open before any
	// copy runs, read-only afterwards.
	peers map[int]bool

	// q is the owner's inbox: tasks from Enqueue, Alloc, Free, Do and from
	// other devices' owners. Unbounded, so no sender ever blocks.
	q struct {
		mu     sync.Mutex
		tasks  []task // guarded by mu
		closed bool   // guarded by mu; no new tasks after Close
	}
	wake    chan struct{} // cap 1: "the inbox has tasks"
	stopped chan struct{} // closed when the owner goroutine has exited

	// Owner-only state: touched by the owner goroutine alone.
	streams []driver.Stream
	pending [][]completion // per stream: ops issued since the last flush
	funcs   map[moduleKey]*module
	graphs  *graphs // graph replay (graph.go); nil with Config.NoGraphs

	// srcMu guards sources and is held while a source compiles (on the
	// launching goroutine, not the owner).
	srcMu   sync.Mutex
	sources map[sourceKey]*compiled

	mu   sync.Mutex                // guards mems
	mems map[*device.Mem]*memState // live allocations of this device

	comp      *completer
	closeOnce sync.Once
	closeErr  error
}

// group is the set of devices one Open returned, by ordinal.
type group struct {
	devs    map[int]*Device
	staging staging
	pins    hostPins
	open    atomic.Int32 // devices not yet shut down
}

// task is one unit of owner work.
type task struct {
	queue int
	op    device.Op
	done  func(error)
	// run, when set, is owner-internal work (Alloc, Free, Do, the second
	// half of a staged copy); it is called instead of executing op.
	run func(t *Thread)
	// args are a launch's arguments as checkLaunch converted them.
	args []device.Arg
	// launch is the launch made ready by Enqueue (nil: execLaunch makes it).
	launch *prepared
}

// completion is what the completer reports when a batch's event fires.
type completion struct {
	done    func(error)
	release func() // after done; frees what the op borrowed (staging)
}

// Thread is the owner goroutine's view of its device, for Do: the driver,
// the current context and the streams. It is only valid during the Do call,
// during which the owner is locked to its OS thread with the context
// current.
type Thread struct {
	Lib     *driver.Lib
	Context driver.Context
	Device  driver.Device
	Streams []driver.Stream
	d       *Device
}

var _ device.Device = (*Device)(nil)

// Info returns the device's identity and capabilities.
func (d *Device) Info() device.Info { return d.info }

var _ device.InOrderQueuer = (*Device)(nil)

// InOrderQueues implements device.InOrderQueuer: a queue is a CUDA stream,
// which runs launches, fills of device memory and copies between this
// GPU's memory and host memory in the order the owner issues them, and the
// owner issues a queue's ops in Enqueue order. (Fills of host memory, done
// by the host, and copies staged between GPUs are outside the promise.)
func (d *Device) InOrderQueues() bool { return true }

var _ device.SpinWaiter = (*Device)(nil)

// SpinWait implements device.SpinWaiter: under CompletionSpin a goroutine
// that waits for this device's work spins on its completion for SpinIdle
// before it parks, as the owner and the completer do for new work (the
// user chose to trade host CPU for latency); 0 under the other strategies.
func (d *Device) SpinWait() time.Duration {
	if d.cfg.Completion == CompletionSpin {
		return d.cfg.SpinIdle
	}
	return 0
}

// Attributes returns what discovery read of the GPU.
func (d *Device) Attributes() Attributes { return d.attrs }

// Linked reports whether the device's MemDevice allocations are host
// memory (L2, L3).
func (d *Device) Linked() bool { return d.linked }

var _ device.Health = (*Device)(nil)

// Lost implements device.Health: nil while the GPU works. After a call
// of this process lost its CUDA state (a kernel faulted: the driver's
// ErrContextLost), an error matching device.ErrDeviceLost and
// driver.ErrContextLost that names the first failure: every later use of
// the device fails with it at once, since every driver call would fail.
func (d *Device) Lost() error {
	if d.lib == nil {
		return nil
	}
	if e := d.lib.Lost(); e != nil {
		return d.lostErr(e)
	}
	return nil
}

// lostErr is the error of work on a lost device: cause is the driver's
// error.
func (d *Device) lostErr(cause error) error {
	return fmt.Errorf("%w: %s: %w; NVIDIA documents that no CUDA work of this process can succeed after it: restart the process (for a node: restart acpp-node) to use this GPU again",
		device.ErrDeviceLost, d.info.ID, cause)
}

// asLost turns a driver error that lost the context into lostErr; other
// errors pass unchanged.
func (d *Device) asLost(err error) error {
	if err != nil && errors.Is(err, driver.ErrContextLost) && !errors.Is(err, device.ErrDeviceLost) {
		return d.lostErr(err)
	}
	return err
}

// push hands t to the owner. It fails after Close, and once the device is
// lost (Lost).
func (d *Device) push(t task) error {
	if err := d.Lost(); err != nil {
		return err
	}
	d.q.mu.Lock()
	if d.q.closed {
		d.q.mu.Unlock()
		return fmt.Errorf("%s: %w", d.info.ID, device.ErrClosed)
	}
	d.q.tasks = append(d.q.tasks, t)
	d.q.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default: // the owner is already due to wake
	}
	return nil
}

// pushInternal is push for owner-to-owner hand-offs: if the device closed
// meanwhile, the task's done gets ErrClosed.
func (d *Device) pushInternal(t task) {
	if err := d.push(t); err != nil && t.done != nil {
		t.done(err)
	}
}

// Do runs fn on the device's owner goroutine, with the context current, and
// waits for it. Use it for driver calls the Device has no method for (the
// benchmarks' raw baselines do); fn must not keep the Thread.
func (d *Device) Do(fn func(t *Thread) error) error {
	res := make(chan error, 1)
	if err := d.push(task{run: func(t *Thread) { res <- fn(t) }}); err != nil {
		return err
	}
	return <-res
}

// Enqueue validates op, queues it for the owner and returns; done is called
// once, from the device's completer goroutine (or its owner, for an op that
// failed to start), when the op has finished.
func (d *Device) Enqueue(queue int, op device.Op, done func(error)) error {
	if queue < 0 {
		queue = 0
	}
	switch o := op.(type) {
	case device.CopyOp:
		if err := o.Validate(); err != nil {
			return err
		}
		if _, _, err := d.copySide(o.Src.Mem); err != nil {
			return fmt.Errorf("copy source: %w", err)
		}
		if _, _, err := d.copySide(o.Dst.Mem); err != nil {
			return fmt.Errorf("copy destination: %w", err)
		}
	case device.FillOp:
		if err := o.Validate(); err != nil {
			return err
		}
		if _, _, err := d.copySide(o.Dst); err != nil {
			return fmt.Errorf("fill destination: %w", err)
		}
	case device.LaunchOp:
		if o.Kernel != nil && o.Kernel.PTX == nil && o.Kernel.CUDA != nil {
			k, err := d.fromSource(o.Kernel)
			if err != nil {
				return err
			}
			o.Kernel = k
			op = o
		}
		args, err := d.checkLaunch(o)
		if err != nil {
			return err
		}
		p, err := d.prepareLaunch(o, args)
		if err != nil {
			return err
		}
		return d.push(task{queue: queue, op: op, done: done, args: args, launch: p})
	default:
		return fmt.Errorf("%w: %s cannot run %T", device.ErrUnsupported, d.info.ID, op)
	}
	return d.push(task{queue: queue, op: op, done: done})
}

// run is the owner goroutine. It holds its OS thread, with the device's
// context current, only while it talks to the driver: blocked waiting for
// work it is an ordinary goroutine, so waking it costs a goroutine switch,
// not the hand-off of a locked thread (measured: about 10 µs per wake-up on
// the GPU machine; docs/CUDA.md).
func (d *Device) run(ready chan<- error) {
	defer close(d.stopped)
	unlock, err := d.lockContext()
	if err == nil {
		err = d.start()
		unlock()
	}
	if err != nil {
		ready <- err
		return
	}
	go d.comp.run()
	ready <- nil
	th := &Thread{Lib: d.lib, Context: d.ctx, Device: d.dev, Streams: d.streams, d: d}
	for {
		<-d.wake
		unlock, err := d.lockContext()
		if err != nil {
			// The driver refuses our context: every op fails with why.
			d.log.Error("cuda context lost", "device", d.info.ID.String(), "error", err)
			unlock = func() {}
		}
		var closed bool
	batches:
		for {
			d.q.mu.Lock()
			var tasks []task
			tasks, closed = d.q.tasks, d.q.closed
			d.q.tasks = nil
			d.q.mu.Unlock()
			if err == nil {
				err = d.Lost() // queued before the loss: fail them without the driver
			}
			for i := 0; i < len(tasks); {
				t, n := tasks[i], 1
				switch {
				case t.run != nil:
					if d.graphs != nil {
						// Do and owner-internal work see every op queued
						// before them on its stream.
						d.graphs.releaseAll(d)
					}
					t.run(th)
				case err != nil:
					if t.done != nil {
						t.done(err)
					}
				case d.graphs != nil:
					n = d.graphs.execTask(d, tasks, i)
				default:
					d.exec(t)
				}
				clear(tasks[i : i+n])
				i += n
			}
			if d.graphs != nil {
				d.graphs.endBatch(d, closed)
			}
			d.flush()
			if closed && len(tasks) == 0 {
				d.shutdown()
				unlock()
				return
			}
			if closed {
				break
			}
			// More work queued meanwhile: take it on this thread, with the
			// context still current (no unlock, relock and cuCtxSetCurrent
			// between back-to-back batches). Under CompletionSpin, look for
			// it for SpinIdle first, still holding the thread.
			if d.cfg.Completion == CompletionSpin {
				if spinPoll(d.wake, d.cfg.SpinIdle) {
					continue
				}
				break
			}
			select {
			case <-d.wake:
			default:
				break batches
			}
		}
		unlock()
		if closed {
			select { // look again: more may have come before closed was set
			case d.wake <- struct{}{}:
			default:
			}
		}
	}
}

// lockContext locks the calling goroutine to its thread and makes the
// device's context current there; unlock ends that.
func (d *Device) lockContext() (unlock func(), err error) {
	runtime.LockOSThread()
	if err := d.lib.CtxSetCurrent(d.ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// start runs on the owner thread before any task.
func (d *Device) start() error {
	if err := d.lib.CtxSetCurrent(d.ctx); err != nil {
		return err
	}
	d.streams = make([]driver.Stream, d.cfg.Streams)
	for i := range d.streams {
		s, err := d.lib.StreamCreate(driver.StreamNonBlocking)
		if err != nil {
			return err
		}
		d.streams[i] = s
	}
	d.pending = make([][]completion, len(d.streams))
	if !d.cfg.NoGraphs {
		d.graphs = newGraphs(len(d.streams))
	}
	d.enablePeers()
	d.funcs = map[moduleKey]*module{}
	return nil
}

// shutdown runs on the owner thread once the inbox is closed and empty.
func (d *Device) shutdown() {
	if err := d.lib.CtxSynchronize(); err != nil {
		d.log.Warn("cuda synchronize at close failed", "device", d.info.ID.String(), "error", err)
	}
	d.comp.close() // waits until every done has been called
	d.mu.Lock()
	mems := d.mems
	d.mems = map[*device.Mem]*memState{}
	d.mu.Unlock()
	for m, st := range mems {
		if err := d.freeMem(st); err != nil {
			d.log.Warn("cuda free at close failed", "device", d.info.ID.String(), "bytes", m.Bytes, "error", err)
		}
	}
	d.group.staging.drain(d)
	if d.group.open.Add(-1) == 0 {
		d.group.unpinAll(d.lib)
	}
	if d.graphs != nil {
		d.graphs.clear(d)
	}
	for _, m := range d.funcs {
		_ = d.lib.ModuleUnload(m.mod)
	}
	d.comp.destroyEvents()
	for _, s := range d.streams {
		_ = d.lib.StreamDestroy(s)
	}
}

// stream maps a queue hint to a stream index.
func (d *Device) stream(queue int) int { return queue % len(d.streams) }

// issued records that op t is on stream s; the next flush covers it.
func (d *Device) issued(s int, c completion) {
	d.pending[s] = append(d.pending[s], c)
	if d.graphs != nil {
		d.graphs.inflight[s].Add(1)
	}
}

// flush hands every stream's issued ops to the completer: one event (or one
// host callback) per stream covers them all, since a stream runs in order.
func (d *Device) flush() {
	for s, list := range d.pending {
		if len(list) == 0 {
			continue
		}
		d.pending[s] = nil
		d.comp.submit(s, list)
	}
}

// exec starts one op on the owner thread. Failures to start call done at
// once.
func (d *Device) exec(t task) {
	var err error
	switch o := t.op.(type) {
	case device.CopyOp:
		err = d.execCopy(t, o)
	case device.FillOp:
		err = d.execFill(t, o)
	case device.LaunchOp:
		err = d.execLaunch(t, o)
	}
	if err != nil && t.done != nil {
		t.done(d.asLost(err))
	}
}

// Close waits for the queued work, stops the owner and completer goroutines
// and frees the device's allocations, streams and modules. Calling it twice
// is safe.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.q.mu.Lock()
		d.q.closed = true
		d.q.mu.Unlock()
		select {
		case d.wake <- struct{}{}:
		default:
		}
		<-d.stopped
		if err := d.lib.DevicePrimaryCtxRelease(d.dev); err != nil {
			d.closeErr = err
		}
	})
	return d.closeErr
}

// hostSlice views driver-owned host memory as bytes.
func hostSlice(p uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(driver.HostPointer(p)), n)
}
