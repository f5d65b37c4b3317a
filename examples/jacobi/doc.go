// Jacobi runs a 2D Jacobi stencil (the average of the four neighbours, with
// a fixed boundary) on the CPU. Each iteration is split into row blocks;
// each block's command group reads its rows plus one halo row on each side
// through a ranged accessor and writes its own rows through another, so the
// blocks of one iteration run in parallel and each block of the next
// iteration waits only for its neighbours — no subbuffers. The result is
// checked against a plain sequential loop.
//
//	go run ./examples/jacobi [-n 1024] [-iters 100] [-blocks 8]
package main
