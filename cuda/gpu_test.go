package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/cuda/kernels"
	"github.com/acpp/acpp/device"
)

// openGPUs opens the machine's GPUs with cfg, or skips: the GPU tests run on
// the GPU machine (docs/CUDA.md says how).
func openGPUs(t testing.TB, cfg Config) []*Device {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	devs, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if len(devs) == 0 {
		t.Skip("no CUDA driver or GPU on this machine; GPU tests run on the GPU machine (see docs/CUDA.md)")
	}
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil {
				t.Errorf("Close %s: %v", d.info.ID, err)
			}
		}
	})
	return devs
}

// do enqueues op and waits for it; a hang fails the test instead of the run.
func do(t testing.TB, d *Device, queue int, op device.Op) error {
	t.Helper()
	ch := make(chan error, 1)
	if err := d.Enqueue(queue, op, func(err error) { ch <- err }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("op %T on %s did not finish within 60 s", op, d.info.ID)
		return nil
	}
}

func mustAlloc(t testing.TB, d *Device, kind device.MemKind, n int) *device.Mem {
	t.Helper()
	m, err := d.Alloc(kind, n)
	if err != nil {
		t.Fatalf("Alloc(%s, %d): %v", kind, n, err)
	}
	t.Cleanup(func() { _ = d.Free(m) })
	return m
}

func linear(m *device.Mem) device.Region {
	return device.Region{Mem: m, Extent: [3]int{1, 1, m.Bytes}}
}

// upload copies b into a new device allocation.
func upload(t testing.TB, d *Device, b []byte) *device.Mem {
	t.Helper()
	m := mustAlloc(t, d, device.MemDevice, len(b))
	host := &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemDevice, Bytes: len(b), Host: b}
	if err := do(t, d, 0, device.CopyOp{Src: linear(host), Dst: linear(m), Size: [3]int{1, 1, len(b)}, ElemSize: 1}); err != nil {
		t.Fatalf("upload: %v", err)
	}
	return m
}

// download copies a whole allocation to the host.
func download(t testing.TB, d *Device, m *device.Mem) []byte {
	t.Helper()
	b := make([]byte, m.Bytes)
	host := &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemDevice, Bytes: len(b), Host: b}
	if err := do(t, d, 0, device.CopyOp{Src: linear(m), Dst: linear(host), Size: [3]int{1, 1, len(b)}, ElemSize: 1}); err != nil {
		t.Fatalf("download: %v", err)
	}
	return b
}

func f32s(b []byte) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4) }
func u32s(b []byte) []uint32  { return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4) }

func randFloats(r *rand.Rand, n int) []byte {
	b := make([]byte, 4*n)
	for i, f := 0, f32s(b); i < n; i++ {
		f[i] = float32(r.Float64()*2 - 1)
	}
	return b
}

func scalarF32(v float32) device.Arg {
	return device.Arg{Kind: device.ArgScalar, Space: device.Private, Scalar: binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))}
}
func scalarU64(v uint64) device.Arg {
	return device.Arg{Kind: device.ArgScalar, Space: device.Private, Scalar: binary.LittleEndian.AppendUint64(nil, v)}
}
func scalarU32(v uint32) device.Arg {
	return device.Arg{Kind: device.ArgScalar, Space: device.Private, Scalar: binary.LittleEndian.AppendUint32(nil, v)}
}
func ptrArg(m *device.Mem, elem int) device.Arg {
	return device.Arg{Kind: device.ArgPointer, Space: m.Space(), Mem: m, ElemSize: elem}
}
func accArg(m *device.Mem, r [3]int) device.Arg {
	return device.Arg{Kind: device.ArgAccessor, Space: m.Space(), Mem: m, ElemSize: 4, Range: r}
}
func localArg(n int) device.Arg {
	return device.Arg{Kind: device.ArgLocal, Space: device.Local, LocalBytes: n}
}

func builtin(t testing.TB, name string) *device.Kernel {
	b, ok := kernels.Lookup(name)
	if !ok {
		t.Fatalf("no built-in kernel %q", name)
	}
	k := b.Kernel()
	return &k
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d elements differ", what, bad, len(want))
	}
}

// TestBuiltinKernelsMatchGo: every built-in kernel against a Go reference
// that does the same float operations in the same order, on random inputs;
// every element is compared bit for bit.
func TestBuiltinKernelsMatchGo(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	r := rand.New(rand.NewPCG(1, 2))

	t.Run("saxpy", func(t *testing.T) {
		n := 1<<20 + 37
		xb, yb := randFloats(r, n), randFloats(r, n)
		x, y := upload(t, d, xb), upload(t, d, yb)
		a := float32(1.7)
		err := do(t, d, 1, device.LaunchOp{Kernel: builtin(t, "saxpy"), Range: device.NDRange{Global: [3]int{1, 1, n}},
			Args: []device.Arg{scalarF32(a), ptrArg(x, 4), ptrArg(y, 4)}})
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, n)
		for i, xv := range f32s(xb) {
			want[i] = float32(a*xv) + f32s(yb)[i]
		}
		sameBits(t, "y", f32s(download(t, d, y)), want)
	})

	t.Run("fill_f32 with offset", func(t *testing.T) {
		rg := [3]int{3, 17, 29}
		b := randFloats(r, rg[0]*rg[1]*rg[2])
		m := upload(t, d, append([]byte(nil), b...))
		nd := device.NDRange{Global: [3]int{2, 10, 13}, Offset: [3]int{1, 5, 9}}
		if err := do(t, d, 2, device.LaunchOp{Kernel: builtin(t, "fill_f32"), Range: nd, Args: []device.Arg{accArg(m, rg), scalarF32(-3.25)}}); err != nil {
			t.Fatal(err)
		}
		want := append([]float32(nil), f32s(b)...)
		for z := 0; z < nd.Global[0]; z++ {
			for y := 0; y < nd.Global[1]; y++ {
				for x := 0; x < nd.Global[2]; x++ {
					want[((z+1)*rg[1]+y+5)*rg[2]+x+9] = -3.25
				}
			}
		}
		sameBits(t, "out", f32s(download(t, d, m)), want)
	})

	t.Run("copy_f32 ranged", func(t *testing.T) {
		// A 3D box between offsets; long rows (several elements a thread
		// under the launch hint); a range larger than the access ranges
		// (ids outside either are skipped). Everything outside the box
		// keeps its old value.
		for _, tc := range []struct {
			sr, dr, global, so, do_, sa, da [3]int
		}{
			{sr: [3]int{5, 7, 9}, dr: [3]int{4, 8, 11}, global: [3]int{3, 4, 5}, so: [3]int{1, 2, 3}, do_: [3]int{0, 3, 4}, sa: [3]int{3, 4, 5}, da: [3]int{3, 4, 5}},
			{sr: [3]int{2, 3, 3000}, dr: [3]int{2, 4, 2900}, global: [3]int{2, 3, 2500}, so: [3]int{0, 0, 7}, do_: [3]int{0, 1, 100}, sa: [3]int{2, 3, 2500}, da: [3]int{2, 3, 2500}},
			{sr: [3]int{1, 3, 3000}, dr: [3]int{1, 3, 3000}, global: [3]int{1, 3, 3000}, so: [3]int{0, 0, 1}, do_: [3]int{0, 1, 0}, sa: [3]int{1, 3, 2500}, da: [3]int{1, 2, 2800}},
			{sr: [3]int{1, 1, 1 << 20}, dr: [3]int{1, 1, 1<<20 + 5}, global: [3]int{1, 1, 1<<20 - 3}, so: [3]int{0, 0, 3}, do_: [3]int{0, 0, 5}, sa: [3]int{1, 1, 1<<20 - 3}, da: [3]int{1, 1, 1<<20 - 3}},
		} {
			sb, db := randFloats(r, tc.sr[0]*tc.sr[1]*tc.sr[2]), randFloats(r, tc.dr[0]*tc.dr[1]*tc.dr[2])
			src, dst := upload(t, d, sb), upload(t, d, append([]byte(nil), db...))
			sa := device.Arg{Kind: device.ArgRangedAccessor, Space: device.GlobalDevice, Mem: src, ElemSize: 4, Range: tc.sr, AccessOffset: tc.so, AccessRange: tc.sa}
			da := device.Arg{Kind: device.ArgRangedAccessor, Space: device.GlobalDevice, Mem: dst, ElemSize: 4, Range: tc.dr, AccessOffset: tc.do_, AccessRange: tc.da}
			if err := do(t, d, 3, device.LaunchOp{Kernel: builtin(t, "copy_f32"), Range: device.NDRange{Global: tc.global}, Args: []device.Arg{sa, da}}); err != nil {
				t.Fatal(err)
			}
			var box [3]int
			for i := range box {
				box[i] = min(tc.global[i], tc.sa[i], tc.da[i])
			}
			want := append([]float32(nil), f32s(db)...)
			for z := 0; z < box[0]; z++ {
				for y := 0; y < box[1]; y++ {
					for x := 0; x < box[2]; x++ {
						want[((z+tc.do_[0])*tc.dr[1]+y+tc.do_[1])*tc.dr[2]+x+tc.do_[2]] = f32s(sb)[((z+tc.so[0])*tc.sr[1]+y+tc.so[1])*tc.sr[2]+x+tc.so[2]]
					}
				}
			}
			sameBits(t, fmt.Sprintf("dst (box %v)", box), f32s(download(t, d, dst)), want)
		}
	})

	t.Run("jacobi2d", func(t *testing.T) {
		// Whole grids and sub-ranges (a split chunk's rows, columns), with
		// the built-in's launch hint (column strips) and without it (one
		// point per thread); points outside the range keep their poison.
		for _, tc := range []struct {
			rows, cols int
			global     [3]int
			offset     [3]int
		}{
			{301, 517, [3]int{1, 301, 517}, [3]int{}},
			{301, 517, [3]int{1, 100, 517}, [3]int{0, 150, 0}},
			{301, 517, [3]int{1, 37, 200}, [3]int{0, 1, 300}},
			{301, 517, [3]int{1, 65, 517}, [3]int{0, 236, 0}},
			{1024, 64, [3]int{2, 1024, 64}, [3]int{}},
			{2, 3, [3]int{1, 2, 3}, [3]int{}},
			{1, 9, [3]int{1, 1, 9}, [3]int{}},
		} {
			ib := randFloats(r, tc.rows*tc.cols)
			poison := randFloats(r, tc.rows*tc.cols)
			rg := [3]int{1, tc.rows, tc.cols}
			a := f32s(ib)
			want := append([]float32(nil), f32s(poison)...)
			for y := tc.offset[1]; y < tc.offset[1]+tc.global[1]; y++ {
				for x := tc.offset[2]; x < tc.offset[2]+tc.global[2]; x++ {
					i := y*tc.cols + x
					if y == 0 || x == 0 || y+1 >= tc.rows || x+1 >= tc.cols {
						want[i] = a[i]
						continue
					}
					s := a[i-tc.cols] + a[i+tc.cols]
					s = s + a[i-1]
					s = s + a[i+1]
					want[i] = 0.25 * s
				}
			}
			hinted := builtin(t, "jacobi2d")
			plain := *hinted
			// A copy with a comment added is no built-in's PTX: no hint.
			plain.PTX = &device.PTX{Module: append(append([]byte(nil), hinted.PTX.Module...), "\n// not the built-in\n"...), Entry: hinted.PTX.Entry}
			for _, k := range []*device.Kernel{hinted, &plain} {
				in, out := upload(t, d, ib), upload(t, d, append([]byte(nil), poison...))
				op := device.LaunchOp{Kernel: k, Range: device.NDRange{Global: tc.global, Offset: tc.offset}, Args: []device.Arg{accArg(in, rg), accArg(out, rg)}}
				if err := do(t, d, 0, op); err != nil {
					t.Fatal(err)
				}
				sameBits(t, fmt.Sprintf("%dx%d range %v offset %v hinted %v", tc.rows, tc.cols, tc.global, tc.offset, k == hinted), f32s(download(t, d, out)), want)
			}
		}
	})

	t.Run("matmul_tiled", func(t *testing.T) {
		const T = 16
		M, N, K := 96, 80, 75 // M, N multiples of the tile; K is not
		ab, bb := randFloats(r, M*K), randFloats(r, K*N)
		A, B, C := upload(t, d, ab), upload(t, d, bb), mustAlloc(t, d, device.MemDevice, M*N*4)
		nd := device.NDRange{Global: [3]int{1, M, N}, Local: [3]int{1, T, T}}
		args := []device.Arg{ptrArg(A, 4), ptrArg(B, 4), ptrArg(C, 4), scalarU64(uint64(M)), scalarU64(uint64(N)), scalarU64(uint64(K)), localArg(T * T * 4), localArg(T * T * 4)}
		if err := do(t, d, 1, device.LaunchOp{Kernel: builtin(t, "matmul_tiled"), Range: nd, Args: args}); err != nil {
			t.Fatal(err)
		}
		av, bv := f32s(ab), f32s(bb)
		kpad := (K + T - 1) / T * T
		want := make([]float32, M*N)
		for i := 0; i < M; i++ {
			for j := 0; j < N; j++ {
				var acc float32
				for k := 0; k < kpad; k++ {
					var x, y float32
					if k < K {
						x, y = av[i*K+k], bv[k*N+j]
					}
					acc = acc + float32(x*y)
				}
				want[i*N+j] = acc
			}
		}
		sameBits(t, "C", f32s(download(t, d, C)), want)
	})

	t.Run("reduce_sum_f32", func(t *testing.T) {
		const G = 256
		n := 100_003
		groups := (n + G - 1) / G
		ib := randFloats(r, n)
		in, part := upload(t, d, ib), mustAlloc(t, d, device.MemDevice, groups*4)
		nd := device.NDRange{Global: [3]int{1, 1, groups * G}, Local: [3]int{1, 1, G}}
		if err := do(t, d, 2, device.LaunchOp{Kernel: builtin(t, "reduce_sum_f32"), Range: nd, Args: []device.Arg{ptrArg(in, 4), ptrArg(part, 4), scalarU64(uint64(n)), localArg(G * 4)}}); err != nil {
			t.Fatal(err)
		}
		v := f32s(ib)
		want := make([]float32, groups)
		s := make([]float32, G)
		for g := range want {
			for t := range s {
				if i := g*G + t; i < n {
					s[t] = v[i]
				} else {
					s[t] = 0
				}
			}
			for stride := G / 2; stride > 0; stride /= 2 {
				for t := 0; t < stride; t++ {
					s[t] = s[t] + s[t+stride]
				}
			}
			want[g] = s[0]
		}
		sameBits(t, "partial", f32s(download(t, d, part)), want)
	})

	t.Run("histogram_u32", func(t *testing.T) {
		n, nbins := 1<<20+5, uint32(97)
		ib := make([]byte, 4*n)
		for i, v := range u32s(ib) {
			_ = v
			u32s(ib)[i] = r.Uint32()
		}
		in, bins := upload(t, d, ib), upload(t, d, make([]byte, 4*nbins))
		nd := device.NDRange{Global: [3]int{1, 1, 64 * 256}, Local: [3]int{1, 1, 256}}
		args := []device.Arg{ptrArg(in, 4), scalarU64(uint64(n)), ptrArg(bins, 4), scalarU32(nbins), localArg(int(nbins) * 4)}
		if err := do(t, d, 3, device.LaunchOp{Kernel: builtin(t, "histogram_u32"), Range: nd, Args: args}); err != nil {
			t.Fatal(err)
		}
		want := make([]uint32, nbins)
		for _, v := range u32s(ib) {
			want[v%nbins]++
		}
		got := u32s(download(t, d, bins))
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("bins[%d] = %d, want %d", i, got[i], want[i])
			}
		}
	})
}

// TestCopyBoxesBytewise_T4: random page boxes (1–3D, odd sizes, odd element
// sizes) between every pair of memory kinds, and between two devices, land
// byte for byte where device.CopyHost says, and leave every other byte alone.
func TestCopyBoxesBytewise_T4(t *testing.T) {
	devs := openGPUs(t, Config{virtualDevices: 1})
	checkBoxes(t, devs[0], devs[len(devs)-1])
}

// TestCopyBetweenGPUs_T4: on a machine with two GPUs, boxes between them
// go peer to peer where the driver allows it and through pinned host
// memory otherwise, byte for byte right either way.
func TestCopyBetweenGPUs_T4(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"peer", Config{}}, {"staged", Config{NoPeer: true}}} {
		t.Run(c.name, func(t *testing.T) {
			devs := openGPUs(t, c.cfg)
			if len(devs) < 2 {
				t.Skipf("needs two GPUs, this machine has %d", len(devs))
			}
			a, b := devs[0], devs[1]
			t.Logf("peer access %s→%s: %v, %s→%s: %v", a.info.ID, b.info.ID, a.peers[1], b.info.ID, a.info.ID, b.peers[0])
			if c.cfg.NoPeer && (a.peers[1] || b.peers[0]) {
				t.Fatalf("NoPeer: peer access still on")
			}
			checkBoxes(t, a, b)
		})
	}
}

// checkBoxes copies random boxes between every pair of memory kinds,
// including d's and other's device memory.
func checkBoxes(t *testing.T, d, other *Device) {
	r := rand.New(rand.NewPCG(7, 7))
	cpuMem := func(n int) *device.Mem {
		return &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemDevice, Bytes: n, Host: make([]byte, n)}
	}
	kinds := []struct {
		name  string
		alloc func(n int) *device.Mem
	}{
		{"device", func(n int) *device.Mem { return mustAlloc(t, d, device.MemDevice, n) }},
		{"host-usm", func(n int) *device.Mem { return mustAlloc(t, d, device.MemHost, n) }},
		{"shared-usm", func(n int) *device.Mem { return mustAlloc(t, d, device.MemShared, n) }},
		{"cpu-pageable", cpuMem},
		{"other-gpu", func(n int) *device.Mem { return mustAlloc(t, other, device.MemDevice, n) }},
	}
	// set and get whole allocations through a host mirror.
	set := func(m *device.Mem, b []byte) {
		if m.Host != nil {
			copy(m.Host, b)
			return
		}
		host := cpuMem(len(b))
		copy(host.Host, b)
		if err := do(t, d, 0, device.CopyOp{Src: linear(host), Dst: linear(m), Size: [3]int{1, 1, len(b)}, ElemSize: 1}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(m *device.Mem) []byte {
		if m.Host != nil {
			return append([]byte(nil), m.Host...)
		}
		host := cpuMem(m.Bytes)
		if err := do(t, d, 0, device.CopyOp{Src: linear(m), Dst: linear(host), Size: [3]int{1, 1, m.Bytes}, ElemSize: 1}); err != nil {
			t.Fatal(err)
		}
		return host.Host
	}
	cases := 0
	for _, sk := range kinds {
		for _, dk := range kinds {
			if sk.name == "cpu-pageable" && dk.name == "cpu-pageable" {
				continue
			}
			for i := 0; i < 6; i++ {
				elem := []int{1, 3, 4, 8}[r.IntN(4)]
				var se, de, so, do_, sz [3]int
				dims := 1 + i%3
				for k := 0; k < 3; k++ {
					if k < 3-dims {
						se[k], de[k], sz[k] = 1, 1, 1
						continue
					}
					sz[k] = 1 + r.IntN(23)
					se[k], de[k] = sz[k]+r.IntN(9), sz[k]+r.IntN(9)
					so[k], do_[k] = r.IntN(se[k]-sz[k]+1), r.IntN(de[k]-sz[k]+1)
				}
				soff, doff := elem*r.IntN(5), elem*r.IntN(5)
				sn, dn := soff+se[0]*se[1]*se[2]*elem, doff+de[0]*de[1]*de[2]*elem
				src, dst := sk.alloc(sn), dk.alloc(dn)
				sb, db := make([]byte, sn), make([]byte, dn)
				for j := range sb {
					sb[j] = byte(r.Uint32())
				}
				for j := range db {
					db[j] = byte(r.Uint32())
				}
				set(src, sb)
				set(dst, db)
				op := device.CopyOp{
					Src:  device.Region{Mem: src, Offset: soff, Extent: se, Origin: so},
					Dst:  device.Region{Mem: dst, Offset: doff, Extent: de, Origin: do_},
					Size: sz, ElemSize: elem,
				}
				// Enqueue on either device: the backend runs it where the data is.
				at := []*Device{d, other}[r.IntN(2)]
				if err := do(t, at, r.IntN(4), op); err != nil {
					t.Fatalf("%s → %s box %v: %v", sk.name, dk.name, sz, err)
				}
				want := append([]byte(nil), db...)
				device.CopyHost(want, sb, op)
				if got := get(dst); !bytes.Equal(got, want) {
					t.Fatalf("%s → %s: box %v elem %d src ext %v org %v → dst ext %v org %v: bytes differ", sk.name, dk.name, sz, elem, se, so, de, do_)
				}
				cases++
			}
		}
	}
	t.Logf("%d random boxes checked byte for byte", cases)
}

// TestFillPatterns_B3: USM fills of device memory with 1-, 2-, 3-, 4- and
// 8-byte patterns at odd offsets and counts: memsets of 8, 16 and 32 bits
// where the pattern allows, else a pinned seed block doubled by device
// copies (past fillSeed several of them).
func TestFillPatterns_B3(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	for _, tc := range []struct {
		pat       []byte
		off, reps int
	}{
		{[]byte{0xab}, 4, 333}, {[]byte{1, 2}, 8, 333}, {[]byte{1, 2}, 2, 334}, {[]byte{1, 2}, 8, 334}, {[]byte{1, 2, 3}, 12, 333},
		{[]byte{9, 8, 7, 6}, 16, 333}, {[]byte{5, 5, 5, 5}, 16, 333}, {[]byte{1, 2, 3, 4, 5, 6, 7, 8}, 4, 333},
		{[]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, 32, 401}, {[]byte{1, 2, 3, 4, 1, 2, 3, 4}, 8, 3}, {[]byte{1, 2, 3, 4, 5, 6, 7, 8}, 2, 5},
		{[]byte{1, 2, 3, 4, 5, 6, 7, 8}, 8, (3<<20)/8 + 3}, {[]byte{1, 2, 3}, 5, (5 << 20) / 3}, // past fillSeed: doubling copies
	} {
		pat, off, n := tc.pat, tc.off, len(tc.pat)*tc.reps
		size := max(4096, off+n+64)
		m := upload(t, d, make([]byte, size))
		if err := do(t, d, 0, device.FillOp{Dst: m, Offset: off, Bytes: n, Pattern: pat}); err != nil {
			t.Fatalf("fill %v: %v", pat, err)
		}
		want := make([]byte, size)
		device.FillHost(want, device.FillOp{Dst: m, Offset: off, Bytes: n, Pattern: pat})
		if got := download(t, d, m); !bytes.Equal(got, want) {
			t.Errorf("fill with %v: bytes differ", pat)
		}
	}
}

// TestLinkedAllocations_L2_L3: a linked GPU's MemDevice is host memory that
// kernels write and the host reads with no copy; an H100/H200 is not linked
// by default, and the decision is logged at debug level.
func TestLinkedAllocations_L2_L3(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(syncWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	auto := openGPUs(t, Config{Logger: log})[0]
	mu.Lock()
	line := logs.String()
	mu.Unlock()
	if !strings.Contains(line, "cuda link decision") {
		t.Errorf("no debug line for the link decision in %q", line)
	}
	if auto.attrs.HostUnified() != auto.Linked() || auto.Info().Caps.HostUnified != auto.Linked() {
		t.Errorf("linked = %v, HostUnified() = %v, Caps.HostUnified = %v: disagree", auto.Linked(), auto.attrs.HostUnified(), auto.Info().Caps.HostUnified)
	}
	m := mustAlloc(t, auto, device.MemDevice, 1024)
	if !auto.Linked() && m.Host != nil {
		t.Errorf("unlinked GPU: MemDevice has a host view")
	}
	t.Logf("%s: linked=%v (%s)", auto.attrs.Name, auto.Linked(), auto.linkWhy)

	linked := openGPUs(t, Config{Link: LinkAlways})[0]
	if !linked.Linked() {
		t.Fatalf("Link=LinkAlways: device not linked (%s)", linked.linkWhy)
	}
	n := 4099
	lm := mustAlloc(t, linked, device.MemDevice, 4*n)
	if lm.Host == nil || lm.Space() != device.GlobalDevice {
		t.Fatalf("linked MemDevice: host view %v, space %s; want host-visible global_device memory", lm.Host != nil, lm.Space())
	}
	rg := [3]int{1, 1, n}
	if err := do(t, linked, 0, device.LaunchOp{Kernel: builtin(t, "fill_f32"), Range: device.NDRange{Global: rg}, Args: []device.Arg{accArg(lm, rg), scalarF32(6.5)}}); err != nil {
		t.Fatal(err)
	}
	for i, v := range f32s(lm.Host) {
		if v != 6.5 {
			t.Fatalf("linked memory seen from the host: [%d] = %v, want 6.5 (kernel writes must be visible without a copy)", i, v)
		}
	}
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestOutOfMemoryIsAnError_B1: an allocation larger than the GPU fails with
// device.ErrOutOfMemory at once; a managed one is refused before the driver
// sees it.
func TestOutOfMemoryIsAnError_B1(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	start := time.Now()
	_, err := d.Alloc(device.MemDevice, 1<<50)
	if !errors.Is(err, device.ErrOutOfMemory) {
		t.Errorf("Alloc(MemDevice, 1 PiB) = %v, want ErrOutOfMemory", err)
	}
	_, err = d.Alloc(device.MemShared, int(d.attrs.TotalMem))
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "hang") {
		t.Errorf("Alloc(MemShared, all of it) = %v, want ErrOutOfMemory explaining the refusal", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("out-of-memory answers took %v", el)
	}
	// The device still works.
	m := upload(t, d, []byte{1, 2, 3})
	if got := download(t, d, m); !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Errorf("after OOM: round trip = %v", got)
	}
}

// TestCompletionStrategies_D4: under each completion strategy, hundreds of
// ops over several streams each report done exactly once, and the results
// are right.
func TestCompletionStrategies_D4(t *testing.T) {
	for _, mode := range []Completion{CompletionPoll, CompletionBlockingSync, CompletionCallback, CompletionSpin} {
		t.Run(mode.String(), func(t *testing.T) {
			d := openGPUs(t, Config{Completion: mode})[0]
			const n = 64
			mems := make([]*device.Mem, n)
			for i := range mems {
				mems[i] = mustAlloc(t, d, device.MemHost, 4096)
			}
			var calls atomic.Int64
			var wg sync.WaitGroup
			for round := 0; round < 4; round++ {
				for i, m := range mems {
					wg.Add(1)
					rg := [3]int{1, 1, 1024}
					op := device.LaunchOp{Kernel: builtin(t, "fill_f32"), Range: device.NDRange{Global: rg}, Args: []device.Arg{accArg(m, rg), scalarF32(float32(round*1000 + i))}}
					if err := d.Enqueue(i, op, func(err error) {
						if err != nil {
							t.Errorf("op failed: %v", err)
						}
						calls.Add(1)
						wg.Done()
					}); err != nil {
						t.Fatal(err)
					}
				}
				wg.Wait()
				for i, m := range mems {
					if v := f32s(m.Host)[1023]; v != float32(round*1000+i) {
						t.Fatalf("round %d mem %d = %v", round, i, v)
					}
				}
			}
			if got := calls.Load(); got != 4*n {
				t.Errorf("done called %d times, want %d", got, 4*n)
			}
		})
	}
}

// userPTX is a job's own module: it takes the ND range first, then a raw
// pointer and a count.
const userPTX = `.version 7.0
.target sm_52
.address_size 64
.visible .entry add_one(.param .align 8 .b8 nd[48], .param .u64 p, .param .u32 n)
{
 .reg .pred q; .reg .b32 r<6>; .reg .b64 rd<5>;
 ld.param.u64 rd1, [p]; ld.param.u32 r1, [n];
 mov.u32 r2, %ctaid.x; mov.u32 r3, %ntid.x; mov.u32 r4, %tid.x;
 mad.lo.s32 r2, r2, r3, r4;
 setp.ge.u32 q, r2, r1; @q bra DONE;
 cvta.to.global.u64 rd2, rd1; mul.wide.u32 rd3, r2, 4; add.s64 rd4, rd2, rd3;
 ld.global.u32 r5, [rd4]; add.s32 r5, r5, 1; st.global.u32 [rd4], r5;
DONE: ret;
}
`

// addOneKernel declares userPTX's add_one, loaded from mod.
func addOneKernel(mod []byte) *device.Kernel {
	return &device.Kernel{Name: "job.add_one", PTX: &device.PTX{Module: mod, Entry: "add_one"}, Params: []device.Param{
		{Name: "p", Kind: device.ArgPointer, Space: device.Global, ElemSize: 4},
		{Name: "n", Kind: device.ArgScalar, Space: device.Private, ElemSize: 4},
	}}
}

// TestUserPTX_A2: a job's own PTX runs by entry name; a declaration that
// does not match the entry is refused before launch, naming the argument.
func TestUserPTX_A2(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	mod := []byte(userPTX)
	k := addOneKernel(mod)
	n := 1000
	m := mustAlloc(t, d, device.MemHost, 4*n)
	for i := range u32s(m.Host) {
		u32s(m.Host)[i] = uint32(i)
	}
	if err := do(t, d, 0, device.LaunchOp{Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, n}}, Args: []device.Arg{ptrArg(m, 4), scalarU32(uint32(n))}}); err != nil {
		t.Fatal(err)
	}
	for i, v := range u32s(m.Host) {
		if v != uint32(i)+1 {
			t.Fatalf("after add_one: [%d] = %d", i, v)
		}
	}
	bad := &device.Kernel{Name: "job.bad", PTX: k.PTX, Params: []device.Param{
		{Name: "p", Kind: device.ArgAccessor, Space: device.Global, ElemSize: 4},
		{Name: "n", Kind: device.ArgScalar, Space: device.Private, ElemSize: 4},
	}}
	err := d.Enqueue(0, device.LaunchOp{Kernel: bad, Range: device.NDRange{Global: [3]int{1, 1, n}}, Args: []device.Arg{accArg(m, [3]int{1, 1, n}), scalarU32(uint32(n))}}, func(error) { t.Error("done called") })
	if !errors.Is(err, kernels.ErrLayout) || !strings.Contains(err.Error(), "argument 0 (p)") {
		t.Errorf("mismatched declaration: %v, want kernels.ErrLayout naming argument 0 (p)", err)
	}
	missing := &device.Kernel{Name: "job.missing", PTX: &device.PTX{Module: mod, Entry: "nope"}}
	if err := d.Enqueue(0, device.LaunchOp{Kernel: missing, Range: device.NDRange{Global: [3]int{1, 1, 1}}}, nil); !errors.Is(err, device.ErrNoImplementation) {
		t.Errorf("unknown entry: %v, want ErrNoImplementation", err)
	}
}

// TestPinForeignHostMemory: another backend's host allocation is
// page-locked on its first copy, shared by every Mem over the same bytes,
// and unregistered once no Mem uses it, after which it can be pinned again.
func TestPinForeignHostMemory(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	const n = 4 << 20
	bytesA := make([]byte, n)
	for i := range bytesA {
		bytesA[i] = byte(i * 7)
	}
	dev := mustAlloc(t, d, device.MemDevice, n)
	pinned := func() int {
		d.group.pins.mu.Lock()
		defer d.group.pins.mu.Unlock()
		return len(d.group.pins.byBase)
	}
	copyIn := func() {
		m := &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemDevice, Bytes: n, Host: bytesA}
		if err := do(t, d, 0, device.CopyOp{Src: linear(m), Dst: linear(dev), Size: [3]int{1, 1, n}, ElemSize: 1}); err != nil {
			t.Fatal(err)
		}
	}
	copyIn()
	copyIn()
	if got := pinned(); got != 1 {
		t.Fatalf("after two copies from Mems over one slice: %d pinned ranges, want 1", got)
	}
	if got := download(t, d, dev); !bytes.Equal(got, bytesA) {
		t.Fatalf("copy from pinned CPU memory: bytes differ")
	}
	deadline := time.Now().Add(10 * time.Second)
	for pinned() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("range still pinned 10 s after its Mems became unreachable")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	_ = d.Do(func(*Thread) error { return nil }) // the unregistration ran before this
	copyIn()
	if got := pinned(); got != 1 {
		t.Errorf("pinning the same bytes again: %d pinned ranges, want 1", got)
	}
}

// TestCopyIntoOwnPinnedMemoryRegistersNothing: a Mem that views host
// memory the group allocated pinned (host USM: a CopyToHost into a slice
// of it, one new Mem per copy) is copied to directly, every time, without
// a registration of its own; once freed, the range is foreign again.
func TestCopyIntoOwnPinnedMemoryRegistersNothing(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	const n = 4 << 20
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 13)
	}
	dev := upload(t, d, src)
	slab, err := d.Alloc(device.MemHost, n)
	if err != nil {
		t.Fatal(err)
	}
	seen := func() (ranges, mems int) {
		d.group.pins.mu.Lock()
		defer d.group.pins.mu.Unlock()
		return len(d.group.pins.byBase), len(d.group.pins.mems)
	}
	r0, m0 := seen()
	for i := range 3 {
		clear(slab.Host)
		view := &device.Mem{Device: device.ID{Kind: device.KindCPU}, Kind: device.MemHost, Bytes: n / 2, Host: slab.Host[n/2:]}
		if err := do(t, d, 0, device.CopyOp{Src: device.Region{Mem: dev, Extent: [3]int{1, 1, n}, Origin: [3]int{0, 0, n / 2}},
			Dst: linear(view), Size: [3]int{1, 1, n / 2}, ElemSize: 1}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(slab.Host[n/2:], src[n/2:]) {
			t.Fatalf("copy %d into a view of pinned host USM: bytes differ", i)
		}
	}
	if r, m := seen(); r != r0 || m != m0 {
		t.Errorf("copies into views of host USM: %d pinned ranges and %d Mems seen, want %d and %d (nothing registered)", r, m, r0, m0)
	}
	if err := d.Free(slab); err != nil {
		t.Fatal(err)
	}
	d.group.pins.mu.Lock()
	owned := d.group.pins.ownedLocked(uintptrOf(slab.Host), n)
	d.group.pins.mu.Unlock()
	if owned {
		t.Error("a freed host allocation is still counted as the group's own")
	}
}

// TestStreamsOverlap_D4: independent ops on different queues run at the
// same time: four kernels that each keep one SM busy for a while finish in
// well under four times the time of one — as fast as the same four
// launched raw on four streams.
func TestStreamsOverlap_D4(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	k := builtin(t, "spin")
	spin := func(cycles uint64) device.LaunchOp {
		return device.LaunchOp{Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, 1}}, Args: []device.Arg{scalarU64(cycles)}}
	}
	const cycles = 40_000_000 // about 20 ms at the H200's clock
	_ = do(t, d, 0, spin(1000))
	start := time.Now()
	if err := do(t, d, 0, spin(cycles)); err != nil {
		t.Fatal(err)
	}
	one := time.Since(start)
	var raw time.Duration
	if err := d.Do(func(th *Thread) error {
		f, err := d.function(k)
		if err != nil {
			return err
		}
		op := spin(cycles)
		params, _, err := packArgs(k, op.Range, op.Args, d.kernelAddr)
		if err != nil {
			return err
		}
		start := time.Now()
		for q := 0; q < 4; q++ {
			c := driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Stream: th.Streams[q]}
			if err := th.Lib.LaunchKernel(f.fn, &c, params); err != nil {
				return err
			}
		}
		err = th.Lib.CtxSynchronize()
		raw = time.Since(start)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start = time.Now()
	for q := 0; q < 4; q++ {
		wg.Add(1)
		if err := d.Enqueue(q, spin(cycles), func(err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	four := time.Since(start)
	t.Logf("one spin kernel %v; four on four streams: raw %v, backend %v", one, raw, four)
	if four > 2*one && four > raw*3/2 {
		t.Errorf("four independent kernels on four queues took %v (raw on four streams %v, one kernel %v): they did not overlap", four, raw, one)
	}
}
