package exec

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/internal/goroutines"
)

// newSpinRig is a runtime over a CPU device and a Fake that asks for a
// spin of spin (none when 0).
func newSpinRig(t *testing.T, spin time.Duration, fc devicetest.FakeConfig) (*Runtime, device.Device, *devicetest.Fake) {
	t.Helper()
	fc.SpinWait = spin
	r, d := newFakeRig(t, Config{}, fc, nil)
	return r.rt, d, r.fake
}

// waiterState is the scheduler state ("select", "running", "runnable",
// ...) of the one goroutine in Node.Wait, or "" if there is none.
func waiterState() string { return stateIn("exec.(*Node).Wait(") }

var stateIn = goroutines.StateIn

// heldWait submits one op to d while the Fake is held, starts a Wait for
// it with ctx and returns the Wait's result channel, the release of the
// Fake and whether the op ran.
func heldWait(t *testing.T, ctx context.Context, rt *Runtime, d device.Device, f *devicetest.Fake) (<-chan error, func(), *bool) {
	t.Helper()
	release := f.Hold()
	t.Cleanup(release)
	ran := new(bool)
	n, err := rt.Submit(Group{Name: "held", Device: d, Ops: []device.Op{launch(func() { *ran = true })}})
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- n.Wait(ctx) }()
	waitFor(t, "the waiter is in Node.Wait", func() bool { return waiterState() != "" })
	return res, release, ran
}

func waitResult(t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Node.Wait did not return within 10 s")
		return nil
	}
}

// On a device that asks for it (device.SpinWaiter), Node.Wait spins on
// the node's completion instead of parking: with a bound far longer than
// the test, the waiter is never seen parked while its op is held, and it
// returns once the op has run (and sees what the op wrote: -race).
func TestWaitSpinsOnSpinWaiterDevice(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a spinning waiter and the device need two processors")
	}
	rt, d, f := newSpinRig(t, time.Hour, devicetest.FakeConfig{})
	if got := rt.SpinWait(d); got != time.Hour {
		t.Fatalf("SpinWait of the spinning fake = %v, want 1h", got)
	}
	res, release, ran := heldWait(t, context.Background(), rt, d, f)
	for range 20 {
		if st := waiterState(); st == "select" || st == "" {
			t.Fatalf("the waiter of a spinning device is %q while its op is held; want it spinning (running or runnable)", st)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	if err := waitResult(t, res); err != nil {
		t.Fatal(err)
	}
	if !*ran {
		t.Fatal("Wait returned before the op ran")
	}
}

// The spin is bounded: a node that finishes long after the bound is
// waited for parked (no CPU burnt for the rest of the wait), and the Wait
// still returns once it finishes.
func TestWaitParksAfterSpinBound(t *testing.T) {
	rt, d, f := newSpinRig(t, time.Millisecond, devicetest.FakeConfig{})
	res, release, ran := heldWait(t, context.Background(), rt, d, f)
	waitFor(t, "the waiter parks after its 1 ms spin", func() bool { return waiterState() == "select" })
	select {
	case err := <-res:
		t.Fatalf("Wait returned %v while the op is held", err)
	default:
	}
	release()
	if err := waitResult(t, res); err != nil {
		t.Fatal(err)
	}
	if !*ran {
		t.Fatal("Wait returned before the op ran")
	}
}

// Devices that do not ask for a spin (CPU devices, a plain Fake, host
// tasks) are waited for parked, as before: no CPU burnt.
func TestWaitDoesNotSpinOnOtherDevices(t *testing.T) {
	rt, d, f := newSpinRig(t, 0, devicetest.FakeConfig{})
	for _, x := range append(rt.Devices(), nil) {
		if w := rt.SpinWait(x); w != 0 {
			t.Fatalf("SpinWait(%v) = %v, want 0", x, w)
		}
	}
	res, release, _ := heldWait(t, context.Background(), rt, d, f)
	waitFor(t, "the waiter parks", func() bool { return waiterState() == "select" })
	release()
	if err := waitResult(t, res); err != nil {
		t.Fatal(err)
	}
}

// A spinning Wait still ends with its context: cancelled while it spins
// (bound: an hour), it returns the context's error, and the node finishes
// later as usual.
func TestWaitSpinEndsWithContext(t *testing.T) {
	rt, d, f := newSpinRig(t, time.Hour, devicetest.FakeConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	res, release, _ := heldWait(t, ctx, rt, d, f)
	cancel()
	if err := waitResult(t, res); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v after its context was cancelled, want context.Canceled", err)
	}
	release()
	if err := rt.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Many short groups on a spinning device whose completions reach the host
// late, each waited for by its submitter while others finish: every Wait
// returns nil after its own op ran (the race detector checks that the
// spin's return orders the op's write before the waiter's read).
func TestWaitSpinSeesEachCompletion(t *testing.T) {
	rt, d, _ := newSpinRig(t, 50*time.Microsecond, devicetest.FakeConfig{DoneLatency: 20 * time.Microsecond})
	vals := make([]int, 200)
	for i := range vals {
		n, err := rt.Submit(Group{Name: "short", Device: d, Ops: []device.Op{launch(func() { vals[i] = i + 1 })}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if vals[i] != i+1 {
			t.Fatalf("group %d: Wait returned before its op wrote (%d)", i, vals[i])
		}
	}
}

// Runtime.Wait spins too where a device asks for it: with a bound far
// longer than the test, a Wait for a held op is never seen parked, and it
// returns once the op has run; cancelled, it returns the context's error.
// Without a spinning device it parks at once.
func TestRuntimeWaitSpinsOnSpinWaiterDevice(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a spinning waiter and the device need two processors")
	}
	const waitFn = "exec.(*Runtime).Wait("
	for _, spin := range []time.Duration{time.Hour, 0} {
		rt, d, f := newSpinRig(t, spin, devicetest.FakeConfig{})
		release := f.Hold()
		t.Cleanup(release) // before the rig's Close, which waits for the op
		ran := false
		if _, err := rt.Submit(Group{Name: "held", Device: d, Ops: []device.Op{launch(func() { ran = true })}}); err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() { res <- rt.Wait(context.Background()) }()
		waitFor(t, "the waiter is in Runtime.Wait", func() bool { return stateIn(waitFn) != "" })
		if spin == 0 {
			waitFor(t, "the waiter parks", func() bool { return stateIn(waitFn) == "select" })
		} else {
			for range 20 {
				if st := stateIn(waitFn); st == "select" || st == "" {
					t.Fatalf("Runtime.Wait with a spinning device is %q while the op is held; want it spinning", st)
				}
				time.Sleep(time.Millisecond)
			}
		}
		release()
		if err := waitResult(t, res); err != nil {
			t.Fatal(err)
		}
		if !ran {
			t.Fatalf("spin %v: Wait returned before the op ran", spin)
		}
	}
	rt, d, f := newSpinRig(t, time.Hour, devicetest.FakeConfig{})
	t.Cleanup(f.Hold())
	if _, err := rt.Submit(Group{Name: "held", Device: d, Ops: []device.Op{launch(func() {})}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- rt.Wait(ctx) }()
	waitFor(t, "the waiter is in Runtime.Wait", func() bool { return stateIn(waitFn) != "" })
	cancel()
	if err := waitResult(t, res); !errors.Is(err, context.Canceled) {
		t.Fatalf("a spinning Runtime.Wait cancelled: %v, want context.Canceled", err)
	}
}
