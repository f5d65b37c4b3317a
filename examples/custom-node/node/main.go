// Command node is an acpp-node with a kernel of its own: custom.poly, in
// Go (its CPU devices run it over the node's own allocations) and CUDA C
// (compiled for its GPUs at first launch). Everything else is acpp-node:
// the same flags, environment, config file and credentials
// (docs/OPERATIONS.md). The node tells the cluster it has custom.poly, and
// the coordinator places the kernel's groups only on nodes that have it.
//
//	go build -o custom-node ./examples/custom-node/node
//	./custom-node run --name n1 --credentials /etc/acpp …
package main

import (
	"github.com/acpp/acpp/examples/custom-node/poly"
	"github.com/acpp/acpp/node/nodecmd"
)

func main() {
	poly.Register()
	nodecmd.Main()
}
