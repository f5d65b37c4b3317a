package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ErrFormat: the bytes are not a well-formed .npy file.
var ErrFormat = errors.New("npy: malformed file")

// ErrUnsupported: a well-formed .npy file of a kind this package does not
// read; the message says how to convert it.
var ErrUnsupported = errors.New("npy: unsupported array")

const magic = "\x93NUMPY"

// maxHeader bounds the header length (NumPy writes a few hundred bytes).
const maxHeader = 1 << 20

// maxElems bounds the element count a header may declare (2^40).
const maxElems = 1 << 40

// Header is what a .npy header says about its array.
type Header struct {
	// Dtype is the NumPy type string, normalised to little-endian ("<f4";
	// "|u1" for one-byte types).
	Dtype string
	// Shape is the array's shape, C order; empty for a 0-d array.
	Shape []int
}

// ItemSize is the element size in bytes.
func (h Header) ItemSize() int { s, _ := itemSize(h.Dtype); return s }

// Count is the number of elements (1 for a 0-d array).
func (h Header) Count() int {
	n := 1
	for _, d := range h.Shape {
		n *= d
	}
	return n
}

// DataBytes is the size of the data that follows the header.
func (h Header) DataBytes() int { return h.Count() * h.ItemSize() }

// GoType is the Go type name of the elements (float32, int64, ...).
func (h Header) GoType() string { return goTypes[h.Dtype] }

var goTypes = map[string]string{
	"<f4": "float32", "<f8": "float64",
	"|i1": "int8", "<i2": "int16", "<i4": "int32", "<i8": "int64",
	"|u1": "uint8", "<u2": "uint16", "<u4": "uint32", "<u8": "uint64",
}

// Dtype returns the NumPy type string of a Go type name, or false.
func Dtype(goType string) (string, bool) {
	for d, g := range goTypes {
		if g == goType {
			return d, true
		}
	}
	return "", false
}

func itemSize(dtype string) (int, bool) {
	if _, ok := goTypes[dtype]; !ok {
		return 0, false
	}
	n, _ := strconv.Atoi(dtype[2:])
	return n, true
}

// normDtype maps a header's descr to its little-endian form, or explains why
// it cannot.
func normDtype(d string) (string, error) {
	if len(d) < 3 {
		return "", fmt.Errorf("%w: dtype %q is not a simple number type; save a numeric array (e.g. arr.astype('<f4'))", ErrUnsupported, d)
	}
	order, kind, size := d[0], d[1], d[2:]
	switch order {
	case '<', '|', '=':
	case '>':
		return "", fmt.Errorf("%w: dtype %q is big-endian; save arr.astype('<%c%s')", ErrUnsupported, d, kind, size)
	default:
		return "", fmt.Errorf("%w: dtype %q has no byte order mark", ErrFormat, d)
	}
	switch kind {
	case 'f', 'i', 'u':
	default:
		return "", fmt.Errorf("%w: dtype %q is not a float or integer type; save a numeric array (e.g. arr.astype('<f4'))", ErrUnsupported, d)
	}
	n := "<" + string(kind) + size
	if size == "1" {
		n = "|" + string(kind) + size
	}
	if _, ok := goTypes[n]; !ok {
		return "", fmt.Errorf("%w: dtype %q: %c%s is not one of float32/64, int8–64, uint8–64", ErrUnsupported, d, kind, size)
	}
	return n, nil
}

// ReadHeader reads the magic, version and header of a .npy file from r,
// leaving r at the first data byte.
func ReadHeader(r io.Reader) (Header, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Header{}, fmt.Errorf("%w: file too short for the magic and version (%v)", ErrFormat, err)
	}
	if string(pre[:6]) != magic {
		return Header{}, fmt.Errorf("%w: no \\x93NUMPY magic at the start (is this a raw file? say format: raw)", ErrFormat)
	}
	var hlen int
	switch pre[6] {
	case 1:
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return Header{}, fmt.Errorf("%w: truncated header length", ErrFormat)
		}
		hlen = int(binary.LittleEndian.Uint16(l[:]))
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return Header{}, fmt.Errorf("%w: truncated header length", ErrFormat)
		}
		v := binary.LittleEndian.Uint32(l[:])
		if v > maxHeader {
			return Header{}, fmt.Errorf("%w: header of %d bytes (at most %d)", ErrFormat, v, maxHeader)
		}
		hlen = int(v)
	default:
		return Header{}, fmt.Errorf("%w: format version %d.%d (this reader knows 1.0, 2.0, 3.0)", ErrUnsupported, pre[6], pre[7])
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return Header{}, fmt.Errorf("%w: header of %d bytes is truncated", ErrFormat, hlen)
	}
	return parseHeader(string(hb))
}

// Array is a decoded .npy file.
type Array struct {
	Header
	// Data is the raw little-endian element data, C order.
	Data []byte
}

// Decode parses a whole .npy file.
func Decode(b []byte) (*Array, error) {
	r := bytes.NewReader(b)
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	rest := b[len(b)-r.Len():]
	if len(rest) != h.DataBytes() {
		return nil, fmt.Errorf("%w: shape %v of %s needs %d data bytes, the file has %d", ErrFormat, h.Shape, h.Dtype, h.DataBytes(), len(rest))
	}
	return &Array{Header: h, Data: rest}, nil
}

// Write writes a version 1.0 .npy file of the given dtype ("<f4", ...) and
// shape holding data (C order, little-endian).
func Write(w io.Writer, dtype string, shape []int, data []byte) error {
	dt, err := normDtype(dtype)
	if err != nil {
		return err
	}
	h := Header{Dtype: dt, Shape: shape}
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("%w: negative extent in shape %v", ErrFormat, shape)
		}
	}
	if h.DataBytes() != len(data) {
		return fmt.Errorf("%w: shape %v of %s needs %d bytes, got %d", ErrFormat, shape, dt, h.DataBytes(), len(data))
	}
	_, err = w.Write(EncodeHeader(h))
	if err == nil {
		_, err = w.Write(data)
	}
	return err
}

// EncodeHeader returns the magic, version 1.0 and header for h, padded so
// that the data starts at a multiple of 64 bytes, as NumPy writes it.
func EncodeHeader(h Header) []byte {
	var sb strings.Builder
	fmt.Fprintf(&sb, "{'descr': '%s', 'fortran_order': False, 'shape': (", h.Dtype)
	for i, d := range h.Shape {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(d))
	}
	if len(h.Shape) == 1 {
		sb.WriteString(",")
	}
	sb.WriteString("), }")
	dict := sb.String()
	total := len(magic) + 2 + 2 + len(dict) + 1
	pad := (64 - total%64) % 64
	out := make([]byte, 0, total+pad)
	out = append(out, magic...)
	out = append(out, 1, 0)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(dict)+pad+1))
	out = append(out, dict...)
	out = append(out, bytes.Repeat([]byte{' '}, pad)...)
	return append(out, '\n')
}

// parseHeader reads the Python dict literal of a header.
func parseHeader(s string) (Header, error) {
	p := &lit{s: s}
	var h Header
	var haveDescr, haveOrder, haveShape bool
	p.space()
	if !p.eat('{') {
		return h, fmt.Errorf("%w: header %q does not start with '{'", ErrFormat, clip(s))
	}
	for {
		p.space()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return h, err
		}
		p.space()
		if !p.eat(':') {
			return h, fmt.Errorf("%w: header: ':' expected after key %q", ErrFormat, key)
		}
		p.space()
		switch key {
		case "descr":
			d, err := p.str()
			if err != nil {
				return h, err
			}
			if h.Dtype, err = normDtype(d); err != nil {
				return h, err
			}
			haveDescr = true
		case "fortran_order":
			v, err := p.boolean()
			if err != nil {
				return h, err
			}
			if v {
				return h, fmt.Errorf("%w: Fortran-order array; save np.ascontiguousarray(arr)", ErrUnsupported)
			}
			haveOrder = true
		case "shape":
			if h.Shape, err = p.tuple(); err != nil {
				return h, err
			}
			haveShape = true
		default:
			return h, fmt.Errorf("%w: header has unknown key %q (want descr, fortran_order, shape)", ErrFormat, key)
		}
		p.space()
		if p.eat(',') {
			continue
		}
		p.space()
		if !p.eat('}') {
			return h, fmt.Errorf("%w: header: ',' or '}' expected at byte %d", ErrFormat, p.i)
		}
		break
	}
	if !haveDescr || !haveOrder || !haveShape {
		return h, fmt.Errorf("%w: header %q lacks descr, fortran_order or shape", ErrFormat, clip(s))
	}
	if rest := strings.TrimRight(s[p.i:], " \n\x00"); rest != "" {
		return h, fmt.Errorf("%w: header has %q after the dict", ErrFormat, clip(rest))
	}
	n := uint64(1)
	for _, d := range h.Shape {
		// Checked before multiplying: the product must not wrap.
		if d != 0 && n > maxElems/uint64(d) {
			return h, fmt.Errorf("%w: shape %v has more than 2^40 elements", ErrFormat, h.Shape)
		}
		n *= uint64(d)
	}
	return h, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// lit is a cursor over a Python literal.
type lit struct {
	s string
	i int
}

func (p *lit) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *lit) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *lit) str() (string, error) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", fmt.Errorf("%w: header: string expected at byte %d", ErrFormat, p.i)
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", fmt.Errorf("%w: header: unterminated string at byte %d", ErrFormat, p.i)
	}
	v := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return v, nil
}

func (p *lit) boolean() (bool, error) {
	switch {
	case strings.HasPrefix(p.s[p.i:], "True"):
		p.i += 4
		return true, nil
	case strings.HasPrefix(p.s[p.i:], "False"):
		p.i += 5
		return false, nil
	}
	return false, fmt.Errorf("%w: header: True or False expected at byte %d", ErrFormat, p.i)
}

func (p *lit) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, fmt.Errorf("%w: header: shape tuple expected at byte %d", ErrFormat, p.i)
	}
	out := []int{}
	for {
		p.space()
		if p.eat(')') {
			return out, nil
		}
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i || j-p.i > 12 {
			return nil, fmt.Errorf("%w: header: shape extent expected at byte %d", ErrFormat, p.i)
		}
		v, _ := strconv.Atoi(p.s[p.i:j])
		if v > math.MaxInt32 {
			return nil, fmt.Errorf("%w: shape extent %d is too large", ErrFormat, v)
		}
		out = append(out, v)
		p.i = j
		if len(out) > 32 {
			return nil, fmt.Errorf("%w: shape has more than 32 dimensions", ErrFormat)
		}
		p.space()
		if p.eat(',') {
			continue
		}
		if p.eat(')') {
			return out, nil
		}
		return nil, fmt.Errorf("%w: header: ',' or ')' expected in shape at byte %d", ErrFormat, p.i)
	}
}
