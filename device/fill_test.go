package device

import (
	"bytes"
	"testing"
)

// FillHost leaves the bytes around the region alone and repeats the
// pattern from the region's start, for zero and non-zero patterns of every
// element size (and 3 bytes), regions smaller and larger than its block.
func TestFillHostPatterns(t *testing.T) {
	for _, pat := range [][]byte{{0}, {0, 0, 0, 0}, {7}, {1, 2}, {1, 2, 3}, {0, 0, 0x80, 0x3f}, {1, 2, 3, 4, 5, 6, 7, 8}, {0, 0, 0, 0, 0, 0, 0, 1}} {
		for _, count := range []int{1, 5, fillBlock/len(pat) - 1, fillBlock / len(pat), fillBlock/len(pat) + 1, 3*fillBlock/len(pat) + 17} {
			n := count * len(pat)
			dst := bytes.Repeat([]byte{0xaa}, n+13)
			FillHost(dst, FillOp{Offset: 5, Bytes: n, Pattern: pat})
			want := append(append(bytes.Repeat([]byte{0xaa}, 5), bytes.Repeat(pat, count)...), bytes.Repeat([]byte{0xaa}, 8)...)
			if !bytes.Equal(dst, want) {
				t.Fatalf("FillHost(%v × %d) differs from the repeated pattern", pat, count)
			}
		}
	}
}

// BenchmarkFillHost: FillHost of 64 MiB with a zero and a float32 1.0
// pattern, against clear (memclr) and copy (memmove) of the same bytes in
// the same run; the memory is touched before timing.
func BenchmarkFillHost(b *testing.B) {
	const n = 64 << 20
	dst := make([]byte, n)
	src := make([]byte, n)
	clear(dst)
	clear(src)
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"baseline=clear", func() { clear(dst) }},
		{"baseline=copy", func() { copy(dst, src) }},
		{"zero", func() { FillHost(dst, FillOp{Bytes: n, Pattern: []byte{0, 0, 0, 0}}) }},
		{"f32=1.0", func() { FillHost(dst, FillOp{Bytes: n, Pattern: []byte{0, 0, 0x80, 0x3f}}) }},
		{"f64=1.0", func() { FillHost(dst, FillOp{Bytes: n, Pattern: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				tc.fn()
			}
		})
	}
}
