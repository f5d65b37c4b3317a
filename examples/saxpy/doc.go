// Saxpy computes y = a·x + y over float32 vectors on the default device
// through raw accessors, and checks the result.
//
//	go run ./examples/saxpy [-n 16777216] [-a 2.5]
package main
