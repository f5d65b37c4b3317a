//go:build linux

package nvrtc

import "syscall"

// workerAttr makes a worker die with the process that started it: a
// compilation NVRTC hangs in must not outlive a node that was killed.
func workerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
