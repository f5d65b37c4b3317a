package cluster_test

import (
	"context"
	"fmt"
	"time"

	"github.com/acpp/acpp/cluster"
)

// Two members on 127.0.0.1: the second joins by naming the first, and each
// sees the other's devices.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := []byte("example-gossip-key-32-bytes-long") // acpp-node credentials makes real ones

	start := func(name string, devs []cluster.DeviceSummary, join ...string) *cluster.Cluster {
		cfg := cluster.DefaultLocalConfig()
		cfg.Name = name
		cfg.GossipKeys = [][]byte{key}
		cfg.QUICAddr = "127.0.0.1:7950"
		cfg.Devices = devs
		cfg.Join = join
		c, err := cluster.Start(ctx, cfg)
		if err != nil {
			panic(err)
		}
		return c
	}
	a := start("node-a", []cluster.DeviceSummary{{Kind: cluster.DeviceCPU, Count: 1, MemBytes: 64 << 30, Unified: true}})
	defer a.Close()
	b := start("node-b", []cluster.DeviceSummary{{Kind: cluster.DeviceCUDA, Count: 2, MemBytes: 160 << 30}}, a.Addr().String())
	defer b.Close()

	snap, err := a.WaitFor(ctx, func(s cluster.Snapshot) bool { return len(s.Alive()) == 2 })
	if err != nil {
		panic(err)
	}
	for _, m := range snap.Members {
		fmt.Println(m.Name, m.State, m.Meta.Devices)
	}
	// Output:
	// node-a alive [cpu×1/64GiB/unified]
	// node-b alive [cuda×2/160GiB]
}
