package cli

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/jobfile/npy"
)

// outputSlab is the most bytes of a buffer that one host read covers while
// an output is written: the read-back of the next slab (device to host, on
// a GPU) runs while this one goes to the file.
var outputSlab = 64 << 20

// hostLittleEndian: this machine stores numbers little-endian, as .npy
// files (descr '<…') and raw outputs promise. A big-endian host swaps the
// bytes of each element on the way out (swapWriter).
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// writeOutput writes buffer b to path in format: the .npy header (format
// npy), then the buffer's elements, little-endian, row-major, in large
// writes straight from its host copy (no copy of the buffer, no
// per-element conversion on a little-endian host). It returns the bytes
// moved to the host for it.
func writeOutput(ctx context.Context, eng *engine, b buf, path string, format jobfile.Format) (int64, error) {
	s := b.spec()
	dt, ok := npy.Dtype(s.Type)
	if !ok {
		return 0, fmt.Errorf("element type %q has no .npy dtype", s.Type)
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	var w io.Writer = f
	if !hostLittleEndian {
		w = &swapWriter{w: f, size: npy.Header{Dtype: dt}.ItemSize()}
	}
	if format == jobfile.FormatNPY {
		_, err = f.Write(npy.EncodeHeader(npy.Header{Dtype: dt, Shape: s.Range}))
	}
	var moved int64
	if err == nil {
		moved, err = eng.write(ctx, b, w)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return moved, err
}

// writeTo writes the buffer to w in slabs of whole indices of its first
// dimension, at most outputSlab bytes each, each from a host read of just
// that slab (only its pages move, T3), the next slab's read under way while
// one is written.
func (t *tbuf[T]) writeTo(ctx context.Context, w io.Writer) error {
	rng := t.s.Range
	if t.s.Bytes() == 0 {
		return nil
	}
	row := t.s.Bytes() / rng[0] // bytes per index of the first dimension
	per := max(1, outputSlab/row)
	type slab struct {
		a   *acpp.HostAccessorRO[T]
		err error
	}
	open := func(lo int) chan slab {
		ch := make(chan slab, 1)
		off := make([]int, len(rng))
		off[0] = lo
		r := slices.Clone(rng)
		r[0] = min(per, rng[0]-lo)
		go func() {
			a, err := acpp.HostRead(ctx, t.b, acpp.Within(toID(off, len(off)), toRange(r)))
			ch <- slab{a, err}
		}()
		return ch
	}
	next := open(0)
	for lo := 0; lo < rng[0]; lo += per {
		s := <-next
		next = nil
		if s.err != nil {
			return s.err
		}
		if lo+per < rng[0] {
			next = open(lo + per)
		}
		_, err := s.a.WriteTo(w)
		s.a.Close()
		if err != nil {
			if next != nil {
				if s := <-next; s.a != nil {
					s.a.Close()
				}
			}
			return err
		}
	}
	return nil
}

// swapWriter reverses the bytes of each size-byte element on its way to w
// (a big-endian host writing little-endian files), through a scratch
// buffer of its own: the caller's bytes, the buffer's memory, stay as they
// are.
type swapWriter struct {
	w       io.Writer
	size    int
	scratch []byte
}

func (s *swapWriter) Write(p []byte) (int, error) {
	if s.size <= 1 {
		return s.w.Write(p)
	}
	if len(p)%s.size != 0 {
		return 0, fmt.Errorf("swapWriter: %d bytes are not whole %d-byte elements", len(p), s.size)
	}
	if s.scratch == nil {
		s.scratch = make([]byte, 1<<20) // a multiple of every element size (1, 2, 4, 8)
	}
	n := 0
	for n < len(p) {
		c := copy(s.scratch, p[n:])
		swapBytes(s.scratch[:c], s.size)
		m, err := s.w.Write(s.scratch[:c])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// swapBytes reverses the bytes of each size-byte element of b in place.
func swapBytes(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		slices.Reverse(b[i : i+size])
	}
}
