package coordinator

import (
	"errors"
	"fmt"
	"strings"

	"github.com/acpp/acpp/coherence"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig: Config.Validate found bad fields; the message
	// names each.
	ErrInvalidConfig = errors.New("coordinator: invalid config")
	// ErrInvalid: a buffer, command group or read was malformed; the
	// message names the field and what to change. The job goes on.
	ErrInvalid = errors.New("coordinator: invalid request")
	// ErrNoDevice: no selected device can run the group (no device matched
	// the filter, the pinned device does not exist, or no device has the
	// kernel).
	ErrNoDevice = errors.New("coordinator: no device can run this")
	// ErrNodeLost matches every *NodeLostError.
	ErrNodeLost = errors.New("coordinator: node lost")
	// ErrJobFailed marks a job that stopped because an instruction failed
	// on a node; the error wraps the node's failure. Open a new job.
	ErrJobFailed = errors.New("coordinator: job failed")
	// ErrClosed: the job was closed.
	ErrClosed = errors.New("coordinator: job closed")
)

// LostRange is a part of a buffer that has no valid copy left, in elements.
type LostRange struct {
	Buffer string // the buffer's name (BufferSpec.Name, or "buffer <id>")
	// Boxes are element boxes [Lo, Hi), dimension 2 fastest.
	Boxes []coherence.Box
	// Producers are the command groups that last wrote these pages (the
	// lineage a recomputation would re-run), oldest first.
	Producers []GroupID
}

// NodeLostError is the failure of a job that lost a node (C5): the node
// left, failed, or stopped answering while the job needed it. It names the
// node and every buffer range with no valid copy left, and the groups that
// were running there.
type NodeLostError struct {
	Node string
	// How says how the loss was noticed ("failed", "left", "unreachable: …").
	How string
	// Lost lists buffer ranges with no valid copy left (sorted by buffer).
	Lost []LostRange
	// Groups are the command groups that had not finished when the node
	// was lost and cannot finish now.
	Groups []GroupID
}

func (e *NodeLostError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coordinator: node %s lost (%s)", e.Node, e.How)
	if len(e.Lost) == 0 {
		b.WriteString("; no buffer lost its last copy")
	}
	for i, l := range e.Lost {
		if i == 4 {
			fmt.Fprintf(&b, "; and %d more buffers", len(e.Lost)-4)
			break
		}
		fmt.Fprintf(&b, "; %s lost", l.Buffer)
		for k, bx := range l.Boxes {
			if k == 3 {
				fmt.Fprintf(&b, " and %d more ranges", len(l.Boxes)-3)
				break
			}
			fmt.Fprintf(&b, " %v", bx)
		}
	}
	if len(e.Groups) > 0 {
		fmt.Fprintf(&b, "; %d command group(s) could not finish", len(e.Groups))
	}
	b.WriteString("; the job cannot go on: open a new job without that node, or restart it")
	return b.String()
}

// NoDeviceError is Open's error when Config.Devices selects none of the
// devices of the nodes reached; it matches ErrNoDevice. All lists those
// devices ("n1/cpu:0"), for a caller that words the selection its own way.
type NoDeviceError struct {
	All []string
}

func (e *NoDeviceError) Error() string {
	return fmt.Sprintf("%v: the device filter selects none of %s; widen Config.Devices", ErrNoDevice, strings.Join(e.All, ", "))
}

// Unwrap makes a NoDeviceError match ErrNoDevice.
func (e *NoDeviceError) Unwrap() error { return ErrNoDevice }

// Is makes every NodeLostError match ErrNodeLost.
func (e *NodeLostError) Is(target error) bool { return target == ErrNodeLost }
