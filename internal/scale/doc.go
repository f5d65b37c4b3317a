// Package scale is the scale harness of issue 17 (part 2): how membership,
// the coordinator and the client behave as a cluster grows from 1 to 64
// members on one machine.
//
// The measurements are tests that start real acpp-node processes on
// loopback; they run only when ACPP_SCALE=1 is set (and not with -short),
// so CI does not pay for them. scripts/scale runs them and writes the
// figures (a JSON file of results and PNG plots drawn by [LinePlot], pure
// Go, no plotting library) under docs/img/:
//
//	scripts/scale                         # 1, 4, 16, 64 members, both presets
//	ACPP_SCALE_MEMBERS=4,16 scripts/scale # fewer
//
// What is measured:
//
//   - gossip: the time from the first node's start until every node's
//     /healthz reports all members; after that, one more node joins (the
//     time until every node sees it) and is killed with SIGKILL (the time
//     until every survivor has dropped it); then a hold of a few seconds
//     counts false deaths (a node seeing fewer members than run), for each
//     timing preset;
//   - the coordinator: a Jacobi step split over every member's CPU device
//     (16 rows of 256 floats per member), the client's Submit time per
//     chunk group (placement, splitting, the plan, issuing), the dispatch
//     rate (chunk groups per second, waited for), the client's heap and
//     its bytes allocated per chunk group, and the nodes' resident memory.
package scale
