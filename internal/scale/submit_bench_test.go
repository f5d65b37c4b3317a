//go:build linux

package scale

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/coordinator/coordtest"
	"github.com/acpp/acpp/node"
)

// BenchmarkSubmitCPU is the coordinator's own cost per chunk group as the
// job grows (issue 17, part 2: at 64 members at most 1.5× that at 4): a
// Jacobi step split over every member's CPU device, 16 rows of 256 floats
// per member (a row per page), in-process nodes with real QUIC transports
// and the LAN failure-detection preset. It reports the CPU time of the
// Submit calls (the calling thread's, the goroutine locked to it: nodes
// starving the client on a small machine do not count) per chunk group
// (cpu-ns/chunk), and their wall time (wall-ns/chunk), 8 steps per op
// (ACPP_BENCH_STEPS: more steps submitted before each Wait make a deeper
// pipeline).
// coordinator's BenchmarkCoordinatorScale reports the wall time alone.
//
//	go test -run '^$' -bench BenchmarkSubmitCPU -benchtime 20x ./internal/scale
//	ACPP_BENCH_MEMBERS=4,64 go test -run '^$' -bench BenchmarkSubmitCPU ./internal/scale
func BenchmarkSubmitCPU(b *testing.B) {
	members := []int{1, 4, 16, 64}
	if s := os.Getenv("ACPP_BENCH_MEMBERS"); s != "" {
		members = nil
		for _, f := range strings.Split(s, ",") {
			if n, err := strconv.Atoi(f); err == nil && n > 0 {
				members = append(members, n)
			}
		}
	}
	const cols, rowsPer = 256, 16
	iters := 8
	if n, err := strconv.Atoi(os.Getenv("ACPP_BENCH_STEPS")); err == nil && n > 0 {
		iters = n
	}
	for _, m := range members {
		b.Run(fmt.Sprintf("members=%d", m), func(b *testing.B) {
			c := coordtest.Start(b, m, coordtest.Options{CPUWorkers: 1, Modify: func(_ int, cfg *node.Config) {
				cfg.Cluster.Timing = cluster.DefaultLANConfig().Timing
				// 64 members joining at once: stragglers converge by
				// push/pull (docs/CLUSTER.md, "Convergence"), within the
				// cluster start's 20 s.
				cfg.Cluster.Timing.PushPullInterval = 2 * time.Second
			}})
			ctx := context.Background()
			cfg := c.Config()
			// 64 nodes in this process starve the client's pings on a small
			// machine: a 2 s silence bound loses them all (the membership
			// watch); the benchmark is about planning, not loss.
			cfg.LostTimeout = 30 * time.Second
			j, err := coordinator.Open(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				j.Close(cctx)
			}()
			rows := rowsPer * m
			init := make([]byte, 4*rows*cols)
			for i := range rows * cols {
				binary.LittleEndian.PutUint32(init[4*i:], math.Float32bits(float32((i*7919)%1009)/17))
			}
			pg := coordinator.Dims{1, 1, cols}
			a, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg, Init: init})
			bb, _ := j.NewBuffer(coordinator.BufferSpec{Range: coordinator.Dims{1, rows, cols}, ElemSize: 4, PageSize: pg})
			split := &coordinator.Split{}
			step := func() {
				if _, err := j.Submit(ctx, coordinator.Group{
					Kernel: "jacobi2d", Range: coordinator.Dims{1, rows, cols}, Split: split,
					Args: []coordinator.Arg{
						coordinator.Acc(coordinator.Accessor{Buffer: a, Mode: coordinator.Read, Map: coordinator.Neighbourhood(1)}),
						coordinator.Acc(coordinator.Accessor{Buffer: bb, Mode: coordinator.Write, NoInit: true, Map: coordinator.OneToOne()}),
					},
				}); err != nil {
					b.Fatal(err)
				}
				a, bb = bb, a
			}
			for range 2 { // uploads, allocations, connections
				step()
			}
			if err := j.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			var cpu, wall time.Duration
			steps := 0
			for b.Loop() {
				runtime.LockOSThread()
				t0, c0 := time.Now(), threadCPU()
				for range iters {
					step()
				}
				cpu += threadCPU() - c0
				wall += time.Since(t0)
				runtime.UnlockOSThread()
				steps += iters
				if err := j.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(steps*m), "cpu-ns/chunk")
			b.ReportMetric(float64(wall.Nanoseconds())/float64(steps*m), "wall-ns/chunk")
		})
	}
}
