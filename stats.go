package acpp

import (
	"slices"

	"github.com/acpp/acpp/internal/engine"
)

// Stats counts what a queue did since it was made.
//
// On an embedded queue (NewQueue) every field is counted. On a cluster
// queue (Connect) Groups counts submitted command groups, and Copies,
// BytesCopied and Links count the page transfers of finished groups as the
// nodes reported them (uploads from the client, sends between nodes,
// copies within a node, read-backs to the client); CopiesPlanned,
// BytesHostToDevice, BytesDeviceToHost and Allocations stay zero there.
// A group's transfers are counted once its completion reached the client,
// which for a host read (Buffer.Read, HostRead) can be just after the read
// returned.
type Stats struct {
	// Groups is the number of command groups submitted (the chunks of a
	// split group count one each).
	Groups int64
	// CopiesPlanned is the number of page-box copies coherence planned;
	// Copies is the number of backend transfers run. On an embedded queue
	// they are equal once every group has run.
	CopiesPlanned, Copies int64
	// BytesCopied is the total of all copies; BytesHostToDevice and
	// BytesDeviceToHost are the part between the host memory and a device
	// memory in each direction.
	BytesCopied, BytesHostToDevice, BytesDeviceToHost int64
	// Allocations is the number of allocations made (lazily, B5).
	Allocations int64
	// Links are the copies per direction between two memories, one entry
	// per pair that saw any, sorted by From, then To. BytesCopied is the
	// sum of their Bytes.
	Links []Transfer
}

// Link returns the counts of the copies from one memory to another (zero
// when none ran).
func (s Stats) Link(from, to string) Transfer {
	for _, t := range s.Links {
		if t.From == from && t.To == to {
			return t
		}
	}
	return Transfer{From: from, To: to}
}

// Transfer counts the copies over one link, from one memory to another.
//
// On an embedded queue a memory is named "host" (the host memory, which
// every CPU device and host-unified GPU uses: linked allocations, L2) or
// by the device that owns it ("cuda:0"). On a cluster queue it is a node
// name, or "client" for the client's host memory; a copy between two
// memories of one node has the node on both sides.
type Transfer struct {
	From, To string
	// Copies is the number of backend transfers (one per page box on an
	// embedded queue; one per send, upload, copy or read-back instruction
	// on a cluster), Bytes their payload.
	Copies, Bytes int64
}

// sortTransfers orders ts by From, then To.
func sortTransfers(ts []Transfer) []Transfer {
	slices.SortFunc(ts, func(a, b Transfer) int {
		if a.From != b.From {
			if a.From < b.From {
				return -1
			}
			return 1
		}
		if a.To < b.To {
			return -1
		}
		if a.To > b.To {
			return 1
		}
		return 0
	})
	return ts
}

// statsOf is an engine's counters as Stats.
func statsOf(s engine.Stats) Stats {
	return Stats{Groups: s.Groups, CopiesPlanned: s.CopiesPlanned, Copies: s.Copies,
		BytesCopied: s.BytesCopied, BytesHostToDevice: s.BytesHostToDevice, BytesDeviceToHost: s.BytesDeviceToHost,
		Allocations: s.Allocations, Links: sortTransfers(transfersOf(s.Links))}
}

func transfersOf(ts []engine.Transfer) []Transfer {
	if len(ts) == 0 {
		return nil
	}
	out := make([]Transfer, len(ts))
	for i, t := range ts {
		out[i] = Transfer(t)
	}
	return out
}

// Transfers are the page copies this command group's prologue ran, per
// direction between two memories (see Transfer for their names), in the
// order they were planned: on an embedded queue planned at Submit, all of
// them run once the group is Complete (a failed group may have run only
// some); on a cluster queue, as the nodes reported them once the group
// finished (nil before). A split group's are the sum of its chunks'.
func (e *Event) Transfers() []Transfer { return transfersOf(e.e.Transfers()) }
