// Package driver is the raw binding to the CUDA driver API (libcuda.so.1),
// resolved at run time with github.com/ebitengine/purego so that every
// binary builds with CGO_ENABLED=0.
//
// Every entry point the runtime uses is listed once in procs (procs.go), with
// a link to its documentation. Open resolves each of them; a symbol that does
// not resolve is recorded, and a call to it returns an *Error that unwraps to
// ErrNotResolved instead of jumping through a nil pointer.
//
// # Usage
//
//	lib, err := driver.Open("")      // errors.Is(err, driver.ErrNoDriver) on a machine without CUDA
//	if err != nil { ... }
//	if err := lib.Init(); err != nil { ... }
//	n, err := lib.DeviceGetCount()
//
// # Concurrency
//
// Lib is safe for concurrent use: it only holds resolved function pointers.
// CUDA itself binds a context to the calling OS thread, so callers that make
// a context current (CtxSetCurrent) must keep the goroutine locked to its
// thread (runtime.LockOSThread) for as long as they use it; package cuda does
// this with one owner goroutine per device.
//
// # Errors
//
// A failing call returns *Error, which carries the call's name, the CUresult
// code and the name the driver gives it (cuGetErrorName). Error.Is matches the
// sentinels ErrOutOfMemory, ErrNotReady, ErrNoDevice and ErrNotResolved.
package driver
