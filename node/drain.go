package node

import (
	"context"
	"sync"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// Remote drain (acpp-node drain, issue 15): an operator asks the node to
// drain as SIGTERM would. The handler only records the request; Run, which
// owns the node's life, drains, leaves and returns.

// drainRequest is closed when an operator asked the node to drain.
type drainRequest struct {
	once sync.Once
	ch   chan struct{}
}

func (d *drainRequest) init() { d.ch = make(chan struct{}) }

func (d *drainRequest) ask() (already bool) {
	already = true
	d.once.Do(func() { close(d.ch); already = false })
	return already
}

// DrainRequested is closed when an operator asked the node to drain
// (MsgNodeDrain); Run then drains and returns.
func (n *Node) DrainRequested() <-chan struct{} { return n.drainReq.ch }

func (n *Node) registerDrain() {
	transport.HandleFunc(n.tr, proto.MsgNodeDrain, func(_ context.Context, from credentials.Identity, req *proto.NodeDrain) (*proto.NodeDraining, error) {
		if from.Role != proto.RoleOperator {
			return nil, reply(proto.CodeNotOwner, "%s may not drain node %s: only operators may (acpp-node credentials operator NAME); or send the process SIGTERM", from, n.cfg.Name)
		}
		already := n.drainReq.ask() || n.draining.Load()
		n.log.Info("drain requested", "by", from.String(), "reason", req.Reason, "already", already)
		return &proto.NodeDraining{Node: n.cfg.Name, Jobs: len(n.jobList()), Already: already}, nil
	})
}
