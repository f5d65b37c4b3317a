package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveStream says whether streamRepeat runs here: its loads and
// non-temporal stores are 32-byte AVX ones (16-byte SSE2 stores reached
// about 0.55× of them on the dev VM).
var haveStream = cpu.X86.HasAVX

// streamUnit is the bytes one turn of streamRepeat's loop writes.
const streamUnit = 128

// streamRepeat writes src over dst, len(dst)/len(src) times, with
// non-temporal stores, then fences them. len(src) and len(dst) are
// non-zero multiples of streamUnit, len(dst) a multiple of len(src), and
// dst starts at a multiple of 32 bytes.
func streamRepeat(dst, src []byte) {
	ntRepeat(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), len(dst), len(src))
}

//go:noescape
func ntRepeat(dst, src unsafe.Pointer, n, m int)

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
