// Saxpy computes y = a·x + y over float32 vectors on the default device
// through raw accessors, and checks the result.
//
//	go run ./examples/saxpy [-n 16777216] [-a 2.5] [-kernel closure|named]
//
// -kernel named runs the same command group with the registered Go kernel
// example.saxpy (kernel.go) instead of the closure: the form that can
// travel to a node (docs/API.md, "Why a closure cannot travel").
package main
