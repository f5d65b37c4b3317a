// Liveview runs a Jacobi stencil on acpp.NewQueue (on the first GPU when
// the CUDA backend finds one, else on the CPU) and serves the live view of
// its own queue while it runs: the machine's devices and memory, the
// iterations done, the kernel running now, and the page grids of the two
// grids per allocation. Every -report iterations it reads one row near the
// hot edge on the host (HostRead Within the row): with a GPU, the page
// grid shows that row's page turn valid on the host while the rest stays
// on the GPU.
//
//	go run ./examples/liveview [-addr 127.0.0.1:8090] [-n 1024] [-iters 4000] [-report 100] [-linger 0s]
//
// Open the printed address in a browser. The view is three lines of
// main.go (queueview.Serve, the error, Close); -linger keeps it up after
// the run.
package main
