package cli

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/jobfile"
)

// Outputs written in many slabs (each its own host read, the next read
// under way while one is written) hold the same bytes as in one: Jacobi
// bit for bit against plain Go, in .npy and raw.
func TestOutputInSlabs(t *testing.T) {
	defer func(s int) { outputSlab = s }(outputSlab)
	for _, slab := range []int{1000, 96 * 4 * 7, 64 << 20} { // 2 rows, 7 rows, all at once
		outputSlab = slab
		out := t.TempDir()
		if _, err := Run(context.Background(), Config{JobFile: "../../../examples/jobs/jacobi.yaml", Params: map[string]string{"n": "96"}, OutDir: out, Devices: []string{"cpu"}}); err != nil {
			t.Fatal(err)
		}
		got, want := f32(readNPY(t, filepath.Join(out, "jacobi.npy")).Data), plainJacobi(96, 100)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("slab %d bytes: cell %d = %v, want %v (plain Go)", slab, i, got[i], want[i])
			}
		}
	}
	outputSlab = 40 // 10 float32 per slab, one row of 3D [3 2 5]
	job := writeJob(t, "o.yaml", `buffers:
  a: {type: float64, range: [3, 2, 5], init: {value: 2.5}}
  b: {type: int16, range: [33]}
steps:
  - fill: {buffer: b, value: -2}
outputs:
  - {buffer: a, file: a.raw, format: raw}
  - {buffer: b, file: b.npy}
`)
	out := t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: job, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "a.raw"))
	if err != nil || len(raw) != 30*8 {
		t.Fatalf("a.raw: %d bytes, %v; want 240", len(raw), err)
	}
	for i := range 30 {
		if v := math.Float64frombits(uint64(raw[8*i]) | uint64(raw[8*i+1])<<8 | uint64(raw[8*i+2])<<16 | uint64(raw[8*i+3])<<24 |
			uint64(raw[8*i+4])<<32 | uint64(raw[8*i+5])<<40 | uint64(raw[8*i+6])<<48 | uint64(raw[8*i+7])<<56); v != 2.5 {
			t.Fatalf("a.raw element %d = %v, want 2.5", i, v)
		}
	}
	a := readNPY(t, filepath.Join(out, "b.npy"))
	if a.Dtype != "<i2" || !slices.Equal(a.Shape, []int{33}) || !bytes.Equal(a.Data, bytes.Repeat([]byte{0xfe, 0xff}, 33)) {
		t.Errorf("b.npy = %s %v % x, want <i2 [33] of -2", a.Dtype, a.Shape, a.Data)
	}
}

// failAfter fails its Write once n bytes have gone through.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		m := f.n
		f.n = 0
		return m, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

// A writer's error ends the output with that error, and every host read it
// opened is closed: the buffer takes a write access and the queue closes.
func TestOutputWriteErrorReleasesTheBuffer(t *testing.T) {
	defer func(s int) { outputSlab = s }(outputSlab)
	outputSlab = 64 * 4 // 4 rows of 16 float32
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithKind(acpp.CPU))
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{q: q}
	b, err := e.newBuffer(&jobfile.Buffer{Name: "x", Type: "float32", Range: []int{64, 16}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.write(ctx, b, &failAfter{n: 600}); err == nil || err.Error() != "disk full" {
		t.Fatalf("write into a failing writer = %v, want disk full", err)
	}
	tb := b.(*tbuf[float32])
	wctx, cancel := context.WithTimeout(ctx, 10e9)
	defer cancel()
	if err := tb.b.Write(wctx, make([]float32, 64*16)); err != nil {
		t.Fatalf("a write after the failed output = %v: a host read was left open", err)
	}
	var res Result
	if err := e.close(&res); err != nil {
		t.Fatal(err)
	}
}

// On a big-endian host outputs go through swapWriter: each element's bytes
// reversed, the caller's bytes untouched, any chunking of the writes.
func TestSwapWriter(t *testing.T) {
	src := make([]byte, 3<<20) // more than the scratch buffer
	for i := range src {
		src[i] = byte(i * 7)
	}
	orig := slices.Clone(src)
	for _, size := range []int{1, 2, 4, 8} {
		var out bytes.Buffer
		w := &swapWriter{w: &out, size: size}
		if n, err := w.Write(src[:len(src)/2]); err != nil || n != len(src)/2 {
			t.Fatalf("size %d: Write = %d, %v", size, n, err)
		}
		if _, err := w.Write(src[len(src)/2:]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, orig) {
			t.Fatalf("size %d: swapWriter changed the caller's bytes", size)
		}
		got := out.Bytes()
		for i := 0; i < len(src); i += size {
			for k := range size {
				if got[i+k] != src[i+size-1-k] {
					t.Fatalf("size %d: byte %d = %#x, want %#x", size, i+k, got[i+k], src[i+size-1-k])
				}
			}
		}
	}
	if _, err := (&swapWriter{w: &bytes.Buffer{}, size: 4}).Write(make([]byte, 6)); err == nil {
		t.Error("swapWriter took 6 bytes of 4-byte elements")
	}
}
