package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/jobfile/npy"
)

// buf is a job buffer of any element type, an acpp.Buffer of that type:
// the engine works through it so that one code path serves every type.
type buf interface {
	spec() *jobfile.Buffer
	// arg declares the accessor a for a kernel parameter of the given kind;
	// split: the group is split, and a gets its range mapper instead of a
	// region.
	arg(h *acpp.Handler, kind device.ArgKind, a *jobfile.Accessor, split bool) acpp.KernelArg
	// fill declares a fill of a region with the encoded value v.
	fill(h *acpp.Handler, off, rng []int, v []byte)
	// fillSplit declares a fill of the whole buffer with the encoded
	// 4-byte value v by the fill_f32 kernel, for a split group.
	fillSplit(h *acpp.Handler, v []byte)
	// copyTo declares a copy of the region (off, rng) into dst at dstOff.
	copyTo(h *acpp.Handler, off, rng []int, dst buf, dstOff []int)
	// writeTo writes the buffer's contents to w (waiting for its writers),
	// straight from its host copy (output.go).
	writeTo(ctx context.Context, w io.Writer) error
	// writeFrom writes the buffer's contents to w from device dev's copy,
	// through pinned host slabs, leaving its host copy as it was; it
	// returns the bytes copied to the host (output.go).
	writeFrom(ctx context.Context, q *acpp.Queue, dev acpp.DeviceID, w io.Writer) (int64, error)
	close() error
}

type number interface {
	~float32 | ~float64 | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type tbuf[T number] struct {
	s *jobfile.Buffer
	b *acpp.Buffer[T]
}

// newBuf makes the buffer of spec s; data, when not nil, is its initial
// contents (len(data) == s.Bytes()), used in place unless copyData.
func newBuf(q *acpp.Queue, s *jobfile.Buffer, data []byte, copyData bool) (buf, error) {
	opts := []acpp.BufferOption{acpp.BufferName(s.Name)}
	if s.PageSize != nil {
		opts = append(opts, acpp.PageSize(s.PageSize...))
	}
	if copyData && data != nil { // NewBuffer, without data, refuses CopyData
		opts = append(opts, acpp.CopyData())
	}
	switch s.Type {
	case "float32":
		return makeBuf[float32](q, s, data, opts)
	case "float64":
		return makeBuf[float64](q, s, data, opts)
	case "int8":
		return makeBuf[int8](q, s, data, opts)
	case "int16":
		return makeBuf[int16](q, s, data, opts)
	case "int32":
		return makeBuf[int32](q, s, data, opts)
	case "int64":
		return makeBuf[int64](q, s, data, opts)
	case "uint8":
		return makeBuf[uint8](q, s, data, opts)
	case "uint16":
		return makeBuf[uint16](q, s, data, opts)
	case "uint32":
		return makeBuf[uint32](q, s, data, opts)
	case "uint64":
		return makeBuf[uint64](q, s, data, opts)
	}
	return nil, fmt.Errorf("element type %q is not supported", s.Type)
}

// allocData returns zeroed memory for s's contents, aligned for its element
// type.
func allocData(s *jobfile.Buffer) []byte {
	n := s.Bytes()
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

func makeBuf[T number](q *acpp.Queue, s *jobfile.Buffer, data []byte, opts []acpp.BufferOption) (buf, error) {
	r := toRange(s.Range)
	var b *acpp.Buffer[T]
	var err error
	if data != nil {
		var z T
		elems := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(data))), len(data)/int(unsafe.Sizeof(z)))
		b, err = acpp.NewBufferFrom(q, elems, r, opts...)
	} else {
		b, err = acpp.NewBuffer[T](q, r, opts...)
	}
	if err != nil {
		return nil, err
	}
	return &tbuf[T]{s: s, b: b}, nil
}

func toRange(e []int) acpp.Range {
	switch len(e) {
	case 1:
		return acpp.R1(e[0])
	case 2:
		return acpp.R2(e[0], e[1])
	}
	return acpp.R3(e[0], e[1], e[2])
}

func toID(e []int, dims int) acpp.ID {
	var id acpp.ID
	copy(id[:], e)
	_ = dims
	return id
}

func (t *tbuf[T]) spec() *jobfile.Buffer { return t.s }

// region resolves an offset and range (nil = defaults) and says whether
// they cover the whole buffer.
func (t *tbuf[T]) region(off, rng []int) (acpp.ID, acpp.Range, bool) {
	dims := len(t.s.Range)
	o := make([]int, dims)
	copy(o, off)
	r := make([]int, dims)
	whole := true
	for i := range dims {
		if rng != nil {
			r[i] = rng[i]
		} else {
			r[i] = t.s.Range[i] - o[i]
		}
		if o[i] != 0 || r[i] != t.s.Range[i] {
			whole = false
		}
	}
	return toID(o, dims), toRange(r), whole
}

func (t *tbuf[T]) arg(h *acpp.Handler, kind device.ArgKind, a *jobfile.Accessor, split bool) acpp.KernelArg {
	var opts []acpp.AccessOption
	off, rng, whole := t.region(a.Offset, a.Range)
	if a.NoInit && (whole || t.pageAligned(a.Offset, a.Range)) {
		opts = append(opts, acpp.NoInit)
	}
	if split {
		// Each chunk's accessor covers the mapper's region; a ranged
		// parameter gets that region.
		opts = append(opts, acpp.Map(mapperOf(a, off, rng)))
		if kind == device.ArgPointer {
			return t.raw(h, a.Mode, opts)
		}
		return t.unranged(h, a.Mode, opts)
	}
	switch kind {
	case device.ArgPointer:
		if !whole {
			opts = append(opts, acpp.Within(off, rng))
		}
		return t.raw(h, a.Mode, opts)
	case device.ArgAccessor:
		return t.unranged(h, a.Mode, opts)
	}
	switch a.Mode {
	case jobfile.Read:
		return acpp.ReadRange(h, t.b, rng, off, opts...)
	case jobfile.Write:
		return acpp.WriteRange(h, t.b, rng, off, opts...)
	}
	return acpp.ReadWriteRange(h, t.b, rng, off, opts...)
}

func (t *tbuf[T]) raw(h *acpp.Handler, mode jobfile.Mode, opts []acpp.AccessOption) acpp.KernelArg {
	switch mode {
	case jobfile.Read:
		return acpp.ReadRaw(h, t.b, opts...)
	case jobfile.Write:
		return acpp.WriteRaw(h, t.b, opts...)
	}
	return acpp.ReadWriteRaw(h, t.b, opts...)
}

func (t *tbuf[T]) unranged(h *acpp.Handler, mode jobfile.Mode, opts []acpp.AccessOption) acpp.KernelArg {
	switch mode {
	case jobfile.Read:
		return acpp.Read(h, t.b, opts...)
	case jobfile.Write:
		return acpp.Write(h, t.b, opts...)
	}
	return acpp.ReadWrite(h, t.b, opts...)
}

// mapperOf is the range mapper of a split step's accessor a, whose region
// is (off, rng): the job file's map, or All without one (always correct,
// moves the most), as on a cluster.
func mapperOf(a *jobfile.Accessor, off acpp.ID, rng acpp.Range) acpp.RangeMapper {
	switch a.Map {
	case "one_to_one":
		return acpp.OneToOne()
	case "neighbourhood":
		return acpp.Neighbourhood(a.MapRange)
	case "fixed":
		return acpp.Fixed(off, rng)
	}
	return acpp.All()
}

// pageAligned reports whether a region starts and ends on page boundaries
// of the buffer's declared page size (or the buffer's end). The runtime
// discards whole pages for a no_init access, so a region that covers part
// of a page must not be no_init: the rest of the page would be lost on a
// device that holds no copy of it. Without a declared page size only the
// whole buffer is known to be safe.
func (t *tbuf[T]) pageAligned(off, rng []int) bool { return pageAligned(t.s, off, rng) }

func pageAligned(s *jobfile.Buffer, off, rng []int) bool {
	ps := s.PageSize
	if ps == nil {
		return false
	}
	for i, e := range s.Range {
		o := 0
		if off != nil {
			o = off[i]
		}
		end := e
		if rng != nil {
			end = o + rng[i]
		}
		if o%ps[i] != 0 || (end%ps[i] != 0 && end != e) {
			return false
		}
	}
	return true
}

func (t *tbuf[T]) fill(h *acpp.Handler, off, rng []int, v []byte) {
	o, r, whole := t.region(off, rng)
	var opts []acpp.AccessOption
	if whole {
		// Only a fill of the whole buffer may discard: a partial one
		// must keep the rest of the pages it touches.
		opts = append(opts, acpp.NoInit)
	}
	acc := acpp.WriteRange(h, t.b, r, o, opts...)
	acpp.Fill(h, acc, *(*T)(unsafe.Pointer(unsafe.SliceData(v))))
}

func (t *tbuf[T]) fillSplit(h *acpp.Handler, v []byte) {
	h.Launch("fill_f32", toRange(t.s.Range), acpp.Write(h, t.b, acpp.NoInit, acpp.Map(acpp.OneToOne())), scalarArg(v))
}

func (t *tbuf[T]) copyTo(h *acpp.Handler, off, rng []int, dst buf, dstOff []int) {
	d := dst.(*tbuf[T]) // the job was validated: same type
	so, sr, _ := t.region(off, rng)
	full := make([]int, sr.Dims())
	for i := range full {
		full[i] = sr.Size(i)
	}
	do, dr, whole := d.region(dstOff, full)
	var opts []acpp.AccessOption
	if whole {
		opts = append(opts, acpp.NoInit)
	}
	acpp.Copy(h, acpp.ReadRange(h, t.b, sr, so), acpp.WriteRange(h, d.b, dr, do, opts...))
}

func (t *tbuf[T]) close() error { return t.b.Close() }

// scalarArg passes encoded scalar bytes as a kernel argument of their size.
func scalarArg(b []byte) acpp.KernelArg {
	switch len(b) {
	case 1:
		return acpp.Scalar([1]byte(b))
	case 2:
		return acpp.Scalar([2]byte(b))
	case 4:
		return acpp.Scalar([4]byte(b))
	}
	return acpp.Scalar([8]byte(b))
}

// readInit reads a buffer's initial data file into memory for s.
func readInit(path string, s *jobfile.Buffer, format jobfile.Format) ([]byte, error) {
	f, r, err := openInit(path, s, format)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := allocData(s)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("%s: reading %d data bytes: %w", path, len(data), err)
	}
	if n, _ := r.Read(make([]byte, 1)); n != 0 {
		return nil, fmt.Errorf("%s has data past the %d bytes its header announces", path, len(data))
	}
	return data, nil
}

// openInit opens a buffer's initial data file and checks that it holds
// what s needs (an .npy header of s's type and shape, or raw data of s's
// size); r reads on from the data's first byte.
func openInit(path string, s *jobfile.Buffer, format jobfile.Format) (f *os.File, r *bufio.Reader, err error) {
	f, err = os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; the path is relative to the job file's directory", err)
	}
	opened := f // the error returns below set f to nil before this runs
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if st.IsDir() {
		return nil, nil, fmt.Errorf("%s is a directory; give the data file (the path is relative to the job file's directory)", path)
	}
	r = bufio.NewReaderSize(f, 1<<16)
	if format == jobfile.FormatNPY {
		h, err := npy.ReadHeader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.GoType() != s.Type || !sameShape(h.Shape, s.Range) {
			dt, _ := npy.Dtype(s.Type)
			return nil, nil, fmt.Errorf("%s holds %s %v, buffer %q is %s %v; save arr.astype('%s').reshape(%s) or change the buffer",
				path, h.GoType(), h.Shape, s.Name, s.Type, s.Range, dt, shapeTuple(s.Range))
		}
	} else if int64(s.Bytes()) != st.Size() {
		return nil, nil, fmt.Errorf("%s has %d bytes, buffer %q (%s %v) needs %d (raw: little-endian elements, row-major, nothing else)",
			path, st.Size(), s.Name, s.Type, s.Range, s.Bytes())
	}
	return f, r, nil
}

func sameShape(shape, rng []int) bool {
	if len(shape) != len(rng) {
		return false
	}
	for i := range shape {
		if shape[i] != rng[i] {
			return false
		}
	}
	return true
}

func shapeTuple(r []int) string {
	s := ""
	for i, e := range r {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(e)
	}
	return s
}
