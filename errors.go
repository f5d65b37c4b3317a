package acpp

import (
	"context"
	"errors"
	"fmt"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
)

// Sentinel errors. Match them with errors.Is; messages add the detail.
var (
	// ErrClosed: the queue or buffer was closed; create a new one. A
	// closed buffer's error is ErrBufferClosed, which matches ErrClosed
	// too, so errors.Is(err, ErrClosed) covers both.
	ErrClosed = engine.ErrClosed
	// ErrBufferClosed: the buffer was closed; accessors, host access and
	// WriteBack need a live buffer. It wraps ErrClosed.
	ErrBufferClosed error = &classError{msg: "acpp: buffer closed", class: ErrClosed}
	// ErrBadRange: a range or offset is malformed or does not fit the
	// buffer; the message names the bound.
	ErrBadRange = engine.ErrBadRange
	// ErrMode: an access mode does not allow the operation (writing through
	// a read accessor, a NoInit read, a fill of a read accessor).
	ErrMode = engine.ErrMode
	// ErrNoKernel: a command group declared no work, or more than one, or
	// gave a kernel method a nil function; call exactly one of
	// ParallelFor, ParallelForND, SingleTask, Launch, Copy, Fill.
	ErrNoKernel = errors.New("acpp: command group must declare exactly one action")
	// ErrHandlerDone: a Handler was used after its Submit returned, or an
	// accessor of one command group in another. Build accessors and
	// declare the action inside the command-group function. Using a
	// finished Handler is a programmer error with no error to return: the
	// call panics with an error wrapping ErrHandlerDone (recover it and
	// match it with errors.Is). An accessor of another group is an error
	// from Submit.
	ErrHandlerDone = errors.New("acpp: handler used outside its command group")
	// ErrOption: an option was given where it cannot apply (a SubmitOption
	// that Malloc, Memcpy, Memset or FillUSM does not take; a NewQueue
	// option given to Connect, or a Connect option to NewQueue), or with a
	// value it cannot take (WithWorkers beyond MaxWorkers). Nothing was
	// done; the message names the option and those that apply.
	ErrOption = engine.ErrOption
	// ErrNoDevice: no device matched the selection.
	ErrNoDevice = engine.ErrNoDevice
	// ErrNoImplementation: the kernel has no implementation for the device
	// the group runs on (a Go closure on a GPU, a named kernel without one
	// for this backend). Register one or submit with On(another device).
	ErrNoImplementation = device.ErrNoImplementation
	// ErrUnknownKernel: Launch or LaunchND named a kernel that is
	// registered nowhere: not in this process (device.Register,
	// device.MustRegister) and, on a cluster queue, on none of the job's
	// nodes. Register it before Submit; the built-in kernels (saxpy,
	// fill_f32, copy_f32, jacobi2d, matmul_tiled, reduce_sum_f32,
	// histogram_u32) are registered by kernels.Register() (package
	// github.com/acpp/acpp/kernels).
	ErrUnknownKernel = device.ErrUnknownKernel
	// ErrKernelPanic marks errors made from a panic in a CPU kernel, or
	// from a kernel that called runtime.Goexit (t.Fatal in a kernel).
	ErrKernelPanic = device.ErrKernelPanic
	// ErrPlaceholder is reserved and returned by nothing: a placeholder
	// accessor used in a group without Require cannot happen, because a
	// placeholder has no method that indexes memory and is no KernelArg, so
	// such a program does not compile. The name stays for programs that
	// refer to it.
	ErrPlaceholder = errors.New("acpp: placeholder accessor not bound with Require")
	// ErrElemType: the element type holds pointers (Go memory the runtime
	// moves between devices must be plain data).
	ErrElemType = errors.New("acpp: element type must not contain pointers")
	// ErrNotHostVisible: the memory cannot be touched from the host; copy it
	// with Memcpy or use a host accessor.
	ErrNotHostVisible = errors.New("acpp: memory is not host-visible")
	// ErrMemoryLimit: an allocation does not fit its memory's budget
	// (WithMemoryLimit) and was refused before it was made; the message
	// names the size, the budget and what to do. The error is a
	// *device.BudgetError.
	ErrMemoryLimit = device.ErrOverBudget
)

// classError is a sentinel that also matches a broader one (its class) with
// errors.Is, without repeating the class's text in its message.
type classError struct {
	msg   string
	class error
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }

// checkCtx is the error of call given a nil context, before anything is
// submitted or registered; nil for a real one.
func checkCtx(ctx context.Context, call string) error {
	if ctx == nil {
		return fmt.Errorf("acpp: %s got a nil context; pass context.Background() (or a context with a deadline) instead", call)
	}
	return nil
}
