package kernels

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/acpp/acpp"
	ptxlib "github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDeclarationsMatchCUDA_A1: every built-in has a Go and a PTX
// implementation under one name with the parameters of cuda/kernels, and
// ParamType covers exactly its data parameters with a type of the declared
// size.
func TestDeclarationsMatchCUDA_A1(t *testing.T) {
	if len(goImpls) != len(ptxlib.Names()) {
		t.Errorf("Go implementations for %d kernels, cuda/kernels has %d (%v)", len(goImpls), len(ptxlib.Names()), ptxlib.Names())
	}
	sizes := map[string]int{"float32": 4, "uint32": 4, "uint64": 8, "float64": 8, "int32": 4, "int64": 8}
	for _, name := range ptxlib.Names() {
		b, _ := ptxlib.Lookup(name)
		k, ok := Kernel(name)
		if !ok || k.Go == nil || k.PTX == nil {
			t.Fatalf("Kernel(%q) = %+v, %v; want both implementations", name, k, ok)
		}
		if !reflect.DeepEqual(k.Params, b.Params) {
			t.Errorf("Kernel(%q).Params = %v, want cuda/kernels' %v", name, k.Params, b.Params)
		}
		if k.PTX.Entry != b.Entry {
			t.Errorf("Kernel(%q).PTX.Entry = %q, want %q", name, k.PTX.Entry, b.Entry)
		}
		nData := 0
		for _, p := range k.Params {
			typ, ok := ParamType(name, p.Name)
			if p.Kind == device.ArgLocal {
				if ok {
					t.Errorf("ParamType(%q, %q) = %q for local memory, want none", name, p.Name, typ)
				}
				continue
			}
			nData++
			if !ok {
				t.Errorf("ParamType(%q, %q) missing", name, p.Name)
				continue
			}
			if p.ElemSize != 0 && sizes[typ] != p.ElemSize {
				t.Errorf("ParamType(%q, %q) = %s (%d bytes), declared %d bytes", name, p.Name, typ, sizes[typ], p.ElemSize)
			}
		}
		if len(paramTypes[name]) != nData {
			t.Errorf("paramTypes[%q] has %d entries, the kernel %d data parameters", name, len(paramTypes[name]), nData)
		}
	}
}

// TestRegisterIdempotent_A1: Register twice is fine; a foreign kernel of a
// built-in name with other parameters is reported as a clash that names it,
// and the other kernels still register.
func TestRegisterIdempotent_A1(t *testing.T) {
	if err := Register(); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := Register(); err != nil {
		t.Fatalf("second Register: %v", err)
	}
	for _, n := range Names() {
		if _, err := device.Kernels.Lookup(n); err != nil {
			t.Errorf("after Register, Lookup(%q): %v", n, err)
		}
	}
	var r device.Registry
	if err := RegisterIn(&r); err != nil {
		t.Fatal(err)
	}
	if err := RegisterIn(&r); err != nil {
		t.Errorf("RegisterIn twice = %v, want nil (same declarations)", err)
	}
	var other device.Registry
	other.Register(device.Kernel{Name: "saxpy", Go: func(*device.Work) {}})
	err := RegisterIn(&other)
	if !errors.Is(err, device.ErrDuplicateKernel) {
		t.Fatalf("RegisterIn over a foreign saxpy = %v, want ErrDuplicateKernel", err)
	}
	if _, lerr := other.Lookup("jacobi2d"); lerr != nil {
		t.Errorf("jacobi2d not registered after a clash on saxpy: %v", lerr)
	}
}

// ---- a miniature CPU launcher: chunks and groups as cpu/ makes them ----

type arg struct {
	a    device.Arg
	data []byte
}

func bytesOf[T any](s []T) []byte {
	var z T
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func ptrArg[T any](s []T) arg {
	var z T
	return arg{device.Arg{Kind: device.ArgPointer, ElemSize: int(unsafe.Sizeof(z))}, bytesOf(s)}
}

func accArg[T any](s []T, rng [3]int) arg {
	a := ptrArg(s)
	a.a.Kind, a.a.Range = device.ArgAccessor, rng
	return a
}

func rangedArg[T any](s []T, rng, off, ar [3]int) arg {
	a := ptrArg(s)
	a.a.Kind, a.a.Range, a.a.AccessOffset, a.a.AccessRange = device.ArgRangedAccessor, rng, off, ar
	return a
}

func scalarArg[T any](v T) arg {
	b := make([]byte, unsafe.Sizeof(v))
	copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&v)), len(b)))
	return arg{device.Arg{Kind: device.ArgScalar, Scalar: b, ElemSize: len(b)}, nil}
}

func localArg(bytes int) arg {
	return arg{device.Arg{Kind: device.ArgLocal, LocalBytes: bytes}, nil}
}

// run launches fn over nd in chunks of the slowest non-unit dimension
// (flat) or group by group with fresh-but-dirty local memory (grouped).
func run(fn device.GoFunc, nd device.NDRange, chunks int, args ...arg) {
	w := device.Work{Range: nd}
	for _, a := range args {
		w.Args = append(w.Args, a.a)
		w.Data = append(w.Data, a.data)
	}
	if !nd.Grouped() {
		sd := 0
		for sd < 2 && nd.Global[sd] == 1 {
			sd++
		}
		ext := nd.Global[sd]
		for c := range chunks {
			w.Lo, w.Hi = [3]int{}, nd.Global
			w.Lo[sd], w.Hi[sd] = ext*c/chunks, ext*(c+1)/chunks
			fn(&w)
		}
		return
	}
	w.Local = make([][]byte, len(args))
	for i, a := range args {
		if a.a.Kind == device.ArgLocal {
			w.Local[i] = bytesOf(make([]uint64, (a.a.LocalBytes+7)/8))[:a.a.LocalBytes]
			for j := range w.Local[i] {
				w.Local[i][j] = 0xA5 // kernels must initialise local memory themselves
			}
		}
	}
	var g3 [3]int
	for d := range 3 {
		g3[d] = nd.Global[d] / nd.Local[d]
	}
	for g0 := range g3[0] {
		for g1 := range g3[1] {
			for g2 := range g3[2] {
				w.Group = [3]int{g0, g1, g2}
				for d := range 3 {
					w.Lo[d] = w.Group[d] * nd.Local[d]
					w.Hi[d] = w.Lo[d] + nd.Local[d]
				}
				fn(&w)
			}
		}
	}
}

func randF32(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v (bit-exact)", what, i, got[i], want[i])
		}
	}
}

func TestSaxpyMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, chunks int }{{1, 1}, {7, 3}, {1000, 4}, {4097, 8}} {
		x, y := randF32(r, tc.n), randF32(r, tc.n)
		want := make([]float32, tc.n)
		for i := range want {
			want[i] = float32(1.5*x[i]) + y[i]
		}
		run(saxpy, device.NDRange{Global: [3]int{1, 1, tc.n}}, tc.chunks, scalarArg(float32(1.5)), ptrArg(x), ptrArg(y))
		sameBits(t, "y", y, want)
	}
}

func TestFillF32MatchesReference(t *testing.T) {
	for _, rng := range [][3]int{{1, 1, 10}, {1, 5, 7}, {3, 4, 5}} {
		n := rng[0] * rng[1] * rng[2]
		out := make([]float32, n)
		run(fillF32, device.NDRange{Global: rng}, 2, accArg(out, rng), scalarArg(float32(3.25)))
		for i, v := range out {
			if v != 3.25 {
				t.Fatalf("range %v: out[%d] = %v, want 3.25", rng, i, v)
			}
		}
	}
}

func TestCopyF32MatchesReference(t *testing.T) {
	src := make([]float32, 6*8)
	for i := range src {
		src[i] = float32(i)
	}
	dst := make([]float32, 5*9)
	srng, drng := [3]int{1, 6, 8}, [3]int{1, 5, 9}
	soff, doff := [3]int{0, 1, 2}, [3]int{0, 2, 3}
	ar := [3]int{1, 3, 4}
	// The launch covers more than the access ranges: ids outside are skipped.
	run(copyF32, device.NDRange{Global: [3]int{1, 4, 6}}, 2, rangedArg(src, srng, soff, ar), rangedArg(dst, drng, doff, ar))
	want := make([]float32, len(dst))
	for y := 0; y < ar[1]; y++ {
		for x := 0; x < ar[2]; x++ {
			want[(doff[1]+y)*drng[2]+doff[2]+x] = src[(soff[1]+y)*srng[2]+soff[2]+x]
		}
	}
	sameBits(t, "dst", dst, want)
}

// refJacobi is the plain Jacobi step of src/jacobi.cu.
func refJacobi(in []float32, rows, cols int) []float32 {
	out := make([]float32, len(in))
	for y := range rows {
		for x := range cols {
			i := y*cols + x
			if y == 0 || x == 0 || y+1 >= rows || x+1 >= cols {
				out[i] = in[i]
				continue
			}
			s := in[i-cols] + in[i+cols]
			s = s + in[i-1]
			s = s + in[i+1]
			out[i] = 0.25 * s
		}
	}
	return out
}

func TestJacobi2dMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ rows, cols, chunks int }{{1, 1, 1}, {2, 5, 2}, {5, 2, 1}, {17, 33, 5}, {64, 64, 7}} {
		in := randF32(r, tc.rows*tc.cols)
		out := make([]float32, len(in))
		rng := [3]int{1, tc.rows, tc.cols}
		run(jacobi2d, device.NDRange{Global: rng}, tc.chunks, accArg(in, rng), accArg(out, rng))
		sameBits(t, "out", out, refJacobi(in, tc.rows, tc.cols))
	}
	// Column chunks (a 1-row launch is split along x).
	in := randF32(r, 3*40)
	out := make([]float32, len(in))
	rng := [3]int{1, 3, 40}
	for _, row := range []int{0, 1, 2} {
		nd := device.NDRange{Global: [3]int{1, 1, 40}, Offset: [3]int{0, row, 0}}
		run(jacobi2d, nd, 6, accArg(in, rng), accArg(out, rng))
	}
	sameBits(t, "out (row launches)", out, refJacobi(in, 3, 40))
}

func TestMatmulTiledMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ M, N, K, T int }{{1, 1, 1, 1}, {5, 7, 3, 4}, {16, 16, 16, 8}, {33, 17, 40, 16}} {
		A, B := randF32(r, tc.M*tc.K), randF32(r, tc.K*tc.N)
		C := make([]float32, tc.M*tc.N)
		want := make([]float32, len(C))
		for i := range tc.M {
			for j := range tc.N {
				var acc float32
				for k := range tc.K {
					acc = acc + float32(A[i*tc.K+k]*B[k*tc.N+j])
				}
				want[i*tc.N+j] = acc
			}
		}
		up := func(v int) int { return (v + tc.T - 1) / tc.T * tc.T }
		nd := device.NDRange{Global: [3]int{1, up(tc.M), up(tc.N)}, Local: [3]int{1, tc.T, tc.T}}
		tile := tc.T * tc.T * 4
		run(matmulTiled, nd, 0, ptrArg(A), ptrArg(B), ptrArg(C), scalarArg(uint64(tc.M)), scalarArg(uint64(tc.N)), scalarArg(uint64(tc.K)), localArg(tile), localArg(tile))
		sameBits(t, "C", C, want)
	}
}

// refTree is src/reduce.cu's tree for one group.
func refTree(items []float32, bs int) float32 {
	s := make([]float32, bs)
	copy(s, items)
	for stride := bs / 2; stride > 0; stride >>= 1 {
		for t := 0; t < stride; t++ {
			s[t] = s[t] + s[t+stride]
		}
	}
	return s[0]
}

func TestReduceSumF32MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ n, bs int }{{1, 1}, {100, 32}, {1000, 256}, {4096, 64}} {
		in := randF32(r, tc.n)
		groups := (tc.n + tc.bs - 1) / tc.bs
		partial := make([]float32, groups)
		nd := device.NDRange{Global: [3]int{1, 1, groups * tc.bs}, Local: [3]int{1, 1, tc.bs}}
		run(reduceSumF32, nd, 0, ptrArg(in), ptrArg(partial), scalarArg(uint64(tc.n)), localArg(tc.bs*4))
		want := make([]float32, groups)
		for g := range groups {
			want[g] = refTree(in[g*tc.bs:min(tc.n, (g+1)*tc.bs)], tc.bs)
		}
		sameBits(t, "partial", partial, want)
	}
}

func TestHistogramU32MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, tc := range []struct{ n, bs, groups, nbins int }{{1, 1, 1, 1}, {1000, 32, 4, 10}, {5000, 64, 8, 256}, {10, 64, 2, 3}} {
		in := make([]uint32, tc.n)
		for i := range in {
			in[i] = r.Uint32()
		}
		bins := make([]uint32, tc.nbins)
		nd := device.NDRange{Global: [3]int{1, 1, tc.groups * tc.bs}, Local: [3]int{1, 1, tc.bs}}
		run(histogramU32, nd, 0, ptrArg(in), scalarArg(uint64(tc.n)), ptrArg(bins), scalarArg(uint32(tc.nbins)), localArg(tc.nbins*4))
		want := make([]uint32, tc.nbins)
		for _, v := range in {
			want[v%uint32(tc.nbins)]++
		}
		if !reflect.DeepEqual(bins, want) {
			t.Fatalf("n=%d bs=%d groups=%d: bins = %v, want %v", tc.n, tc.bs, tc.groups, bins, want)
		}
	}
}

// TestKernelMisuseIsAClearPanic_A3: local memory smaller than documented is
// a panic that says what to pass (the CPU backend makes it the launch's
// error).
func TestKernelMisuseIsAClearPanic_A3(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("reduce_sum_f32 with 4 bytes of scratch for 8 items did not panic")
		}
	}()
	nd := device.NDRange{Global: [3]int{1, 1, 8}, Local: [3]int{1, 1, 8}}
	run(reduceSumF32, nd, 0, ptrArg(make([]float32, 8)), ptrArg(make([]float32, 1)), scalarArg(uint64(8)), localArg(4))
}

// TestBuiltinsOnTheEmbeddedRuntime_A2: the registered kernels run through
// acpp.Queue on the CPU backend with accessors of each variant their
// declarations ask for, and give the reference results.
func TestBuiltinsOnTheEmbeddedRuntime_A2(t *testing.T) {
	ctx := context.Background()
	q := cpuQueue(t)
	const rows, cols = 40, 50
	r := rand.New(rand.NewPCG(11, 12))
	grid := randF32(r, rows*cols)
	gb, _ := acpp.NewBufferFrom(q, append([]float32(nil), grid...), acpp.R2(rows, cols))
	nb, _ := acpp.NewBuffer[float32](q, acpp.R2(rows, cols))
	ev, err := q.Submit(func(h *acpp.Handler) error {
		h.Launch("jacobi2d", acpp.R2(rows, cols), acpp.Read(h, gb), acpp.Write(h, nb, acpp.NoInit))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := nb.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "jacobi2d", got, refJacobi(grid, rows, cols))

	// A two-pass reduction of 10000 halves.
	const n, bs = 10000, 128
	in, _ := acpp.NewBuffer[float32](q, acpp.R1(n))
	groups := (n + bs - 1) / bs
	part, _ := acpp.NewBuffer[float32](q, acpp.R1(groups))
	sum, _ := acpp.NewBuffer[float32](q, acpp.R1(1))
	submit := func(cgf func(h *acpp.Handler) error) {
		t.Helper()
		if _, err := q.Submit(cgf); err != nil {
			t.Fatal(err)
		}
	}
	submit(func(h *acpp.Handler) error {
		h.Launch("fill_f32", acpp.R1(n), acpp.Write(h, in, acpp.NoInit), acpp.Scalar(float32(0.5)))
		return nil
	})
	submit(func(h *acpp.Handler) error {
		h.LaunchND("reduce_sum_f32", acpp.R1(groups*bs), acpp.R1(bs), acpp.ReadRaw(h, in), acpp.WriteRaw(h, part, acpp.NoInit),
			acpp.Scalar(uint64(n)), acpp.LocalAccessor[float32](h, bs))
		return nil
	})
	submit(func(h *acpp.Handler) error {
		h.LaunchND("reduce_sum_f32", acpp.R1(bs), acpp.R1(bs), acpp.ReadRaw(h, part), acpp.WriteRaw(h, sum, acpp.NoInit),
			acpp.Scalar(uint64(groups)), acpp.LocalAccessor[float32](h, bs))
		return nil
	})
	s, err := sum.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s[0] != n*0.5 {
		t.Errorf("sum of %d halves = %v, want %v", n, s[0], n*0.5)
	}
	if err := q.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMisusedLaunchesRefused_A3: a launch a built-in cannot compute as
// documented (reduce_sum_f32 over a work-group that is not a power of two,
// which would silently drop items; too little local memory; no
// work-groups; a non-square matmul tile; no bins) is refused when the group
// is submitted, wrapping device.ErrBadArg with what to pass, and by the
// backend for a launch that bypasses the API (device.CheckLaunch).
func TestMisusedLaunchesRefused_A3(t *testing.T) {
	q := cpuQueue(t)
	in, _ := acpp.NewBuffer[float32](q, acpp.R1(1024))
	out, _ := acpp.NewBuffer[float32](q, acpp.R1(1024))
	bins, _ := acpp.NewBuffer[uint32](q, acpp.R1(16))
	ins, _ := acpp.NewBuffer[uint32](q, acpp.R1(1024))
	for _, tc := range []struct {
		name string
		cgf  func(h *acpp.Handler)
		want string
	}{
		{"reduce over 100 items", func(h *acpp.Handler) {
			h.LaunchND("reduce_sum_f32", acpp.R1(1000), acpp.R1(100), acpp.ReadRaw(h, in), acpp.WriteRaw(h, out), acpp.Scalar(uint64(1000)), acpp.LocalAccessor[float32](h, 100))
		}, "a work-group of 100 items: the tree sum needs a power of two"},
		{"reduce with small scratch", func(h *acpp.Handler) {
			h.LaunchND("reduce_sum_f32", acpp.R1(1024), acpp.R1(64), acpp.ReadRaw(h, in), acpp.WriteRaw(h, out), acpp.Scalar(uint64(1024)), acpp.LocalAccessor[float32](h, 8))
		}, "scratch has 32 bytes, a work-group of 64 items needs 256"},
		{"matmul with a non-square tile", func(h *acpp.Handler) {
			h.LaunchND("matmul_tiled", acpp.R2(32, 32), acpp.R2(8, 16), acpp.ReadRaw(h, in), acpp.ReadRaw(h, in), acpp.WriteRaw(h, out),
				acpp.Scalar(uint64(32)), acpp.Scalar(uint64(32)), acpp.Scalar(uint64(32)), acpp.LocalAccessor[float32](h, 256), acpp.LocalAccessor[float32](h, 256))
		}, "square work-group"},
		{"histogram without bins", func(h *acpp.Handler) {
			h.LaunchND("histogram_u32", acpp.R1(1024), acpp.R1(64), acpp.ReadRaw(h, ins), acpp.Scalar(uint64(1024)), acpp.WriteRaw(h, bins), acpp.Scalar(uint32(0)), acpp.LocalAccessor[uint32](h, 16))
		}, "nbins is 0"},
	} {
		_, err := q.Submit(func(h *acpp.Handler) error { tc.cgf(h); return nil })
		if !errors.Is(err, device.ErrBadArg) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Submit = %v; want device.ErrBadArg saying %q", tc.name, err, tc.want)
		}
	}
	// A backend refuses the launch too (a caller of the device interface,
	// as a node is).
	k, _ := Kernel("reduce_sum_f32")
	nd := device.NDRange{Global: [3]int{1, 1, 12}, Local: [3]int{1, 1, 12}}
	err := device.CheckLaunch(&k, nd, []device.Arg{{Kind: device.ArgPointer}, {Kind: device.ArgPointer}, {Kind: device.ArgScalar, Scalar: make([]byte, 8)}, {Kind: device.ArgLocal, LocalBytes: 48}})
	if !errors.Is(err, device.ErrBadArg) {
		t.Errorf("CheckLaunch of reduce_sum_f32 over 12 items = %v, want ErrBadArg", err)
	}
}

// cpuQueue registers the built-ins and opens a queue on the CPU, closed
// when t ends.
func cpuQueue(t *testing.T) *acpp.Queue {
	t.Helper()
	if err := Register(); err != nil {
		t.Fatal(err)
	}
	q, err := acpp.NewQueue(context.Background(), acpp.WithKind(acpp.CPU))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// TestLaunchesPastBuffersRefused_A2: a built-in launched over more items
// than its buffers hold, or told (n, M·K, nbins) of more elements than they
// have, is refused at Submit with device.ErrBadArg naming the argument and
// its size. The CUDA forms trust the launch as hand-written kernels do: such
// a launch wrote past the buffer on a GPU (another buffer's data, or a
// fault that costs the node its GPU); the Go forms panicked. In-bounds
// launches of the same kernels, a launch with an offset that ends at the
// buffer's end included, still run, and a backend refuses what bypasses
// the API.
func TestLaunchesPastBuffersRefused_A2(t *testing.T) {
	q := cpuQueue(t)
	x, _ := acpp.NewBuffer[float32](q, acpp.R1(64))
	y, _ := acpp.NewBuffer[float32](q, acpp.R1(64))
	g, _ := acpp.NewBuffer[float32](q, acpp.R2(8, 8))
	g2, _ := acpp.NewBuffer[float32](q, acpp.R2(8, 8))
	small, _ := acpp.NewBuffer[float32](q, acpp.R1(16))
	ins, _ := acpp.NewBuffer[uint32](q, acpp.R1(64))
	bins, _ := acpp.NewBuffer[uint32](q, acpp.R1(4))
	for _, tc := range []struct {
		name string
		cgf  func(h *acpp.Handler)
		want string // "" runs
	}{
		{"saxpy past x and y", func(h *acpp.Handler) {
			h.Launch("saxpy", acpp.R1(1000), acpp.Scalar(float32(2)), acpp.ReadRaw(h, x), acpp.ReadWriteRaw(h, y))
		}, "reaches x[999], but x holds 64 elements"},
		{"fill past the buffer", func(h *acpp.Handler) {
			h.Launch("fill_f32", acpp.R1(65), acpp.Write(h, x), acpp.Scalar(float32(1)))
		}, "reaches out[64], but out holds 64 elements"},
		{"fill of a 2D buffer with a flat range", func(h *acpp.Handler) {
			h.Launch("fill_f32", acpp.R1(64), acpp.Write(h, g), acpp.Scalar(float32(1)))
		}, ""},
		{"jacobi past the grid", func(h *acpp.Handler) {
			h.Launch("jacobi2d", acpp.R2(9, 8), acpp.Read(h, g), acpp.Write(h, g2))
		}, "run past the 8×8 grid of in"},
		{"jacobi into a smaller out", func(h *acpp.Handler) {
			h.Launch("jacobi2d", acpp.R2(8, 8), acpp.Read(h, g), acpp.Write(h, small))
		}, "out holds 16 elements"},
		{"matmul with K past A", func(h *acpp.Handler) {
			h.LaunchND("matmul_tiled", acpp.R2(8, 8), acpp.R2(8, 8), acpp.ReadRaw(h, g), acpp.ReadRaw(h, g), acpp.WriteRaw(h, g2),
				acpp.Scalar(uint64(8)), acpp.Scalar(uint64(8)), acpp.Scalar(uint64(9)), acpp.LocalAccessor[float32](h, 64), acpp.LocalAccessor[float32](h, 64))
		}, "A holds 64 elements"},
		{"reduce with n past in", func(h *acpp.Handler) {
			h.LaunchND("reduce_sum_f32", acpp.R1(128), acpp.R1(64), acpp.ReadRaw(h, x), acpp.WriteRaw(h, small), acpp.Scalar(uint64(128)), acpp.LocalAccessor[float32](h, 64))
		}, "in holds 64 elements"},
		{"histogram with more bins than bins holds", func(h *acpp.Handler) {
			h.LaunchND("histogram_u32", acpp.R1(64), acpp.R1(64), acpp.ReadRaw(h, ins), acpp.Scalar(uint64(64)), acpp.ReadWriteRaw(h, bins), acpp.Scalar(uint32(8)), acpp.LocalAccessor[uint32](h, 8))
		}, "bins holds 4 elements"},
	} {
		ev, err := q.Submit(func(h *acpp.Handler) error { tc.cgf(h); return nil })
		if tc.want == "" {
			if err == nil {
				err = ev.Wait(context.Background())
			}
			if err != nil {
				t.Errorf("%s: %v, want it to run", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, device.ErrBadArg) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Submit = %v; want device.ErrBadArg saying %q", tc.name, err, tc.want)
		}
	}
	// A backend refuses it too, from the memory it was given.
	k, _ := Kernel("saxpy")
	mem := &device.Mem{Kind: device.MemHost, Bytes: 16}
	args := []device.Arg{{Kind: device.ArgScalar, Scalar: make([]byte, 4)}, {Kind: device.ArgPointer, Mem: mem, ElemSize: 4}, {Kind: device.ArgPointer, Mem: mem, Offset: 8, ElemSize: 4}}
	if err := device.CheckLaunch(&k, device.NDRange{Global: [3]int{1, 1, 3}}, args); !errors.Is(err, device.ErrBadArg) || !strings.Contains(err.Error(), "y holds 2 elements") {
		t.Errorf("CheckLaunch of saxpy over 3 items, y 8 bytes past a 16-byte allocation's start = %v, want ErrBadArg saying y holds 2 elements", err)
	}
	// The launch offset counts (a split's chunks, a cluster group's Offset).
	mem.Bytes = 256
	args[2].Offset = 0
	if err := device.CheckLaunch(&k, device.NDRange{Global: [3]int{1, 1, 32}, Offset: [3]int{0, 0, 40}}, args); !errors.Is(err, device.ErrBadArg) || !strings.Contains(err.Error(), "reaches y[71], but y holds 64 elements") {
		t.Errorf("CheckLaunch of saxpy over [40, 72) of 64 elements = %v, want ErrBadArg naming y[71]", err)
	}
	if err := device.CheckLaunch(&k, device.NDRange{Global: [3]int{1, 1, 32}, Offset: [3]int{0, 0, 32}}, args); err != nil {
		t.Errorf("CheckLaunch of saxpy over [32, 64) of 64 elements = %v, want nil", err)
	}
}

// The launch check of every built-in allocates nothing when the launch is
// in bounds: it runs on every Submit and every backend launch (issue 16's
// submit → wait path).
func TestLaunchCheckAllocatesNothing(t *testing.T) {
	mem := &device.Mem{Kind: device.MemHost, Bytes: 1 << 20}
	ptr := device.Arg{Kind: device.ArgPointer, Mem: mem, ElemSize: 4}
	acc := device.Arg{Kind: device.ArgAccessor, Mem: mem, ElemSize: 4, Range: [3]int{1, 64, 64}}
	f4 := device.Arg{Kind: device.ArgScalar, Scalar: []byte{0, 0, 0, 64}}
	for _, tc := range []struct {
		kernel string
		nd     device.NDRange
		args   []device.Arg
	}{
		{"saxpy", device.NDRange{Global: [3]int{1, 1, 4096}}, []device.Arg{f4, ptr, ptr}},
		{"fill_f32", device.NDRange{Global: [3]int{1, 64, 64}}, []device.Arg{acc, f4}},
		{"jacobi2d", device.NDRange{Global: [3]int{1, 64, 64}}, []device.Arg{acc, acc}},
	} {
		k, _ := Kernel(tc.kernel)
		if n := testing.AllocsPerRun(100, func() {
			if err := device.CheckLaunch(&k, tc.nd, tc.args); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("CheckLaunch of %s allocates %v times per launch, want 0", tc.kernel, n)
		}
	}
}

// TestLaunchCheckOffsetOverflow_A2: a launch whose offset plus range, or
// whose last item's index in the buffer, passes 2^63 or 2^64 is refused,
// not let through wrapped to a small index. fill_f32 with offset 2^40−1
// (what a node accepts) and 2 layers over a 4096×4096 buffer: the last
// item's index 2^40·2^24 wrapped to 0, while the first layer's items write
// 2^24 floats before the buffer. jacobi2d with rows [MaxInt, MaxInt+2):
// the end wrapped negative and passed "end > rows".
func TestLaunchCheckOffsetOverflow_A2(t *testing.T) {
	mem := &device.Mem{Kind: device.MemHost, Bytes: 4 << 24}
	acc := device.Arg{Kind: device.ArgAccessor, Mem: mem, ElemSize: 4, Range: [3]int{1, 4096, 4096}}
	f4 := device.Arg{Kind: device.ArgScalar, Scalar: make([]byte, 4)}
	fill, _ := Kernel("fill_f32")
	nd := device.NDRange{Global: [3]int{2, 1, 1}, Offset: [3]int{1<<40 - 1, 0, 0}}
	if err := device.CheckLaunch(&fill, nd, []device.Arg{acc, f4}); !errors.Is(err, device.ErrBadArg) {
		t.Errorf("CheckLaunch of fill_f32 over layers [2^40-1, 2^40+1) of a 1×4096×4096 buffer = %v, want ErrBadArg", err)
	}
	nd = device.NDRange{Global: [3]int{1, 1, 2}, Offset: [3]int{0, 0, math.MaxInt}}
	if err := device.CheckLaunch(&fill, nd, []device.Arg{acc, f4}); !errors.Is(err, device.ErrBadArg) {
		t.Errorf("CheckLaunch of fill_f32 with offset MaxInt = %v, want ErrBadArg", err)
	}
	jac, _ := Kernel("jacobi2d")
	g := device.Arg{Kind: device.ArgAccessor, Mem: mem, ElemSize: 4, Range: [3]int{1, 8, 2}}
	nd = device.NDRange{Global: [3]int{1, 2, 2}, Offset: [3]int{0, math.MaxInt, 0}}
	if err := device.CheckLaunch(&jac, nd, []device.Arg{g, g}); !errors.Is(err, device.ErrBadArg) {
		t.Errorf("CheckLaunch of jacobi2d over rows [MaxInt, MaxInt+2) of an 8×2 grid = %v, want ErrBadArg", err)
	}
	sax, _ := Kernel("saxpy")
	ptr := device.Arg{Kind: device.ArgPointer, Mem: mem, ElemSize: 4}
	nd = device.NDRange{Global: [3]int{1, 1, 2}, Offset: [3]int{0, 0, math.MaxInt}}
	if err := device.CheckLaunch(&sax, nd, []device.Arg{f4, ptr, ptr}); !errors.Is(err, device.ErrBadArg) {
		t.Errorf("CheckLaunch of saxpy with offset MaxInt = %v, want ErrBadArg", err)
	}
	// In bounds at the edge still runs.
	nd = device.NDRange{Global: [3]int{1, 4096, 4096}}
	if err := device.CheckLaunch(&fill, nd, []device.Arg{acc, f4}); err != nil {
		t.Errorf("CheckLaunch of fill_f32 over its whole buffer = %v, want nil", err)
	}
}
