//go:build !linux

package nvrtc

import "syscall"

// workerAttr: no parent-death signal outside Linux; the parent's timeout
// still bounds a compilation.
func workerAttr() *syscall.SysProcAttr { return nil }
