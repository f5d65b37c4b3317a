// Package coordtest starts in-process acpp-node clusters on loopback for
// tests and benchmarks of the coordinator (and of acpp.Connect and
// acpp-submit --cluster): credentials generated in a temporary directory,
// N nodes n0…n(N-1) that see each other, the built-in kernels registered,
// and helpers that read the nodes' own transfer counters.
//
// # Usage
//
//	c := coordtest.Start(t, 3, coordtest.Options{})
//	job, err := coordinator.Open(ctx, c.Config())
//	...
//	moved := c.PeerBytes() // bytes the nodes sent to each other
//
// # Concurrency
//
// The nodes run until the test ends (t.Cleanup closes them) or Stop.
package coordtest
