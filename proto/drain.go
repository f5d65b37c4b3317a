package proto

// Remote drain (issue 15, item 5): an operator asks a node to drain, as
// SIGTERM does (acpp-node drain).
//
// WARNING: ONLY APPEND TO THIS LIST! The numeric values are part of the
// protocol itself.
const (
	// MsgNodeDrain asks a node to drain and leave: body [NodeDrain], reply
	// [NodeDraining]. Operators only.
	MsgNodeDrain MsgType = MsgFirstApp + 48 + iota
)

func init() {
	appNames[MsgNodeDrain] = "MsgNodeDrain"
}

// NodeDrain asks a node to drain: stop taking jobs, let its jobs' clients
// move the pages only it holds, then leave the cluster and exit.
type NodeDrain struct {
	// Reason is logged by the node.
	Reason string `msgpack:"r,omitempty"`
}

// NodeDraining is the reply to MsgNodeDrain: the drain has started.
type NodeDraining struct {
	Node string `msgpack:"n"`
	// Jobs are the jobs open on the node when the drain started.
	Jobs int `msgpack:"j"`
	// Already: a drain was under way.
	Already bool `msgpack:"a,omitempty"`
}
