package cuda

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/ebitengine/purego"
)

// batch is the ops one stream ran in one owner batch, and what tells when
// they are done: an event (poll, blocking-sync) or a host callback.
type batch struct {
	ev    driver.Event
	items []completion
	at    time.Time // when the owner submitted it
	s     int       // the stream's index
}

// completer reports finished work for one device (see Config.Completion).
// It is started by the owner and stopped by the owner's shutdown; it calls
// every done exactly once, including after close was asked.
type completer struct {
	d    *Device
	mode Completion
	in   chan batch    // poll and blocking-sync: batches in submission order
	quit chan struct{} // closed by close: no more batches will come
	exit chan struct{} // closed when run has returned

	evMu   sync.Mutex
	events []driver.Event // guarded by evMu: free events of this context
	all    []driver.Event // guarded by evMu: every event created, to destroy

	// Callback mode: batches whose host function ran, and how many are
	// still in flight.
	cbMu        sync.Mutex
	ready       []batch // guarded by cbMu
	outstanding int     // guarded by cbMu
	signal      chan struct{}
}

func newCompleter(d *Device) *completer {
	return &completer{d: d, mode: d.cfg.Completion, in: make(chan batch, 4096),
		quit: make(chan struct{}), exit: make(chan struct{}), signal: make(chan struct{}, 1)}
}

// event returns a free event of the device's context (owner thread: it may
// create one).
func (c *completer) event() (driver.Event, error) {
	c.evMu.Lock()
	if n := len(c.events); n > 0 {
		e := c.events[n-1]
		c.events = c.events[:n-1]
		c.evMu.Unlock()
		return e, nil
	}
	c.evMu.Unlock()
	flags := uint32(driver.EventDisableTiming)
	if c.mode == CompletionBlockingSync {
		flags |= driver.EventBlockingSync
	}
	e, err := c.d.lib.EventCreate(flags)
	if err != nil {
		return 0, err
	}
	c.evMu.Lock()
	c.all = append(c.all, e)
	c.evMu.Unlock()
	return e, nil
}

// putEvent returns an event to the pool (any goroutine; no driver call).
func (c *completer) putEvent(e driver.Event) {
	c.evMu.Lock()
	c.events = append(c.events, e)
	c.evMu.Unlock()
}

// destroyEvents runs on the owner thread after run has returned.
func (c *completer) destroyEvents() {
	c.evMu.Lock()
	all := c.all
	c.all, c.events = nil, nil
	c.evMu.Unlock()
	for _, e := range all {
		_ = c.d.lib.EventDestroy(e)
	}
}

// submit hands the completer the ops just issued on stream si (owner
// thread).
func (c *completer) submit(si int, items []completion) {
	if c.mode == CompletionCallback {
		c.submitCallback(si, items)
		return
	}
	ev, err := c.event()
	if err == nil {
		err = c.d.lib.EventRecord(ev, c.d.streams[si])
	}
	if err != nil {
		c.finish(batch{items: items, s: si}, err)
		return
	}
	c.in <- batch{ev: ev, items: items, at: time.Now(), s: si}
}

// finish reports a batch and recycles its event.
func (c *completer) finish(b batch, err error) {
	err = c.d.asLost(err)
	if g := c.d.graphs; g != nil {
		g.completed(c.d, b.s, len(b.items))
	}
	for _, it := range b.items {
		if it.done != nil {
			it.done(err)
		}
		if it.release != nil {
			it.release()
		}
	}
	if b.ev != 0 {
		c.putEvent(b.ev)
	}
}

// close is called by the owner after its last submit; it waits until every
// batch has been reported.
func (c *completer) close() {
	close(c.quit)
	if c.mode != CompletionCallback {
		close(c.in)
	}
	select {
	case c.signal <- struct{}{}:
	default:
	}
	<-c.exit
}

func (c *completer) run() {
	defer close(c.exit)
	switch c.mode {
	case CompletionBlockingSync:
		c.runBlocking()
	case CompletionCallback:
		c.runCallback()
	case CompletionSpin:
		c.runSpin()
	default:
		c.runPoll()
	}
}

// lockWithContext locks the completer to its thread with the device's
// context current (cuEventQuery and cuEventSynchronize do not need it, but
// it costs little and keeps the driver's assumptions).
func (c *completer) lockWithContext() {
	runtime.LockOSThread()
	_ = c.d.lib.CtxSetCurrent(c.d.ctx)
}

// pollSleep is how long to sleep before the next round of queries: an
// eighth of how long the newest batch has been waiting, within [min, max].
// Latency overshoot stays near an eighth of the wait (a 250 µs kernel is
// seen within about 30 µs), and a long kernel costs a few dozen wake-ups.
func pollSleep(waited, min, max time.Duration) time.Duration {
	s := waited / 8
	if s < min {
		s = min
	}
	if s > max {
		s = max
	}
	return s
}

// runPoll queries the events of pending batches; while some are not done
// it sleeps (pollSleep) on its thread with a 1 µs timer slack, so short
// sleeps are short. With nothing pending it blocks on its channel as an
// ordinary goroutine. It never spins.
func (c *completer) runPoll() {
	var pending []batch
	in := c.in
	min, max := c.d.cfg.PollMin, c.d.cfg.PollMax
	for {
		if len(pending) == 0 {
			if in == nil {
				return
			}
			b, ok := <-in
			if !ok {
				return
			}
			pending = append(pending, b)
		}
		c.lockWithContext()
		setTimerSlack(1000)
		for len(pending) > 0 {
		more:
			for in != nil {
				select {
				case b, ok := <-in:
					if !ok {
						in = nil
						break more
					}
					pending = append(pending, b)
				default:
					break more
				}
			}
			keep := pending[:0]
			for _, b := range pending {
				err := c.d.lib.EventQuery(b.ev)
				if errors.Is(err, driver.ErrNotReady) {
					keep = append(keep, b)
					continue
				}
				c.finish(b, err)
			}
			clear(pending[len(keep):])
			pending = keep
			if len(pending) > 0 {
				// Paced by the newest batch, not the oldest: a short copy
				// queued beside a long kernel on another stream is seen
				// within an eighth of its own wait, not of the kernel's
				// (a halo copy behind a 600 µs kernel waited up to 75 µs).
				nanosleep(pollSleep(time.Since(pending[len(pending)-1].at), min, max))
			}
		}
		setTimerSlack(0) // back to the thread's default
		runtime.UnlockOSThread()
	}
}

// runSpin is runPoll without the sleeps: while batches are pending it
// queries their events back to back; with none pending it looks for a new
// batch for SpinIdle (spinRecv) before it blocks on its channel. It never
// locks its thread or makes the context current: cuEventQuery needs
// neither, and on the GPU machine each cuCtxSetCurrent cost about 0.7 µs,
// a tenth of a small kernel's round trip.
func (c *completer) runSpin() {
	var pending []batch
	in := c.in
	for {
		if len(pending) == 0 {
			if in == nil {
				return
			}
			b, ok := spinRecv(in, c.d.cfg.SpinIdle)
			if !ok {
				return
			}
			pending = append(pending, b)
		}
	more:
		for in != nil {
			select {
			case b, ok := <-in:
				if !ok {
					in = nil
					break more
				}
				pending = append(pending, b)
			default:
				break more
			}
		}
		keep, done := pending[:0], 0
		for _, b := range pending {
			err := c.d.lib.EventQuery(b.ev)
			if errors.Is(err, driver.ErrNotReady) {
				keep = append(keep, b)
				continue
			}
			c.finish(b, err)
			done++
		}
		clear(pending[len(keep):])
		pending = keep
		if done > 0 {
			// A done callback that wakes a goroutine puts it next in line
			// on this P, where it would wait for as long as we spin (until
			// another P steals it, which the scheduler delays): let it run
			// now, on this thread.
			runtime.Gosched()
		}
	}
}

// spinRecv receives from ch, looking for a value without blocking for up
// to d before it blocks like a plain receive.
func spinRecv[T any](ch <-chan T, d time.Duration) (T, bool) {
	var start time.Time
	for i := 0; ; i++ {
		select {
		case v, ok := <-ch:
			return v, ok
		default:
		}
		if i%64 == 0 { // reading the clock costs more than a look at ch
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > d {
				break
			}
		}
	}
	v, ok := <-ch
	return v, ok
}

// spinPoll looks for a value on ch without blocking for up to d; it
// reports whether it took one.
func spinPoll[T any](ch <-chan T, d time.Duration) bool {
	var start time.Time
	for i := 0; ; i++ {
		select {
		case <-ch:
			return true
		default:
		}
		if i%64 == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > d {
				return false
			}
		}
	}
}

// runBlocking waits for each batch in order in cuEventSynchronize on
// blocking-sync events: the driver parks the thread until the GPU signals.
func (c *completer) runBlocking() {
	for b := range c.in {
		c.lockWithContext()
		err := c.d.lib.EventSynchronize(b.ev)
		runtime.UnlockOSThread()
		c.finish(b, err)
	}
}

// Host-function callbacks. purego allows a bounded number of callbacks per
// process, so there is one, shared by every device; userData is a key into
// hostFn.pending.
var hostFn struct {
	once    sync.Once
	addr    uintptr
	next    atomic.Uint64
	pending sync.Map // uint64 → cbEntry
}

type cbEntry struct {
	c *completer
	b batch
}

// hostFnCallback runs on a driver thread: it must not call the driver and
// must not block, so it hands the batch to the completer and returns.
func hostFnCallback(userData uintptr) {
	v, ok := hostFn.pending.LoadAndDelete(uint64(userData))
	if !ok {
		return
	}
	e := v.(cbEntry)
	e.c.cbMu.Lock()
	e.c.ready = append(e.c.ready, e.b)
	e.c.cbMu.Unlock()
	select {
	case e.c.signal <- struct{}{}:
	default:
	}
}

func (c *completer) submitCallback(si int, items []completion) {
	hostFn.once.Do(func() { hostFn.addr = purego.NewCallback(hostFnCallback) })
	id := hostFn.next.Add(1)
	s := c.d.streams[si]
	hostFn.pending.Store(id, cbEntry{c: c, b: batch{items: items, s: si}})
	c.cbMu.Lock()
	c.outstanding++
	c.cbMu.Unlock()
	if err := c.d.lib.LaunchHostFunc(s, hostFn.addr, uintptr(id)); err != nil {
		hostFn.pending.Delete(id)
		c.cbMu.Lock()
		c.outstanding--
		c.cbMu.Unlock()
		c.finish(batch{items: items, s: si}, err)
	}
}

func (c *completer) runCallback() {
	quit := c.quit
	// After a kernel fault the driver calls no host function again: a
	// batch in flight would never finish. While batches are in flight,
	// look every callbackProbe for a lost context, and fail them if so.
	probe := time.NewTicker(callbackProbe)
	defer probe.Stop()
	for {
		select {
		case <-c.signal:
		case <-quit:
			quit = nil
		case <-probe.C:
			c.failIfLost()
		}
		c.cbMu.Lock()
		ready := c.ready
		c.ready = nil
		c.outstanding -= len(ready)
		left := c.outstanding
		c.cbMu.Unlock()
		for _, b := range ready {
			c.finish(b, nil)
		}
		if quit == nil && left == 0 {
			return
		}
	}
}

// callbackProbe is how often the callback completer looks for a lost
// context while batches are in flight.
const callbackProbe = 100 * time.Millisecond

// failIfLost fails the batches in flight (callback mode) when the
// device's context is lost: it asks the driver about the device's streams
// (a lost context answers every call with its error, which the driver
// wrapper records), and then finishes each pending batch with the loss.
func (c *completer) failIfLost() {
	c.cbMu.Lock()
	n := c.outstanding
	c.cbMu.Unlock()
	if n == 0 {
		return
	}
	if c.d.Lost() == nil {
		if unlock, err := c.d.lockContext(); err == nil {
			for _, s := range c.d.streams { // fixed until the completer has stopped
				_ = c.d.lib.StreamQuery(s)
			}
			unlock()
		}
	}
	lost := c.d.Lost()
	if lost == nil {
		return
	}
	var failed []batch
	hostFn.pending.Range(func(k, v any) bool {
		if e := v.(cbEntry); e.c == c {
			if _, ok := hostFn.pending.LoadAndDelete(k); ok {
				failed = append(failed, e.b)
			}
		}
		return true
	})
	c.cbMu.Lock()
	c.outstanding -= len(failed)
	c.cbMu.Unlock()
	for _, b := range failed {
		c.finish(b, lost)
	}
}

// nanosleep sleeps the calling thread (locked to it) for d: a plain
// nanosleep system call, since Go timers round sleeps under a millisecond up
// to a millisecond.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
