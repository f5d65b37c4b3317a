package transport

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"pgregory.net/rapid"

	"github.com/acpp/acpp/proto"
)

// The reflective twins of the types with hand-written codecs (codec.go):
// same fields, same tags, same layout, no registered codec. The
// reflective codec encodes and decodes these; the hand codecs must agree
// with it byte for byte.
type (
	boxR struct {
		Lo [3]uint64 `msgpack:"l"`
		Hi [3]uint64 `msgpack:"h"`
	}
	kargR struct {
		Kind         uint8     `msgpack:"k"`
		Space        uint8     `msgpack:"s,omitempty"`
		Buffer       uint64    `msgpack:"b,omitempty"`
		Mem          uint32    `msgpack:"m,omitempty"`
		Offset       uint64    `msgpack:"o,omitempty"`
		ElemSize     uint32    `msgpack:"e,omitempty"`
		Range        [3]uint64 `msgpack:"r,omitempty"`
		AccessOffset [3]uint64 `msgpack:"ao,omitempty"`
		AccessRange  [3]uint64 `msgpack:"ar,omitempty"`
		ReadOnly     bool      `msgpack:"ro,omitempty"`
		LocalBytes   uint64    `msgpack:"lb,omitempty"`
		Scalar       []byte    `msgpack:"v,omitempty"`
	}
	launchR struct {
		Kernel string    `msgpack:"n"`
		Device string    `msgpack:"dv"`
		Global [3]uint64 `msgpack:"g"`
		Local  [3]uint64 `msgpack:"lc,omitempty"`
		Offset [3]uint64 `msgpack:"o,omitempty"`
		Args   []kargR   `msgpack:"a,omitempty"`
		Replay bool      `msgpack:"rp,omitempty"`
	}
	instrR struct {
		ID       uint64          `msgpack:"i"`
		Kind     proto.InstrKind `msgpack:"k"`
		Deps     []uint64        `msgpack:"d,omitempty"`
		Buffer   uint64          `msgpack:"b,omitempty"`
		Mem      uint32          `msgpack:"m,omitempty"`
		DstMem   uint32          `msgpack:"dm,omitempty"`
		Range    [3]uint64       `msgpack:"r,omitempty"`
		ElemSize uint32          `msgpack:"e,omitempty"`
		Boxes    []boxR          `msgpack:"x,omitempty"`
		Peer     string          `msgpack:"p,omitempty"`
		PeerMem  uint32          `msgpack:"pm,omitempty"`
		PeerBoot uint64          `msgpack:"pb,omitempty"`
		Ticket   uint32          `msgpack:"t,omitempty"`
		Pattern  []byte          `msgpack:"pt,omitempty"`
		Launch   *launchR        `msgpack:"l,omitempty"`
	}
	pageHeaderR struct {
		Job      uint64         `msgpack:"j"`
		Buffer   uint64         `msgpack:"b"`
		Mem      uint32         `msgpack:"m"`
		ElemSize uint32         `msgpack:"e"`
		Boxes    []boxR         `msgpack:"x"`
		Ref      *proto.PageRef `msgpack:"r,omitempty"`
	}
	pageSegmentR struct {
		Transfer uint64      `msgpack:"id"`
		Index    uint32      `msgpack:"i"`
		Count    uint32      `msgpack:"n"`
		Offset   uint64      `msgpack:"o"`
		Length   uint64      `msgpack:"len"`
		Header   pageHeaderR `msgpack:"h"`
	}
	submitR struct {
		Job    uint64   `msgpack:"j"`
		Instrs []instrR `msgpack:"is"`
		Forget uint64   `msgpack:"fg,omitempty"`
	}
)

// The twins list exactly the fields and tags of the real types: a field
// added to a proto type without its hand codec fails here (it would
// otherwise be dropped on the wire).
func TestHandCodecTypesMatchProto(t *testing.T) {
	for _, p := range []struct{ real, twin any }{
		{proto.Box{}, boxR{}}, {proto.KArg{}, kargR{}}, {proto.Launch{}, launchR{}},
		{proto.Instr{}, instrR{}}, {proto.PageHeader{}, pageHeaderR{}}, {proto.PageSegment{}, pageSegmentR{}},
		{proto.Submit{}, submitR{}},
	} {
		rt, tt := reflect.TypeOf(p.real), reflect.TypeOf(p.twin)
		if rt.Size() != tt.Size() || rt.NumField() != tt.NumField() {
			t.Errorf("%v has %d fields (%d bytes), its twin %v %d (%d bytes): update codec.go and the twin", rt, rt.NumField(), rt.Size(), tt, tt.NumField(), tt.Size())
			continue
		}
		for i := range rt.NumField() {
			rf, tf := rt.Field(i), tt.Field(i)
			if rf.Name != tf.Name || rf.Tag != tf.Tag || rf.Offset != tf.Offset || rf.Type.Kind() != tf.Type.Kind() {
				t.Errorf("%v.%s %q differs from its twin's %s %q: update codec.go and the twin", rt, rf.Name, rf.Tag, tf.Name, tf.Tag)
			}
		}
	}
}

func genDims(t *rapid.T, label string) [3]uint64 {
	var d [3]uint64
	for i := range d {
		d[i] = rapid.SampledFrom([]uint64{0, 1, 127, 128, 255, 65536, 1 << 40, ^uint64(0)}).Draw(t, label)
	}
	return d
}

func genBoxes(t *rapid.T, label string) []proto.Box {
	n := rapid.IntRange(-1, 3).Draw(t, label)
	if n < 0 {
		return nil
	}
	out := make([]proto.Box, n)
	for i := range out {
		out[i] = proto.Box{Lo: genDims(t, label+".lo"), Hi: genDims(t, label+".hi")}
	}
	return out
}

func genBytes(t *rapid.T, label string) []byte {
	if rapid.Bool().Draw(t, label+".nil") {
		return nil
	}
	return rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, label)
}

func genU32(t *rapid.T, label string) uint32 {
	return rapid.SampledFrom([]uint32{0, 0, 1, 200, 1 << 20, ^uint32(0)}).Draw(t, label)
}

func genU64(t *rapid.T, label string) uint64 {
	return rapid.SampledFrom([]uint64{0, 0, 1, 300, 1 << 33, ^uint64(0)}).Draw(t, label)
}

func genInstr(t *rapid.T) proto.Instr {
	in := proto.Instr{
		ID: genU64(t, "id"), Kind: proto.InstrKind(rapid.Uint8().Draw(t, "kind")), Buffer: genU64(t, "buf"),
		Mem: genU32(t, "mem"), DstMem: genU32(t, "dm"), Range: genDims(t, "range"), ElemSize: genU32(t, "es"),
		Boxes: genBoxes(t, "boxes"), Peer: rapid.SampledFrom([]string{"", "n1", "node-with-a-long-name"}).Draw(t, "peer"),
		PeerMem: genU32(t, "pm"), PeerBoot: genU64(t, "pb"), Ticket: genU32(t, "ticket"), Pattern: genBytes(t, "pattern"),
	}
	if rapid.Bool().Draw(t, "deps") {
		in.Deps = rapid.SliceOfN(rapid.Uint64(), 0, 5).Draw(t, "depv")
	}
	if rapid.Bool().Draw(t, "launch") {
		l := &proto.Launch{Kernel: rapid.StringN(0, 12, -1).Draw(t, "kernel"), Device: "cuda:1",
			Global: genDims(t, "g"), Local: genDims(t, "l"), Offset: genDims(t, "o"), Replay: rapid.Bool().Draw(t, "replay")}
		for range rapid.IntRange(0, 3).Draw(t, "nargs") {
			l.Args = append(l.Args, proto.KArg{
				Kind: rapid.Uint8().Draw(t, "ak"), Space: rapid.Uint8().Draw(t, "as"), Buffer: genU64(t, "ab"), Mem: genU32(t, "am"),
				Offset: genU64(t, "ao"), ElemSize: genU32(t, "ae"), Range: genDims(t, "ar"), AccessOffset: genDims(t, "aao"),
				AccessRange: genDims(t, "aar"), ReadOnly: rapid.Bool().Draw(t, "aro"), LocalBytes: genU64(t, "alb"), Scalar: genBytes(t, "av"),
			})
		}
		in.Launch = l
	}
	return in
}

func genSegment(t *rapid.T) proto.PageSegment {
	s := proto.PageSegment{Transfer: genU64(t, "tr"), Index: genU32(t, "idx"), Count: genU32(t, "cnt"), Offset: genU64(t, "off"), Length: genU64(t, "len"),
		Header: proto.PageHeader{Job: genU64(t, "job"), Buffer: genU64(t, "hb"), Mem: genU32(t, "hm"), ElemSize: genU32(t, "he"), Boxes: genBoxes(t, "hx")}}
	if rapid.Bool().Draw(t, "ref") {
		s.Header.Ref = &proto.PageRef{Host: "boot-1", PID: rapid.IntRange(-5, 1<<20).Draw(t, "pid"), Handle: genBytes(t, "handle"), Bytes: genU64(t, "bytes"), Alloc: genU64(t, "alloc")}
	}
	return s
}

func marshal(t interface{ Fatalf(string, ...any) }, v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true) // as encodeFrame
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	return buf.Bytes()
}

// TestHandCodecsMatchReflection: for random submits and page segments the
// hand codecs write the reflective encoder's bytes, read them back to the
// same value, and the reflective decoder reads the hand codecs' bytes to
// the same value.
func TestHandCodecsMatchReflection(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sub := proto.Submit{Job: genU64(t, "job"), Forget: genU64(t, "forget")}
		for range rapid.IntRange(0, 4).Draw(t, "n") {
			sub.Instrs = append(sub.Instrs, genInstr(t))
		}
		seg := genSegment(t)
		for _, c := range []struct {
			real, twin any        // pointers to the same memory
			newReal    func() any // a fresh value to decode into
			newTwin    func() any
		}{
			{&sub, (*submitR)(unsafe.Pointer(&sub)), func() any { return new(proto.Submit) }, func() any { return new(submitR) }},
			{&seg, (*pageSegmentR)(unsafe.Pointer(&seg)), func() any { return new(proto.PageSegment) }, func() any { return new(pageSegmentR) }},
		} {
			hand, refl := marshal(t, c.real), marshal(t, c.twin)
			if !bytes.Equal(hand, refl) {
				t.Fatalf("%T: hand codec wrote\n%x\nreflection\n%x", c.real, hand, refl)
			}
			back := c.newReal()
			if err := unmarshalExact(refl, back); err != nil {
				t.Fatalf("%T: hand decoder: %v", c.real, err)
			}
			twin := c.newTwin()
			if err := unmarshalExact(hand, twin); err != nil {
				t.Fatalf("%T: reflective decoder: %v", c.twin, err)
			}
			// Both decoded values must encode to the same bytes again (nil
			// and empty slices that omitempty drops compare equal this way).
			if b := marshal(t, back); !bytes.Equal(b, refl) {
				t.Fatalf("%T: decoded by hand and encoded again:\n%x\nwant\n%x", c.real, b, refl)
			}
			if b := marshal(t, twin); !bytes.Equal(b, refl) {
				t.Fatalf("%T: decoded by reflection and encoded again:\n%x\nwant\n%x", c.twin, b, refl)
			}
		}
	})
}

// Fields come in any order and unknown ones are skipped, as with the
// reflective decoder (newer peers may add fields).
func TestHandDecoderSkipsUnknownFields(t *testing.T) {
	raw := marshal(t, map[string]any{"zz-unknown-field-name": []any{1, "x", map[string]any{"a": 1}}, "k": 3, "i": 42,
		"x": []any{map[string]any{"h": []uint64{1, 2, 3}, "q": true}}, "p": "n2"})
	var in proto.Instr
	if err := unmarshalExact(raw, &in); err != nil {
		t.Fatal(err)
	}
	want := proto.Instr{ID: 42, Kind: 3, Peer: "n2", Boxes: []proto.Box{{Hi: [3]uint64{1, 2, 3}}}}
	if !reflect.DeepEqual(in, want) {
		t.Errorf("decoded %+v, want %+v", in, want)
	}
}

// The hand decoders refuse a key given twice in one map, and more
// instructions, dependencies, boxes or kernel arguments than proto allows,
// before allocating for them; within the limits they decode.
func TestHandDecoderRefusesDuplicatesAndExcess(t *testing.T) {
	dup := marshal(t, map[string]any{"i": 1}) // then a second "i" by hand
	dup = append([]byte{0x82}, append(dup[1:], 0xa1, 'i', 0x02)...)
	if err := unmarshalExact(dup, new(proto.Instr)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("an instruction with key i twice: %v, want refused", err)
	}
	over := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = map[string]any{}
		}
		return out
	}
	for _, c := range []struct {
		what string
		v    any
		into any
		n    int
	}{
		{"instructions", func(n int) any { return map[string]any{"j": 1, "is": over(n)} }, new(proto.Submit), proto.MaxBatch},
		{"dependencies", func(n int) any { return map[string]any{"d": make([]uint64, n)} }, new(proto.Instr), proto.MaxDeps},
		{"boxes", func(n int) any { return map[string]any{"x": over(n)} }, new(proto.Instr), proto.MaxBoxes},
		{"kernel arguments", func(n int) any { return map[string]any{"n": "k", "a": over(n)} }, new(proto.Launch), proto.MaxKernelArgs},
	} {
		mk := c.v.(func(int) any)
		if err := unmarshalExact(marshal(t, mk(c.n)), c.into); err != nil {
			t.Errorf("%d %s (the most allowed): %v", c.n, c.what, err)
		}
		if err := unmarshalExact(marshal(t, mk(c.n+1)), c.into); err == nil || !strings.Contains(err.Error(), c.what) {
			t.Errorf("%d %s: %v, want refused naming them", c.n+1, c.what, err)
		}
	}
}

// FuzzHandCodecs: arbitrary bytes never crash the hand decoders, and where
// both the hand and the reflective decoder accept a submit or a page
// segment, they read the same value.
func FuzzHandCodecs(f *testing.F) {
	seg := proto.PageSegment{Transfer: 9, Count: 1, Length: 4, Header: proto.PageHeader{Job: 3, Buffer: 17, ElemSize: 4, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 1}}}}}
	sub := proto.Submit{Job: 1, Instrs: []proto.Instr{{ID: 1, Kind: proto.InstrLaunch, Deps: []uint64{0}, Launch: &proto.Launch{Kernel: "fill_f32", Device: "cpu:0",
		Global: [3]uint64{1, 1, 1}, Args: []proto.KArg{{Kind: 2, Buffer: 1, ElemSize: 4}, {Kind: 4, Scalar: []byte{0, 0, 128, 63}}}}}, {ID: 2, Kind: proto.InstrSend, Boxes: []proto.Box{{}}, Peer: "n1", PeerBoot: 0x9e3779b97f4a7c15}}}
	f.Add(marshal(f, &seg))
	f.Add(marshal(f, &sub))
	// A Launch given twice: reflection merged the two, the hand decoder
	// refuses it (found by review).
	f.Add([]byte{0x81, 0xa2, 0x69, 0x73, 0x91, 0x82, 0xa1, 0x6c, 0x82, 0xa1, 0x6e, 0xa1, 0x61, 0xa2, 0x64, 0x76, 0xa1, 0x78, 0xa1, 0x6c, 0x81, 0xa1, 0x6e, 0xa1, 0x62})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := scanMsgpack(b); err != nil {
			return // decodeFrame refuses these before any decoder runs
		}
		var s proto.Submit
		var sr submitR
		if err := unmarshalExact(b, &s); err == nil {
			if err := unmarshalExact(b, &sr); err == nil && !bytes.Equal(marshal(t, &s), marshal(t, &sr)) {
				t.Fatalf("submit: hand and reflective decoders disagree on %x", b)
			}
		}
		var p proto.PageSegment
		var pr pageSegmentR
		if err := unmarshalExact(b, &p); err == nil {
			if err := unmarshalExact(b, &pr); err == nil && !bytes.Equal(marshal(t, &p), marshal(t, &pr)) {
				t.Fatalf("page segment: hand and reflective decoders disagree on %x", b)
			}
		}
	})
}
