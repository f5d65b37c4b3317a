package transport

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/acpp/acpp/proto"
)

// Hand-written msgpack codecs for the messages of every hop: instructions
// (proto.Instr, with Launch, KArg and Box, and the decoding of a Submit
// batch) and page segments (proto.PageSegment, PageHeader). The codec's
// reflection cost about 2 µs an instruction to decode and boxed every
// field to test omitempty; on a chain of small command groups between two
// nodes encoding and decoding took 12 % of the CPU. These write the same
// bytes as the reflective encoder (fields in struct order, omitempty as
// msgpack/v5 does it: a [3]uint64 is never empty) and read what it reads,
// including fields in any order and unknown keys (skipped). They are
// stricter in two ways, which no encoder of ours comes near: a key given
// twice in one map is refused (reflection merged the two values), and so
// are more instructions, dependencies, boxes or kernel arguments than
// proto allows, before anything is allocated for them (the frame's
// pre-scan bounds a length by the frame's bytes, and an empty map of one
// byte decodes to a Box of 48). TestHandCodecsMatchReflection and
// FuzzHandCodecs hold them to that.
func init() {
	msgpack.Register(proto.Box{}, encodeBoxValue, decodeBoxValue)
	msgpack.Register(proto.KArg{}, encodeKArgValue, decodeKArgValue)
	msgpack.Register(proto.Launch{}, encodeLaunchValue, decodeLaunchValue)
	msgpack.Register(proto.Instr{}, encodeInstrValue, decodeInstrValue)
	msgpack.Register(proto.PageHeader{}, encodePageHeaderValue, decodePageHeaderValue)
	msgpack.Register(proto.PageSegment{}, encodePageSegmentValue, decodePageSegmentValue)
	msgpack.Register(proto.Submit{}, nil, decodeSubmitValue) // encoded by reflection
	for _, v := range []any{proto.Box{}, proto.KArg{}, proto.Launch{}, proto.Instr{}, proto.PageHeader{}, proto.PageSegment{}, proto.Submit{}} {
		handCoded[reflect.TypeOf(v)] = true
	}
}

// ---- encoding ----

// addr is a pointer to v's value: v itself when addressable (a field or
// an element), else a copy (a struct passed by value).
func addr(v reflect.Value) reflect.Value {
	if v.CanAddr() {
		return v.Addr()
	}
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return p
}

// fieldWriter writes a struct as a msgpack map of its present fields.
type fieldWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *fieldWriter) key(k string) bool {
	if w.err == nil {
		w.err = w.e.EncodeString(k)
	}
	return w.err == nil
}

func (w *fieldWriter) uint(k string, v uint64) {
	if w.key(k) {
		w.err = w.e.EncodeUint(v)
	}
}

func (w *fieldWriter) str(k, v string) {
	if w.key(k) {
		w.err = w.e.EncodeString(v)
	}
}

func (w *fieldWriter) bytes(k string, v []byte) {
	if w.key(k) {
		w.err = w.e.EncodeBytes(v)
	}
}

func (w *fieldWriter) bool(k string, v bool) {
	if w.key(k) {
		w.err = w.e.EncodeBool(v)
	}
}

func (w *fieldWriter) dims(k string, v *[3]uint64) {
	if w.key(k) {
		w.err = encodeDims(w.e, v)
	}
}

func (w *fieldWriter) value(k string, v any) {
	if w.key(k) {
		w.err = w.e.Encode(v)
	}
}

func encodeDims(e *msgpack.Encoder, v *[3]uint64) error {
	if err := e.EncodeArrayLen(3); err != nil {
		return err
	}
	for _, x := range v {
		if err := e.EncodeUint(x); err != nil {
			return err
		}
	}
	return nil
}

func count(n int, present ...bool) int {
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}

func encodeBoxValue(e *msgpack.Encoder, v reflect.Value) error {
	b := addr(v).Interface().(*proto.Box)
	return encodeBox(e, b)
}

func encodeBox(e *msgpack.Encoder, b *proto.Box) error {
	w := fieldWriter{e: e}
	w.err = e.EncodeMapLen(2)
	w.dims("l", &b.Lo)
	w.dims("h", &b.Hi)
	return w.err
}

func encodeBoxes(w *fieldWriter, k string, boxes []proto.Box) {
	if !w.key(k) {
		return
	}
	if boxes == nil {
		w.err = w.e.EncodeNil()
		return
	}
	if w.err = w.e.EncodeArrayLen(len(boxes)); w.err != nil {
		return
	}
	for i := range boxes {
		if w.err = encodeBox(w.e, &boxes[i]); w.err != nil {
			return
		}
	}
}

func encodeKArgValue(e *msgpack.Encoder, v reflect.Value) error {
	return encodeKArg(e, addr(v).Interface().(*proto.KArg))
}

func encodeKArg(e *msgpack.Encoder, a *proto.KArg) error {
	w := fieldWriter{e: e}
	// k, r, ao, ar always (an array is never empty to msgpack's omitempty).
	w.err = e.EncodeMapLen(count(4, a.Space != 0, a.Buffer != 0, a.Mem != 0, a.Offset != 0, a.ElemSize != 0,
		a.ReadOnly, a.LocalBytes != 0, len(a.Scalar) > 0))
	w.uint("k", uint64(a.Kind))
	if a.Space != 0 {
		w.uint("s", uint64(a.Space))
	}
	if a.Buffer != 0 {
		w.uint("b", a.Buffer)
	}
	if a.Mem != 0 {
		w.uint("m", uint64(a.Mem))
	}
	if a.Offset != 0 {
		w.uint("o", a.Offset)
	}
	if a.ElemSize != 0 {
		w.uint("e", uint64(a.ElemSize))
	}
	w.dims("r", &a.Range)
	w.dims("ao", &a.AccessOffset)
	w.dims("ar", &a.AccessRange)
	if a.ReadOnly {
		w.bool("ro", true)
	}
	if a.LocalBytes != 0 {
		w.uint("lb", a.LocalBytes)
	}
	if len(a.Scalar) > 0 {
		w.bytes("v", a.Scalar)
	}
	return w.err
}

func encodeLaunchValue(e *msgpack.Encoder, v reflect.Value) error {
	return encodeLaunch(e, addr(v).Interface().(*proto.Launch))
}

func encodeLaunch(e *msgpack.Encoder, l *proto.Launch) error {
	w := fieldWriter{e: e}
	// n, dv, g, lc, o always.
	w.err = e.EncodeMapLen(count(5, len(l.Args) > 0, l.Replay))
	w.str("n", l.Kernel)
	w.str("dv", l.Device)
	w.dims("g", &l.Global)
	w.dims("lc", &l.Local)
	w.dims("o", &l.Offset)
	if len(l.Args) > 0 && w.key("a") {
		if w.err = e.EncodeArrayLen(len(l.Args)); w.err == nil {
			for i := range l.Args {
				if w.err = encodeKArg(e, &l.Args[i]); w.err != nil {
					break
				}
			}
		}
	}
	if l.Replay {
		w.bool("rp", true)
	}
	return w.err
}

func encodeInstrValue(e *msgpack.Encoder, v reflect.Value) error {
	in := addr(v).Interface().(*proto.Instr)
	w := fieldWriter{e: e}
	// i, k and r always.
	w.err = e.EncodeMapLen(count(3, len(in.Deps) > 0, in.Buffer != 0, in.Mem != 0, in.DstMem != 0, in.ElemSize != 0,
		len(in.Boxes) > 0, in.Peer != "", in.PeerMem != 0, in.PeerBoot != 0, in.Ticket != 0, len(in.Pattern) > 0, in.Launch != nil))
	w.uint("i", in.ID)
	w.uint("k", uint64(in.Kind))
	if len(in.Deps) > 0 && w.key("d") {
		if w.err = e.EncodeArrayLen(len(in.Deps)); w.err == nil {
			for _, d := range in.Deps {
				if w.err = e.EncodeUint(d); w.err != nil {
					break
				}
			}
		}
	}
	if in.Buffer != 0 {
		w.uint("b", in.Buffer)
	}
	if in.Mem != 0 {
		w.uint("m", uint64(in.Mem))
	}
	if in.DstMem != 0 {
		w.uint("dm", uint64(in.DstMem))
	}
	w.dims("r", &in.Range)
	if in.ElemSize != 0 {
		w.uint("e", uint64(in.ElemSize))
	}
	if len(in.Boxes) > 0 {
		encodeBoxes(&w, "x", in.Boxes)
	}
	if in.Peer != "" {
		w.str("p", in.Peer)
	}
	if in.PeerMem != 0 {
		w.uint("pm", uint64(in.PeerMem))
	}
	if in.PeerBoot != 0 {
		w.uint("pb", in.PeerBoot)
	}
	if in.Ticket != 0 {
		w.uint("t", uint64(in.Ticket))
	}
	if len(in.Pattern) > 0 {
		w.bytes("pt", in.Pattern)
	}
	if in.Launch != nil && w.key("l") {
		w.err = encodeLaunch(e, in.Launch)
	}
	return w.err
}

func encodePageHeaderValue(e *msgpack.Encoder, v reflect.Value) error {
	return encodePageHeader(e, addr(v).Interface().(*proto.PageHeader))
}

func encodePageHeader(e *msgpack.Encoder, h *proto.PageHeader) error {
	w := fieldWriter{e: e}
	w.err = e.EncodeMapLen(count(5, h.Ref != nil))
	w.uint("j", h.Job)
	w.uint("b", h.Buffer)
	w.uint("m", uint64(h.Mem))
	w.uint("e", uint64(h.ElemSize))
	encodeBoxes(&w, "x", h.Boxes)
	if h.Ref != nil {
		w.value("r", h.Ref)
	}
	return w.err
}

func encodePageSegmentValue(e *msgpack.Encoder, v reflect.Value) error {
	s := addr(v).Interface().(*proto.PageSegment)
	w := fieldWriter{e: e}
	w.err = e.EncodeMapLen(6)
	w.uint("id", s.Transfer)
	w.uint("i", uint64(s.Index))
	w.uint("n", uint64(s.Count))
	w.uint("o", s.Offset)
	w.uint("len", s.Length)
	if w.key("h") {
		w.err = encodePageHeader(e, &s.Header)
	}
	return w.err
}

// ---- decoding ----

// decodeFields reads a msgpack map (nil: no fields) and calls field for
// each key, which decodes the value that follows (d.Skip for an unknown
// key). Keys longer than any of ours come as "".
func decodeFields(d *msgpack.Decoder, what string, field func(key string) error) error {
	n, err := d.DecodeMapLen()
	if err != nil {
		return fmt.Errorf("msgpack: decoding %s: %w", what, err)
	}
	var buf [16]byte
	var seen [24]string // keys so far: one given twice is refused
	nseen := 0
	for range n {
		kn, err := d.DecodeBytesLen()
		if err != nil {
			return err
		}
		if kn < 0 {
			return fmt.Errorf("msgpack: decoding %s: nil map key", what)
		}
		key := ""
		if kn > len(buf) {
			err = d.ReadFull(make([]byte, kn))
		} else if err = d.ReadFull(buf[:kn]); err == nil {
			key = string(buf[:kn])
		}
		if err != nil {
			return err
		}
		if key != "" {
			for _, k := range seen[:nseen] {
				if k == key {
					return fmt.Errorf("msgpack: decoding %s: key %q given twice", what, key)
				}
			}
			if nseen < len(seen) {
				seen[nseen] = key
				nseen++
			}
		}
		if err := field(key); err != nil {
			return err
		}
	}
	return nil
}

// decodeLen reads an array's length (-1 for nil) and refuses more than
// most elements: the frame's pre-scan bounds lengths by the frame's bytes,
// and one byte of input can become dozens of bytes of a decoded element.
func decodeLen(d *msgpack.Decoder, what string, most int) (int, error) {
	n, err := d.DecodeArrayLen()
	if err == nil && n > most {
		err = fmt.Errorf("msgpack: %d %s, at most %d", n, what, most)
	}
	return n, err
}

func decodeDims(d *msgpack.Decoder, v *[3]uint64) error {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n > 3 {
		return fmt.Errorf("msgpack: [3]uint64 len is 3, but msgpack has %d elements", n)
	}
	for i := range n {
		if v[i], err = d.DecodeUint64(); err != nil {
			return err
		}
	}
	return nil
}

// budget is what a hand decoder may still allocate for the slices and
// structs of one message: the per-field caps (MaxDeps, MaxBoxes, ...)
// bound one instruction, but a batch of MaxBatch instructions, each with
// as many dependencies, boxes and kernel arguments as allowed, asked for
// 51 bytes per byte of input (485 MB for a 16 MiB frame).
type budget struct{ left int }

func newBudget() *budget { return &budget{left: MaxDecodedBytes} }

// fieldsOverhead is what decodeFields costs beyond the value it fills
// (its closure), charged with each Box and KArg.
const fieldsOverhead = 32

// take admits n elements of size bytes each, before they are allocated.
func (b *budget) take(n, size int, what string) error {
	if n <= 0 {
		return nil
	}
	if n > b.left/size {
		return fmt.Errorf("%w: %d %s would take the message past %d decoded bytes; split it", ErrFrameTooLarge, n, what, MaxDecodedBytes)
	}
	b.left -= n * size
	return nil
}

func decodeUints(d *msgpack.Decoder, what string, most int, bud *budget) ([]uint64, error) {
	n, err := decodeLen(d, what, most)
	if err != nil || n < 0 {
		return nil, err
	}
	if err := bud.take(n, 8, what); err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		if out[i], err = d.DecodeUint64(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeBoxes(d *msgpack.Decoder, bud *budget) ([]proto.Box, error) {
	n, err := decodeLen(d, "boxes", proto.MaxBoxes)
	if err != nil || n < 0 {
		return nil, err
	}
	if err := bud.take(n, int(unsafe.Sizeof(proto.Box{}))+fieldsOverhead, "boxes"); err != nil {
		return nil, err
	}
	out := make([]proto.Box, n)
	for i := range out {
		if err := decodeBox(d, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeBoxValue(d *msgpack.Decoder, v reflect.Value) error {
	return decodeBox(d, addr(v).Interface().(*proto.Box))
}

func decodeBox(d *msgpack.Decoder, b *proto.Box) error {
	*b = proto.Box{}
	return decodeFields(d, "Box", func(k string) (err error) {
		switch k {
		case "l":
			err = decodeDims(d, &b.Lo)
		case "h":
			err = decodeDims(d, &b.Hi)
		default:
			err = d.Skip()
		}
		return err
	})
}

func decodeKArgValue(d *msgpack.Decoder, v reflect.Value) error {
	return decodeKArg(d, addr(v).Interface().(*proto.KArg))
}

func decodeKArg(d *msgpack.Decoder, a *proto.KArg) error {
	*a = proto.KArg{}
	return decodeFields(d, "KArg", func(k string) (err error) {
		var u uint64
		switch k {
		case "k":
			u, err = d.DecodeUint64()
			a.Kind = uint8(u)
		case "s":
			u, err = d.DecodeUint64()
			a.Space = uint8(u)
		case "b":
			a.Buffer, err = d.DecodeUint64()
		case "m":
			u, err = d.DecodeUint64()
			a.Mem = uint32(u)
		case "o":
			a.Offset, err = d.DecodeUint64()
		case "e":
			u, err = d.DecodeUint64()
			a.ElemSize = uint32(u)
		case "r":
			err = decodeDims(d, &a.Range)
		case "ao":
			err = decodeDims(d, &a.AccessOffset)
		case "ar":
			err = decodeDims(d, &a.AccessRange)
		case "ro":
			a.ReadOnly, err = d.DecodeBool()
		case "lb":
			a.LocalBytes, err = d.DecodeUint64()
		case "v":
			a.Scalar, err = d.DecodeBytes()
		default:
			err = d.Skip()
		}
		return err
	})
}

func decodeLaunchValue(d *msgpack.Decoder, v reflect.Value) error {
	return decodeLaunch(d, addr(v).Interface().(*proto.Launch), newBudget())
}

func decodeLaunch(d *msgpack.Decoder, l *proto.Launch, bud *budget) error {
	*l = proto.Launch{}
	return decodeFields(d, "Launch", func(k string) (err error) {
		switch k {
		case "n":
			l.Kernel, err = d.DecodeString()
		case "dv":
			l.Device, err = d.DecodeString()
		case "g":
			err = decodeDims(d, &l.Global)
		case "lc":
			err = decodeDims(d, &l.Local)
		case "o":
			err = decodeDims(d, &l.Offset)
		case "a":
			var m int
			if m, err = decodeLen(d, "kernel arguments", proto.MaxKernelArgs); err != nil || m < 0 {
				l.Args = nil
				break
			}
			if err = bud.take(m, int(unsafe.Sizeof(proto.KArg{}))+fieldsOverhead, "kernel arguments"); err != nil {
				break
			}
			l.Args = make([]proto.KArg, m)
			for j := range l.Args {
				if err = decodeKArg(d, &l.Args[j]); err != nil {
					break
				}
			}
		case "rp":
			l.Replay, err = d.DecodeBool()
		default:
			err = d.Skip()
		}
		return err
	})
}

func decodeInstrValue(d *msgpack.Decoder, v reflect.Value) error {
	return decodeInstr(d, addr(v).Interface().(*proto.Instr), newBudget())
}

func decodeInstr(d *msgpack.Decoder, in *proto.Instr, bud *budget) error {
	*in = proto.Instr{}
	return decodeFields(d, "Instr", func(k string) (err error) {
		var u uint64
		switch k {
		case "i":
			in.ID, err = d.DecodeUint64()
		case "k":
			u, err = d.DecodeUint64()
			in.Kind = proto.InstrKind(u)
		case "d":
			in.Deps, err = decodeUints(d, "dependencies", proto.MaxDeps, bud)
		case "b":
			in.Buffer, err = d.DecodeUint64()
		case "m":
			u, err = d.DecodeUint64()
			in.Mem = uint32(u)
		case "dm":
			u, err = d.DecodeUint64()
			in.DstMem = uint32(u)
		case "r":
			err = decodeDims(d, &in.Range)
		case "e":
			u, err = d.DecodeUint64()
			in.ElemSize = uint32(u)
		case "x":
			in.Boxes, err = decodeBoxes(d, bud)
		case "p":
			in.Peer, err = d.DecodeString()
		case "pm":
			u, err = d.DecodeUint64()
			in.PeerMem = uint32(u)
		case "pb":
			in.PeerBoot, err = d.DecodeUint64()
		case "t":
			u, err = d.DecodeUint64()
			in.Ticket = uint32(u)
		case "pt":
			in.Pattern, err = d.DecodeBytes()
		case "l":
			in.Launch, err = decodeLaunchPtr(d, bud)
		default:
			err = d.Skip()
		}
		return err
	})
}

// decodeLaunchPtr reads a *Launch: nil for a msgpack nil.
func decodeLaunchPtr(d *msgpack.Decoder, bud *budget) (*proto.Launch, error) {
	if c, err := d.PeekCode(); err != nil {
		return nil, err
	} else if c == 0xc0 { // nil
		return nil, d.DecodeNil()
	}
	if err := bud.take(1, int(unsafe.Sizeof(proto.Launch{})), "launches"); err != nil {
		return nil, err
	}
	l := new(proto.Launch)
	return l, decodeLaunch(d, l, bud)
}

func decodePageHeaderValue(d *msgpack.Decoder, v reflect.Value) error {
	return decodePageHeader(d, addr(v).Interface().(*proto.PageHeader))
}

func decodePageHeader(d *msgpack.Decoder, h *proto.PageHeader) error {
	*h = proto.PageHeader{}
	return decodeFields(d, "PageHeader", func(k string) (err error) {
		var u uint64
		switch k {
		case "j":
			h.Job, err = d.DecodeUint64()
		case "b":
			h.Buffer, err = d.DecodeUint64()
		case "m":
			u, err = d.DecodeUint64()
			h.Mem = uint32(u)
		case "e":
			u, err = d.DecodeUint64()
			h.ElemSize = uint32(u)
		case "x":
			h.Boxes, err = decodeBoxes(d, newBudget())
		case "r":
			h.Ref = nil
			err = d.Decode(&h.Ref)
		default:
			err = d.Skip()
		}
		return err
	})
}

func decodePageSegmentValue(d *msgpack.Decoder, v reflect.Value) error {
	s := addr(v).Interface().(*proto.PageSegment)
	*s = proto.PageSegment{}
	return decodeFields(d, "PageSegment", func(k string) (err error) {
		var u uint64
		switch k {
		case "id":
			s.Transfer, err = d.DecodeUint64()
		case "i":
			u, err = d.DecodeUint64()
			s.Index = uint32(u)
		case "n":
			u, err = d.DecodeUint64()
			s.Count = uint32(u)
		case "o":
			s.Offset, err = d.DecodeUint64()
		case "len":
			s.Length, err = d.DecodeUint64()
		case "h":
			err = decodePageHeader(d, &s.Header)
		default:
			err = d.Skip()
		}
		return err
	})
}

func decodeSubmitValue(d *msgpack.Decoder, v reflect.Value) error {
	sub := addr(v).Interface().(*proto.Submit)
	*sub = proto.Submit{}
	bud := newBudget() // one for the whole batch
	return decodeFields(d, "Submit", func(k string) (err error) {
		switch k {
		case "j":
			sub.Job, err = d.DecodeUint64()
		case "is":
			var n int
			if n, err = decodeLen(d, "instructions", proto.MaxBatch); err != nil || n < 0 {
				break
			}
			if err = bud.take(n, int(unsafe.Sizeof(proto.Instr{})), "instructions"); err != nil {
				break
			}
			sub.Instrs = make([]proto.Instr, n)
			for i := range sub.Instrs {
				if err = decodeInstr(d, &sub.Instrs[i], bud); err != nil {
					break
				}
			}
		case "fg":
			sub.Forget, err = d.DecodeUint64()
		default:
			err = d.Skip()
		}
		return err
	})
}
