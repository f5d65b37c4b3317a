package node

import (
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/kernels"
	"github.com/acpp/acpp/proto"
)

// fuzzBytes hands out fuzz bytes, zeros once they run out.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// launchFrom turns fuzz bytes into a batch: two allocations of the job and
// a launch of a built-in kernel over them on cpu:0, its ND range and each
// argument from the bytes. Arguments mostly take their parameter's kind,
// space and element size, so that launches often pass the checks and run;
// sizes, offsets, ranges and scalars are the client's.
func launchFrom(data []byte) []proto.Instr {
	b := fuzzBytes(data)
	names := kernels.Names()
	name := names[int(b.next())%len(names)]
	k, _ := device.Kernels.Lookup(name)
	elem := []uint32{4, 4, 8, 1}
	var batch []proto.Instr
	for i := range uint64(2) {
		batch = append(batch, proto.Instr{ID: i + 1, Kind: proto.InstrAlloc, Buffer: i + 1,
			Range: [3]uint64{1, uint64(b.next()%4) + 1, uint64(b.next()%64) + 1}, ElemSize: elem[b.next()%4]})
	}
	small := func() [3]uint64 { return [3]uint64{uint64(b.next() % 3), uint64(b.next() % 5), uint64(b.next() % 70)} }
	l := &proto.Launch{Kernel: name, Device: "cpu:0", Global: small()}
	if c := b.next(); c%3 == 1 {
		l.Local = [3]uint64{1, uint64(c>>2%2) + 1, 1 << (c >> 3 % 6)}
	} else if c%3 == 2 {
		l.Local = small()
	}
	if c := b.next(); c%4 == 0 {
		l.Offset = small()
	}
	nargs := len(k.Params)
	if c := b.next(); c%8 == 0 {
		nargs += int(c>>3%3) - 1
	}
	for i := range max(nargs, 0) {
		var p device.Param
		if i < len(k.Params) {
			p = k.Params[i]
		}
		c := b.next()
		a := proto.KArg{Kind: uint8(p.Kind), Space: uint8(p.Space), ElemSize: uint32(p.ElemSize), Buffer: uint64(c%2) + 1}
		if c&0x04 != 0 {
			a.Kind, a.Space = b.next()%7, b.next()%9
		}
		if c&0x08 != 0 {
			a.ElemSize = elem[b.next()%4]
		}
		if c&0x10 != 0 {
			a.Offset = uint64(b.next()) * 4
		}
		a.Range = [3]uint64{1, uint64(b.next()%4) + 1, uint64(b.next()%64) + 1}
		if c&0x20 != 0 {
			a.Range = small()
		}
		if c&0x40 != 0 {
			a.AccessOffset, a.AccessRange = small(), small()
		}
		a.ReadOnly = p.Space == device.Constant || c&0x80 != 0 && b.next()%2 == 0
		a.LocalBytes = uint64(b.next()) << (b.next() % 12)
		a.Scalar = make([]byte, p.ElemSize)
		if c&0x03 == 3 {
			a.Scalar = make([]byte, b.next()%9)
		}
		for j := range a.Scalar {
			a.Scalar[j] = b.next()
		}
		if name == "spin" && len(a.Scalar) > 2 {
			// spin runs as many iterations as its client asks (2^64 would
			// keep a worker for ever, as any long kernel does): at most 2^16.
			clear(a.Scalar[2:])
		}
		l.Args = append(l.Args, a)
	}
	return append(batch, proto.Instr{ID: 3, Kind: proto.InstrLaunch, Deps: []uint64{1, 2}, Launch: l})
}

// FuzzLaunch launches built-in kernels on a node's CPU device with the
// arguments, ranges and allocations a client chooses: the launch is
// refused, runs, or fails, but never by a built-in's panic (an index past
// its memory: the kernels' checks refuse such a launch, as a GPU would
// not catch it); the node does not crash, nothing hangs, and closing the
// job returns every byte.
func FuzzLaunch(f *testing.F) {
	if err := kernels.Register(); err != nil {
		f.Fatal(err)
	}
	for i, name := range kernels.Names() {
		// Each kernel over 16 items, with its parameters' kinds and sizes,
		// whole buffers of 16 floats, 256 bytes of local memory and
		// scalars of 2 (float32 2.0 or 2 of an integer type).
		// Flat over [1, 1, 16], then in work-groups of [1, 1, 16] and, over
		// [1, 2, 16], of [1, 2, 2].
		k, _ := device.Kernels.Lookup(name)
		for _, local := range []byte{0, 34, 13} {
			seed := []byte{byte(i), 0, 15, 0, 0, 15, 0, 1, 1 + local%2, 16, local, 1, 1}
			for j, p := range k.Params {
				seed = append(seed, byte(j%2), 0, 15, 64, 2)
				switch p.ElemSize {
				case 4:
					seed = append(seed, 2, 0, 0, 0)
				case 8:
					seed = append(seed, 2, 0, 0, 0, 0, 0, 0, 0)
				}
			}
			f.Add(seed)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := offlineNode(t)
		j := newJob(n, 1, credentials.Client("alice"), time.Minute, 512<<10)
		n.jobs[1] = j
		batch := launchFrom(data)
		if _, err := j.submit(batch, 0); err != nil {
			var re *proto.ErrorReply
			if !asReply(err, &re) || re.Code != proto.CodeBadInstr {
				t.Fatalf("submit refused with %v, want a CodeBadInstr reply", err)
			}
		}
		waitNotRunning(t, j, batch[2].Launch)
		j.mu.Lock()
		failed := j.failures[3]
		j.mu.Unlock()
		if failed != nil && strings.Contains(failed.Message, device.ErrKernelPanic.Error()) {
			// The built-ins' checks refuse every launch that would index
			// past its memory: on a GPU, where nothing panics, it would
			// write over other memory or fault.
			t.Fatalf("a built-in panicked instead of being refused: %v\nlaunch %+v", failed.Message, batch[2].Launch)
		}
		closeJobFreesAll(t, n, j)
	})
}
