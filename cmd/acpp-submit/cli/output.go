package cli

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"unsafe"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/jobfile/npy"
)

// outputSlab is the most bytes of a buffer that one host read covers while
// an output is written: the read-back of the next slab (device to host, on
// a GPU) runs while this one goes to the file.
var outputSlab = 64 << 20

// stagingSlab is the most bytes of a buffer that one command group copies
// from a GPU into one of the two pinned host slabs of an output
// (writeFrom). Making the pair costs about 0.6 ms per MiB (cuMemHostAlloc
// and its free, as the figures below imply), once per output, while a
// slab's copy hides behind the previous slab's write at any of these
// sizes: on the H100 host (BenchmarkOutputGPU, 2026-11-27) 2–4 MiB slabs
// wrote a 256 MiB output at 0.9–1.15× a plain file write, 16 MiB ones at
// 0.67–0.84×, and a 64 MiB one at 0.7–0.9× against 0.45–0.5×.
var stagingSlab = 4 << 20

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

// readBackDevice is the device an output of buffer s reads it back from:
// the one that holds all of its current contents (holder, engine.wrote),
// of devs (the queue's), when its memory is not the host's (a GPU). ok is
// false, and the output reads the buffer's host copy (writeTo), for a
// buffer no single device holds (never written, written by a split over
// several devices or in parts by several), one a CPU device or another
// host-unified one holds (its memory is the host copy: nothing to copy),
// and when one index of the buffer's first dimension is larger than a
// slab.
func readBackDevice(s *jobfile.Buffer, holder string, devs []device.Info) (acpp.DeviceID, bool) {
	if holder == "" || s.Bytes() == 0 || s.Bytes()/s.Range[0] > stagingSlab {
		return acpp.DeviceID{}, false
	}
	for _, d := range devs {
		if d.ID.String() == holder {
			return d.ID, !d.Caps.HostUnified
		}
	}
	return acpp.DeviceID{}, false
}

// writeFrom writes the buffer to w from dev's copy of it, in slabs of
// whole indices of its first dimension (at most stagingSlab bytes each):
// a command group on dev copies each slab into one of two pinned host
// slabs (host USM of dev, pinned once for the whole output) while the
// previous one goes to the file. The buffer's host copy is neither read
// nor made up to date: a GPU buffer's read-back costs no page-locking of
// its host allocation, and no copy but the one into the slab.
func (t *tbuf[T]) writeFrom(ctx context.Context, q *acpp.Queue, dev acpp.DeviceID, w io.Writer) (int64, error) {
	rng := t.s.Range
	if t.s.Bytes() == 0 {
		return 0, nil
	}
	var z T
	size := int(unsafe.Sizeof(z))
	row := t.s.Bytes() / rng[0] // bytes per index of the first dimension
	per := min(rng[0], max(1, stagingSlab/row))
	var slabs [2][]T
	for i := range min(2, (rng[0]+per-1)/per) {
		p, err := acpp.Malloc[T](q, per*row/size, acpp.USMHost, acpp.On(dev))
		if err != nil {
			return 0, fmt.Errorf("pinned host slab of %d bytes on %s: %w", per*row, dev, err)
		}
		defer acpp.Free(q, p) // after every copy into it finished (below)
		if slabs[i], err = p.Host(); err != nil {
			return 0, err
		}
	}
	// copyOut submits the copy of the slab at lo into slabs[i].
	copyOut := func(lo, i int) (*acpp.Event, error) {
		off := make([]int, len(rng))
		off[0] = lo
		r := slices.Clone(rng)
		r[0] = min(per, rng[0]-lo)
		return q.Submit(func(h *acpp.Handler) error {
			acpp.CopyToHost(h, acpp.ReadRange(h, t.b, toRange(r), toID(off, len(off))), slabs[i])
			return nil
		}, acpp.On(dev), acpp.Named("output "+t.s.Name))
	}
	var copied int64
	next, err := copyOut(0, 0)
	for lo, i := 0, 0; err == nil && lo < rng[0]; lo, i = lo+per, 1-i {
		cur := next
		next = nil
		if err = cur.Wait(ctx); err != nil {
			cur.Wait(context.Background()) // the slab is freed on return
			break
		}
		if lo+per < rng[0] {
			if next, err = copyOut(lo+per, 1-i); err != nil {
				break
			}
		}
		n := min(per, rng[0]-lo) * row
		copied += int64(n)
		_, err = w.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(slabs[i]))), n))
	}
	if next != nil {
		next.Wait(context.Background())
	}
	return copied, err
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
