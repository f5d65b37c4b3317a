// Matmul multiplies two float32 matrices with a tiled kernel: each
// work-group loads one tile of A and one of B into work-group local memory
// per step, and after a barrier every item accumulates from the tiles. The
// result is checked against a plain triple loop.
//
//	go run ./examples/matmul [-n 256] [-tile 16]
package main
