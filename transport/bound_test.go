package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/acpp/acpp/proto"
)

// Worst-case bodies: msgpack built by hand, every element as short as it
// can be, so that each byte of the frame asks for as much as it can.

// mkMap is a map of one key.
func mkMap(key string, val []byte) []byte {
	b := []byte{0x81, 0xa0 | byte(len(key))}
	return append(append(b, key...), val...)
}

// mkArr is an array (array32) of n copies of elem.
func mkArr(n int, elem []byte) []byte {
	b := make([]byte, 5, 5+n*len(elem))
	b[0] = 0xdd
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	for range n {
		b = append(b, elem...)
	}
	return b
}

// fillArr is mkArr with as many elements as make the whole body, once
// wrapped by wrap, about size bytes.
func fillArr(size int, elem []byte, wrap func([]byte) []byte) []byte {
	return wrap(mkArr((size-len(wrap(mkArr(0, nil))))/len(elem), elem))
}

// allocated runs f and returns the bytes it allocated (the test must not
// run in parallel with others).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

type amplCase struct {
	name string
	v    func() any
	body func(size int) []byte
}

// amplCases are the messages a node decodes, each with the body that
// makes its decoder allocate the most per byte.
var amplCases = []amplCase{
	{"Wait.IDs", func() any { return new(proto.Wait) }, func(size int) []byte {
		return fillArr(size, []byte{0x01}, func(a []byte) []byte { return mkMap("is", a) })
	}},
	{"UnmapRef.Allocs", func() any { return new(proto.UnmapRef) }, func(size int) []byte {
		return fillArr(size, []byte{0x01}, func(a []byte) []byte { return mkMap("a", a) })
	}},
	{"JobKernels.Kernels", func() any { return new(proto.JobKernels) }, func(size int) []byte {
		return fillArr(size, []byte{0x80}, func(a []byte) []byte { return mkMap("k", a) })
	}},
	{"JobKernels.Kernels.Params", func() any { return new(proto.JobKernels) }, func(size int) []byte {
		return fillArr(size, []byte{0x80}, func(a []byte) []byte { return mkMap("k", append([]byte{0x91}, mkMap("p", a)...)) })
	}},
	{"JobKernels.Kernels.Options", func() any { return new(proto.JobKernels) }, func(size int) []byte {
		return fillArr(size, []byte{0xa0}, func(a []byte) []byte { return mkMap("k", append([]byte{0x91}, mkMap("o", a)...)) })
	}},
	{"Submit.Instrs", func() any { return new(proto.Submit) }, func(size int) []byte {
		return mkMap("is", mkArr(proto.MaxBatch, []byte{0x80}))
	}},
	{"Submit.Instrs.DepsBoxesArgs", func() any { return new(proto.Submit) }, func(size int) []byte {
		in := []byte{0x83}
		in = append(in, mkMap("d", mkArr(proto.MaxDeps, []byte{0x01}))[1:]...)
		in = append(in, mkMap("x", mkArr(proto.MaxBoxes, []byte{0x80}))[1:]...)
		in = append(in, mkMap("l", mkMap("a", mkArr(proto.MaxKernelArgs, []byte{0x80})))[1:]...)
		return mkMap("is", mkArr(min(proto.MaxBatch, size/len(in)), in))
	}},
	{"PageSegment.Header.Boxes", func() any { return new(proto.PageSegment) }, func(size int) []byte {
		return mkMap("h", mkMap("x", mkArr(proto.MaxBoxes, []byte{0x80})))
	}},
	{"EventsReply.Events.Err", func() any { return new(proto.EventsReply) }, func(size int) []byte {
		return fillArr(size, mkMap("x", []byte{0x80}), func(a []byte) []byte { return mkMap("e", a) })
	}},
	{"Inventory.JobList", func() any { return new(proto.Inventory) }, func(size int) []byte {
		return fillArr(size, []byte{0x80}, func(a []byte) []byte { return mkMap("jl", a) })
	}},
}

// TestDecodedSizeIsBounded: no body of a message a node decodes makes the
// decoder allocate more than MaxDecodedBytes beyond the body itself. A 2
// MiB MsgJobKernels body of empty maps made it allocate 604 MB (288 bytes
// a byte; 4.8 GB for a 16 MiB frame), and a 16 MiB MsgWait body of small
// integers 256 MiB.
func TestDecodedSizeIsBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation sizes differ under the race detector")
	}
	failed := map[string]bool{} // do not try a larger body where a smaller one failed
	for _, size := range []int{64 << 10, 2 << 20, 16 << 20} {
		for _, c := range amplCases {
			if failed[c.name] {
				continue
			}
			failed[c.name] = !t.Run(fmt.Sprintf("%s/%d", c.name, size), func(t *testing.T) {
				body := c.body(size)
				if _, err := scanMsgpack(body); err != nil {
					t.Fatalf("test body does not scan: %v", err)
				}
				var err error
				got := allocated(func() { err = decodeBody(body, c.v()) })
				if limit := uint64(MaxDecodedBytes + len(body) + 1<<20); got > limit {
					t.Errorf("decoding a %d-byte body allocated %d bytes (%.0f a byte), more than %d", len(body), got, float64(got)/float64(len(body)), limit)
				}
				if err != nil && !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrMalformed) {
					t.Errorf("refused with %v, want ErrFrameTooLarge or ErrMalformed", err)
				}
				t.Logf("%d bytes: allocated %d (%.1f a byte), err %v", len(body), got, float64(got)/float64(len(body)), err)
			})
		}
	}
}

// TestLargestValidJobKernelsDecodes: the bound leaves room for the largest
// request Validate accepts: 64 kernels of 256 parameters and 256 options.
func TestLargestValidJobKernelsDecodes(t *testing.T) {
	r := proto.JobKernels{Job: 1}
	for i := range proto.MaxKernelsPerRequest {
		k := proto.KernelSpec{Name: fmt.Sprintf("k%d", i), Entry: "e", CUDA: []byte("x"), File: "f.cu"}
		for p := range proto.MaxKernelParams {
			k.Params = append(k.Params, proto.KernelParam{Name: fmt.Sprintf("p%d", p), Kind: 1, Space: 1, ElemSize: 4})
			k.Options = append(k.Options, "-lineinfo")
		}
		r.Kernels = append(r.Kernels, k)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := msgpack.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var got proto.JobKernels
	if err := decodeBody(b, &got); err != nil {
		t.Fatalf("largest valid request (%d bytes) refused: %v", len(b), err)
	}
}

// TestDecodedSizeRefusalIsClear: a body over the bound is refused with
// ErrFrameTooLarge, naming the type and the limit.
func TestDecodedSizeRefusalIsClear(t *testing.T) {
	body := amplCases[2].body(1 << 20)
	err := decodeBody(body, new(proto.JobKernels))
	if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "*proto.JobKernels") || !strings.Contains(err.Error(), "split it") {
		t.Fatalf("err = %v, want ErrFrameTooLarge naming *proto.JobKernels", err)
	}
}

// TestSubmitBatchBudget: a batch whose instructions each have as many
// dependencies, boxes and kernel arguments as proto allows is refused
// with ErrFrameTooLarge once it would decode past MaxDecodedBytes (it
// asked for 51 bytes a byte of input, 485 MB for a 16 MiB frame); a large
// batch of ordinary instructions decodes.
func TestSubmitBatchBudget(t *testing.T) {
	var worst amplCase
	for _, c := range amplCases {
		if c.name == "Submit.Instrs.DepsBoxesArgs" {
			worst = c
		}
	}
	err := decodeBody(worst.body(16<<20), new(proto.Submit))
	if !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "split it") {
		t.Fatalf("worst batch: err = %v, want ErrFrameTooLarge", err)
	}
	sub := proto.Submit{Job: 1}
	for i := range proto.MaxBatch {
		in := proto.Instr{ID: uint64(i + 1), Kind: proto.InstrLaunch, Deps: []uint64{1, 2, 3, 4},
			Launch: &proto.Launch{Kernel: "k", Device: "cpu:0", Global: [3]uint64{1, 1, 1 << 20}, Args: make([]proto.KArg, 8)}}
		for b := range 8 {
			in.Boxes = append(in.Boxes, proto.Box{Lo: [3]uint64{0, 0, uint64(b)}, Hi: [3]uint64{1, 1, uint64(b + 1)}})
		}
		sub.Instrs = append(sub.Instrs, in)
	}
	b, err := msgpack.Marshal(&sub)
	if err != nil {
		t.Fatal(err)
	}
	var got proto.Submit
	if err := decodeBody(b, &got); err != nil || len(got.Instrs) != proto.MaxBatch {
		t.Fatalf("batch of %d ordinary instructions (%d bytes): %d decoded, %v", proto.MaxBatch, len(b), len(got.Instrs), err)
	}
}
