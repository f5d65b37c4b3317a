package liveview

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// stuckReader opens url's /events with a tiny receive buffer and never
// reads it; big views fill the socket within a second, and the stream's
// writes block.
func stuckReader(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(1)
	fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
	return c
}

// bigViews takes 256 KiB views that always differ, every 10 ms.
func bigViews() Config {
	big := strings.Repeat("x", 256<<10)
	n := 0
	return Config{Interval: 10 * time.Millisecond, Snapshot: func() View {
		n++
		return View{Title: fmt.Sprint(n), Notes: []string{big}}
	}}
}

// TestCloseWithClientThatDoesNotRead: Close returns at once while a
// client holds an event stream open without reading it (it used to wait
// for ever for the blocked write: acpp-submit run --ui never exited after
// its job, a program's deferred queueview Close never returned).
func TestCloseWithClientThatDoesNotRead(t *testing.T) {
	e, err := Serve(context.Background(), "127.0.0.1:0", bigViews())
	if err != nil {
		t.Fatal(err)
	}
	c := stuckReader(t, e.URL())
	defer c.Close()
	time.Sleep(time.Second) // the socket's buffers fill, the write blocks
	done := make(chan error, 1)
	go func() { done <- e.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		c.Close() // lets the blocked write fail, so that Close returns
		<-done
		t.Fatal("Close still blocked 5 s after it was called, on a client that does not read its stream")
	}
}

// TestStreamThatIsNotReadIsDropped: a stream whose client takes no event
// within the write timeout is ended while the server runs, instead of
// holding its goroutine and connection for as long as the client wants.
func TestStreamThatIsNotReadIsDropped(t *testing.T) {
	defer func(d time.Duration) { eventWriteTimeout = d }(eventWriteTimeout)
	eventWriteTimeout = 300 * time.Millisecond
	e, err := Serve(context.Background(), "127.0.0.1:0", bigViews())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := stuckReader(t, e.URL())
	defer c.Close()
	subs := func() int {
		e.lv.mu.Lock()
		defer e.lv.mu.Unlock()
		return len(e.lv.subs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for subs() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for subs() != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := subs(); n != 0 {
		t.Fatalf("%d streams still open 10 s after a client stopped reading (write timeout %v)", n, eventWriteTimeout)
	}
}

// TestServeTimeouts: Serve's server has an idle and a write timeout (it had
// only ReadHeaderTimeout: a kept-alive connection stayed open for ever, and
// so did one whose client did not read its response).
func TestServeTimeouts(t *testing.T) {
	e, err := Serve(context.Background(), "127.0.0.1:0", Config{Snapshot: func() View { return View{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if h := e.http; h.ReadHeaderTimeout != ReadHeaderTimeout || h.IdleTimeout != IdleTimeout || h.WriteTimeout != WriteTimeout || h.IdleTimeout <= 0 || h.WriteTimeout <= 0 {
		t.Errorf("server timeouts: read header %v, idle %v, write %v; want %v, %v, %v", h.ReadHeaderTimeout, h.IdleTimeout, h.WriteTimeout, ReadHeaderTimeout, IdleTimeout, WriteTimeout)
	}
}

// TestCloseWithJSONClientThatDoesNotRead: Close returns at once, without
// error, while a client has not read a /view.json answer too big for the
// socket's buffers; it waited for the 2 s of Shutdown and returned
// "context deadline exceeded" (acpp-node's Close too), the handler's write
// blocked for up to WriteTimeout.
func TestCloseWithJSONClientThatDoesNotRead(t *testing.T) {
	big := strings.Repeat("x", 8<<20)
	e, err := Serve(context.Background(), "127.0.0.1:0", Config{Interval: 10 * time.Millisecond, Snapshot: func() View { return View{Notes: []string{big}} }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(e.URL(), "http://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(1)
	fmt.Fprintf(c, "GET /view.json HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(time.Second) // the view is taken, the write blocks
	start := time.Now()
	err = e.Close()
	if took := time.Since(start); err != nil || took >= 3*time.Second/2 {
		t.Errorf("Close with a /view.json answer not read: %v after %v, want nil at once", err, took.Round(time.Millisecond))
	}
}
