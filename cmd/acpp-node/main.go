// Command acpp-node is the acpp cluster agent: it joins the cluster, serves
// its machine's CPUs and GPUs to jobs, and moves pages peer to peer. `acpp-node
// run` runs the agent; `acpp-node credentials` creates the cluster's CA,
// certificates and gossip key. docs/OPERATIONS.md is the operator's guide.
//
// It is node/nodecmd.Main with the built-in kernels: a node of your own,
// with kernels of your own, is the same few lines (examples/custom-node).
package main

import "github.com/acpp/acpp/node/nodecmd"

func main() { nodecmd.Main() }
