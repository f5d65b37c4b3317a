package engine

import (
	"errors"
	"fmt"
)

// Sentinel errors the engines return; the root package exports them under
// the same names (acpp.ErrBadRange is ErrBadRange), with their docs.
var (
	ErrClosed           = errors.New("acpp: queue closed")
	ErrBadRange         = errors.New("acpp: range does not fit")
	ErrMode             = errors.New("acpp: access mode does not allow this")
	ErrNoDevice         = errors.New("acpp: no such device")
	ErrSplit            = errors.New("acpp: cannot split this command group")
	ErrNotOnCluster     = errors.New("acpp: not available on a cluster queue")
	ErrClosureOnCluster = errors.New("acpp: closures cannot run on a cluster; register a named kernel with Go and PTX implementations and use h.Launch")
	ErrOption           = errors.New("acpp: option does not apply here")
)

// UnknownKernel is the error of a launch of a kernel this process has not
// registered (err wraps device.ErrUnknownKernel and names the kernel),
// with what to do about it.
func UnknownKernel(err error) error {
	return fmt.Errorf("%w; register it before Submit (device.Register or device.MustRegister), or call kernels.Register() (package github.com/acpp/acpp/kernels) for the built-in kernels", err)
}
