//go:build !linux

package cpu

// mostlyResident says yes: only Linux tells (mincore) here.
func mostlyResident(b []byte) bool { return true }
