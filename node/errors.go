package node

import (
	"errors"
	"fmt"

	"github.com/acpp/acpp/proto"
)

// Sentinel errors. Match with errors.Is.
var (
	// ErrInvalidConfig: Validate found bad fields; the message names each.
	ErrInvalidConfig = errors.New("node: invalid config")
	// ErrNodeLost matches every *NodeLostError.
	ErrNodeLost = errors.New("node: peer node lost")
	// ErrMemoryLimit: an allocation would exceed the job's or the node's
	// memory limit; free buffers, or raise --max-job-bytes / --max-bytes.
	ErrMemoryLimit = errors.New("node: memory limit exceeded")
	// ErrClosed: the node is closed.
	ErrClosed = errors.New("node: closed")
)

// NodeLostError is the failure of an instruction that waited on a peer
// (pages from it, or a send to it) when the peer failed or left (C5).
type NodeLostError struct {
	Node string
	// How is "failed" or "left".
	How string
	// Buffer and Boxes are what the instruction was moving.
	Buffer uint64
	Boxes  []proto.Box
}

func (e *NodeLostError) Error() string {
	return fmt.Sprintf("node: peer node %s %s while pages of buffer %d (%d boxes) were in transit with it; the job must recover the data from another copy or re-run what produced it",
		e.Node, e.How, e.Buffer, len(e.Boxes))
}

// Is makes every NodeLostError match ErrNodeLost.
func (e *NodeLostError) Is(target error) bool { return target == ErrNodeLost }

// instrErr builds the wire form of an instruction failure.
func instrErr(id uint64, code proto.ErrorCode, err error) *proto.InstrError {
	ie := &proto.InstrError{ID: id, Code: code, Message: err.Error()}
	var nl *NodeLostError
	if errors.As(err, &nl) {
		ie.Code, ie.Node = proto.CodeNodeLost, nl.Node
	}
	if errors.Is(err, ErrMemoryLimit) {
		ie.Code = proto.CodeMemoryLimit
	}
	return ie
}

func reply(code proto.ErrorCode, format string, a ...any) *proto.ErrorReply {
	return &proto.ErrorReply{Code: code, Message: fmt.Sprintf(format, a...)}
}
