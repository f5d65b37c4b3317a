// Package cluster is acpp's membership layer: who is in the cluster, at which
// QUIC address, with which devices (C1), and who left or failed (C5). It
// wraps github.com/hashicorp/memberlist (SWIM gossip with failure detection)
// and is the only package that imports it; everything else sees the types
// here.
//
// Each member advertises a small [Meta] in memberlist's metadata (at most
// [MetaMaxSize] = 512 bytes): its node ID, a boot ID, its QUIC address, the
// acpp protocol version and a [DeviceSummary] per device kind. The full
// device inventory is asked for over QUIC. Gossip is encrypted and
// authenticated with a shared AES key from a memberlist keyring (C6); keys
// can be rotated at run time ([Cluster.InstallKey], [Cluster.UseKey],
// [Cluster.RemoveKey], [Cluster.SetKeys]). docs/CLUSTER.md describes the
// model, the metadata layout, the timings and the rotation procedure.
//
// # Usage
//
//	cfg := cluster.DefaultLANConfig()
//	cfg.Name = "gpu-07"
//	cfg.GossipKeys = [][]byte{key}
//	cfg.QUICAddr = "10.0.0.7:7950"
//	cfg.Devices = []cluster.DeviceSummary{{Kind: cluster.DeviceCUDA, Count: 8, MemBytes: 8 << 37}}
//	cfg.Join = []string{"10.0.0.1:7946"}
//	c, err := cluster.Start(ctx, cfg)
//	if err != nil { return err }
//	defer c.Close()
//	sub := c.Subscribe()
//	defer sub.Close()
//	view := sub.Snapshot()          // who is there now
//	for ev := range sub.Events() { // and every change after it
//		...
//	}
//	...
//	c.Leave(ctx) // on SIGTERM: peers see "left", not "failed"
//
// # Concurrency
//
// All methods of [Cluster] and [Subscription] are safe for concurrent use.
// memberlist calls this package back on its own goroutines, with its locks
// held; those callbacks only update the member table and queue events, and
// never block. Each [Subscription] owns one goroutine that delivers its
// queued events; a slow reader never stalls gossip (its queue is bounded
// and overflows into one EventResync carrying a full snapshot). A
// [Cluster] owns two more goroutines: one logs membership changes, one
// retries failed members to heal partitions (Config.ReconnectInterval).
// [Cluster.Close] stops them all and waits; memberlist's own connection
// handlers end within Timing.TCPTimeout after it. [Cluster.WaitFor] blocks
// the caller until a condition on the membership holds.
//
// # Errors
//
// [Start] reports every bad config field at once ([ErrInvalidConfig]).
// [Cluster.Join] returns a [*JoinError] listing each address that failed
// and what to check (a wrong gossip key looks like a connection closed by
// the peer). Metadata that cannot be encoded or decoded wraps [ErrBadMeta]
// ([ErrMetaTooLarge], [ErrMetaVersion]); a member whose metadata does not
// decode is listed with [Member.MetaErr] set. After Close every call
// returns [ErrClosed]; after Leave, Join and UpdateNode return [ErrLeft].
package cluster
