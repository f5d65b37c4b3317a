//go:build unix

package nvrtc

import "syscall"

// limitMemory bounds this process's address space (RLIMIT_AS), best
// effort: a worker that cannot lower its limit compiles without one.
func limitMemory(bytes uint64) {
	lim := syscall.Rlimit{Cur: bytes, Max: bytes}
	_ = syscall.Setrlimit(syscall.RLIMIT_AS, &lim)
}
