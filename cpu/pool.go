package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/acpp/acpp/device"
)

// job is one op split into n chunks. Workers claim chunks through next; the
// worker that finishes the last chunk calls done.
type job struct {
	n     int64
	next  atomic.Int64                          // next chunk to claim
	left  atomic.Int64                          // chunks not yet finished
	run   func(chunk int, w *device.Work) error // w is the worker's, reset before each call
	done  func(error)
	name  string
	errMu sync.Mutex
	err   error // first failure; guarded by errMu
	fail  atomic.Bool
}

func (j *job) setErr(err error) {
	j.errMu.Lock()
	if j.err == nil {
		j.err = err
	}
	j.errMu.Unlock()
	j.fail.Store(true)
}

// pool runs jobs on a fixed set of worker goroutines.
type pool struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*job       // jobs with unclaimed chunks, oldest first; guarded by mu
	closed  bool         // workers stop once the queue is empty; guarded by mu
	closing bool         // submit refuses new jobs; guarded by mu
	idle    int          // workers spinning or waiting on cond; guarded by mu
	queued  atomic.Int64 // len(queue), readable without mu by spinning workers
	// spinning counts idle workers that still poll queued: they need no
	// signal. inDone counts workers inside a job's done callback: they
	// claim again as soon as it returns, so a job submitted from a callback
	// (the next command group of a chain) needs no wake-up for its first
	// chunk. Skipping those wake-ups saves two futex calls per group.
	spinning atomic.Int64
	inDone   atomic.Int64
	wg       sync.WaitGroup
	busy     sync.WaitGroup // jobs not yet done
}

func newPool(workers int) *pool {
	p := &pool{}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(workers)
	for range workers {
		go p.worker()
	}
	return p
}

// submit queues j and wakes as many idle workers as it has chunks.
func (p *pool) submit(j *job) error {
	j.left.Store(j.n)
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return device.ErrClosed
	}
	p.busy.Add(1)
	p.queue = append(p.queue, j)
	p.queued.Store(int64(len(p.queue)))
	sleepers := int64(p.idle) - p.spinning.Load()
	wake := min(sleepers, j.n-p.inDone.Load())
	p.mu.Unlock()
	for range wake {
		p.cond.Signal()
	}
	return nil
}

// claim returns a job with an unclaimed chunk and the chunk, or nil when the
// pool is closed and drained.
func (p *pool) claim() (*job, int64) {
	// A few lock-free-ish retries before sleeping keep a pipelined stream of
	// small jobs from paying a wake-up each.
	p.mu.Lock()
	for {
		for len(p.queue) > 0 {
			j := p.queue[0]
			c := j.next.Add(1) - 1
			if c < j.n {
				if c == j.n-1 { // last chunk claimed: retire the job
					p.queue[0] = nil
					p.queue = p.queue[1:]
					p.queued.Store(int64(len(p.queue)))
				}
				p.mu.Unlock()
				return j, c
			}
			p.queue[0] = nil
			p.queue = p.queue[1:]
			p.queued.Store(int64(len(p.queue)))
		}
		if p.closed {
			p.mu.Unlock()
			return nil, 0
		}
		p.idle++
		p.spinning.Add(1)
		p.mu.Unlock()
		// Spin briefly: follow-up work usually arrives within a microsecond
		// (a done callback enqueueing the next command group).
		for i := 0; i < 16 && p.queued.Load() == 0; i++ {
			runtime.Gosched()
		}
		p.spinning.Add(-1)
		p.mu.Lock()
		if len(p.queue) == 0 && !p.closed {
			p.cond.Wait()
		}
		p.idle--
	}
}

func (p *pool) worker() {
	defer p.wg.Done()
	w := new(device.Work) // reused: a chunk's Work lives only during its call
	for {
		j, c := p.claim()
		if j == nil {
			return
		}
		if !j.fail.Load() {
			*w = device.Work{}
			if err := runChunk(j, int(c), w); err != nil {
				j.setErr(err)
			}
		}
		if j.left.Add(-1) == 0 {
			j.errMu.Lock()
			err := j.err
			j.errMu.Unlock()
			p.inDone.Add(1)
			j.done(err)
			p.inDone.Add(-1)
			p.busy.Done()
		}
	}
}

func runChunk(j *job, c int, w *device.Work) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", device.ErrKernelPanic, j.name, r)
		}
	}()
	return j.run(c, w)
}

// close waits for queued jobs, then stops the workers.
func (p *pool) close() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.busy.Wait()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
}
