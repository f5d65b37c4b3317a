package devicetest

import (
	"sync/atomic"

	"github.com/acpp/acpp/device"
)

// Fault decides, for each op or allocation, whether to fail it. n counts
// calls from 1. A nil error lets the call through.
type Fault func(n int64, op device.Op) error

// FailNth fails the nth op (allocations count too; op is nil for them).
func FailNth(nth int64, err error) Fault {
	return func(n int64, _ device.Op) error {
		if n == nth {
			return err
		}
		return nil
	}
}

// FailOps fails every op for which match returns true.
func FailOps(match func(device.Op) bool, err error) Fault {
	return func(_ int64, op device.Op) error {
		if op != nil && match(op) {
			return err
		}
		return nil
	}
}

// Faulty wraps a device and injects errors. Failed ops fail through done
// (asynchronously, as a real device failure would) unless AtEnqueue is set.
type Faulty struct {
	device.Device
	fault Fault
	n     atomic.Int64
	// AtEnqueue makes injected op errors return from Enqueue instead.
	AtEnqueue bool
}

// NewFaulty wraps d.
func NewFaulty(d device.Device, f Fault) *Faulty { return &Faulty{Device: d, fault: f} }

// Alloc implements device.Device.
func (f *Faulty) Alloc(kind device.MemKind, bytes int) (*device.Mem, error) {
	if err := f.fault(f.n.Add(1), nil); err != nil {
		return nil, err
	}
	return f.Device.Alloc(kind, bytes)
}

// Enqueue implements device.Device.
func (f *Faulty) Enqueue(queue int, op device.Op, done func(error)) error {
	err := f.fault(f.n.Add(1), op)
	if err == nil {
		return f.Device.Enqueue(queue, op, done)
	}
	if f.AtEnqueue {
		return err
	}
	// Fail asynchronously, still through the wrapped device's goroutine
	// order: run a no-op fill-free path by calling done on a new goroutine
	// owned by the call (it ends right away).
	go done(err)
	return nil
}
