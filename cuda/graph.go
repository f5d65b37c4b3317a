package cuda

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// Graph replay. A run of launches on one stream whose sequence repeats —
// Jacobi's ping-pong submits A→B, B→A, A→B, ... — costs one cuLaunchKernel
// each, about 2–4 µs of the owner's time on the GPU machine. Once the
// owner has launched the same period (1 to maxPeriod launches, each the
// same function, grid, block, shared memory and parameter bytes) minRepeats
// times in a row on a stream, it captures that period into a CUDA graph
// (cuStreamBeginCapture, the launches, cuStreamEndCapture,
// cuGraphInstantiate) and from then on replaces each further occurrence it
// finds whole in the batch it is running by a graph launch: a run of
// occurrences goes as graphs of 8, 4, 2 and 1 periods (graphReps), the
// largest that fit first, each captured the first time it is needed. Every
// op still gets its own done, reported as before by the stream's
// completion event.
//
// Which launches it has in hand depends on who is faster. When launches
// queue up behind the owner (a dependent chain the executor issues ahead,
// docs/RUNTIME.md, submitted faster than the owner launches), each batch
// it takes holds runs of them. When the GPU is the slower one, the owner
// keeps up and sees the launches one by one; then, while the stream
// already has holdDepth ops or more queued that have not completed, the
// owner holds a run that follows the period back (it does not launch it
// yet, costing the GPU nothing: it has that much work before it) until
// the run is a graph of 8 periods, another op comes for the stream, a Do
// task comes, or the stream's queue drains below holdDepth (the completer
// wakes the owner then). Otherwise nothing is held: a launch that no run
// in hand follows goes plainly. Graphs are kept per device in a small LRU
// cache (maxGraphs), freed when a module is unloaded and at Close; a
// pattern whose capture or launch failed is launched plainly from then
// on.

const (
	maxPeriod  = 4 // longest repeating sequence recognised
	minRepeats = 3 // periods launched plainly before the capture
	maxGraphs  = 8 // instantiated graphs kept per device
	histLen    = maxPeriod * minRepeats
	maxKeyLen  = 4096 // patterns with more parameter bytes are not captured
	holdDepth  = 32   // queued ops on a stream from which a run is held
)

// graphReps are the numbers of periods one graph holds, largest first: a
// run of occurrences is replayed as few graph launches as these make up
// (a graph of 16 kernels left the GPU no gaps between Jacobi steps at
// 2048², one of 2 about 0.5 µs a step; BenchmarkJacobiChain's raw rows).
var graphReps = [...]int{8, 4, 2, 1}

// launchSig is what makes two launches the same kernel node: function,
// geometry, dynamic shared memory and packed parameters.
type launchSig struct {
	fn     driver.Function
	grid   [3]uint32
	block  [3]uint32
	shared uint32
	params []byte // owned by the task's prepared launch, never changed
	name   string // the kernel's, for errors; not part of the identity
}

func (a *launchSig) same(b *launchSig) bool {
	return a.fn == b.fn && a.grid == b.grid && a.block == b.block && a.shared == b.shared && bytes.Equal(a.params, b.params)
}

// recognizer finds the repeating period of one stream's recent launches.
type recognizer struct {
	hist   []launchSig // the last histLen launches, oldest first
	period int         // 0: none; else the last period launches repeat
}

func (r *recognizer) reset() {
	clear(r.hist)
	r.hist, r.period = r.hist[:0], 0
}

// push records a plain launch and looks for the shortest period that the
// last minRepeats periods share.
func (r *recognizer) push(s launchSig) {
	if len(r.hist) == histLen {
		copy(r.hist, r.hist[1:])
		r.hist = r.hist[:histLen-1]
	}
	r.hist = append(r.hist, s)
	r.period = 0
	h := r.hist
	for p := 1; p <= maxPeriod; p++ {
		need := p * minRepeats
		if len(h) < need {
			break
		}
		ok := true
		for j := 1; j <= need-p && ok; j++ {
			ok = h[len(h)-j].same(&h[len(h)-j-p])
		}
		if ok {
			r.period = p
			return
		}
	}
}

// pattern is the period that the next launches should repeat, or nil.
func (r *recognizer) pattern() []launchSig {
	if r.period == 0 {
		return nil
	}
	return r.hist[len(r.hist)-r.period:]
}

// graphEntry is one instantiated graph of the cache.
type graphEntry struct {
	exec driver.GraphExec // 0: its capture failed; launch plainly
	used uint64           // LRU tick
}

// heldLaunch is a launch the owner holds back (graphs.held).
type heldLaunch struct {
	done func(error)
	sig  launchSig
}

// graphs is a device's graph replay state (owner only, except inflight
// and armed).
type graphs struct {
	recs  []recognizer // per stream
	cache map[string]*graphEntry
	tick  uint64
	run   []heldLaunch   // scratch: a run to replay
	key   []byte         // scratch for keys
	held  [][]heldLaunch // per stream: a run held back, in phase from the pattern's start

	// inflight counts per stream the ops issued whose completion the
	// completer has not reported yet; armed asks the completer to wake
	// the owner once it falls below holdDepth (the owner holds a run).
	inflight []atomic.Int64
	armed    []atomic.Bool

	captures, launches, replaced atomic.Int64 // GraphStats
}

// graphTotals adds up GraphStats over every device of the process, for
// tests and benchmarks that reach the devices through a queue.
var graphTotals struct{ captures, launches, replaced atomic.Int64 }

// GraphStats counts what graph replay did on a device.
type GraphStats struct {
	// Captures is the number of graphs captured and instantiated;
	// Launches the cuGraphLaunch calls; Replaced the kernel launches they
	// stood for.
	Captures, Launches, Replaced int64
}

// GraphStats returns the device's graph replay counters (all zero with
// Config.NoGraphs).
func (d *Device) GraphStats() GraphStats {
	if d.graphs == nil {
		return GraphStats{}
	}
	return GraphStats{Captures: d.graphs.captures.Load(), Launches: d.graphs.launches.Load(), Replaced: d.graphs.replaced.Load()}
}

// resolved is a launch ready for the driver.
type resolved struct {
	sig   launchSig
	empty bool // a zero-size range: nothing to launch
}

// execTask runs tasks[i] on the owner thread and returns how many tasks it
// ran: more than one when a graph replaced a run of launches.
func (g *graphs) execTask(d *Device, tasks []task, i int) int {
	t := tasks[i]
	o, ok := t.op.(device.LaunchOp)
	s := d.stream(t.queue)
	if !ok {
		g.release(d, s)
		g.recs[s].reset()
		d.exec(t)
		return 1
	}
	r, err := d.resolveLaunch(t, o)
	if err != nil || r.empty {
		g.release(d, s)
		g.recs[s].reset()
		if err != nil {
			t.done(d.asLost(err))
		} else {
			d.issued(s, completion{done: t.done})
		}
		return 1
	}
	rec := &g.recs[s]
	pat := rec.pattern()
	if h := g.held[s]; len(h) > 0 {
		if r.sig.same(&pat[len(h)%len(pat)]) {
			g.held[s] = append(h, heldLaunch{t.done, r.sig})
			if len(g.held[s]) == graphReps[0]*len(pat) {
				g.release(d, s) // one graph of the largest size
			}
			return 1
		}
		g.release(d, s)
		pat = rec.pattern() // the phase may have moved with a partial run
	}
	if pat != nil && pat[0].same(&r.sig) {
		if g.inflight[s].Load() >= holdDepth {
			g.held[s] = append(g.held[s][:0], heldLaunch{t.done, r.sig})
			return 1
		}
		if n := g.replay(d, tasks, i, s, pat, r); n > 0 {
			return n
		}
	}
	g.plain(d, s, t.done, r.sig)
	return 1
}

// plain launches sig on stream s as one kernel launch and records it.
func (g *graphs) plain(d *Device, s int, done func(error), sig launchSig) {
	if err := d.launch(s, &sig); err != nil {
		g.recs[s].reset()
		done(d.asLost(err))
		return
	}
	d.issued(s, completion{done: done})
	g.recs[s].push(sig)
}

// replay launches the whole periods of pat that tasks[i:] hold (first, the
// resolved tasks[i], starts one) from graphs, and returns the number of
// tasks they covered; 0 when not even one period is there or its graph
// cannot be had.
func (g *graphs) replay(d *Device, tasks []task, i, s int, pat []launchSig, first resolved) int {
	p := len(pat)
	run := append(g.run[:0], heldLaunch{tasks[i].done, first.sig})
	for j := i + 1; j < len(tasks); j++ {
		t := tasks[j]
		o, ok := t.op.(device.LaunchOp)
		if !ok || t.run != nil || d.stream(t.queue) != s {
			break
		}
		r, err := d.resolveLaunch(t, o)
		if err != nil || r.empty || !r.sig.same(&pat[(j-i)%p]) {
			break
		}
		run = append(run, heldLaunch{t.done, r.sig})
	}
	n := g.launchGraphs(d, s, pat, run[:len(run)/p*p])
	clear(run) // the parameters stay with the tasks, not here
	g.run = run[:0]
	return n
}

// launchGraphs launches run, whole periods of pat in phase, as graphs of
// graphReps periods, the largest that fit first, and reports each launch's
// completion; it returns how many of run's launches the graphs covered
// (fewer when a graph cannot be had). A graph of one kernel is used too: a
// repeated saxpy launched and waited for, one at a time, came back 2–3 µs
// sooner through a one-kernel graph than through cuLaunchKernel
// (BenchmarkSubmitWait, both builds alternated twice on one H100).
func (g *graphs) launchGraphs(d *Device, s int, pat []launchSig, run []heldLaunch) int {
	p := len(pat)
	done := 0
	for done < len(run) {
		left := (len(run) - done) / p
		reps := 1
		for _, r := range graphReps {
			if left >= r {
				reps = r
				break
			}
		}
		e := g.graph(d, s, pat, reps)
		if e == nil {
			break
		}
		if err := d.lib.GraphLaunch(e.exec, d.streams[s]); err != nil {
			d.log.Warn("cuda graph launch failed; launching its kernels one by one from now on", "device", d.info.ID.String(), "error", err)
			_ = d.lib.GraphExecDestroy(e.exec)
			e.exec = 0
			break
		}
		n := reps * p
		for _, l := range run[done : done+n] {
			d.issued(s, completion{done: l.done})
		}
		g.launches.Add(1)
		g.replaced.Add(int64(n))
		graphTotals.launches.Add(1)
		graphTotals.replaced.Add(int64(n))
		done += n
	}
	return done
}

// release launches the run held on stream s: its whole periods as graphs,
// the rest one by one.
func (g *graphs) release(d *Device, s int) {
	h := g.held[s]
	if len(h) == 0 {
		return
	}
	g.armed[s].Store(false)
	n := 0
	// The pattern cannot have changed while the run was held (only
	// plain launches and resets of this stream change it, and both
	// release first); the check keeps a broken promise from dividing by 0.
	if pat := g.recs[s].pattern(); pat != nil {
		n = g.launchGraphs(d, s, pat, h[:len(h)/len(pat)*len(pat)])
	}
	for _, l := range h[n:] {
		g.plain(d, s, l.done, l.sig)
	}
	clear(h)
	g.held[s] = h[:0]
}

// releaseAll releases every stream's held run.
func (g *graphs) releaseAll(d *Device) {
	for s := range g.held {
		g.release(d, s)
	}
}

// endBatch runs at the end of each owner batch: a held run stays held only
// while its stream still has holdDepth ops queued, and then the completer
// is asked to wake the owner once it has fewer. At Close everything goes.
func (g *graphs) endBatch(d *Device, closing bool) {
	for s := range g.held {
		if len(g.held[s]) == 0 {
			continue
		}
		if closing {
			g.release(d, s)
			continue
		}
		g.armed[s].Store(true)
		// After arming: a completion that took the count below
		// holdDepth before it saw the flag is seen here.
		if g.inflight[s].Load() < holdDepth {
			g.release(d, s)
		}
	}
}

// completed is the completer's report that n ops of stream s finished; it
// wakes the owner when a held run's stream has drained below holdDepth.
func (g *graphs) completed(d *Device, s, n int) {
	if g.inflight[s].Add(-int64(n)) < holdDepth && g.armed[s].Load() && g.armed[s].Swap(false) {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// graph returns the instantiated graph of reps periods of pat, capturing
// it on stream s the first time; nil when its capture failed (now or
// before).
func (g *graphs) graph(d *Device, s int, pat []launchSig, reps int) *graphEntry {
	key := g.keyOf(pat, reps)
	if key == nil {
		return nil
	}
	g.tick++
	if e := g.cache[string(key)]; e != nil { // no allocation for the lookup
		e.used = g.tick
		if e.exec == 0 {
			return nil
		}
		return e
	}
	x, err := d.capture(s, pat, reps)
	e := &graphEntry{exec: x, used: g.tick}
	if err != nil {
		d.log.Info("cuda graph capture failed; launching this sequence one by one", "device", d.info.ID.String(), "kernels", reps*len(pat), "error", err)
		e.exec = 0
	} else {
		g.captures.Add(1)
		graphTotals.captures.Add(1)
	}
	g.evict(d)
	g.cache[string(key)] = e
	if e.exec == 0 {
		return nil
	}
	return e
}

// keyOf encodes a pattern and its repetitions as a cache key (in g.key),
// or nil when it is too large to keep.
func (g *graphs) keyOf(pat []launchSig, reps int) []byte {
	k := binary.LittleEndian.AppendUint32(g.key[:0], uint32(reps))
	for i := range pat {
		s := &pat[i]
		k = binary.LittleEndian.AppendUint64(k, uint64(s.fn))
		for _, v := range [...]uint32{s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2], s.shared, uint32(len(s.params))} {
			k = binary.LittleEndian.AppendUint32(k, v)
		}
		k = append(k, s.params...)
	}
	g.key = k
	if len(k) > maxKeyLen {
		return nil
	}
	return k
}

// evict makes room for one more entry: the least recently used goes.
func (g *graphs) evict(d *Device) {
	if len(g.cache) < maxGraphs {
		return
	}
	var oldest string
	var at uint64
	for k, e := range g.cache {
		if oldest == "" || e.used < at {
			oldest, at = k, e.used
		}
	}
	g.drop(d, oldest)
}

func (g *graphs) drop(d *Device, key string) {
	if e := g.cache[key]; e != nil && e.exec != 0 {
		// A launch of it still in flight completes: the driver frees it
		// then (cuGraphExecDestroy).
		_ = d.lib.GraphExecDestroy(e.exec)
	}
	delete(g.cache, key)
}

// clear frees every graph and forgets every stream's history: a module
// was unloaded (its functions are gone) or the device closes.
func (g *graphs) clear(d *Device) {
	for k := range g.cache {
		g.drop(d, k)
	}
	for i := range g.recs {
		g.recs[i].reset()
	}
}

func newGraphs(streams int) *graphs {
	return &graphs{recs: make([]recognizer, streams), cache: map[string]*graphEntry{},
		held: make([][]heldLaunch, streams), inflight: make([]atomic.Int64, streams), armed: make([]atomic.Bool, streams)}
}

// capture records reps periods of pat on stream s into a graph and
// instantiates it. The capture is thread-local: other threads' driver
// calls (the completer's event queries) are not affected.
func (d *Device) capture(s int, pat []launchSig, reps int) (driver.GraphExec, error) {
	st := d.streams[s]
	if err := d.lib.StreamBeginCapture(st, driver.StreamCaptureModeThread); err != nil {
		return 0, err
	}
	var lerr error
	for range reps {
		for i := range pat {
			if lerr = d.launch(s, &pat[i]); lerr != nil {
				break
			}
		}
		if lerr != nil {
			break
		}
	}
	gr, err := d.lib.StreamEndCapture(st) // ends the capture also after a failed launch
	if lerr == nil {
		lerr = err
	}
	if lerr != nil {
		if gr != 0 {
			_ = d.lib.GraphDestroy(gr)
		}
		return 0, lerr
	}
	x, err := d.lib.GraphInstantiate(gr)
	_ = d.lib.GraphDestroy(gr) // the instantiated graph does not need it
	return x, err
}
