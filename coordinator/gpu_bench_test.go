package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	_ "github.com/acpp/acpp/cuda" // the CUDA backend: no devices without a driver
	"github.com/acpp/acpp/node"
)

// BenchmarkJacobiGPU runs Jacobi on CUDA devices: one in-process node per
// GPU (n0 on cuda:0, n1 on cuda:1), split by row blocks over 1 or 2 of
// them, pages of one row, halos GPU → pinned host → QUIC → host → GPU.
// It runs only with ACPP_BENCH_GPU=1 on a machine with two GPUs:
//
//	ACPP_BENCH_GPU=1 ACPP_BENCH_N=16384 ACPP_BENCH_ITERS=100 ./coordinator.test -test.run '^$' -test.bench JacobiGPU -test.benchtime 2x
func BenchmarkJacobiGPU(b *testing.B) {
	if os.Getenv("ACPP_BENCH_GPU") == "" {
		b.Skip("set ACPP_BENCH_GPU=1 on a machine with two GPUs")
	}
	n := envInt("ACPP_BENCH_N", 16384)
	iters := envInt("ACPP_BENCH_ITERS", 100)
	c := coordtest.Start(b, 2, coordtest.Options{Modify: func(i int, cfg *node.Config) {
		cfg.Devices = fmt.Sprintf("cuda:%d", i)
	}})
	in := jacobiInput(n, n)
	type variant struct{ gpus, chunks, borders int }
	variants := []variant{{1, 0, 0}, {2, 0, 0}}
	if cs := os.Getenv("ACPP_BENCH_CHUNKS"); cs != "" { // total chunks over both GPUs
		for _, f := range strings.Split(cs, ",") {
			if k, err := strconv.Atoi(f); err == nil && k > 0 {
				variants = append(variants, variant{2, k, 0})
			}
		}
	}
	if bs := os.Getenv("ACPP_BENCH_BORDERS"); bs != "" { // rows per border chunk
		for _, f := range strings.Split(bs, ",") {
			if k, err := strconv.Atoi(f); err == nil && k > 0 {
				variants = append(variants, variant{2, 0, k})
			}
		}
	}
	for _, v := range variants {
		nodes := v.gpus
		b.Run(fmt.Sprintf("n=%d/iters=%d/gpus=%d/chunks=%d/borders=%d", n, iters, nodes, v.chunks, v.borders), func(b *testing.B) {
			var rec traceRecorder
			j := openJob(b, c, func(cfg *coordinator.Config) { cfg.OnGroupDone = rec.add })
			devs := []string{"n0/cuda:0", "n1/cuda:1"}[:nodes]
			for _, d := range devs {
				if !hasDevice(j, d) {
					b.Skipf("no device %s (devices: %v)", d, j.Devices())
				}
			}
			pg := coordinator.Dims{1, 1, n}
			a, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, n, n}, ElemSize: 4, PageSize: pg, Init: f32bytes(in)})
			bb, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, n, n}, ElemSize: 4, PageSize: pg})
			split := &coordinator.Split{Devices: devs, Chunks: v.chunks, Borders: v.borders}
			runJacobi(b, j, a, bb, n, n, 2, split, "")
			if err := j.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
			before := c.PeerBytes()
			ops := 0
			for b.Loop() {
				runJacobi(b, j, a, bb, n, n, iters, split, "")
				if err := j.Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
				ops++
			}
			moved := c.PeerBytes() - before
			rec.dump(b, fmt.Sprintf("jacobi-gpus%d-chunks%d-borders%d", nodes, v.chunks, v.borders))
			b.ReportMetric(float64(moved)/float64(ops*iters), "peer-bytes/iter")
			// Check the result against plain Go (small n only: the
			// reference is slow at 16384²).
			if n <= 2048 {
				steps, res := 2+ops*iters, a
				if steps%2 == 1 {
					res = bb
				}
				got, err := j.Read(context.Background(), res, coordinator.Dims{}, coordinator.Dims{})
				if err != nil {
					b.Fatal(err)
				}
				if g, want := bytesF32(got), jacobiRef(in, n, n, steps); !slices.Equal(g, want) {
					b.Fatalf("GPU Jacobi differs from plain Go at %d", firstDiff(g, want))
				}
			}
		})
	}
}

func hasDevice(j *coordinator.Job, name string) bool {
	for _, d := range j.Devices() {
		if d.String() == name {
			return true
		}
	}
	return false
}

// traceRecorder keeps the instruction traces of a job's groups and, with
// ACPP_BENCH_TRACE_DIR set, writes them as JSON lines for offline
// analysis of where a run's time goes.
type traceRecorder struct {
	mu  sync.Mutex
	trs []coordinator.GroupTrace
}

func (r *traceRecorder) add(tr coordinator.GroupTrace) {
	r.mu.Lock()
	r.trs = append(r.trs, tr)
	r.mu.Unlock()
}

func (r *traceRecorder) dump(b *testing.B, name string) {
	dir := os.Getenv("ACPP_BENCH_TRACE_DIR")
	if dir == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.Create(filepath.Join(dir, name+".jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, tr := range r.trs {
		if err := enc.Encode(tr); err != nil {
			b.Fatal(err)
		}
	}
}
