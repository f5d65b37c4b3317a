package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/cluster/clustertest"
)

// startUnjoined starts n members with the local preset and encryption on,
// logging warnings only.
func startUnjoined(b *testing.B, n int) []*cluster.Cluster { return startUnjoinedT(b, n) }

func startUnjoinedT(b testing.TB, n int) []*cluster.Cluster {
	b.Helper()
	cs := make([]*cluster.Cluster, n)
	for i := range n {
		cfg := clustertest.Config(b, fmt.Sprintf("m%02d", i))
		cfg.Logger = clustertest.Logger(b, slog.LevelWarn)
		cfg.Devices = []cluster.DeviceSummary{{Kind: cluster.DeviceCPU, Count: 1, MemBytes: 1 << 30, Unified: true}}
		c, err := cluster.Start(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		cs[i] = c
	}
	return cs
}

func closeAll(cs []*cluster.Cluster) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
}

// BenchmarkConverge measures, for in-process clusters on 127.0.0.1 with
// the local preset, the time from "every member joins m00 at once" until
// every member sees every member alive (ms/converge). Setup and teardown
// are in ns/op; ms/converge is the figure.
//
//	go test ./cluster -run '^$' -bench Converge -benchtime 5x
func BenchmarkConverge(b *testing.B) {
	for _, n := range []int{3, 32} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var total, worst time.Duration
			runs := 0
			for b.Loop() {
				cs := startUnjoined(b, n)
				seed := cs[0].Addr().String()
				start := time.Now()
				var wg sync.WaitGroup
				for _, c := range cs[1:] {
					wg.Go(func() {
						if _, err := c.Join(context.Background(), seed); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				clustertest.WaitAlive(b, cs, n, 60*time.Second)
				d := time.Since(start)
				total += d
				worst = max(worst, d)
				runs++
				closeAll(cs)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(runs), "ms/converge")
			b.ReportMetric(float64(worst.Milliseconds()), "ms-worst")
		})
	}
}

// BenchmarkFailureDetection measures, in a 3-member in-process cluster with
// the local preset, the time from one member's Close (no Leave) until both
// others see it failed (ms/detect), next to the preset's bound.
//
//	go test ./cluster -run '^$' -bench FailureDetection -benchtime 5x
func BenchmarkFailureDetection(b *testing.B) {
	var total time.Duration
	runs := 0
	var bound time.Duration
	for b.Loop() {
		cs := startUnjoined(b, 3)
		for _, c := range cs[1:] {
			if _, err := c.Join(context.Background(), cs[0].Addr().String()); err != nil {
				b.Fatal(err)
			}
		}
		clustertest.WaitAlive(b, cs, 3, 30*time.Second)
		bound = cs[0].Config().FailureDetectionTimeout(3)
		start := time.Now()
		cs[2].Close()
		clustertest.WaitState(b, cs[0], cs[2].Name(), cluster.StateFailed, 4*bound)
		clustertest.WaitState(b, cs[1], cs[2].Name(), cluster.StateFailed, 4*bound)
		total += time.Since(start)
		runs++
		closeAll(cs[:2])
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(runs), "ms/detect")
	b.ReportMetric(float64(bound.Milliseconds()), "ms-bound")
}
