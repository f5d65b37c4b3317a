package coordinator

import (
	"errors"
	"fmt"
	"strings"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/internal/partition"
)

// The range-splitting math lives in internal/partition, shared with the
// root package's embedded queues; these aliases keep it the coordinator's
// API.

// Chunk is one part of a split command group's index space: the launch
// offset and range of the group it becomes.
type Chunk = partition.Chunk

// RangeMapper says which part of a buffer an accessor of a split command
// group touches for one chunk, as Celerity's range mappers do. Map returns
// the accessed region (offset and range, in elements) of a buffer whose
// range is buf; the coordinator clips it to the buffer.
type RangeMapper = partition.RangeMapper

// MapFunc is a RangeMapper from a function (custom mappers).
type MapFunc = partition.MapFunc

// OneToOne maps work item i to element i: the chunk's own range.
func OneToOne() RangeMapper { return partition.OneToOne() }

// Neighbourhood maps a chunk to its range grown by k elements on each
// side, clipped to the buffer (stencils). One k applies to every
// dimension; two give the extents of a 2D buffer's rows and columns;
// three give one per dimension (dimension 2 fastest). Any other number of
// extents, or a negative one, makes Submit refuse the group with
// ErrInvalid, naming the mapper.
func Neighbourhood(k ...int) RangeMapper {
	var e [3]int
	switch len(k) {
	case 1:
		e = [3]int{k[0], k[0], k[0]}
	case 2:
		e = [3]int{0, k[0], k[1]}
	case 3:
		e = [3]int(k)
	default:
		return badMapper(fmt.Sprintf("Neighbourhood takes 1 to 3 extents, got %d", len(k)))
	}
	for _, x := range k {
		if x < 0 {
			return badMapper(fmt.Sprintf("Neighbourhood%v has a negative extent", k))
		}
	}
	return partition.Neighbourhood(e[0], e[1], e[2])
}

// badMapper is a range mapper built from arguments it cannot use: Submit
// reports it as an ErrInvalid (partition.MapAccess turns the panic into
// an error) rather than the constructor ending the program.
type badMapper string

func (b badMapper) Map(Chunk, Dims) (Dims, Dims) { panic(string(b)) }

// All maps every chunk to the whole buffer.
func All() RangeMapper { return partition.All() }

// Fixed maps every chunk to the same region.
func Fixed(offset, rng Dims) RangeMapper { return partition.Fixed(offset, rng) }

// Split divides a command group's range across devices (see
// partition.Split for its fields). Its Cut is the one rule for splitting,
// shared with the root package's embedded queues; Submit refuses a split
// that Cut refuses with ErrInvalid.
type Split = partition.Split

// SplitDim names the dimension a split cuts.
type SplitDim = partition.SplitDim

// Split dimensions.
const (
	SplitAuto = partition.SplitAuto
	SplitDim0 = partition.SplitDim0
	SplitDim1 = partition.SplitDim1
	SplitDim2 = partition.SplitDim2
)

// cutSplit is s.Cut with its error an ErrInvalid of the coordinator.
func cutSplit(s *Split, off, rng, local Dims, devs int) ([]Chunk, []int, error) {
	chunks, dev, err := s.Cut(off, rng, local, devs)
	if err != nil {
		return nil, nil, invalidSplit(err)
	}
	return chunks, dev, nil
}

// mapAccess applies m to chunk c for a buffer of range buf and clips the
// result to the buffer (partition.MapAccess, its error an ErrInvalid).
func mapAccess(m RangeMapper, c Chunk, buf Dims) (Dims, Dims, error) {
	off, rng, err := partition.MapAccess(m, c, buf)
	if err != nil {
		return Dims{}, Dims{}, invalidSplit(err)
	}
	return off, rng, nil
}

// splitError is an error of package partition as the coordinator reports
// it: it matches both ErrInvalid and partition.ErrBadSplit, and reads as
// the coordinator's errors did before the math moved ("coordinator:
// invalid request: Split.Borders -1 is negative").
type splitError struct{ err error }

func invalidSplit(err error) error {
	if err == nil || !errors.Is(err, partition.ErrBadSplit) {
		return err
	}
	return &splitError{err}
}

func (e *splitError) Error() string {
	return ErrInvalid.Error() + ": " + strings.TrimPrefix(e.err.Error(), partition.ErrBadSplit.Error()+": ")
}

func (e *splitError) Unwrap() []error { return []error{ErrInvalid, e.err} }

func sub(a, b Dims) Dims { return Dims{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }

// Dims is a 3D extent or index, dimension 2 fastest: a 1D range n is
// {1, 1, n}, a 2D range (rows, cols) is {1, rows, cols}.
type Dims = coherence.Dims
