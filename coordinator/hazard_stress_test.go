package coordinator_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/kernels"
)

func init() {
	// test_jacobi_jitter is jacobi2d after a sleep of 0 to 2 ms, so that
	// instructions ready at the same time finish in shifting orders and a
	// missing dependency shows as a wrong value.
	if err := kernels.Register(); err != nil {
		panic(err)
	}
	k, err := device.Kernels.Lookup("jacobi2d")
	if err != nil {
		panic(err)
	}
	jitter := *k
	jitter.Name, jitter.PTX = "test_jacobi_jitter", nil
	step := k.Go
	jitter.Go = func(w *device.Work) {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		step(w)
	}
	device.MustRegister(jitter)
}

// jacobiStep is one jacobi2d step of rows×cols from a into b, as the
// kernel computes it (borders copied).
func jacobiStep(a, b []float32, rows, cols int) {
	for y := range rows {
		for x := range cols {
			i := y*cols + x
			if y == 0 || y == rows-1 || x == 0 || x == cols-1 {
				b[i] = a[i]
				continue
			}
			s := a[i-cols] + a[i+cols]
			s = s + a[i-1]
			s = s + a[i+1]
			b[i] = 0.25 * s
		}
	}
}

// Seeded random programs of deep pipelines, all submitted ahead: Jacobi
// steps split over random sets of devices of four nodes (so a block's
// halos come from different nodes, and blocks move), unsplit steps on a
// random device, fills of random row ranges (whole-page writes that cover
// or cut earlier accesses' pages, discard or not) and host writes, with
// kernels that sleep a random 0–2 ms; the buffers read at the end equal a
// plain Go run of the same program (D1–D4, C3, C4: any dependency the
// per-allocation hazard tables miss shows as a wrong value). ACPP_SEEDS=n
// runs more seeds.
func TestRandomPipelinesAgainstModel_D1_D3_D4_C4(t *testing.T) {
	c := coordtest.Start(t, 4, coordtest.Options{CPUWorkers: 2})
	seeds := 3
	if n, err := strconv.Atoi(os.Getenv("ACPP_SEEDS")); err == nil && n > 0 {
		seeds = n
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed+1), func(t *testing.T) { runRandomPipeline(t, c, seed+1) })
	}
}

func runRandomPipeline(t *testing.T, c *coordtest.Cluster, seed uint64) {
	const rows, cols, ops = 48, 16, 50
	r := rand.New(rand.NewPCG(seed, 11))
	ctx := testCtx(t)
	j := openJob(t, c, nil)
	devs := []string{"n0/cpu:0", "n1/cpu:0", "n2/cpu:0", "n3/cpu:0"}
	model := [2][]float32{jacobiInput(rows, cols), make([]float32, rows*cols)}
	pg := coordinator.Dims{1, 1, cols}
	var bufs [2]*coordinator.Buffer
	for i := range bufs {
		spec := coordinator.BufferSpec{Name: fmt.Sprint("b", i), Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg, Init: f32bytes(model[i])}
		b, err := j.NewBuffer(spec)
		if err != nil {
			t.Fatal(err)
		}
		bufs[i] = b
	}
	var log []string
	fail := func(err error) {
		t.Helper()
		t.Fatalf("seed %d: %v\nprogram:\n%v", seed, err, log)
	}
	src := 0 // the buffer the next step reads
	for range ops {
		switch op := r.IntN(10); {
		case op < 5: // a split step over a random subset of the devices
			sub := slices.Clone(devs)
			r.Shuffle(len(sub), func(a, b int) { sub[a], sub[b] = sub[b], sub[a] })
			sub = sub[:1+r.IntN(len(sub))]
			split := &coordinator.Split{Devices: sub, Chunks: len(sub) * (1 + r.IntN(2))}
			log = append(log, fmt.Sprintf("split step %d→%d over %v, %d chunks", src, 1-src, sub, split.Chunks))
			if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_jacobi_jitter", Range: coordinator.Dims{1, rows, cols}, Split: split,
				Args: []coordinator.Arg{
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[src], Mode: coordinator.Read, Map: coordinator.Neighbourhood(1)}),
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[1-src], Mode: coordinator.Write, NoInit: true, Map: coordinator.OneToOne()}),
				}}); err != nil {
				fail(err)
			}
			jacobiStep(model[src], model[1-src], rows, cols)
			src = 1 - src
		case op < 7: // an unsplit step on one device
			dev := devs[r.IntN(len(devs))]
			log = append(log, fmt.Sprintf("step %d→%d on %s", src, 1-src, dev))
			if _, err := j.Submit(ctx, coordinator.Group{Kernel: "test_jacobi_jitter", Range: coordinator.Dims{1, rows, cols}, Device: dev,
				Args: []coordinator.Arg{
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[src], Mode: coordinator.Read}),
					coordinator.Acc(coordinator.Accessor{Buffer: bufs[1-src], Mode: coordinator.Write, NoInit: r.IntN(2) == 0}),
				}}); err != nil {
				fail(err)
			}
			jacobiStep(model[src], model[1-src], rows, cols)
			src = 1 - src
		case op < 9: // a fill of some rows of either buffer
			b, y := r.IntN(2), r.IntN(rows)
			n := 1 + r.IntN(rows-y)
			v := float32(r.IntN(1000)) / 8
			dev := devs[r.IntN(len(devs))]
			noInit := r.IntN(2) == 0
			log = append(log, fmt.Sprintf("fill b%d rows %d+%d = %v on %s (noInit %v)", b, y, n, v, dev, noInit))
			region := coordinator.Accessor{Buffer: bufs[b], Mode: coordinator.Write, NoInit: noInit, Offset: coordinator.Dims{0, y, 0}, Range: coordinator.Dims{1, n, cols}}
			if _, err := j.Submit(ctx, coordinator.Group{Kernel: "fill_f32", Range: coordinator.Dims{1, n, cols}, Offset: coordinator.Dims{0, y, 0}, Device: dev,
				Args: []coordinator.Arg{coordinator.Acc(region), coordinator.ScalarF32(v)}}); err != nil {
				fail(err)
			}
			for i := y * cols; i < (y+n)*cols; i++ {
				model[b][i] = v
			}
		default: // a host write of some rows
			b, y := r.IntN(2), r.IntN(rows)
			n := 1 + r.IntN(rows-y)
			vals := make([]float32, n*cols)
			for i := range vals {
				vals[i] = float32(r.IntN(1000)) / 4
			}
			log = append(log, fmt.Sprintf("host write b%d rows %d+%d", b, y, n))
			if err := j.Write(ctx, bufs[b], coordinator.Dims{0, y, 0}, coordinator.Dims{1, n, cols}, f32bytes(vals)); err != nil {
				fail(err)
			}
			copy(model[b][y*cols:], vals)
		}
	}
	for b := range bufs {
		got, err := j.Read(ctx, bufs[b], coordinator.Dims{}, coordinator.Dims{})
		if err != nil {
			fail(err)
		}
		if g := bytesF32(got); !slices.Equal(g, model[b]) {
			i := firstDiff(g, model[b])
			fail(fmt.Errorf("b%d differs from the model at row %d col %d: %v, want %v", b, i/cols, i%cols, g[i], model[b][i]))
		}
	}
	if err := j.Wait(ctx); err != nil {
		fail(err)
	}
}
