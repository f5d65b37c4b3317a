package npy

import (
	"bytes"
	"errors"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

// numpySaved is what np.save writes for np.arange(6, dtype='<f4').reshape(2, 3)
// (NumPy 1.x/2.x: version 1.0, header padded with spaces to 64 bytes).
var numpySaved = func() []byte {
	h := "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
	h += strings.Repeat(" ", (64-(10+len(h)+1)%64)%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), 0)
	b = append(b, h...)
	return append(b, 0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0xa0, 0x40)
}()

func TestDecodeNumPyFile(t *testing.T) {
	a, err := Decode(numpySaved)
	if err != nil {
		t.Fatal(err)
	}
	if a.Dtype != "<f4" || !reflect.DeepEqual(a.Shape, []int{2, 3}) || len(a.Data) != 24 || a.GoType() != "float32" {
		t.Fatalf("Decode = %s %v %d bytes (%s), want <f4 [2 3] 24 bytes float32", a.Dtype, a.Shape, len(a.Data), a.GoType())
	}
	var buf bytes.Buffer
	if err := Write(&buf, "<f4", []int{2, 3}, a.Data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), numpySaved) {
		t.Errorf("Write = %q, want NumPy's bytes %q", buf.Bytes(), numpySaved)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		dtype string
		shape []int
	}{
		{"<f4", []int{5}}, {"<f8", []int{2, 2}}, {"|u1", []int{3, 1, 2}}, {"<i4", []int{}}, {"<u8", []int{0}},
		{"=i2", []int{7}}, {"|i1", []int{4}}, {"<u2", []int{1, 1}}, {"<i8", []int{2}}, {"<u4", []int{100000}},
	} {
		h := Header{Dtype: tc.dtype, Shape: tc.shape}
		dt, _ := normDtype(tc.dtype)
		h.Dtype = dt
		data := make([]byte, h.DataBytes())
		for i := range data {
			data[i] = byte(i * 7)
		}
		var buf bytes.Buffer
		if err := Write(&buf, tc.dtype, tc.shape, data); err != nil {
			t.Fatalf("Write(%s %v): %v", tc.dtype, tc.shape, err)
		}
		if buf.Len()-len(data) < 64 || (buf.Len()-len(data))%64 != 0 {
			t.Errorf("Write(%s %v): data starts at byte %d, want a multiple of 64", tc.dtype, tc.shape, buf.Len()-len(data))
		}
		a, err := Decode(buf.Bytes())
		if err != nil {
			t.Fatalf("Decode(Write(%s %v)): %v", tc.dtype, tc.shape, err)
		}
		if a.Dtype != dt || !reflect.DeepEqual(a.Shape, tc.shape) || !bytes.Equal(a.Data, data) {
			t.Errorf("round trip %s %v = %s %v, data equal %v", tc.dtype, tc.shape, a.Dtype, a.Shape, bytes.Equal(a.Data, data))
		}
	}
}

func withHeader(dict string, version byte, data []byte) []byte {
	b := append([]byte("\x93NUMPY"), version, 0)
	if version == 1 {
		b = append(b, byte(len(dict)), byte(len(dict)>>8))
	} else {
		b = append(b, byte(len(dict)), byte(len(dict)>>8), 0, 0)
	}
	return append(append(b, dict...), data...)
}

func TestDecodeErrorsSayWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		is   error
		want string
	}{
		{"raw bytes", []byte("hello world, not numpy"), ErrFormat, "format: raw"},
		{"short", []byte("\x93NUM"), ErrFormat, "too short"},
		{"version 9", withHeader("{}", 9, nil), ErrUnsupported, "version 9.0"},
		{"big endian", withHeader("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }\n", 1, make([]byte, 4)), ErrUnsupported, "astype('<f4')"},
		{"fortran", withHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", 1, make([]byte, 4)), ErrUnsupported, "ascontiguousarray"},
		{"object", withHeader("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n", 1, make([]byte, 8)), ErrUnsupported, "numeric"},
		{"complex", withHeader("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n", 1, make([]byte, 8)), ErrUnsupported, "float or integer"},
		{"short data", withHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", 1, make([]byte, 4)), ErrFormat, "needs 8 data bytes, the file has 4"},
		{"missing key", withHeader("{'descr': '<f4', 'shape': (2,), }\n", 1, make([]byte, 8)), ErrFormat, "lacks"},
		{"unknown key", withHeader("{'descr': '<f4', 'x': 1}\n", 1, nil), ErrFormat, "unknown key"},
		{"huge shape", withHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000, 100000000), }\n", 2, nil), ErrFormat, "2^40"},
		// 2^20·2^20·2^24 = 2^64 wrapped to 0 elements: a header of no data
		// declared an array of 2^64 (found by FuzzDecode).
		{"shape wrapping to 0", withHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576, 16777216), }\n", 2, nil), ErrFormat, "2^40"},
		{"garbage after", withHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), } x\n", 1, nil), ErrFormat, "after the dict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want %v mentioning %q", err, tc.is, tc.want)
			}
		})
	}
}

// FuzzDecode: arbitrary bytes decode without panicking; what decodes
// re-encodes to a file that decodes to the same array.
func FuzzDecode(f *testing.F) {
	f.Add(numpySaved)
	var buf bytes.Buffer
	Write(&buf, "<u8", []int{2, 1}, make([]byte, 16))
	f.Add(buf.Bytes())
	f.Add(withHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", 2, make([]byte, 8)))
	f.Add(withHeader("{\"descr\": \"|u1\", \"fortran_order\": False, \"shape\": (3,)}", 3, []byte{1, 2, 3}))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := Decode(in)
		if err != nil {
			return
		}
		elems := big.NewInt(1)
		for _, d := range a.Shape {
			elems.Mul(elems, big.NewInt(int64(d)))
		}
		if elems.Cmp(big.NewInt(maxElems)) > 0 || elems.Int64()*int64(a.ItemSize()) != int64(len(a.Data)) {
			t.Fatalf("shape %v of %s (%v elements) decoded with %d data bytes", a.Shape, a.Dtype, elems, len(a.Data))
		}
		var out bytes.Buffer
		if err := Write(&out, a.Dtype, a.Shape, a.Data); err != nil {
			t.Fatalf("Write of a decoded array: %v", err)
		}
		b, err := Decode(out.Bytes())
		if err != nil {
			t.Fatalf("Decode(Write(a)): %v", err)
		}
		if b.Dtype != a.Dtype || !reflect.DeepEqual(b.Shape, a.Shape) || !bytes.Equal(b.Data, a.Data) {
			t.Fatalf("round trip changed %s %v to %s %v", a.Dtype, a.Shape, b.Dtype, b.Shape)
		}
	})
}
