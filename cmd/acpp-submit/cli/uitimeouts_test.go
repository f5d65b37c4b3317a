package cli

import (
	"log/slog"
	"testing"

	"github.com/acpp/acpp/liveview"
)

// TestUIServerTimeouts: the --ui server closes a kept-alive connection
// that idles and one whose client does not read its response
// (liveview.IdleTimeout, WriteTimeout; it had only ReadHeaderTimeout).
// liveview's TestCloseWithClientThatDoesNotRead covers the end of a run
// with such a client on the event stream.
func TestUIServerTimeouts(t *testing.T) {
	u, err := startUI("127.0.0.1:0", Config{}, "t", nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	h := u.http
	if h.ReadHeaderTimeout != liveview.ReadHeaderTimeout || h.IdleTimeout != liveview.IdleTimeout || h.WriteTimeout != liveview.WriteTimeout {
		t.Errorf("server timeouts: read header %v, idle %v, write %v; want %v, %v, %v", h.ReadHeaderTimeout, h.IdleTimeout, h.WriteTimeout,
			liveview.ReadHeaderTimeout, liveview.IdleTimeout, liveview.WriteTimeout)
	}
}
