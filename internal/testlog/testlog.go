// Package testlog gives tests a *slog.Logger that writes to the test's
// output and goes quiet when the test ends: background goroutines of
// libraries (memberlist, quic-go handlers) may still log after that, and
// writing to a finished test's output panics.
package testlog

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// New returns a logger for t at level and above.
func New(t testing.TB, level slog.Level) *slog.Logger {
	w := &writer{w: t.Output()}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// Default returns a logger for t at Warn, or Debug when ACPP_TEST_DEBUG is
// set in the environment.
func Default(t testing.TB) *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("ACPP_TEST_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	return New(t, lvl)
}

type writer struct {
	mu   sync.Mutex // guards done and serialises writes
	w    io.Writer
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	return w.w.Write(p)
}

func (w *writer) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// Buffer collects what a logger shared by goroutines writes, for tests
// that look at the log: a bytes.Buffer safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
