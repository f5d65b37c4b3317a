// Package bench holds benchmarks that compare the runtime with a raw
// reference outside it in the same run, where the reference needs a
// library only its wrapper may import elsewhere (quic-go: the cluster
// hop against a raw QUIC round trip). It has no code of its own.
package bench
