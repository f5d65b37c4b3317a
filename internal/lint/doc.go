// Package lint holds repository-wide checks that run as tests: every package
// has one package comment, and the layer boundaries of docs/ARCHITECTURE.md
// hold (coherence is pure; only cluster imports memberlist; only transport
// imports quic-go and msgpack; backends never import the scheduler).
package lint
