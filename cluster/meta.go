package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// MetaMaxSize is the most memberlist carries in a member's metadata
// (memberlist.MetaMaxSize). [Meta.Encode] refuses anything larger.
const MetaMaxSize = 512

// Metadata limits. Together they keep the largest valid metadata under
// MetaMaxSize only for reasonable values; Encode checks the total.
const (
	// MaxQUICAddrLen bounds Meta.QUICAddr (a DNS name and a port).
	MaxQUICAddrLen = 255
	// MaxDeviceKinds bounds len(Meta.Devices).
	MaxDeviceKinds = 16
)

// Metadata encoding versions. WARNING: ONLY APPEND TO THIS LIST! The values
// are part of the protocol: a node decodes only versions it knows.
const (
	metaVersion1 byte = 1
)

// DeviceKind is the kind of a device in the summary. The values are those of
// device.Kind; append only, they travel in the metadata.
type DeviceKind uint8

// Device kinds (the numbering of device.Kind).
const (
	DeviceCPU  DeviceKind = 1
	DeviceCUDA DeviceKind = 2
	// DeviceFake is the in-memory test device.
	DeviceFake DeviceKind = 3
)

func (k DeviceKind) String() string {
	switch k {
	case DeviceCPU:
		return "cpu"
	case DeviceCUDA:
		return "cuda"
	case DeviceFake:
		return "fake"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// DeviceSummary sums up the devices of one kind on a node. The full
// inventory (names, per-device memory, capabilities) is asked for over QUIC.
type DeviceSummary struct {
	Kind DeviceKind
	// Count is the number of devices of this kind, at least 1.
	Count uint32
	// MemBytes is the memory of all devices of this kind together, in
	// bytes; 0 means unknown.
	MemBytes uint64
	// Unified is true when every device of this kind shares physical memory
	// with the host (CPU devices, integrated GPUs): their allocations link to
	// the host allocation (L2, L3).
	Unified bool
}

// String formats the summary for logs and tables: "cuda×8/1128GiB",
// "cpu×1/512GiB/unified".
func (d DeviceSummary) String() string {
	s := d.Kind.String() + "×" + strconv.FormatUint(uint64(d.Count), 10)
	if d.MemBytes > 0 {
		s += "/" + strconv.FormatUint(d.MemBytes>>30, 10) + "GiB"
	}
	if d.Unified {
		s += "/unified"
	}
	return s
}

// Meta is what a member advertises about itself in memberlist's metadata
// (C1). It is small on purpose: see docs/CLUSTER.md for the byte layout.
type Meta struct {
	// NodeID is the member's name (Config.Name), repeated so the metadata is
	// self-describing and a mismatch with the gossip name is caught.
	NodeID string
	// BootID is random per Start: a node that restarts under the same name
	// gets a new one, so peers know its allocations are gone.
	BootID uint64
	// QUICAddr is the host:port of the node's QUIC transport; empty when it
	// serves none.
	QUICAddr string
	// ProtocolVersion is the acpp wire protocol version it speaks; 0 when
	// not advertised.
	ProtocolVersion uint16
	// Devices holds one summary per device kind, sorted by kind.
	Devices []DeviceSummary
	// Leaving is set by a member that is draining before it leaves
	// (Cluster.Leave sets it): schedule no new work on it. It is also how
	// peers tell a graceful leave from a failure, since memberlist does not
	// report which one it saw.
	Leaving bool
}

// Device returns the summary for kind k, if the node has devices of it.
func (m Meta) Device(k DeviceKind) (DeviceSummary, bool) {
	for _, d := range m.Devices {
		if d.Kind == k {
			return d, true
		}
	}
	return DeviceSummary{}, false
}

// Clone returns a deep copy.
func (m Meta) Clone() Meta {
	m.Devices = slices.Clone(m.Devices)
	return m
}

// flag bits of the node flags byte. Version 1 defines only bit 0.
const (
	nodeFlagLeaving byte = 1 << 0
	knownNodeFlags       = nodeFlagLeaving
)

// flag bits of a device record. Version 1 defines only bit 0; a decoder
// rejects the others, since a new meaning needs a new version.
const (
	flagUnified byte = 1 << 0
	knownFlags       = flagUnified
)

// Encode returns the version-1 encoding of m:
//
//	version    1 byte, = 1
//	flags      1 byte, bit 0 = leaving
//	protocol   uvarint
//	node id    uvarint length (1..MaxNameLen), UTF-8 bytes
//	boot id    8 bytes, little endian
//	quic addr  uvarint length (0..MaxQUICAddrLen), bytes
//	kinds      uvarint count (0..MaxDeviceKinds), then per kind, sorted by kind:
//	  kind     1 byte, non-zero, strictly increasing
//	  flags    1 byte, bit 0 = unified
//	  count    uvarint, ≥ 1
//	  memory   uvarint, bytes
//
// Every uvarint is minimal, so each Meta has exactly one encoding. Encode
// fails with [ErrMetaTooLarge] above MetaMaxSize bytes and with
// [ErrBadMeta] for an invalid field.
func (m Meta) Encode() ([]byte, error) {
	if err := checkName(m.NodeID); err != nil {
		return nil, fmt.Errorf("%w: node id %q: %v", ErrBadMeta, m.NodeID, err)
	}
	if m.QUICAddr != "" {
		if err := checkHostPort(m.QUICAddr); err != nil {
			return nil, fmt.Errorf("%w: QUIC address %q: %v", ErrBadMeta, m.QUICAddr, err)
		}
	}
	if err := checkDevices(m.Devices); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	b := make([]byte, 0, 64)
	var nodeFlags byte
	if m.Leaving {
		nodeFlags |= nodeFlagLeaving
	}
	b = append(b, metaVersion1, nodeFlags)
	b = binary.AppendUvarint(b, uint64(m.ProtocolVersion))
	b = binary.AppendUvarint(b, uint64(len(m.NodeID)))
	b = append(b, m.NodeID...)
	b = binary.LittleEndian.AppendUint64(b, m.BootID)
	b = binary.AppendUvarint(b, uint64(len(m.QUICAddr)))
	b = append(b, m.QUICAddr...)
	b = binary.AppendUvarint(b, uint64(len(m.Devices)))
	for _, d := range m.Devices {
		var flags byte
		if d.Unified {
			flags |= flagUnified
		}
		b = append(b, byte(d.Kind), flags)
		b = binary.AppendUvarint(b, uint64(d.Count))
		b = binary.AppendUvarint(b, d.MemBytes)
	}
	if len(b) > MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, memberlist carries at most %d; shorten the QUIC address or node name, or advertise fewer device kinds", ErrMetaTooLarge, len(b), MetaMaxSize)
	}
	return b, nil
}

func checkDevices(ds []DeviceSummary) error {
	if len(ds) > MaxDeviceKinds {
		return fmt.Errorf("%d device kinds, at most %d", len(ds), MaxDeviceKinds)
	}
	for i, d := range ds {
		if d.Kind == 0 {
			return fmt.Errorf("device summary %d has kind 0", i)
		}
		if d.Count == 0 {
			return fmt.Errorf("device summary %d (%v) has count 0; leave the kind out instead", i, d.Kind)
		}
		if i > 0 && ds[i-1].Kind >= d.Kind {
			return fmt.Errorf("device summaries must be sorted by kind, one per kind: %v follows %v", d.Kind, ds[i-1].Kind)
		}
	}
	return nil
}

// DecodeMeta decodes what [Meta.Encode] produced. It rejects input that is
// empty, larger than MetaMaxSize, of an unknown version, truncated, has
// bytes left over, a non-minimal varint, an out-of-range field or unknown
// flag bits, with an error wrapping [ErrBadMeta] (or [ErrMetaVersion]) that
// says which field is wrong.
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, fmt.Errorf("%w: empty (the member runs no acpp node, or a version that advertises nothing)", ErrBadMeta)
	}
	if len(b) > MetaMaxSize {
		return m, fmt.Errorf("%w: %d bytes, at most %d", ErrBadMeta, len(b), MetaMaxSize)
	}
	if b[0] != metaVersion1 {
		return m, fmt.Errorf("%w: version %d, this build reads version %d; run the same acpp version on every node", ErrMetaVersion, b[0], metaVersion1)
	}
	d := metaDecoder{b: b, off: 1}
	nodeFlags := d.byte("node flags")
	if d.err == nil && nodeFlags&^knownNodeFlags != 0 {
		d.fail("unknown node flag bits %#x", nodeFlags&^knownNodeFlags)
	}
	m.Leaving = nodeFlags&nodeFlagLeaving != 0
	proto := d.uvarint("protocol version", math.MaxUint16)
	m.ProtocolVersion = uint16(proto)
	m.NodeID = d.str("node id", MaxNameLen)
	m.BootID = d.u64("boot id")
	m.QUICAddr = d.str("QUIC address", MaxQUICAddrLen)
	n := d.uvarint("device kind count", MaxDeviceKinds)
	if d.err == nil && n > 0 {
		m.Devices = make([]DeviceSummary, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		var s DeviceSummary
		s.Kind = DeviceKind(d.byte("device kind"))
		flags := d.byte("device flags")
		if d.err == nil && flags&^knownFlags != 0 {
			d.fail("device %v: unknown flag bits %#x", s.Kind, flags&^knownFlags)
		}
		s.Unified = flags&flagUnified != 0
		s.Count = uint32(d.uvarint("device count", math.MaxUint32))
		s.MemBytes = d.uvarint("device memory", math.MaxUint64)
		m.Devices = append(m.Devices, s)
	}
	if d.err == nil && d.off != len(b) {
		d.fail("%d bytes left over after the device summary", len(b)-d.off)
	}
	if d.err != nil {
		return Meta{}, d.err
	}
	if err := checkName(m.NodeID); err != nil {
		return Meta{}, fmt.Errorf("%w: node id %q: %v", ErrBadMeta, m.NodeID, err)
	}
	if m.QUICAddr != "" {
		if err := checkHostPort(m.QUICAddr); err != nil {
			return Meta{}, fmt.Errorf("%w: QUIC address %q: %v", ErrBadMeta, m.QUICAddr, err)
		}
	}
	if err := checkDevices(m.Devices); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	return m, nil
}

// metaDecoder reads fields in order; the first error sticks and later reads
// return zero values.
type metaDecoder struct {
	b   []byte
	off int
	err error
}

func (d *metaDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrBadMeta}, args...)...)
	}
}

func (d *metaDecoder) truncated(field string) {
	d.fail("truncated at byte %d, reading the %s", d.off, field)
}

func (d *metaDecoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.truncated(field)
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *metaDecoder) u64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 8 {
		d.truncated(field)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *metaDecoder) uvarint(field string, limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.truncated(field)
		return 0
	case n < 0:
		d.fail("%s at byte %d: varint overflows 64 bits", field, d.off)
		return 0
	case n != uvarintLen(v):
		d.fail("%s at byte %d: varint is not minimally encoded", field, d.off)
		return 0
	case v > limit:
		d.fail("%s %d at byte %d exceeds %d", field, v, d.off, limit)
		return 0
	}
	d.off += n
	return v
}

func (d *metaDecoder) str(field string, limit int) string {
	n := d.uvarint(field+" length", uint64(limit))
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)-d.off) < n {
		d.truncated(field)
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Sentinel errors of the metadata codec.
var (
	// ErrBadMeta: metadata that cannot be encoded or decoded; the message
	// says which field.
	ErrBadMeta = errors.New("cluster: malformed node metadata")
	// ErrMetaTooLarge: the encoded metadata exceeds MetaMaxSize. It wraps
	// ErrBadMeta too.
	ErrMetaTooLarge = fmt.Errorf("%w: larger than memberlist's metadata limit", ErrBadMeta)
	// ErrMetaVersion: metadata of a version this build cannot read; the
	// member runs a different acpp version. It wraps ErrBadMeta too.
	ErrMetaVersion = fmt.Errorf("%w: unknown metadata version", ErrBadMeta)
)
