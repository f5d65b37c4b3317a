package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/acpp/acpp/device"
)

type jobKind uint8

const (
	jobEmpty   jobKind = iota // a launch of no items
	jobCopy                   // copy
	jobFill                   // fill
	jobFlat                   // a flat launch, split along dimension sd
	jobGrouped                // a launch in work-groups
)

// job is one op split into n chunks. Workers claim chunks through next; the
// worker that finishes the last chunk calls done, then returns the job to
// jobs. A job holds its op's fields instead of a closure: enqueueing an op
// allocates nothing in the steady state.
type job struct {
	n    int64
	next atomic.Int64 // next chunk to claim
	left atomic.Int64 // chunks not yet finished
	done func(error)
	name string

	kind     jobKind
	copy     device.CopyOp
	fill     device.FillOp
	fn       device.GoFunc
	rng      device.NDRange
	args     []device.Arg
	data     [][]byte
	dataBuf  [4][]byte // data of launches with few arguments
	sd       int       // jobFlat: the dimension split into chunks
	groups   [3]int    // jobGrouped: work-groups per dimension
	hasLocal bool

	errMu sync.Mutex
	err   error // first failure; guarded by errMu
	fail  atomic.Bool
}

var jobs = sync.Pool{New: func() any { return new(job) }}

func getJob() *job { return jobs.Get().(*job) }

// putJob recycles j; nothing may refer to it any more.
func putJob(j *job) {
	*j = job{}
	jobs.Put(j)
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
	queue   ring         // jobs with unclaimed chunks, oldest first; guarded by mu
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
	p.queue.push(j)
	p.queued.Store(int64(p.queue.n))
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
		for p.queue.n > 0 {
			j := p.queue.head()
			c := j.next.Add(1) - 1
			if c < j.n {
				if c == j.n-1 { // last chunk claimed: retire the job
					p.queue.pop()
					p.queued.Store(int64(p.queue.n))
				}
				p.mu.Unlock()
				return j, c
			}
			p.queue.pop()
			p.queued.Store(int64(p.queue.n))
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
		if p.queue.n == 0 && !p.closed {
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
			if err := p.runChunk(j, int(c), w); err != nil {
				j.setErr(err)
			}
		}
		p.finish(j)
	}
}

// finish counts a chunk of j as finished; the last one calls done.
func (p *pool) finish(j *job) {
	if j.left.Add(-1) == 0 {
		j.errMu.Lock()
		err := j.err
		j.errMu.Unlock()
		p.inDone.Add(1)
		j.done(err)
		p.inDone.Add(-1)
		// The last chunk was claimed (so j left the queue) and every
		// chunk finished: no one else refers to j.
		putJob(j)
		p.busy.Done()
	}
}

// errGoexit is the error of a chunk whose kernel called runtime.Goexit.
const errGoexit = "the kernel called runtime.Goexit (t.Fatal, t.FailNow, t.Skip and log.Fatal-like helpers do; they may only run on the test's own goroutine): report failures from a kernel through a buffer, or panic"

func (p *pool) runChunk(j *job, c int, w *device.Work) (err error) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", device.ErrKernelPanic, j.name, r)
		} else if !returned {
			// runtime.Goexit: nothing recovers from it, and this worker ends
			// once its deferred calls have run. Fail the launch, finish the
			// chunk here (the worker's loop will not) and start a worker in
			// its place, so that neither the launch nor the pool is lost.
			j.setErr(fmt.Errorf("%w: %s: %s", device.ErrKernelPanic, j.name, errGoexit))
			p.wg.Add(1)
			go p.worker()
			p.finish(j)
		}
	}()
	j.run(c, w)
	returned = true
	return nil
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

// ring is a FIFO of jobs that reuses its memory (a slice popped from the
// front reallocates on every refill).
type ring struct {
	buf  []*job // len is a power of two
	h, n int    // head index, count
}

func (r *ring) push(j *job) {
	if r.n == len(r.buf) {
		nb := make([]*job, max(16, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = r.buf[(r.h+i)&(len(r.buf)-1)]
		}
		r.buf, r.h = nb, 0
	}
	r.buf[(r.h+r.n)&(len(r.buf)-1)] = j
	r.n++
}

func (r *ring) head() *job { return r.buf[r.h] }

func (r *ring) pop() {
	r.buf[r.h] = nil
	r.h = (r.h + 1) & (len(r.buf) - 1)
	r.n--
}
