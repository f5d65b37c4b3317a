package liveview

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readEvents reads n "view" events from an SSE stream.
func readEvents(t *testing.T, body io.Reader, n int) []View {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var out []View
	event := ""
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if event != "view" {
				t.Fatalf("data for event %q, want view", event)
			}
			var v View
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
				t.Fatalf("decode %q: %v", line, err)
			}
			out = append(out, v)
		}
	}
	if len(out) < n {
		t.Fatalf("stream ended after %d views (%v), want %d", len(out), sc.Err(), n)
	}
	return out
}

func TestEventsStreamViewsAtABoundedRate(t *testing.T) {
	var calls atomic.Int64
	var bytes atomic.Int64
	s := Start(Config{Interval: 50 * time.Millisecond, Snapshot: func() View {
		calls.Add(1)
		b := bytes.Add(1000)
		buf := NewBuffer("a", [3]int{8, 1, 1})
		buf.AddAlloc("n1/m0", nil, nil)
		return View{Title: "t", Jobs: []Job{{Name: "j", Done: int(calls.Load()), Planned: 100, State: "running"}},
			Buffers: []Buffer{buf}, Links: []Link{{From: "n1", To: "n2", Bytes: b}}}
	}})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	defer s.Close()

	// Nobody watches: no snapshots.
	time.Sleep(150 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("Snapshot called %d times with no page open, want 0", n)
	}

	page, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if !strings.Contains(string(body), "EventSource(") || page.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET / = %s %q…, want the embedded page", page.Header.Get("Content-Type"), body[:min(len(body), 60)])
	}

	// Three streams at once share one snapshot per interval.
	start := time.Now()
	var resps []*http.Response
	for range 3 {
		r, err := http.Get(srv.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		if ct := r.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("GET /events Content-Type = %q, want text/event-stream", ct)
		}
		resps = append(resps, r)
	}
	var views []View
	for _, r := range resps {
		views = readEvents(t, r.Body, 5)
	}
	took := time.Since(start)
	if n := calls.Load(); float64(n) > took.Seconds()/0.05+3 {
		t.Errorf("Snapshot called %d times in %v with 3 streams, want at most one per 50 ms interval", n, took)
	}
	last := views[len(views)-1]
	if last.Title != "t" || len(last.Buffers) != 1 || last.Buffers[0].Allocs[0].Valid != "ffffffff" {
		t.Errorf("view = %+v, want the snapshot's", last)
	}
	if r := last.Links[0].Rate; r <= 0 {
		t.Errorf("link rate = %v, want > 0 (bytes grow between views)", r)
	}
	if !views[0].Time.Before(last.Time) {
		t.Errorf("view times %v, %v: want increasing", views[0].Time, last.Time)
	}

	// The JSON view answers too.
	r, err := http.Get(srv.URL + "/view.json")
	if err != nil {
		t.Fatal(err)
	}
	var v View
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil || v.Title != "t" {
		t.Errorf("GET /view.json = %+v, %v; want the view", v, err)
	}
	r.Body.Close()
}

// A stream that does not read gets the newest view, never a queue: the
// server does not block on it and keeps one view per subscriber.
func TestSlowSubscriberCoalesces(t *testing.T) {
	var n atomic.Int64
	s := Start(Config{Interval: 5 * time.Millisecond, Snapshot: func() View {
		return View{Jobs: []Job{{Name: "j", Done: int(n.Add(1))}}}
	}})
	defer s.Close()
	ch := s.subscribe()
	defer s.unsubscribe(ch)
	time.Sleep(100 * time.Millisecond)
	if got := n.Load(); got < 5 {
		t.Fatalf("Snapshot called %d times in 100 ms at 5 ms, want the loop not blocked by a full subscriber", got)
	}
	// One slot, overwritten: never a queue of old views. (Checking that
	// the slot is empty after a read raced with the loop refilling it.)
	if cap(ch) != 1 {
		t.Errorf("subscriber channel holds up to %d views, want 1", cap(ch))
	}
	var v, next View
	json.Unmarshal(<-ch, &v)
	if v.Jobs[0].Done < 3 {
		t.Errorf("subscriber got view %d, want a recent one", v.Jobs[0].Done)
	}
	select {
	case b := <-ch:
		json.Unmarshal(b, &next)
		if next.Jobs[0].Done <= v.Jobs[0].Done {
			t.Errorf("views %d then %d: want newer", v.Jobs[0].Done, next.Jobs[0].Done)
		}
	case <-time.After(5 * time.Second):
		t.Error("no view after the first")
	}
}

// Close ends open streams and is safe twice.
func TestCloseEndsStreams(t *testing.T) {
	s := Start(Config{Snapshot: func() View { return View{} }})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	r, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	readEvents(t, r.Body, 1)
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, r.Body)
		close(done)
	}()
	s.Close()
	s.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open 5 s after Close")
	}
	r.Body.Close()
}

// TestConfigRefused: Serve refuses a Config without Snapshot or with a
// negative Interval, before it listens (the server's goroutine used to
// panic at the first view); Start panics at once.
func TestConfigRefused(t *testing.T) {
	for _, cfg := range []Config{{}, {Snapshot: func() View { return View{} }, Interval: -time.Second}} {
		if e, err := Serve(context.Background(), "127.0.0.1:0", cfg); err == nil || !strings.Contains(err.Error(), "liveview: Config.") {
			if e != nil {
				e.Close()
			}
			t.Errorf("Serve(%+v) = %v, want an error naming the field", cfg, err)
		}
	}
	//lint:ignore SA1012 a nil context is what is tested
	if _, err := Serve(nil, "127.0.0.1:0", Config{Snapshot: func() View { return View{} }}); err == nil { //nolint:staticcheck
		t.Error("Serve(nil, …) succeeded, want an error")
	}
	defer func() {
		if recover() == nil {
			t.Error("Start without Snapshot did not panic")
		}
	}()
	Start(Config{})
}

// TestViewsNeverCloserThanInterval: a page that opens takes a view at
// once, and the next one comes an interval after it, not at the next
// tick of a clock that ran on its own (views came 16 ms apart); a page
// opened after a pause gets no old view first (it got the view taken
// when the last page closed, seconds old); and the link rate of the
// first views after a pause is not averaged over the pause (it showed
// bytes moved seconds before as moving now).
func TestViewsNeverCloserThanInterval(t *testing.T) {
	const iv = 100 * time.Millisecond
	var moved atomic.Int64
	s := Start(Config{Interval: iv, Snapshot: func() View {
		return View{Links: []Link{{From: "n1", To: "n2", Bytes: moved.Load()}}}
	}})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	defer s.Close()
	for round := range 4 {
		opened := time.Now()
		r, err := http.Get(srv.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		views := readEvents(t, r.Body, 4)
		r.Body.Close()
		if age := opened.Sub(views[0].Time); age > iv {
			t.Errorf("round %d: a new page's first view was taken %v before it opened, want a fresh one", round, age)
		}
		for i := 1; i < len(views); i++ {
			if gap := views[i].Time.Sub(views[i-1].Time); gap < iv {
				t.Errorf("round %d: views %d and %d are %v apart, want at least the interval %v", round, i-1, i, gap, iv)
			}
		}
		if round > 0 {
			for i, v := range views {
				if r := v.Links[0].Rate; r != 0 {
					t.Errorf("round %d: view %d shows %.0f B/s, want 0: the bytes moved before the pause", round, i, r)
				}
			}
		}
		// Bytes move while nobody watches, then a pause of three
		// intervals beyond a second.
		time.Sleep(iv / 2)
		moved.Add(1 << 20)
		time.Sleep(time.Second + 3*iv)
	}
}
