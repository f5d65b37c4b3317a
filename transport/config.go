package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
)

// Config configures a Transport. Credentials are required (the cluster's
// name comes from them); every other field has a documented default for
// its zero value.
type Config struct {
	// Credentials are this process's certificate, key and cluster CA
	// (required). Their identity is the name and role the transport
	// announces; a client identity cannot listen.
	Credentials *credentials.Credentials

	// ListenAddr is the UDP host:port to accept connections on, e.g.
	// "0.0.0.0:7946" or "127.0.0.1:0". Empty: accept none (a client); the
	// transport still dials from an ephemeral port, and peers may use the
	// connections it dialed to call back.
	ListenAddr string

	// Resolve maps a node name to the host:port of its listener. The node
	// supplies one that consults cluster membership (C1). Nil (a client):
	// a node without an open connection is dialed again at the address
	// DialAddr last reached it at (after its connection broke, or it
	// restarted); other peers can be called only over an open connection.
	Resolve func(ctx context.Context, node string) (string, error)

	// Authorize is consulted for every connection, in both directions, once
	// the peer's certificate is verified and its handshake read: a non-nil
	// error refuses it, and the peer sees the error's text (C6). The node
	// supplies one that accepts members of the cluster and clients. Nil:
	// every holder of a certificate of the cluster CA is accepted.
	Authorize func(ctx context.Context, peer credentials.Identity) error

	// MaxFrameSize bounds a control frame in bytes, both ways. Zero means
	// 16 MiB.
	MaxFrameSize int

	// MaxPageBytes bounds the payload of one incoming page transfer. Zero
	// means 64 GiB.
	MaxPageBytes uint64

	// PageStreams is how many streams one page transfer is spread over,
	// each carrying at least MinSegmentBytes. Zero means 1: on a 2-core
	// machine more streams did not move bytes faster (docs/TRANSPORT.md).
	PageStreams int

	// MinSegmentBytes is the smallest share of a transfer given its own
	// stream. Zero means 16 MiB.
	MinSegmentBytes int

	// StreamWindow and ConnWindow are the largest QUIC flow-control windows
	// for one stream and one connection, in bytes: how much a peer may send
	// before this end reads it, so the memory a slow reader may hold per
	// connection. Zero means 32 MiB and 128 MiB.
	StreamWindow, ConnWindow uint64

	// DialTimeout bounds connection set-up: QUIC and TLS handshakes plus the
	// acpp Hello exchange. Zero means 10 seconds.
	DialTimeout time.Duration

	// IdleTimeout closes a connection that has heard nothing from its peer
	// for this long; keep-alives are sent at a third of it, so a live peer
	// never idles out and a dead one is noticed within it. It also bounds
	// waiting for a request frame and for the missing parts of a page
	// transfer. Zero means 15 seconds.
	IdleTimeout time.Duration

	// MaxIncomingStreams bounds the concurrent requests (and, separately,
	// one-way messages) a peer may have open on one connection; further
	// ones wait. Zero means 1024.
	MaxIncomingStreams int64

	// MaxRequestBytes bounds the memory of the requests this transport
	// reads and serves at once, from all peers together: each costs its
	// frame's bytes plus what decoding it may make (requestCost). A
	// request whose frame does not fit waits for room (for up to
	// IdleTimeout; then it is refused, "busy"). Without it, 1024 streams
	// of one connection with a 16 MiB frame each would hold 16 GiB before
	// a handler ran. Zero means 512 MiB; it must hold at least one
	// request of MaxFrameSize.
	MaxRequestBytes int64

	// Software describes the build in handshakes, for peers' logs.
	// Empty means "acpp".
	Software string

	// Instance tells this process apart from others holding the same
	// certificate; it is announced in the handshake and becomes
	// Identity.Instance of this end at the peer. Connections to a client
	// are cached per instance (one client identity may run many processes
	// at once); a node's connection from a new instance replaces those of
	// its previous run. The node passes its boot ID. Zero means a random
	// number.
	Instance uint64

	// OnConnection, if not nil, is told when a connection to a peer is
	// established (after its handshake) and when it closes. It is called on
	// the transport's goroutines and must not block (hand the event to a
	// goroutine of your own). A peer may briefly have two connections when
	// both ends dial at once; use Transport.Connected for the current
	// state. The node uses it to start a job's lease when its client's
	// connection goes away.
	OnConnection func(ConnEvent)

	// Logger receives connection events; nil discards them.
	Logger *slog.Logger

	// helloHook lets tests forge the Hello this transport sends.
	helloHook func(*proto.Hello)
}

// ConnEvent is a connection coming up (Up) or going down (Err says why).
type ConnEvent struct {
	Peer credentials.Identity
	Addr string
	Up   bool
	Err  error
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.MaxFrameSize == 0 {
		d.MaxFrameSize = 16 << 20
	}
	if d.MaxPageBytes == 0 {
		d.MaxPageBytes = 64 << 30
	}
	if d.PageStreams == 0 {
		d.PageStreams = 1
	}
	if d.MinSegmentBytes == 0 {
		d.MinSegmentBytes = 16 << 20
	}
	if d.StreamWindow == 0 {
		d.StreamWindow = 32 << 20
	}
	if d.ConnWindow == 0 {
		d.ConnWindow = 128 << 20
	}
	if d.DialTimeout == 0 {
		d.DialTimeout = 10 * time.Second
	}
	if d.IdleTimeout == 0 {
		d.IdleTimeout = 15 * time.Second
	}
	if d.MaxIncomingStreams == 0 {
		d.MaxIncomingStreams = 1024
	}
	if d.MaxRequestBytes == 0 {
		d.MaxRequestBytes = max(512<<20, requestCost(d.MaxFrameSize))
	}
	if d.Software == "" {
		d.Software = "acpp"
	}
	for d.Instance == 0 {
		d.Instance = rand.Uint64()
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}

// Validate reports every bad field at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Credentials == nil {
		errs = append(errs, errors.New("Credentials is required: load them with credentials.LoadNode or LoadClient"))
	} else if c.ListenAddr != "" && c.Credentials.Identity.Role != "node" {
		errs = append(errs, fmt.Errorf("ListenAddr is set but the credentials are those of %s: only nodes listen; use a node certificate or leave ListenAddr empty", c.Credentials.Identity))
	}
	if c.MaxFrameSize < 0 || c.MaxFrameSize > 1<<30 {
		errs = append(errs, fmt.Errorf("MaxFrameSize (%d) must be between 0 and 1 GiB", c.MaxFrameSize))
	} else if c.MaxFrameSize != 0 && c.MaxFrameSize < 4096 {
		errs = append(errs, fmt.Errorf("MaxFrameSize (%d) must be at least 4096 bytes", c.MaxFrameSize))
	}
	if c.PageStreams < 0 || c.PageStreams > 64 {
		errs = append(errs, fmt.Errorf("PageStreams (%d) must be between 0 and 64", c.PageStreams))
	}
	if c.MinSegmentBytes < 0 {
		errs = append(errs, fmt.Errorf("MinSegmentBytes (%d) must be >= 0", c.MinSegmentBytes))
	}
	if c.DialTimeout < 0 || c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("DialTimeout (%v) and IdleTimeout (%v) must be >= 0", c.DialTimeout, c.IdleTimeout))
	}
	if c.MaxIncomingStreams < 0 {
		errs = append(errs, fmt.Errorf("MaxIncomingStreams (%d) must be >= 0", c.MaxIncomingStreams))
	}
	if frame := c.withDefaults().MaxFrameSize; c.MaxRequestBytes != 0 && c.MaxRequestBytes < requestCost(frame) {
		errs = append(errs, fmt.Errorf("MaxRequestBytes (%d) must hold one request of MaxFrameSize (%d bytes: %d with what decoding it may make), or be 0 for the default", c.MaxRequestBytes, frame, requestCost(frame)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("transport: invalid config: %w", err)
	}
	return nil
}
