package coordinator_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/acpp/acpp/device"
)

// Test kernels, registered in this process (in-process nodes share the
// registry). They record when they ran, so ordering and overlap can be
// checked from the kernels' own timestamps.

type span struct {
	id         uint64
	start, end time.Time
}

var spans struct {
	mu  sync.Mutex
	log []span
}

func takeSpans() []span {
	spans.mu.Lock()
	defer spans.mu.Unlock()
	out := spans.log
	spans.log = nil
	return out
}

// barriers: test_barrier(key, n) returns once n launches with the same
// key have arrived; it panics (failing the launch) after 20 s otherwise,
// so launches that do not run at the same time fail instead of hanging.
var barriers struct {
	mu sync.Mutex
	m  map[uint64]*barrier
}

type barrier struct {
	want, n int
	done    chan struct{}
}

// arrive counts a launch at barrier key. A barrier is gone once all its
// launches arrived, so a test that runs again (-count) starts afresh; a key
// in use with another count fails the launch (two tests share it).
func arrive(key uint64, n int) bool {
	barriers.mu.Lock()
	if barriers.m == nil {
		barriers.m = map[uint64]*barrier{}
	}
	b := barriers.m[key]
	if b == nil {
		b = &barrier{want: n, done: make(chan struct{})}
		barriers.m[key] = b
	}
	shared := b.want != n
	if !shared {
		b.n++
		if b.n == n {
			close(b.done)
			delete(barriers.m, key)
		}
	}
	barriers.mu.Unlock()
	if shared {
		panic(fmt.Sprintf("test_barrier key %d is in use with another count; give each test keys of its own", key))
	}
	select {
	case <-b.done:
		return true
	case <-time.After(20 * time.Second):
		return false
	}
}

func init() {
	scalar := func(name string, size int) device.Param {
		return device.Param{Name: name, Kind: device.ArgScalar, Space: device.Private, ElemSize: size}
	}
	acc := func(name string) device.Param {
		return device.Param{Name: name, Kind: device.ArgAccessor, Space: device.Global, ElemSize: 4}
	}
	// test_mark(id u64, buf accessor float32): buf[0] = buf[0]*2 + id,
	// recording its span; sleeps 20 ms so overlaps would show.
	device.MustRegister(device.Kernel{Name: "test_mark", Params: []device.Param{scalar("id", 8), acc("buf")}, Go: func(w *device.Work) {
		start := time.Now()
		id := binary.LittleEndian.Uint64(w.Args[0].Scalar)
		buf := w.Data[1]
		v := binary.LittleEndian.Uint32(buf)
		binary.LittleEndian.PutUint32(buf, v*2+uint32(id))
		time.Sleep(20 * time.Millisecond)
		spans.mu.Lock()
		spans.log = append(spans.log, span{id, start, time.Now()})
		spans.mu.Unlock()
	}})
	// test_barrier(key u64, n u64, buf accessor float32).
	device.MustRegister(device.Kernel{Name: "test_barrier", Params: []device.Param{scalar("key", 8), scalar("n", 8), acc("buf")}, Go: func(w *device.Work) {
		key := binary.LittleEndian.Uint64(w.Args[0].Scalar)
		n := binary.LittleEndian.Uint64(w.Args[1].Scalar)
		if !arrive(key, int(n)) {
			panic(fmt.Sprintf("test_barrier %d: only some of %d launches arrived within 20s: they did not overlap", key, n))
		}
	}})
	// test_ptx_only has no Go implementation: CPU devices cannot run it.
	device.MustRegister(device.Kernel{Name: "test_ptx_only", PTX: &device.PTX{Module: []byte(".entry test_ptx_only() { ret; }"), Entry: "test_ptx_only"}})
}

// started receives the key of every test_sleep launch as it starts.
var started = make(chan uint64, 16)

func init() {
	// test_sleep(key u64, ms u64, buf accessor float32): writes key into
	// buf[0] after sleeping ms milliseconds.
	device.MustRegister(device.Kernel{Name: "test_sleep", Params: []device.Param{
		{Name: "key", Kind: device.ArgScalar, Space: device.Private, ElemSize: 8},
		{Name: "ms", Kind: device.ArgScalar, Space: device.Private, ElemSize: 8},
		{Name: "buf", Kind: device.ArgAccessor, Space: device.Global, ElemSize: 4}}, Go: func(w *device.Work) {
		key := binary.LittleEndian.Uint64(w.Args[0].Scalar)
		select {
		case started <- key:
		default:
		}
		time.Sleep(time.Duration(binary.LittleEndian.Uint64(w.Args[1].Scalar)) * time.Millisecond)
		binary.LittleEndian.PutUint32(w.Data[2], uint32(key))
	}})
}
