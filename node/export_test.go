package node

import "github.com/acpp/acpp/transport"

// TransportForTest is the node's transport, for tests that serve a
// message of their own on it.
func (n *Node) TransportForTest() *transport.Transport { return n.tr }
