// Package partition is the pure range-splitting math of a split command
// group: how a group's index space is cut into chunks over devices
// (Split.Cut) and which part of a buffer each chunk's accessors touch
// (RangeMapper, MapAccess). The coordinator and the embedded runtime (the
// root package's local queues) split a command group the same way through
// it, so a program splits alike on a cluster and on local devices.
//
// It does no I/O and holds no state: every function is a function of its
// arguments. It imports only the standard library and coherence (for Dims).
package partition

import (
	"errors"

	"github.com/acpp/acpp/coherence"
)

// ErrBadSplit is wrapped by every error of this package: a Split, a range
// or a range mapper's result that cannot be split. The message names the
// field and what to change. Match it with errors.Is.
var ErrBadSplit = errors.New("partition: invalid split")

// Dims is a 3D extent or index, dimension 2 fastest: a 1D range n is
// {1, 1, n}, a 2D range (rows, cols) is {1, rows, cols}.
type Dims = coherence.Dims

// Chunk is one part of a split command group's index space: the launch
// offset and range of the group it becomes.
type Chunk struct {
	Offset, Range Dims
}

func sub(a, b Dims) Dims { return Dims{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }
