package coordinator_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
)

// TestRandomProgramsAgainstModel runs seeded random programs — fills,
// saxpys (some split), ranged copies, host reads and writes, on random or
// automatic devices of three nodes — and checks every host read against a
// plain Go model that runs the same program in order (D1–D4, C2–C4: any
// missing edge or wrong transfer shows as a wrong value). Re-run one seed
// with ACPP_SEED=n; ACPP_SEEDS=n runs more. Seeds cycle through page sizes
// of 16, 1, 7 and 256 elements (one page per buffer).
func TestRandomProgramsAgainstModel_D3_C2_C3_C4(t *testing.T) {
	c := coordtest.Start(t, 3, coordtest.Options{})
	seeds := []uint64{1, 2, 3, 4}
	if s, err := strconv.ParseUint(os.Getenv("ACPP_SEED"), 10, 64); err == nil {
		seeds = []uint64{s}
	} else if n, err := strconv.Atoi(os.Getenv("ACPP_SEEDS")); err == nil {
		seeds = nil
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runRandomProgram(t, c, seed) })
	}
}

func runRandomProgram(t *testing.T, c *coordtest.Cluster, seed uint64) {
	const nbuf, n, ops = 3, 256, 60
	// Metamorphic: the same kind of program under several page sizes
	// (one element, a size that does not divide the range, 16, one page).
	page := []int{16, 1, 7, n}[seed%4]
	r := rand.New(rand.NewPCG(seed, 7))
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	devs := []string{"", "n0/cpu:0", "n1/cpu:0", "n2/cpu:0"}
	model := make([][]float32, nbuf)
	bufs := make([]*coordinator.Buffer, nbuf)
	for i := range nbuf {
		model[i] = make([]float32, n)
		spec := coordinator.BufferSpec{Name: fmt.Sprint("b", i), Range: coordinator.Dims{1, 1, n}, ElemSize: 4, PageSize: coordinator.Dims{1, 1, page}}
		if i > 0 { // b0 starts uninitialised (zeros in the model, written before read below)
			for k := range model[i] {
				model[i][k] = float32(r.IntN(100))
			}
			spec.Init = f32bytes(model[i])
		}
		b, err := j.NewBuffer(spec)
		if err != nil {
			t.Fatal(err)
		}
		bufs[i] = b
	}
	// b0 gets a full fill first so it holds data.
	fillOp := func(b, off, ln int, v float32, dev string, noInit bool) {
		if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, 1, ln}, Offset: coordinator.Dims{0, 0, off}, Device: dev,
			Args: []coordinator.Arg{coordinator.Acc(coordinator.Accessor{Buffer: bufs[b], Mode: coordinator.Write, NoInit: noInit,
				Offset: coordinator.Dims{0, 0, off}, Range: coordinator.Dims{1, 1, ln}}), coordinator.ScalarF32(v)}}); err != nil {
			t.Fatalf("seed %d: fill: %v", seed, err)
		}
		for k := off; k < off+ln; k++ {
			model[b][k] = v
		}
	}
	fillOp(0, 0, n, 5, devs[1+r.IntN(3)], true)
	region := func() (int, int) {
		off := r.IntN(n)
		return off, 1 + r.IntN(n-off)
	}
	var log []string
	for op := range ops {
		dev := devs[r.IntN(len(devs))]
		switch k := r.IntN(10); {
		case k < 2: // fill; no_init only over whole pages
			off, ln := region()
			noInit := off%page == 0 && ln%page == 0
			v := float32(r.IntN(1000))
			b := r.IntN(nbuf)
			log = append(log, fmt.Sprintf("%d fill b%d [%d,+%d) = %v on %q noinit=%v", op, b, off, ln, v, dev, noInit))
			fillOp(b, off, ln, v, dev, noInit)
		case k < 5: // saxpy y = a*x + y, sometimes split
			x, y := r.IntN(nbuf), r.IntN(nbuf)
			if x == y {
				y = (x + 1) % nbuf
			}
			off, ln := region()
			a := float32(r.IntN(5)) - 2
			g := coordinator.Group{Kernel: "saxpy", Range: coordinator.Dims{1, 1, ln}, Offset: coordinator.Dims{0, 0, off}, Device: dev,
				Args: []coordinator.Arg{coordinator.ScalarF32(a),
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[x], Mode: coordinator.Read, Offset: coordinator.Dims{0, 0, off}, Range: coordinator.Dims{1, 1, ln}, Map: coordinator.OneToOne()}),
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[y], Mode: coordinator.ReadWrite, Offset: coordinator.Dims{0, 0, off}, Range: coordinator.Dims{1, 1, ln}, Map: coordinator.OneToOne()})}}
			if r.IntN(3) == 0 {
				g.Device, g.Split = "", &coordinator.Split{Chunks: 1 + r.IntN(4)}
			}
			log = append(log, fmt.Sprintf("%d saxpy b%d += %v*b%d [%d,+%d) on %q split=%v", op, y, a, x, off, ln, g.Device, g.Split != nil))
			if _, err := j.Submit(ctx, g); err != nil {
				t.Fatalf("seed %d: saxpy: %v", seed, err)
			}
			for i := off; i < off+ln; i++ {
				model[y][i] = float32(a*model[x][i]) + model[y][i]
			}
		case k < 7: // ranged copy between buffers
			s, d := r.IntN(nbuf), r.IntN(nbuf)
			if s == d {
				d = (s + 1) % nbuf
			}
			ln := 1 + r.IntN(n)
			so, do := r.IntN(n-ln+1), r.IntN(n-ln+1)
			log = append(log, fmt.Sprintf("%d copy b%d[%d,+%d) -> b%d[%d) on %q", op, s, so, ln, d, do, dev))
			if _, err := j.Submit(ctx, coordinator.Group{Kernel: "copy_f32", Range: coordinator.Dims{1, 1, ln}, Device: dev,
				Args: []coordinator.Arg{
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[s], Mode: coordinator.Read, Offset: coordinator.Dims{0, 0, so}, Range: coordinator.Dims{1, 1, ln}}),
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[d], Mode: coordinator.Write, Offset: coordinator.Dims{0, 0, do}, Range: coordinator.Dims{1, 1, ln}})}}); err != nil {
				t.Fatalf("seed %d: copy: %v", seed, err)
			}
			copy(model[d][do:do+ln], model[s][so:so+ln])
		case k < 8: // host write
			b := r.IntN(nbuf)
			off, ln := region()
			vals := make([]float32, ln)
			for i := range vals {
				vals[i] = float32(r.IntN(50))
			}
			log = append(log, fmt.Sprintf("%d write b%d [%d,+%d)", op, b, off, ln))
			if err := j.Write(ctx, bufs[b], coordinator.Dims{0, 0, off}, coordinator.Dims{1, 1, ln}, f32bytes(vals)); err != nil {
				t.Fatalf("seed %d: write: %v", seed, err)
			}
			copy(model[b][off:], vals)
		default: // host read, checked
			b := r.IntN(nbuf)
			off, ln := region()
			log = append(log, fmt.Sprintf("%d read b%d [%d,+%d)", op, b, off, ln))
			got, err := j.Read(ctx, bufs[b], coordinator.Dims{0, 0, off}, coordinator.Dims{1, 1, ln})
			if err != nil {
				t.Fatalf("seed %d: read: %v", seed, err)
			}
			if g := bytesF32(got); !slices.Equal(g, model[b][off:off+ln]) {
				i := firstDiff(g, model[b][off:off+ln])
				t.Fatalf("seed %d (re-run: ACPP_SEED=%d): op %d: b%d[%d] = %v, want %v\nprogram:\n%s", seed, seed, op, b, off+i, g[i], model[b][off+i], joinLines(log))
			}
		}
	}
	for b := range nbuf {
		got, err := j.Read(ctx, bufs[b], coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			t.Fatal(err)
		}
		if g := bytesF32(got); !slices.Equal(g, model[b]) {
			i := firstDiff(g, model[b])
			t.Fatalf("seed %d (re-run: ACPP_SEED=%d): final b%d[%d] = %v, want %v\nprogram:\n%s", seed, seed, b, i, g[i], model[b][i], joinLines(log))
		}
	}
}

func joinLines(l []string) string {
	s := ""
	for _, x := range l {
		s += "  " + x + "\n"
	}
	return s
}
