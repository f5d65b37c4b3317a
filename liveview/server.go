package liveview

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

// DefaultInterval is the shortest time between two views: at most four
// updates a second, whatever happens in between.
const DefaultInterval = 250 * time.Millisecond

// Config configures a Server.
type Config struct {
	// Snapshot takes a view (required). The server calls it from its one
	// goroutine, only while a page (or /view.json) asks, at most once per
	// Interval; it should copy what it needs under its locks and return.
	Snapshot func() View
	// Interval is the shortest time between two views; 0 means
	// DefaultInterval.
	Interval time.Duration
	// Logger receives the server's events; nil discards them.
	Logger *slog.Logger
}

// check refuses a Config without Snapshot or with a negative Interval.
func (c Config) check() error {
	if c.Snapshot == nil {
		return errors.New("liveview: Config.Snapshot is nil; give the function that takes a view")
	}
	if c.Interval < 0 {
		return fmt.Errorf("liveview: Config.Interval %v is negative; give 0 (%v) or more", c.Interval, DefaultInterval)
	}
	return nil
}

// Server serves the page, its event stream and the view as JSON. Start
// one with Start; Close stops it.
type Server struct {
	cfg  Config
	log  *slog.Logger
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{} // closed when the loop has exited
	kick chan struct{} // a subscriber arrived: take a view now

	mu sync.Mutex // guards subs, last, stopping and starting streams
	// subs are the open streams, each with a one-slot channel that holds
	// the newest view it has not sent yet (coalesced).
	subs    map[chan []byte]struct{}
	last    []byte    // the newest view, JSON; nil before the first
	lastAt  time.Time // when last was taken
	streams sync.WaitGroup

	// rates: the link byte counts of recent views (the loop's only).
	hist []sample
}

type sample struct {
	t     time.Time
	bytes map[[2]string]int64
}

// Start starts the server's loop. A Config without Snapshot is a
// programmer's error: Start panics at once, rather than the server's
// goroutine at the first view (Serve returns it as an error).
func Start(cfg Config) *Server {
	if err := cfg.check(); err != nil {
		panic(err)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: log, ctx: ctx, stop: stop, done: make(chan struct{}),
		kick: make(chan struct{}, 1), subs: map[chan []byte]struct{}{}}
	go s.loop()
	return s
}

// Close stops the loop, ends the open streams and waits for them. It is
// safe to call twice.
func (s *Server) Close() {
	s.mu.Lock()
	s.stop()
	s.mu.Unlock()
	<-s.done
	s.streams.Wait()
}

// loop takes a view each Interval while someone watches and hands it to
// every subscriber. Two views are never closer than Interval: the timer
// counts from the latest view, also one taken at once for a new page.
func (s *Server) loop() {
	defer close(s.done)
	t := time.NewTimer(s.cfg.Interval)
	defer t.Stop()
	var lastTake time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			// A new page: answer at once unless a view was just taken
			// (the timer brings the next one).
			if time.Since(lastTake) < s.cfg.Interval {
				continue
			}
		}
		now := time.Now()
		t.Reset(s.cfg.Interval)
		s.mu.Lock()
		n := len(s.subs)
		s.mu.Unlock()
		if n == 0 {
			continue
		}
		lastTake = now
		s.publish(s.take(now), now)
	}
}

// take calls Snapshot and fills in the time and the link rates.
func (s *Server) take(now time.Time) []byte {
	v := s.cfg.Snapshot()
	v.Time = now
	cur := sample{t: now, bytes: make(map[[2]string]int64, len(v.Links))}
	for _, l := range v.Links {
		cur.bytes[[2]string{l.From, l.To}] = l.Bytes
	}
	// The rate over the oldest kept sample at most about a second back.
	for len(s.hist) > 1 && now.Sub(s.hist[1].t) >= time.Second {
		s.hist = s.hist[1:]
	}
	// After a pause of more than a second (nobody watched), the samples
	// before it give no rate of the last second: the first view shows none.
	if len(s.hist) > 0 && now.Sub(s.hist[len(s.hist)-1].t) > time.Second {
		s.hist = s.hist[:0]
	}
	if len(s.hist) > 0 {
		old := s.hist[0]
		if dt := now.Sub(old.t).Seconds(); dt > 0 {
			for i := range v.Links {
				l := &v.Links[i]
				if prev, ok := old.bytes[[2]string{l.From, l.To}]; ok && l.Bytes >= prev {
					l.Rate = float64(l.Bytes-prev) / dt
				}
			}
		}
	}
	s.hist = append(s.hist, cur)
	if v.Members == nil {
		v.Members = []Member{}
	}
	if v.Jobs == nil {
		v.Jobs = []Job{}
	}
	if v.Buffers == nil {
		v.Buffers = []Buffer{}
	}
	if v.Links == nil {
		v.Links = []Link{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("live view: encode", "error", err)
		return nil
	}
	return b
}

// publish hands b, taken at, to every subscriber, replacing a view it
// has not sent.
func (s *Server) publish(b []byte, at time.Time) {
	if b == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.lastAt = b, at
	for ch := range s.subs {
		select {
		case <-ch: // drop the unsent one
		default:
		}
		ch <- b
	}
}

func (s *Server) subscribe() chan []byte {
	ch := make(chan []byte, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return ch
}

func (s *Server) unsubscribe(ch chan []byte) {
	s.mu.Lock()
	delete(s.subs, ch)
	s.mu.Unlock()
}

// Handler serves the page at / (and /index.html), the event stream at
// /events and the newest view at /view.json. It only reads.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(static, "static")
	page, _ := fs.ReadFile(sub, "index.html")
	servePage := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(page)
	}
	mux.HandleFunc("GET /{$}", servePage)
	mux.HandleFunc("GET /index.html", servePage)
	mux.HandleFunc("GET /events", s.serveEvents)
	mux.HandleFunc("GET /view.json", s.serveJSON)
	return mux
}

// serveJSON answers the next view as JSON (for scripts and tests).
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	ch := s.subscribe()
	defer s.unsubscribe(ch)
	var b []byte
	select {
	case b = <-ch:
	case <-r.Context().Done():
		return
	case <-s.ctx.Done():
		http.Error(w, "live view stopped", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	// Bounded also where the server has no WriteTimeout (a mux of the
	// program's own): a client that does not read is dropped, and Close
	// ends the write at once, as for an event stream (Shutdown waited for
	// it, then failed).
	dl := newDeadline(w)
	stop := context.AfterFunc(s.ctx, dl.stop)
	defer stop()
	if !dl.extend() {
		return
	}
	w.Write(b)
}

// serveEvents streams views as server-sent events until the client goes
// or the server closes.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	// Under mu, so that a stream either starts before Close or not at
	// all (Close waits for the streams it let start).
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		http.Error(w, "live view stopped", http.StatusServiceUnavailable)
		return
	}
	s.streams.Add(1)
	s.mu.Unlock()
	defer s.streams.Done()
	// Each event must be taken within eventWriteTimeout: a client that
	// stops reading is dropped then (its browser reconnects), and Close
	// ends a write that blocks on it at once, instead of waiting for
	// ever for a client that never reads.
	dl := newDeadline(w)
	stop := context.AfterFunc(s.ctx, dl.stop)
	defer stop()
	ch := s.subscribe()
	defer s.unsubscribe(ch)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if !dl.extend() {
		return
	}
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("retry: 2000\n\n"))
	fl.Flush()
	// The newest view, unless it is older than an interval (nobody
	// watched for a while): the loop takes a fresh one at once for this
	// stream, and an old one would show a past state as now.
	s.mu.Lock()
	last := s.last
	if time.Since(s.lastAt) >= s.cfg.Interval {
		last = nil
	}
	s.mu.Unlock()
	if last != nil {
		if !dl.extend() {
			return
		}
		writeEvent(w, last)
		fl.Flush()
	}
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case b := <-ch:
			if bytes.Equal(b, last) {
				continue
			}
			last = b
			if !dl.extend() {
				return
			}
			if _, err := writeEvent(w, b); err != nil {
				return
			}
		case <-keep.C:
			if !dl.extend() {
				return
			}
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
		fl.Flush()
	}
}

// eventWriteTimeout is how long a stream's client may take to read one
// event (tests shorten it).
var eventWriteTimeout = WriteTimeout

// deadline is the write deadline of one event stream: extend sets it
// eventWriteTimeout ahead before each event, stop (the server closes)
// sets it to now, which ends a write blocked on a client that does not
// read. Where the ResponseWriter cannot set deadlines (another server's
// writer that does not unwrap to net/http's), the stream has none.
type deadline struct {
	rc      *http.ResponseController
	mu      sync.Mutex
	stopped bool
}

func newDeadline(w http.ResponseWriter) *deadline {
	return &deadline{rc: http.NewResponseController(w)}
}

// extend gives the next write eventWriteTimeout; false once stopped.
func (d *deadline) extend() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return false
	}
	d.rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	return true
}

func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	d.rc.SetWriteDeadline(time.Now())
}

// writeEvent writes one "view" event (JSON has no newlines).
func writeEvent(w http.ResponseWriter, b []byte) (int, error) {
	n, err := w.Write([]byte("event: view\ndata: "))
	if err != nil {
		return n, err
	}
	m, err := w.Write(b)
	if err != nil {
		return n + m, err
	}
	k, err := w.Write([]byte("\n\n"))
	return n + m + k, err
}
