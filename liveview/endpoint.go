package liveview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// The timeouts of every HTTP server acpp runs (NewHTTPServer): acpp-node's
// --http-addr, acpp-submit run --ui, Serve. None of them reads a request
// body, so there is no ReadTimeout (it would also end the event streams).
const (
	// ReadHeaderTimeout is how long a client may take to send a request's
	// headers: a connection that sends half a request is closed then.
	ReadHeaderTimeout = 5 * time.Second
	// WriteTimeout is how long one response may take to be written (the
	// client must read it): a client that stops reading is disconnected
	// then instead of holding a goroutine and a connection for ever. An
	// event stream applies it to each event (Server.Handler).
	WriteTimeout = 30 * time.Second
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	IdleTimeout = 60 * time.Second
)

// NewHTTPServer is an http.Server for h with the timeouts above.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout}
}

// Endpoint is a live view served over HTTP (Serve).
type Endpoint struct {
	lv   *Server
	http *http.Server
	url  string
	stop func() bool // stops the watch of ctx
	once sync.Once   // shuts down once
	err  error       // Shutdown's; set in once
}

// Serve serves the live view that cfg.Snapshot takes (Start) on addr,
// such as "127.0.0.1:8090" ("127.0.0.1:0" picks a free port: see URL),
// until ctx ends or Close is called. The view has no authentication: bind
// it to loopback (docs/LIVEVIEW.md, "Who can read it"). It costs nothing
// while no page is open. Package queueview serves a Go program's Queue
// this way.
func Serve(ctx context.Context, addr string, cfg Config) (*Endpoint, error) {
	if ctx == nil {
		return nil, errors.New("liveview: Serve got a nil context; pass context.Background() or one that ends the view")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("liveview: %s: %w (is the port in use? pass host:port, e.g. 127.0.0.1:8090)", addr, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Endpoint{url: "http://" + ln.Addr().String() + "/"}
	e.lv = Start(cfg)
	e.http = NewHTTPServer(e.lv.Handler())
	go func() {
		if err := e.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("live view server stopped", "error", err)
		}
	}()
	e.stop = context.AfterFunc(ctx, func() { e.shutdown() })
	return e, nil
}

// URL is where the page is ("http://127.0.0.1:8090/"); /view.json
// answers the next view as JSON.
func (e *Endpoint) URL() string { return e.url }

// Close stops serving: it ends the open streams and closes the listener.
// Calling it twice is safe.
func (e *Endpoint) Close() error {
	e.stop()
	return e.shutdown()
}

func (e *Endpoint) shutdown() error {
	e.once.Do(func() {
		e.lv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e.err = e.http.Shutdown(ctx)
	})
	return e.err
}
