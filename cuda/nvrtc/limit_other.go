//go:build !unix

package nvrtc

// limitMemory does nothing where the system has no RLIMIT_AS.
func limitMemory(uint64) {}
