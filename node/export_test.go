package node

import (
	"net/http"

	"github.com/acpp/acpp/transport"
)

// TransportForTest is the node's transport, for tests that serve a
// message of their own on it.
func (n *Node) TransportForTest() *transport.Transport { return n.tr }

// PeerLostForTest is what membership news that run boot of peer name
// (every run: 0) is gone does to the node's jobs.
func (n *Node) PeerLostForTest(name string, boot uint64, how string) { n.peerLost(name, boot, how) }

// HTTPServerForTest is the server of the node's --http-addr (nil without one).
func (n *Node) HTTPServerForTest() *http.Server { return n.http }
