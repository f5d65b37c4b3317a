// Package transport carries acpp's node-to-node and client-to-node
// traffic over QUIC (github.com/quic-go/quic-go) with mutual TLS from the
// cluster CA: msgpack control messages (request/response and one-way) and
// page payloads that land straight in the receiver's memory.
//
// # Usage
//
//	t, err := transport.Start(transport.Config{
//		Credentials: creds,                  // credentials.LoadNode
//		ListenAddr:  "0.0.0.0:7947",
//		Resolve:     members.QUICAddr,       // node name → host:port
//		Authorize:   members.Allow,          // C6: members and clients only
//	})
//	defer t.Close()
//	transport.HandleFunc(t, proto.MsgFirstApp, func(ctx context.Context, from credentials.Identity, req *Req) (*Resp, error) { ... })
//	t.HandlePages(func(ctx context.Context, from credentials.Identity, h *proto.PageHeader) (transport.PageSink, error) { ... })
//	err = t.Call(ctx, credentials.Node("n2"), proto.MsgFirstApp, &req, &resp)
//	err = t.SendPages(ctx, credentials.Node("n2"), &hdr, srcRuns)
//
// # Connections
//
// One UDP socket per Transport serves the listener and all dials.
// Connections are cached by peer, in both directions: a node reaches a
// client over the connection the client opened. Every transport announces
// a random Instance in its handshake, which the peer's identity carries
// (credentials.Identity.Instance): a client identity may run in any number
// of processes at once, and a node reaches each one by the identity its
// handler saw. A node is one process at a time: a connection from a new
// run of it (another Instance) replaces the old run's, and ClosePeer drops
// the connections of a run that membership says is gone. Calls to a node
// without a live connection dial it (concurrent dials to one peer are
// shared) after asking Config.Resolve for its address (without Resolve, at
// the address DialAddr reached it at); a broken connection is dropped and
// the next call dials again, and a call answered by a stateless reset (the
// node restarted) is made once more. Every connection starts with a
// Hello exchange (protocol version, cluster, identity) after the TLS
// handshake, and Config.Authorize is asked about the peer on both sides.
// docs/TRANSPORT.md describes the wire format and the security model.
//
// # Concurrency
//
// Transport's methods are safe for concurrent use. Each incoming message
// runs its handler on its own goroutine; Close cancels the handlers'
// contexts and waits for them and for every other goroutine the transport
// started. A handler (or page handler) that panics is recovered: the
// panic is logged with its stack, the caller gets CodeInternal (a page
// transfer CodeRefused), and the transport goes on serving.
//
// # Errors
//
// Failures with a peer are *PeerError values naming the peer; they wrap
// ErrPeerLost when the connection broke, ErrNoRoute, ErrTLS,
// ErrUnauthorized, ErrVersionMismatch, ErrClusterMismatch,
// ErrFrameTooLarge or the caller's context error. An error reply from the
// peer's handler is a *RemoteError whose Is matches the sentinel of its
// code.
package transport
