package embedded

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/internal/engine"
	"github.com/acpp/acpp/internal/goroutines"
)

// waiterState is the scheduler state ("select", "running", ...) of the
// one goroutine in the Wait named by fn, or "" if there is none.
var waiterState = goroutines.StateIn

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// A queue's event of a group on a spinning device (plain and split over
// two chunks) spins in Wait while the group runs, and returns once every
// chunk has run; with a short bound it parks after it.
func TestEventWaitSpinsOnSpinWaiterDevice(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a spinning waiter and the device need two processors")
	}
	for _, c := range []struct {
		name  string
		split bool
		spin  time.Duration // an hour: it spins for the whole test
		fn    string        // the Wait that the waiter's stack shows
	}{
		{"plain", false, time.Hour, "exec.(*Node).Wait("},
		{"split", true, time.Hour, "(*splitEvent).Wait("},
		{"split-short-bound", true, time.Millisecond, "(*splitEvent).Wait("},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := devicetest.NewFake(devicetest.FakeConfig{SpinWait: c.spin})
			defer f.Close()
			e, err := Open[struct{}](context.Background(), Config{Devices: []device.Device{f}, Kinds: []device.Kind{device.KindFake}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			var ran atomic.Int32
			g := &engine.Group{Name: "k", Action: "parallel_for",
				Ops: []device.Op{device.LaunchOp{Name: "k", Range: device.NDRange{Global: [3]int{1, 1, 64}},
					Func: func(*device.Work) { ran.Add(1) }}}}
			p := engine.Place{}
			if c.split {
				g.Split = &engine.Split{Chunks: 2, Along: -1}
				p.Split = g.Split
			}
			if g.Target, err = e.Target(p); err != nil {
				t.Fatal(err)
			}
			release := f.Hold()
			defer release()
			_, s := e.NewGroup()
			ev, err := e.Submit(s, g)
			if err != nil {
				t.Fatal(err)
			}
			if c.split && len(ev.(*splitEvent).nodes) != 2 {
				t.Fatalf("split into %d chunks, want 2", len(ev.(*splitEvent).nodes))
			}
			res := make(chan error, 1)
			go func() { res <- ev.Wait(context.Background()) }()
			waitFor(t, "the waiter is in Wait", func() bool { return waiterState(c.fn) != "" })
			if c.spin == time.Millisecond {
				waitFor(t, "the waiter parks", func() bool { return waiterState(c.fn) == "select" })
			} else {
				for range 20 {
					if st := waiterState(c.fn); st == "select" || st == "" {
						t.Fatalf("the waiter is %q while the group is held; want it spinning", st)
					}
					time.Sleep(time.Millisecond)
				}
			}
			release()
			select {
			case err := <-res:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Wait did not return within 10 s")
			}
			if ran.Load() == 0 {
				t.Fatal("Wait returned before the group ran")
			}
		})
	}
}
