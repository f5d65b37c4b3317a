package acpp

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

func TestFailedCopyFailsOnlyItsGroup(t *testing.T) {
	registerTestKernels()
	ctx := context.Background()
	f := devicetest.NewFake(devicetest.FakeConfig{})
	defer f.Close()
	boom := errors.New("injected DMA failure")
	var failing atomic.Bool
	failing.Store(true)
	faulty := devicetest.NewFaulty(f, func(_ int64, op device.Op) error {
		if _, ok := op.(device.CopyOp); ok && failing.Load() {
			return boom
		}
		return nil
	})
	q := newQueue(t, WithDevices(faulty), WithDevice(device.KindFake, 0), WithDevice(CPU, 0))
	data := []float32{1, 2, 3, 4}
	b := must(NewBufferFrom(q, data, R1(4)))
	ev := add(t, q, b, 1, fakeID, false) // needs a host→device copy: fails
	if err := ev.Wait(ctx); !errors.Is(err, boom) {
		t.Fatalf("group with a failed copy = %v, want the injected error", err)
	}
	if err := q.Wait(ctx); !errors.Is(err, boom) {
		t.Fatalf("q.Wait = %v, want the injected error", err)
	}
	// Other work goes on. (Coherence recorded the failed group's effects as
	// if it had run, so the next host use copies the device's pages back.)
	failing.Store(false)
	must(q.Submit(func(h *Handler) error {
		a := ReadWrite(h, b)
		h.SingleTask(func() { a.Set(0, 10) })
		return nil
	}, On(cpuID)))
	waitAll(t, q)
	if v := must(b.Read(ctx)); v[0] != 10 {
		t.Fatalf("v[0] = %v, want 10", v[0])
	}
}

func TestFailedAllocationIsASubmitError(t *testing.T) {
	f := devicetest.NewFake(devicetest.FakeConfig{})
	defer f.Close()
	oom := device.ErrOutOfMemory
	faulty := devicetest.NewFaulty(f, func(_ int64, op device.Op) error {
		if op == nil {
			return oom
		}
		return nil
	})
	q := newQueue(t, WithDevices(faulty), WithDevice(device.KindFake, 0))
	b := must(NewBuffer[float32](q, R1(4)))
	_, err := q.Submit(func(h *Handler) error {
		ReadWrite(h, b)
		h.SingleTask(func() {})
		return nil
	})
	if !errors.Is(err, device.ErrOutOfMemory) {
		t.Fatalf("Submit = %v, want ErrOutOfMemory", err)
	}
}
