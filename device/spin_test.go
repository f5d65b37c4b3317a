package device

import (
	"sync/atomic"
	"testing"
	"time"
)

// spinner is a device (its methods unused) that asks for a spin of d.
type spinner struct {
	Device
	d time.Duration
}

func (s spinner) SpinWait() time.Duration { return s.d }

// SpinUntil reports a completion that is already there or comes while it
// spins, gives up after its bound or when cancel is closed, and never
// spins without a bound. SpinWaitOf is 0 for devices that do not ask.
func TestSpinUntil(t *testing.T) {
	var done atomic.Bool
	if SpinUntil(&done, 0, nil) {
		t.Fatal("SpinUntil with no bound reported an unset flag as done")
	}
	start := time.Now()
	if SpinUntil(&done, time.Millisecond, nil) {
		t.Fatal("SpinUntil reported an unset flag as done")
	}
	if took := time.Since(start); took < time.Millisecond {
		t.Fatalf("SpinUntil gave up after %v, before its 1 ms bound", took)
	}
	cancel := make(chan struct{})
	close(cancel)
	if SpinUntil(&done, time.Hour, cancel) { // returns: cancel is closed
		t.Fatal("SpinUntil reported an unset flag as done after cancel")
	}
	go func() {
		time.Sleep(time.Millisecond)
		done.Store(true)
	}()
	if !SpinUntil(&done, time.Hour, nil) {
		t.Fatal("SpinUntil missed the flag set while it spun")
	}
	if !SpinUntil(&done, 0, nil) {
		t.Fatal("SpinUntil missed a flag already set")
	}
	if w := SpinWaitOf(spinner{d: time.Second}); w != time.Second {
		t.Fatalf("SpinWaitOf a SpinWaiter = %v, want its SpinWait (1s)", w)
	}
	if w := SpinWaitOf(spinner{d: -1}); w != 0 {
		t.Fatalf("SpinWaitOf a negative SpinWait = %v, want 0", w)
	}
	if w := SpinWaitOf(spinner{}.Device); w != 0 {
		t.Fatalf("SpinWaitOf nil = %v, want 0", w)
	}
}
