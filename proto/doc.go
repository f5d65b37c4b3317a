// Package proto holds the wire types of acpp's QUIC transport: the
// handshake, the frame envelope, error replies and page-transfer headers, as
// plain Go structs with msgpack tags. It imports no codec: transport/ does
// the encoding, so node/, the coordinator and tests can build and inspect
// messages without importing msgpack.
//
// # Versioning
//
// [Version] is the protocol version that both ends of a connection announce
// in [Hello]; a peer with a different version is refused during the
// handshake with an error that names both versions. Structs are encoded as
// msgpack maps with short keys, so a field may be added without a version
// bump (old decoders skip unknown keys); changing the meaning or type of a
// field, or removing one, needs a new [Version].
//
// The numeric values of [MsgType] and [ErrorCode] are part of the protocol:
// only append to those lists, never renumber or reuse a value.
//
// # Adding messages
//
// Message types below [MsgFirstApp] belong to the transport. Instruction and
// other application messages take values from [MsgFirstApp] up: add them in
// a new file of this package (for example instr.go) as a block of MsgType
// constants starting at MsgFirstApp, each with its request and reply struct
// next to it and a String case in [MsgType.String]'s appNames table, and
// register their handlers with transport.Handle. Application error codes
// likewise start at [CodeFirstApp].
package proto
