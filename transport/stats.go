package transport

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/acpp/acpp/credentials"
)

// PeerStats are the counters of traffic with one peer since the transport
// started, across reconnections; the node exports them as metrics.
type PeerStats struct {
	Peer          credentials.Identity
	Connected     bool   // a live connection (to any process of the identity) is cached now
	CallsSent     uint64 // requests and one-way messages sent (including failed ones)
	CallsReceived uint64 // requests and one-way messages served
	Failures      uint64 // calls and transfers to the peer that returned an error
	TransfersSent uint64 // page transfers completed to the peer
	TransfersRecv uint64 // page transfers completed from the peer
	BoxesSent     uint64 // page boxes in completed transfers to the peer
	BoxesRecv     uint64
	BytesSent     uint64 // page bytes in completed transfers to the peer (also those sent by reference, proto.PageRef)
	BytesRecv     uint64
}

type peerCounters struct {
	id                                                 credentials.Identity
	callsSent, callsRecv, failures                     atomic.Uint64
	transfersSent, transfersRecv, boxesSent, boxesRecv atomic.Uint64
	bytesSent, bytesRecv                               atomic.Uint64
}

// counters returns the counters of peer, creating them on first use.
func (t *Transport) counters(peer credentials.Identity) *peerCounters {
	key := peer.String()
	if c, ok := t.stats.Load(key); ok {
		return c.(*peerCounters)
	}
	peer.Instance = 0 // counted per identity, across its processes
	c, _ := t.stats.LoadOrStore(key, &peerCounters{id: peer})
	return c.(*peerCounters)
}

// Stats returns the counters of every peer the transport has exchanged
// messages with, sorted by identity.
func (t *Transport) Stats() []PeerStats {
	var out []PeerStats
	t.stats.Range(func(_, v any) bool {
		c := v.(*peerCounters)
		out = append(out, PeerStats{
			Peer: c.id, Connected: t.connectedAny(c.id),
			CallsSent: c.callsSent.Load(), CallsReceived: c.callsRecv.Load(), Failures: c.failures.Load(),
			TransfersSent: c.transfersSent.Load(), TransfersRecv: c.transfersRecv.Load(),
			BoxesSent: c.boxesSent.Load(), BoxesRecv: c.boxesRecv.Load(),
			BytesSent: c.bytesSent.Load(), BytesRecv: c.bytesRecv.Load(),
		})
		return true
	})
	slices.SortFunc(out, func(a, b PeerStats) int { return strings.Compare(a.Peer.String(), b.Peer.String()) })
	return out
}

// Connected reports whether a live connection to peer is open now (for a
// client: to the process peer.Instance names).
func (t *Transport) Connected(peer credentials.Identity) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.conns[connKey(peer)]
	return c != nil && c.qc.Context().Err() == nil
}

// connectedAny reports whether a live connection to any process of peer's
// identity is cached (Stats count per identity, across processes).
func (t *Transport) connectedAny(peer credentials.Identity) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.conns {
		if c.peer.Role == peer.Role && c.peer.Name == peer.Name && c.qc.Context().Err() == nil {
			return true
		}
	}
	return false
}
