package cpu

import (
	"bytes"
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

// BenchmarkFill: a 64 MiB fill on the CPU device with GOMAXPROCS
// workers, zero and float32 1.0, each iteration also clearing the same
// memory on one core (clear: memclr, the memset baseline), so the ratios
// x-clear come from the same moments of a noisy machine. The memory is
// touched first: page faults are not what it measures.
func BenchmarkFill(b *testing.B) {
	const n = 64 << 20
	d := New(0, 0)
	defer d.Close()
	m, _ := d.Alloc(device.MemDevice, n)
	clear(m.Host)
	var base, zero, one time.Duration
	fill := func(pat ...byte) time.Duration {
		t := time.Now()
		if err := enqueueWait(b, d, device.FillOp{Dst: m, Bytes: n, Pattern: pat}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t)
	}
	b.SetBytes(3 * n)
	for b.Loop() {
		t := time.Now()
		clear(m.Host)
		base += time.Since(t)
		zero += fill(0, 0, 0, 0)
		one += fill(0, 0, 0x80, 0x3f)
	}
	gb := float64(n) * float64(b.N) / 1e9
	b.ReportMetric(gb/base.Seconds(), "GB/s-clear")
	b.ReportMetric(gb/zero.Seconds(), "GB/s-zero")
	b.ReportMetric(gb/one.Seconds(), "GB/s-f32")
	b.ReportMetric(base.Seconds()/zero.Seconds(), "x-clear-zero")
	b.ReportMetric(base.Seconds()/one.Seconds(), "x-clear-f32")
}
