// Package acpp is the AdaptiveCpp buffer–accessor model for Go: fixed-size
// buffers that the runtime keeps coherent across the CPU and GPUs of this
// machine, command groups whose accessors say which part of which buffer a
// kernel reads or writes, and a runtime that moves only the pages that are
// outdated where they are needed and orders command groups by the accessor
// conflict rules.
//
// # Usage
//
//	q, err := acpp.NewQueue(ctx) // the CPU, plus GPUs of imported backends
//	defer q.Close()
//	x, _ := acpp.NewBufferFrom(q, xs, acpp.R1(len(xs))) // uses xs in place (L1)
//	y, _ := acpp.NewBufferFrom(q, ys, acpp.R1(len(ys)))
//	ev, err := q.Submit(func(h *acpp.Handler) error {
//		xa := acpp.Read(h, x)      // read-only, whole buffer
//		ya := acpp.ReadWrite(h, y) // read-write
//		h.ParallelFor(acpp.R1(len(xs)), func(it acpp.Item) {
//			i := it.ID(0)
//			ya.Set(i, a*xa.At(i)+ya.At(i))
//		})
//		return nil
//	})
//	err = ev.Wait(ctx)
//	err = y.Close() // waits, writes ys back
//
// # Accessors
//
// Accessors come in the variants of AdaptiveCpp's accessor-variants
// extension, each a distinct type that stores only what it needs (V1):
// raw (a data pointer: [Raw], [RawRO]), unranged (pointer and buffer range:
// [Unranged], [UnrangedRO]), ranged (also offset and access range: [Ranged],
// [RangedRO]) and the placeholder forms ([Placeholder], [RangedPlaceholder]
// and their RO versions), bound to a group with Require. The RO types have
// no Set: the access mode is part of the type. Constructors pick the most
// compact variant for what is asked (V5): Read/Write/ReadWrite give
// unranged accessors, ReadRange/... ranged ones, ReadRaw/... raw ones.
// Conversions exist only where accessor-variants.txt allows them (V2):
// unranged → ranged, anything → raw, read-write → read-only, placeholder →
// accessor; never from raw, never ranged → unranged, never to a placeholder.
//
// # Kernels
//
// A command group declares one action: ParallelFor (a Go closure per item),
// ParallelForChunks (a Go closure per chunk), ParallelForND (work-groups
// with local memory and barriers, hierarchical form), SingleTask, Launch /
// LaunchND (a named kernel from the registry in package device, with one
// implementation per backend and parameters declared with address spaces),
// Copy, CopyToHost, CopyFromHost or Fill. Go closures run only on CPU
// devices.
//
// # Concurrency
//
// Queues, buffers and events are safe for concurrent use. Command groups
// run as soon as the groups they conflict with have finished; independent
// ones run concurrently, also on one device. Kernels run on the CPU
// backend's worker goroutines; they must not block on other command groups.
//
// # Errors
//
// Submit returns errors in declaring a group (accessor outside its buffer,
// closed buffer, missing implementation, bad argument); errors while a
// group runs (a kernel panic, a failed copy, a cancelled queue) are on its
// Event and returned by Queue.Wait. A failed group does not stop the queue.
// Every call that takes a context refuses a nil one with an error (pass
// context.Background()), having started nothing. Misusing a Handler after
// its Submit returned panics with an error wrapping ErrHandlerDone.
package acpp
