package transport

import (
	"fmt"
	"reflect"
	"sync"
)

// MaxDecodedBytes bounds what the decoding of one message may allocate
// beyond the bytes and strings it carries (which its frame bounds): the
// slices, pointers and maps the codec makes. The frame's pre-scan bounds
// every declared length by the frame's bytes, but msgpack/v5 preallocates
// a slice by its declared length, and one byte of input (an empty map, a
// nil, a small integer) becomes a whole element: 8 bytes of a []uint64,
// 144 of a proto.KernelSpec (twice that: msgpack/v5 copies the slice it
// made). Without this bound a 16 MiB frame of empty maps sent as a
// MsgJobKernels body made the node allocate 4.8 GB.
const MaxDecodedBytes = 32 << 20

// handCoded lists the types with hand-written decoders (codec.go): they
// bound what they allocate themselves, element counts and the whole.
var handCoded = map[reflect.Type]bool{}

var allocUnits sync.Map // reflect.Type → int

// allocUnit is the most bytes that one element of a msgpack array or one
// entry of a map can make the reflective decoder allocate when decoding
// into a value of type t (t a pointer to the value): the largest slice
// element, pointer target or map entry reachable from t. 0 means that no
// declared length makes it allocate more than the bytes it reads.
func allocUnit(t reflect.Type) int {
	if u, ok := allocUnits.Load(t); ok {
		return u.(int)
	}
	u := 0
	if t.Kind() == reflect.Pointer {
		u = unitOf(t.Elem(), map[reflect.Type]bool{})
	}
	allocUnits.Store(t, u)
	return u
}

func unitOf(t reflect.Type, seen map[reflect.Type]bool) int {
	if seen[t] || handCoded[t] {
		return 0
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer:
		return max(int(t.Elem().Size()), unitOf(t.Elem(), seen))
	case reflect.Slice:
		e := t.Elem()
		if e.Kind() == reflect.Uint8 { // []byte: its bytes are in the frame
			return 0
		}
		// msgpack/v5 makes the slice and then appends it to the
		// field's (nil) slice: two copies.
		u := 2 * int(e.Size())
		if e.Kind() == reflect.Pointer {
			u += int(e.Elem().Size())
		}
		return max(u, unitOf(e, seen))
	case reflect.Array:
		return unitOf(t.Elem(), seen)
	case reflect.Map:
		// Buckets hold key and value; allow for their overhead and growth.
		return max(2*int(t.Key().Size()+t.Elem().Size())+16, unitOf(t.Key(), seen), unitOf(t.Elem(), seen))
	case reflect.Struct:
		u := 0
		for i := range t.NumField() {
			u = max(u, unitOf(t.Field(i).Type, seen))
		}
		return u
	case reflect.Interface:
		// Decoded as map[string]any, []any and boxed scalars.
		return 128
	}
	return 0
}

// checkDecodedSize refuses a body that could make the reflective decoding
// into v allocate more than MaxDecodedBytes, before anything is allocated:
// its arrays' declared elements and maps' entries, times v's allocUnit.
func checkDecodedSize(body []byte, v any) error {
	u := allocUnit(reflect.TypeOf(v))
	if u == 0 || len(body) <= MaxDecodedBytes/u {
		// A scanned body declares at most one element per byte: a body
		// this small cannot declare too many (most messages; no walk).
		return nil
	}
	n := countElems(body)
	if n <= MaxDecodedBytes/u {
		return nil
	}
	return fmt.Errorf("%w: a %d-byte %T declares %d elements, which could decode to %d bytes, more than %d; split it",
		ErrFrameTooLarge, len(body), v, n, uint64(n)*uint64(u), MaxDecodedBytes)
}

// countElems returns the elements that the arrays, and the entries that
// the maps, of a scanned msgpack body declare, together.
func countElems(b []byte) int {
	n := 0
	for pos := 0; pos < len(b); {
		c := b[pos]
		pos++
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			n += int(c & 0x0f)
		case c >= 0x90 && c <= 0x9f:
			n += int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			pos += int(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			pos += 1 + int(at(b, pos, 1))
		case c == 0xc5 || c == 0xda:
			pos += 2 + int(at(b, pos, 2))
		case c == 0xc6 || c == 0xdb:
			pos += 4 + int(at(b, pos, 4))
		case c >= 0xc7 && c <= 0xc9:
			k := 1 << (c - 0xc7)
			pos += k + 1 + int(at(b, pos, k))
		case c == 0xca:
			pos += 4
		case c == 0xcb:
			pos += 8
		case c >= 0xcc && c <= 0xcf:
			pos += 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			pos += 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			pos += 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xde:
			n += int(at(b, pos, 2))
			pos += 2
		case c == 0xdd || c == 0xdf:
			n += int(at(b, pos, 4))
			pos += 4
		}
	}
	return n
}

// at reads a k-byte big-endian length at b[pos:] (0 past the end: the
// body was scanned, so that does not happen).
func at(b []byte, pos, k int) uint64 {
	var v uint64
	for i := range k {
		if pos+i >= len(b) {
			return 0
		}
		v = v<<8 | uint64(b[pos+i])
	}
	return v
}
