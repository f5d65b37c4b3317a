package device

import (
	"runtime"
	"sync/atomic"
	"time"
)

// SpinWaiter is implemented by devices whose user chose to trade host CPU
// for completion latency (the CUDA backend under CompletionSpin). A
// goroutine that waits for such a device's op then spins on the op's
// completion for up to SpinWait before it parks: a parked waiter must be
// woken by whoever calls done, and that wake-up (5–10 µs on virtual
// machines) is as long as a small kernel. SpinWait never changes; 0 means
// wait as for any other device (park at once). Devices without it (the CPU
// backend) are waited for without spinning.
type SpinWaiter interface {
	SpinWait() time.Duration
}

// SpinWaitOf is d's SpinWait, or 0 when d does not implement SpinWaiter.
func SpinWaitOf(d Device) time.Duration {
	if s, ok := d.(SpinWaiter); ok {
		return max(s.SpinWait(), 0)
	}
	return 0
}

// yieldBelowProcs: SpinUntil yields only with fewer Ps than this. With
// more, the goroutines a wait depends on have Ps of their own, and each
// yield only moved the waiter to another thread and core, its cache
// left behind (on a 16-core GPU host the goroutine that spun then
// submitted the next group 4 times slower than on a 2-core VM).
const yieldBelowProcs = 4

// SpinUntil spins until done is set, for up to bound, and reports whether
// it was. It stops early, reporting false, once cancel is closed (nil:
// never). The caller then parks on whatever done's setter also signals (a
// channel closed after done is set): SpinUntil only shortens the common
// case where completion comes within the bound.
//
// Every 64 looks it reads the clock and checks cancel. With fewer than
// yieldBelowProcs Ps, every 1024 looks it also yields its processor
// (runtime.Gosched, about a microsecond apart): a goroutine that the wait
// depends on (the device's completer) may be runnable on this P, and with
// few Ps it would otherwise wait until the spin ended.
func SpinUntil(done *atomic.Bool, bound time.Duration, cancel <-chan struct{}) bool {
	return SpinFor(func() bool { return done.Load() }, bound, cancel)
}

// SpinFor is SpinUntil for any condition: it spins until cond reports
// true, for up to bound, and reports whether it did. cond must be cheap
// (an atomic load) and have no effects.
func SpinFor(cond func() bool, bound time.Duration, cancel <-chan struct{}) bool {
	if cond() {
		return true
	}
	if bound <= 0 {
		return false
	}
	start := time.Now()
	yield := runtime.GOMAXPROCS(0) < yieldBelowProcs
	for i := 1; ; i++ {
		if cond() {
			return true
		}
		if i%64 != 0 { // reading the clock costs more than a look at cond
			continue
		}
		if time.Since(start) > bound {
			return cond()
		}
		select {
		case <-cancel:
			return cond()
		default:
		}
		if yield && i%1024 == 0 {
			runtime.Gosched()
		}
	}
}
