package cpu

import (
	"bytes"
	"testing"

	"github.com/acpp/acpp/device"
)

// A big fill runs in chunks on several workers and writes exactly what one
// FillHost of the whole region writes: chunks start on whole patterns
// (a 3-byte one here) and the bytes around the region stay.
func TestFillInChunks(t *testing.T) {
	d := New(0, 3)
	defer d.Close()
	const n = 7<<20 + 5
	m, _ := d.Alloc(device.MemDevice, n)
	for i := range m.Host {
		m.Host[i] = 0xaa
	}
	want := bytes.Clone(m.Host)
	for _, f := range []device.FillOp{
		{Dst: m, Offset: 1, Bytes: (n - 4) / 3 * 3, Pattern: []byte{1, 2, 3}},
		{Dst: m, Offset: 2, Bytes: n - 3, Pattern: []byte{0}},
		{Dst: m, Offset: 8, Bytes: 3 << 20, Pattern: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}},
	} {
		if err := enqueueWait(t, d, f); err != nil {
			t.Fatal(err)
		}
		device.FillHost(want, f)
		if !bytes.Equal(m.Host, want) {
			t.Fatalf("chunked fill %d bytes at %d with %v differs from one FillHost", f.Bytes, f.Offset, f.Pattern)
		}
	}
}

// BenchmarkFill: a 64 MiB fill (zero, and float32 1.0) on the CPU device
// with GOMAXPROCS workers, against clear of the same memory on one core
// in the same run (the memset baseline); the memory is touched first.
func BenchmarkFill(b *testing.B) {
	const n = 64 << 20
	d := New(0, 0)
	defer d.Close()
	m, _ := d.Alloc(device.MemDevice, n)
	clear(m.Host)
	for _, tc := range []struct {
		name string
		pat  []byte
	}{{"baseline=clear", nil}, {"zero", []byte{0, 0, 0, 0}}, {"f32=1.0", []byte{0, 0, 0x80, 0x3f}}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				if tc.pat == nil {
					clear(m.Host)
					continue
				}
				if err := enqueueWait(b, d, device.FillOp{Dst: m, Bytes: n, Pattern: tc.pat}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
