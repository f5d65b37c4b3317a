// Reduction fills a vector of int64 on the device (x[i] = i, one
// ParallelForChunks group) and sums it in two more command groups: a
// ParallelForND where each work-group reduces its part in local memory
// with a tree of barrier-separated phases and writes one partial sum, then
// a SingleTask that adds the partial sums. The result is checked against n(n-1)/2.
//
//	go run ./examples/reduction [-n 4194304] [-group 256]
package main
