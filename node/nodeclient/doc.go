// Package nodeclient is the client side of acpp-node: what a job's
// coordinator (and acpp-submit, and tests) use to talk to nodes. It dials
// nodes with client credentials, opens jobs (and keeps their leases
// alive), submits instruction batches, waits for them, uploads pages into
// a job's allocations and reads pages back, and asks for inventories.
//
// # Usage
//
//	c, err := nodeclient.Start(nodeclient.Config{Credentials: creds})
//	defer c.Close()
//	name, err := c.Connect(ctx, "10.0.0.7:7947")
//	j, err := c.Open(ctx, name, jobID, nodeclient.JobOptions{})
//	defer j.Close(ctx)
//	_, err = j.Submit(ctx, proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: rng, ElemSize: 4})
//	err = j.Wait(ctx, 1)
//
// # Concurrency
//
// Client and Job methods are safe for concurrent use. Each open Job owns a
// goroutine that renews its lease at a third of the lease; Job.Close and
// Client.Close stop it.
//
// # Errors
//
// Instructions that failed are reported by Wait as an *InstrFailedError
// listing each failure; it matches ErrNodeLost when a node loss caused
// one, and LostNodes names them. Node replies are *transport.RemoteError
// values; transport failures are *transport.PeerError values naming the
// node.
package nodeclient
