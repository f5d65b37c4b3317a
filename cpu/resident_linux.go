package cpu

import (
	"os"
	"syscall"
	"unsafe"
)

var pageSize = uintptr(os.Getpagesize())

// mostlyResident says whether most pages of b are in memory (mincore(2)):
// written before, rather than fresh from the kernel, which zeroes a page
// through the cache on its first write. It says yes when it cannot tell.
func mostlyResident(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b))) &^ (pageSize - 1)
	end := (uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(len(b)) + pageSize - 1) &^ (pageSize - 1)
	vec := make([]byte, (end-start)/pageSize)
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, start, end-start, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return true
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return 2*in >= len(vec)
}
