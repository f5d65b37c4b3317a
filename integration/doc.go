// Package integration holds acpp's multi-process tests: they build
// acpp-node once per test run, start several on loopback with credentials
// made by its credentials subcommand, drive them with node/nodeclient, kill
// and stop them, and check what a user would see (C1, C3, C5, C6). They are
// skipped with -short.
//
//	go test ./integration/          # about 20 s on 2 cores, after the build
//	go test -run '^$' -bench Convergence ./integration/
package integration
