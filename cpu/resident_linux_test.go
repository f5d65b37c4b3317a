package cpu

import (
	"syscall"
	"testing"
)

// Memory fresh from the kernel is not resident until written; a fill
// then uses cached stores (see fill), and streams once it was written.
func TestMostlyResident(t *testing.T) {
	const n = 1 << 20
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if mostlyResident(m[100 : n-100]) {
		t.Fatal("a fresh mapping is mostly resident, want not")
	}
	for i := 0; i < n/2+8192; i += 4096 {
		m[i] = 1
	}
	if !mostlyResident(m[100 : n-100]) {
		t.Fatal("a mapping written over half its pages is not mostly resident, want it is")
	}
	if !mostlyResident(nil) {
		t.Fatal("mostlyResident(nil) = false, want true")
	}
}
