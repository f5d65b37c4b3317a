package cpu

import "github.com/acpp/acpp/device"

// streamMinBytes is the least size of a fill that is written with
// non-temporal (streaming) stores where the machine has them: they skip
// the read of every line that a cached store first does. A fill this big
// has left the nearer caches (2 MiB of L2 a core on the dev VM) by the
// time a kernel reads it anyway. Measured on one core of the dev VM: a
// streamed fill of 2–31 MiB runs at 2.3–2.8× a memclr of the same bytes
// (which streams only from 32 MiB on), one of 64 MiB at 1.0×, where the
// cached copies of a 1 MiB block that FillHost makes reach 0.37×.
const streamMinBytes = 4 << 20

// streamBlock is about the size of the pattern block a streamed fill
// copies over the rest: it stays in L1 while it is read over and over
// (16 KiB gave the same speed).
const streamBlock = 4 << 10

// streamPiece is the most bytes one call of streamRepeat writes: an
// assembly loop cannot be preempted, so it runs in pieces of about 50 µs
// (the same speed as one call over 32 MiB; 4 KiB pieces halve it).
const streamPiece = 1 << 20

// streamAlign is the alignment streamRepeat needs of its destination (a
// cache line; the stores need 32 bytes).
const streamAlign = 64

// fill performs f (valid) on dst, a host-visible view of f.Dst. Big fills
// of any pattern, zeros too, stream one cache-resident block of the
// pattern over the region; the rest are device.FillHost (memclr for
// zeros). So are fills of memory mostly fresh from the kernel (a new
// buffer's init): the kernel zeroes each page through the cache when it
// is first written, and cached stores then hit lines that streaming
// stores would write to memory a second time (1.4–1.6× a clear of fresh
// memory with cached stores, 1.0–1.2× streamed: BenchmarkFillFresh). f may be one worker's chunk of a fill of whole bytes: every
// chunk of a fill makes the same choice of stores.
func fill(dst []byte, f device.FillOp, whole int) {
	b := dst[f.Offset : f.Offset+f.Bytes]
	// The block holds whole patterns and whole turns of streamRepeat's
	// loop, so repeating it keeps the pattern's phase.
	unit := lcm(len(f.Pattern), streamUnit)
	block := max(unit, streamBlock/unit*unit)
	if !haveStream || whole < streamMinBytes || unit > 16*streamBlock || len(b) < streamAlign+2*block || !mostlyResident(b) {
		device.FillHost(dst, f)
		return
	}
	// Cached stores up to the first aligned address, and the block after
	// it, written by doubling the pattern: b[head:head+block] is the block
	// to repeat, starting at the pattern's phase at head.
	head := 0
	if r := int(addrOf(b) % streamAlign); r != 0 {
		head = streamAlign - r
	}
	n := copy(b[:head+block], f.Pattern)
	for n < head+block {
		n += copy(b[n:head+block], b[:n])
	}
	src := b[head : head+block]
	for len(b)-n >= block {
		m := min(streamPiece/block, (len(b)-n)/block) * block
		streamRepeat(b[n:n+m], src)
		n += m
	}
	copy(b[n:], src) // the tail, less than a block: cached stores
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}
