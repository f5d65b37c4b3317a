package cli

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
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

// An output reads a buffer back from the GPU that holds all of it
// (writeFrom) and otherwise from its host copy: the path chooser.
func TestReadBackDevice(t *testing.T) {
	defer func(s int) { stagingSlab = s }(stagingSlab)
	stagingSlab = 1 << 20
	gpu := device.Info{ID: device.ID{Kind: device.KindCUDA, Index: 1}}
	cpu := device.Info{ID: device.ID{Kind: device.KindCPU}, Caps: device.Capabilities{HostUnified: true}}
	igpu := device.Info{ID: device.ID{Kind: device.KindCUDA}, Caps: device.Capabilities{HostUnified: true}}
	devs := []device.Info{igpu, gpu, cpu}
	grid := &jobfile.Buffer{Type: "float32", Range: []int{4096, 4096}}
	for _, c := range []struct {
		what   string
		s      *jobfile.Buffer
		holder string
		want   bool
	}{
		{"held by a GPU", grid, "cuda:1", true},
		{"held by a CPU device: its memory is the host copy", grid, "cpu:0", false},
		{"held by an integrated GPU (host-unified)", grid, "cuda:0", false},
		{"held by no one device (split over several, parts on several, never written)", grid, "", false},
		{"a split's devices", grid, "cuda:1,cpu:0", false},
		{"held by a device the queue lacks", grid, "cuda:7", false},
		{"one index larger than a slab", &jobfile.Buffer{Type: "float32", Range: []int{2, 1 << 19}}, "cuda:1", false},
		{"a row the size of a slab", &jobfile.Buffer{Type: "float32", Range: []int{2, 1 << 18}}, "cuda:1", true},
		{"empty", &jobfile.Buffer{Type: "float32", Range: []int{0, 4}}, "cuda:1", false},
	} {
		dev, ok := readBackDevice(c.s, c.holder, devs)
		if ok != c.want || ok && dev != gpu.ID {
			t.Errorf("%s: readBackDevice = %v, %v; want %v", c.what, dev, ok, c.want)
		}
	}
}

// engine.wrote tracks the one device that holds all of a buffer: a whole
// write makes its device the holder, a part written by the holder keeps
// it, a part written elsewhere leaves none. Fills and copies on a fake
// accelerator (device memory not host-visible) and on the CPU.
func TestOutputHolderTracking(t *testing.T) {
	fake := devicetest.NewFake(devicetest.FakeConfig{})
	t.Cleanup(func() { fake.Close() })
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithDevices(fake), acpp.WithAcceleratorsFirst())
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{q: q}
	defer e.close(&Result{})
	spec := &jobfile.Buffer{Name: "a", Type: "float32", Range: []int{8, 4}}
	a, err := e.newBuffer(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.newBuffer(&jobfile.Buffer{Name: "b", Type: "float32", Range: []int{8, 4}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	one := []byte{0, 0, 0x80, 0x3f}
	for _, s := range []struct {
		what         string
		run          func() (ticket, error)
		wantA, wantB string
	}{
		{"nothing written", nil, "", ""},
		{"a filled on the fake", func() (ticket, error) { return e.fill(&Group{}, a, nil, nil, one, "", false) }, "fake:0", ""},
		{"a row of a filled on the fake", func() (ticket, error) { return e.fill(&Group{}, a, []int{2, 0}, []int{1, 4}, one, "", false) }, "fake:0", ""},
		{"b partly filled on the fake", func() (ticket, error) { return e.fill(&Group{}, b, []int{0, 0}, []int{8, 2}, one, "", false) }, "fake:0", ""},
		{"a copied whole into b on the fake", func() (ticket, error) { return e.copy(&Group{}, a, nil, nil, b, nil, "") }, "fake:0", "fake:0"},
		{"a row of a filled on the CPU", func() (ticket, error) { return e.fill(&Group{}, a, []int{3, 0}, []int{1, 4}, one, "cpu:0", false) }, "", "fake:0"},
		{"a filled whole on the CPU", func() (ticket, error) { return e.fill(&Group{}, a, nil, nil, one, "cpu:0", false) }, "cpu:0", "fake:0"},
	} {
		if s.run != nil {
			tk, err := s.run()
			if err == nil {
				err = tk.wait(ctx)
			}
			if err != nil {
				t.Fatalf("%s: %v", s.what, err)
			}
		}
		if e.holder[a] != s.wantA || e.holder[b] != s.wantB {
			t.Errorf("%s: holders a %q, b %q; want %q, %q", s.what, e.holder[a], e.holder[b], s.wantA, s.wantB)
		}
	}
}

// An output of a buffer an accelerator holds goes from its memory through
// pinned host slabs, slab by slab, bit for bit as from the host copy, and
// leaves the host copy outdated (nothing moves to the buffer's host
// memory); a split over two accelerators reads the host copy as before.
// Jacobi on fakes whose memory the host cannot see stand in for GPUs.
func TestOutputFromAcceleratorInSlabs(t *testing.T) {
	if q, err := acpp.NewQueue(context.Background(), acpp.WithKind(acpp.CUDA)); err == nil {
		q.Close()
		t.Skip("a real GPU is here: it would take the kernels, and fake memory cannot be copied to it")
	}
	defer func(s int) { stagingSlab = s }(stagingSlab)
	const n = 64
	stagingSlab = 7 * n * 4 // 7 rows: 10 slabs, the last of 1 row
	job := "../../../examples/jobs/jacobi.yaml"
	params := map[string]string{"n": "64", "iters": "4"}
	cpuOut := t.TempDir()
	if _, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: cpuOut, Devices: []string{"cpu"}}); err != nil {
		t.Fatal(err)
	}
	want := readNPY(t, filepath.Join(cpuOut, "jacobi.npy"))
	for _, fakes := range []int{1, 2} {
		var devs []device.Device
		var all []*devicetest.Fake
		for i := range fakes {
			f := devicetest.NewFake(devicetest.FakeConfig{Index: i})
			t.Cleanup(func() { f.Close() })
			devs, all = append(devs, f), append(all, f)
		}
		out := t.TempDir()
		res, err := Run(context.Background(), Config{JobFile: job, Params: params, OutDir: out, queueOptions: []acpp.Option{acpp.WithDevices(devs...)}})
		if err != nil {
			t.Fatal(err)
		}
		if got := readNPY(t, filepath.Join(out, "jacobi.npy")); !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("%d fakes: jacobi.npy differs from the CPU run", fakes)
		}
		o := res.Outputs[0]
		if o.Moved != n*n*4 {
			t.Errorf("%d fakes: output moved %d bytes, want %d", fakes, o.Moved, n*n*4)
		}
		switch fakes {
		case 1: // held by fake:0: its slabs, and nothing into the host copy
			if c := all[0].Stats().Copies; c != 10 {
				t.Errorf("one fake: %d copies, want 10 (one per slab, none for the steps)", c)
			}
			if d2h := res.Stats.BytesDeviceToHost; d2h != 0 {
				t.Errorf("one fake: %d bytes moved into the buffer's host copy, want 0", d2h)
			}
			if !strings.Contains(res.Summary(), "16.0 KiB read back") {
				t.Errorf("one fake: the summary does not say what the output read back:\n%s", res.Summary())
			}
		case 2: // split: no one device holds it; the host copy is read
			if d2h := res.Stats.BytesDeviceToHost; d2h != n*n*4 {
				t.Errorf("two fakes: %d bytes moved into the buffer's host copy, want %d", d2h, n*n*4)
			}
		}
	}
}

// A writer's error ends an output read from an accelerator with that
// error, after the slab copy in flight finished: the slabs are freed, the
// buffer takes a write access and the queue closes.
func TestOutputFromAcceleratorWriteError(t *testing.T) {
	defer func(s int) { stagingSlab = s }(stagingSlab)
	stagingSlab = 4 * 16 * 4 // 4 rows of 16 float32
	fake := devicetest.NewFake(devicetest.FakeConfig{})
	t.Cleanup(func() { fake.Close() })
	ctx := context.Background()
	q, err := acpp.NewQueue(ctx, acpp.WithDevices(fake), acpp.WithAcceleratorsFirst())
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{q: q}
	b, err := e.newBuffer(&jobfile.Buffer{Name: "x", Type: "float32", Range: []int{64, 16}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := e.fill(&Group{}, b, nil, nil, []byte{0, 0, 0x80, 0x3f}, "", false)
	if err == nil {
		err = tk.wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	allocs := fake.Stats().Allocs
	if _, err := e.write(ctx, b, &failAfter{n: 600}); err == nil || err.Error() != "disk full" {
		t.Fatalf("write into a failing writer = %v, want disk full", err)
	}
	if s := fake.Stats(); s.Allocs-allocs != 2 || s.Frees != 2 {
		t.Errorf("the output made %d allocations and freed %d; want its 2 slabs made and freed", s.Allocs-allocs, s.Frees)
	}
	wctx, cancel := context.WithTimeout(ctx, 10e9)
	defer cancel()
	if err := b.(*tbuf[float32]).b.Write(wctx, make([]float32, 64*16)); err != nil {
		t.Fatalf("a write after the failed output = %v", err)
	}
	if err := e.close(&Result{}); err != nil {
		t.Fatal(err)
	}
}

// gpuEngine is an engine on this machine's first GPU and its CPU, or a
// skip where there is none.
func gpuEngine(t testing.TB) *engine {
	q, err := acpp.NewQueue(context.Background(), acpp.WithKind(acpp.CUDA), acpp.WithAcceleratorsFirst())
	if err != nil {
		t.Skipf("no GPU here (%v); GPU tests run on the GPU machine (docs/CUDA.md)", err)
	}
	return &engine{q: q}
}

// onGPU makes a buffer of spec s whose contents (data) lie on the GPU
// alone: uploaded into a host-initialised buffer, then copied whole on
// cuda:0 into one that only the GPU ever held.
func onGPU(t testing.TB, e *engine, s *jobfile.Buffer, data []byte) buf {
	src, err := e.newBuffer(&jobfile.Buffer{Name: s.Name + "-src", Type: s.Type, Range: s.Range}, data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.newBuffer(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := e.copy(&Group{}, src, nil, nil, b, nil, "cuda:0")
	if err == nil {
		err = tk.wait(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := src.close(); err != nil {
		t.Fatal(err)
	}
	return b
}

// On a GPU: an output of a buffer the GPU holds goes through the pinned
// slabs bit for bit, moves nothing into its host copy, and equals what
// the host read gives afterwards (TestOutputFromAcceleratorInSlabs is
// the same without a GPU).
func TestOutputFromGPU(t *testing.T) {
	e := gpuEngine(t)
	defer func(s int) { stagingSlab = s }(stagingSlab)
	stagingSlab = 1 << 20
	spec := &jobfile.Buffer{Name: "grid", Type: "float32", Range: []int{1000, 1000}} // 3.8 slabs
	data := make([]byte, spec.Bytes())
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	b := onGPU(t, e, spec, data)
	if dev, ok := readBackDevice(spec, e.holder[b], e.q.Devices()); !ok || dev.String() != "cuda:0" {
		t.Fatalf("holder %q: read back from %v, %v; want cuda:0", e.holder[b], dev, ok)
	}
	ctx := context.Background()
	before := e.q.Stats().BytesDeviceToHost
	var out bytes.Buffer
	moved, err := e.write(ctx, b, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatal("the output from the GPU differs from the data")
	}
	if d2h := e.q.Stats().BytesDeviceToHost - before; d2h != 0 || moved != int64(len(data)) {
		t.Errorf("moved %d bytes, %d of them into the host copy; want %d, 0", moved, d2h, len(data))
	}
	out.Reset()
	if err := b.writeTo(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatal("the host read differs from the data")
	}
	if d2h := e.q.Stats().BytesDeviceToHost - before; d2h != int64(len(data)) {
		t.Errorf("the host read moved %d bytes, want %d", d2h, len(data))
	}
	if err := e.close(&Result{}); err != nil {
		t.Fatal(err)
	}
}
