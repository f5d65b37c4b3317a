package cpu

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

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
		{Dst: m, Offset: 3, Bytes: (5<<20/12 + 7) * 12, Pattern: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
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

// fill writes exactly the repeated pattern over its region and nothing
// around it, for patterns of 1 to 1000 bytes (the element sizes, structs,
// odd sizes, zeros), at any offset (so the streamed part starts after
// cached stores up to an aligned address) and length (tails shorter than
// a block), taking the streamed path where this machine has one (B3:
// fill). The reference is the pattern repeated, not FillHost.
func TestFillPatternsBitExact_B3(t *testing.T) {
	if !haveStream {
		t.Log("no streaming stores here: fill is FillHost")
	}
	rng := rand.New(rand.NewPCG(16, 3))
	sizes := []int{1, 2, 4, 8, 3, 12, 16, 24, 32, 40, 100, 128, 200, 1000}
	buf := make([]byte, 256<<10)
	for i := range 2000 {
		p := sizes[i%len(sizes)]
		pat := make([]byte, p)
		if i%7 != 0 { // every 7th pattern is zeros
			for j := range pat {
				pat[j] = byte(rng.IntN(255) + 1)
			}
		}
		off := rng.IntN(200)
		count := rng.IntN((len(buf) - off) / p)
		if i%3 == 0 { // short ones too: no room for a streamed block
			count = rng.IntN(min(64, (len(buf)-off)/p))
		}
		for j := range buf {
			buf[j] = 0xaa
		}
		whole := streamMinBytes // pretend it is a chunk of a big fill
		if i%5 == 0 {
			whole = count * p
		}
		fill(buf, device.FillOp{Offset: off, Bytes: count * p, Pattern: pat}, whole)
		end := off + count*p
		if !bytes.Equal(buf[off:end], bytes.Repeat(pat, count)) {
			t.Fatalf("fill of %d × %d-byte pattern at %d: region differs from the repeated pattern", count, p, off)
		}
		if !allBytes(buf[:off], 0xaa) || !allBytes(buf[end:], 0xaa) {
			t.Fatalf("fill of %d × %d-byte pattern at %d wrote outside its region", count, p, off)
		}
	}
}

// BenchmarkFill: 64 MiB fills on the CPU device with GOMAXPROCS workers,
// one pattern of each width (zeros, a byte, int16, float32 1.0, float64
// 1.0, a 12-byte struct), each timed right after a clear (memclr, one
// core: the memset baseline) of the same memory, so that a ratio comes
// from two neighbouring moments of a noisy machine. x-clear-W is the
// median over the iterations of clear time / fill time (≥ 0.8 is the
// target of issue 16); GB/s-clear is the baseline's speed. The memory is
// touched first, so neither the clear nor the fills pay page faults.
func BenchmarkFill(b *testing.B) {
	const n = 64 << 20
	d := New(0, 0)
	defer d.Close()
	m, _ := d.Alloc(device.MemDevice, n)
	clear(m.Host)
	pats := []struct {
		name string
		pat  []byte
	}{
		{"zero", []byte{0, 0, 0, 0}},
		{"u8", []byte{0x7f}},
		{"i16", []byte{0x34, 0x12}},
		{"f32", []byte{0, 0, 0x80, 0x3f}},
		{"f64", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}},
		{"s12", []byte{1, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}},
	}
	ratios := make([][]float64, len(pats))
	var base time.Duration
	b.SetBytes(int64(2 * n * len(pats)))
	for b.Loop() {
		for i, p := range pats {
			t := time.Now()
			clear(m.Host)
			c := time.Since(t)
			base += c
			t = time.Now()
			if err := enqueueWait(b, d, device.FillOp{Dst: m, Bytes: n / len(p.pat) * len(p.pat), Pattern: p.pat}); err != nil {
				b.Fatal(err)
			}
			ratios[i] = append(ratios[i], c.Seconds()/time.Since(t).Seconds())
		}
	}
	b.ReportMetric(float64(n)*float64(b.N*len(pats))/base.Seconds()/1e9, "GB/s-clear")
	for i, p := range pats {
		b.ReportMetric(median(ratios[i]), "x-clear-"+p.name)
	}
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

func allBytes(b []byte, c byte) bool {
	for _, x := range b {
		if x != c {
			return false
		}
	}
	return true
}

// BenchmarkFillFresh: as BenchmarkFill, but each fill and its clear
// write memory fresh from the kernel (an anonymous mapping per run), so
// both pay a page fault per 4 KiB page: the fill's workers take theirs in
// parallel, the one-core clear one after the other.
func BenchmarkFillFresh(b *testing.B) {
	const n = 64 << 20
	d := New(0, 0)
	defer d.Close()
	fresh := func() []byte {
		m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	var ratios []float64
	b.SetBytes(2 * n)
	for b.Loop() {
		c, f := fresh(), fresh()
		t := time.Now()
		clear(c)
		tc := time.Since(t)
		m := &device.Mem{Device: d.Info().ID, Kind: device.MemHost, Bytes: n, Host: f}
		t = time.Now()
		if err := enqueueWait(b, d, device.FillOp{Dst: m, Bytes: n, Pattern: []byte{0, 0, 0x80, 0x3f}}); err != nil {
			b.Fatal(err)
		}
		ratios = append(ratios, tc.Seconds()/time.Since(t).Seconds())
		syscall.Munmap(c)
		syscall.Munmap(f)
	}
	b.ReportMetric(median(ratios), "x-clear-f32")
}
