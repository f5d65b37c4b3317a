package proto

import "fmt"

// BoxRuns cuts box b out of alloc, the row-major storage of a buffer of
// extent rng with elemSize-byte elements, as the contiguous byte runs that
// a page transfer reads (on the sender) or fills (on the receiver), in
// payload order. Rows that are contiguous in alloc are merged, so a box
// spanning whole rows (or whole planes) is a single run: the transport then
// moves it with one read or write and no copy.
//
// The runs alias alloc. It fails (wrapping ErrMalformed) if b is empty,
// inverted or outside rng, or alloc is shorter than the buffer.
func BoxRuns(alloc []byte, rng [3]uint64, elemSize uint32, b Box) ([][]byte, error) {
	return AppendBoxRuns(nil, alloc, rng, elemSize, b)
}

// AppendBoxRuns is BoxRuns appending to runs, for callers that collect the
// runs of several boxes into one list.
func AppendBoxRuns(runs [][]byte, alloc []byte, rng [3]uint64, elemSize uint32, b Box) ([][]byte, error) {
	whole := Box{Hi: rng}
	total, ok := whole.Elems()
	if !ok || elemSize == 0 {
		return runs, fmt.Errorf("%w: buffer extent %v with element size %d", ErrMalformed, rng, elemSize)
	}
	if n, ok := b.Elems(); !ok || n == 0 {
		return runs, fmt.Errorf("%w: box %v..%v is empty or inverted", ErrMalformed, b.Lo, b.Hi)
	}
	for d := range 3 {
		if b.Hi[d] > rng[d] {
			return runs, fmt.Errorf("%w: box %v..%v lies outside the buffer extent %v", ErrMalformed, b.Lo, b.Hi, rng)
		}
	}
	es := uint64(elemSize)
	if total > uint64(len(alloc))/es {
		return runs, fmt.Errorf("%w: allocation of %d bytes is shorter than the buffer (%v × %d bytes)", ErrMalformed, len(alloc), rng, elemSize)
	}
	// A run is a row of dimension 2; it extends over dimension 1 when the
	// row is whole, and over dimension 0 when the plane is whole too.
	run := (b.Hi[2] - b.Lo[2]) * es
	outer1, outer0 := b.Hi[1]-b.Lo[1], b.Hi[0]-b.Lo[0]
	if b.Lo[2] == 0 && b.Hi[2] == rng[2] {
		run *= outer1
		outer1 = 1
		if b.Lo[1] == 0 && b.Hi[1] == rng[1] {
			run *= outer0
			outer0 = 1
		}
	}
	for i := range outer0 {
		for j := range outer1 {
			off := (((b.Lo[0]+i)*rng[1]+b.Lo[1]+j)*rng[2] + b.Lo[2]) * es
			runs = append(runs, alloc[off:off+run:off+run])
		}
	}
	return runs, nil
}
