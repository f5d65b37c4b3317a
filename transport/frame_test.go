package transport

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/acpp/acpp/proto"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files and fuzz seed corpora in testdata")

// wireSamples are the messages the golden file and the fuzz seeds hold.
func wireSamples() []struct {
	name string
	env  proto.Envelope
	body any
} {
	seg := &proto.PageSegment{Transfer: 9, Index: 1, Count: 2, Offset: 64, Length: 64, Header: proto.PageHeader{
		Job: 3, Buffer: 17, Mem: 1, ElemSize: 4, Boxes: []proto.Box{{Lo: [3]uint64{0, 0, 0}, Hi: [3]uint64{1, 4, 8}}},
	}}
	return []struct {
		name string
		env  proto.Envelope
		body any
	}{
		{"hello", proto.Envelope{Type: proto.MsgHello}, &proto.Hello{Version: proto.Version, Cluster: "lab", Name: "n1", Role: proto.RoleNode, Software: "acpp", MaxFrame: 16 << 20}},
		{"error", proto.Envelope{Type: proto.MsgError}, &proto.ErrorReply{Code: proto.CodeRefused, Message: "no buffer 17"}},
		{"ping", proto.Envelope{Type: proto.MsgPing, Timeout: 5e9}, nil},
		{"pages", proto.Envelope{Type: proto.MsgPages, Timeout: 1e9}, seg},
		{"app", proto.Envelope{Type: proto.MsgFirstApp}, map[string]any{"k": []any{1, "x", true}}},
		{"abort", proto.Envelope{Type: proto.MsgPagesAbort}, &proto.PageAbort{Transfer: 9, Reason: "sender gave up"}},
		{"session", proto.Envelope{Type: proto.MsgFirstApp + 5, Timeout: 1e9, Session: true}, map[string]any{"j": 3}}, // one key: a map's order is random
	}
}

// TestWireGolden pins the encoding of each transport message: a change
// here is a protocol change (bump proto.Version unless only fields were
// added). Regenerate with go test ./transport -run TestWireGolden -rewrite.
func TestWireGolden(t *testing.T) {
	var out strings.Builder
	for _, s := range wireSamples() {
		f, err := encodeFrame(s.env, s.body, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "%s %s\n", s.name, hex.EncodeToString(f.buf.Bytes()))
	}
	path := filepath.Join("testdata", "wire.golden")
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if out.String() != string(want) {
		t.Errorf("wire encoding changed:\n got:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestWriteFuzzSeeds writes the seed corpora under testdata/fuzz when run
// with -rewrite; without it, it checks they exist.
func TestWriteFuzzSeeds(t *testing.T) {
	seeds := map[string][][]byte{}
	for _, s := range wireSamples() {
		f, _ := encodeFrame(s.env, s.body, 1<<20)
		frame := bytes.Clone(f.buf.Bytes())
		seeds["FuzzFrame"] = append(seeds["FuzzFrame"], frame)
		_, body, err := decodeFrame(frame[frameHeaderLen:])
		if err != nil {
			t.Fatal(err)
		}
		switch s.name {
		case "hello":
			seeds["FuzzHello"] = append(seeds["FuzzHello"], body)
		case "pages":
			seeds["FuzzPageSegment"] = append(seeds["FuzzPageSegment"], body)
		}
	}
	seeds["FuzzFrame"] = append(seeds["FuzzFrame"], []byte{0, 0, 0, 2, 0x91, 0x91}, []byte{0x7f, 0xff, 0xff, 0xff})
	seeds["FuzzPageSegment"] = append(seeds["FuzzPageSegment"], []byte{0x81, 0xa1, 'h', 0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff})
	for target, list := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		for i, b := range list {
			path := filepath.Join(dir, fmt.Sprintf("seed-%d", i))
			if *rewrite {
				os.MkdirAll(dir, 0o755)
				if err := os.WriteFile(path, fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if _, err := os.Stat(path); err != nil {
				t.Errorf("seed %s missing (run with -rewrite): %v", path, err)
			}
		}
	}
}

func TestScanMsgpack(t *testing.T) {
	nested := bytes.Repeat([]byte{0x91}, maxDepth+1)
	nested = append(nested, 0x01)
	tests := []struct {
		name string
		in   []byte
		n    int
		ok   bool
	}{
		{"int", []byte{0x05, 0xff}, 1, true},
		{"fixmap", []byte{0x81, 0xa1, 'a', 0x02}, 4, true},
		{"str8", []byte{0xd9, 2, 'h', 'i'}, 4, true},
		{"ext8", []byte{0xc7, 1, 5, 0xaa}, 4, true},
		{"fixext4", []byte{0xd6, 1, 0, 0, 0, 0}, 6, true},
		{"float64", []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, 9, true},
		{"empty", nil, 0, false},
		{"truncated str", []byte{0xd9, 5, 'h'}, 0, false},
		{"huge array", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, 0, false},
		{"huge map", []byte{0xdf, 0x00, 0x00, 0x00, 0x02, 0x01, 0x01, 0x01}, 0, false},
		{"never used", []byte{0xc1}, 0, false},
		{"too deep", nested, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := scanMsgpack(tt.in)
			if (err == nil) != tt.ok || (tt.ok && n != tt.n) {
				t.Errorf("scanMsgpack(%x) = %d, %v; want %d, ok %v", tt.in, n, err, tt.n, tt.ok)
			}
			if err != nil && !errors.Is(err, proto.ErrMalformed) {
				t.Errorf("scanMsgpack error %v does not wrap proto.ErrMalformed", err)
			}
		})
	}
}

func TestReadFrameLimits(t *testing.T) {
	f, _ := encodeFrame(proto.Envelope{Type: proto.MsgPing}, nil, 1<<20)
	good := bytes.Clone(f.buf.Bytes())
	tests := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"ok", good, 1 << 20, nil},
		{"over limit", []byte{0x40, 0, 0, 0}, 1 << 20, ErrFrameTooLarge},
		{"cut short", good[:len(good)-1], 1 << 20, ErrMalformed},
		{"trailing bytes", append([]byte{0, 0, 0, byte(len(good) - 3)}, append(good[4:], 0x00)...), 1 << 20, ErrMalformed},
		{"no type", []byte{0, 0, 0, 2, 0x80, 0xc0}, 1 << 20, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readFrame(bytes.NewReader(tt.in), tt.max)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("readFrame = %v, want %v", err, tt.want)
			}
		})
	}
}

// FuzzFrame: arbitrary bytes read as a frame never crash or over-allocate;
// what decodes re-encodes to a frame that decodes the same.
func FuzzFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		env, body, err := readFrame(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		// Scanned bodies may still not decode (a map with array keys into
		// any); what matters is that decoding fails cleanly.
		var v any
		_ = decodeBody(body, &v)
		g, err := encodeFrame(env, msgpack.RawMessage(body), 1<<16)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		env2, body2, err := readFrame(bytes.NewReader(g.buf.Bytes()), 1<<16)
		if err != nil || env2 != env || !bytes.Equal(body2, body) {
			t.Fatalf("round trip: %+v %x %v; want %+v %x", env2, body2, err, env, body)
		}
	})
}

func roundTrip[T any](t *testing.T, v *T) {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	w := new(T)
	if err := decodeBody(b, w); err != nil || !reflect.DeepEqual(v, w) {
		t.Fatalf("round trip: %+v, %v; want %+v", w, err, v)
	}
}

// FuzzHello: the handshake decoder rejects junk without crashing.
func FuzzHello(f *testing.F) {
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := scanMsgpack(b); err != nil {
			return
		}
		var h proto.Hello
		if decodeBody(b, &h) != nil {
			return
		}
		roundTrip(t, &h)
	})
}

// FuzzPageSegment: the page header decoder and its validation reject
// junk without crashing; what validates re-encodes to the same segment.
func FuzzPageSegment(f *testing.F) {
	f.Add([]byte{0x80})
	// A segment of pages by reference (no payload).
	if b, err := msgpack.Marshal(&proto.PageSegment{Count: 1, Header: proto.PageHeader{Job: 1, Buffer: 2, ElemSize: 4,
		Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 16}}}, Ref: &proto.PageRef{Host: "boot", PID: 7, Handle: make([]byte, 64), Bytes: 64, Alloc: 3}}}); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := scanMsgpack(b); err != nil {
			return
		}
		var s proto.PageSegment
		if decodeBody(b, &s) != nil {
			return
		}
		total, err := s.Validate(1 << 40)
		if err != nil {
			return
		}
		if s.Offset+s.Length > total {
			t.Fatalf("validated segment %d+%d lies outside %d bytes", s.Offset, s.Length, total)
		}
		roundTrip(t, &s)
	})
}

// TestFrameCodecAllocs guards the allocations of the frame path every call
// takes: encode (pooled buffer), scan, decode of a small body.
func TestFrameCodecAllocs(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts differ under coverage and the race detector")
	}
	req := &proto.ErrorReply{Code: proto.CodeRefused, Message: "x"}
	allocs := testing.AllocsPerRun(200, func() {
		f, err := encodeFrame(proto.Envelope{Type: proto.MsgError, Timeout: 5}, req, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		_, body, err := decodeFrame(f.buf.Bytes()[frameHeaderLen:])
		if err != nil {
			t.Fatal(err)
		}
		var r proto.ErrorReply
		if err := decodeBody(body, &r); err != nil {
			t.Fatal(err)
		}
		framePool.Put(f)
	})
	if allocs > 6 {
		t.Errorf("frame encode+decode allocates %.0f times, want at most 6", allocs)
	}
	t.Logf("%.0f allocations", allocs)
}

// FuzzJobKernels: arbitrary bytes decoded as a MsgJobKernels body, as a
// node decodes it (scanned, then decoded), never crash or over-allocate,
// nor does Validate; a request that validates stays within the bounds and
// re-encodes to bytes that decode to the same request.
func FuzzJobKernels(f *testing.F) {
	good := proto.JobKernels{Job: 7, Kernels: []proto.KernelSpec{{
		Name:   "mysaxpy@0a1b2c",
		Params: []proto.KernelParam{{Name: "a", Kind: 5, Space: 6, ElemSize: 4}, {Name: "x", Kind: 1, Space: 7, ElemSize: 4}},
		PTX:    []byte(".version 7.0\n.visible .entry saxpy(.param .u64 p){ret;}\n"),
		Entry:  "saxpy",
	}}}
	seed, err := msgpack.Marshal(&good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	cu := good
	cu.Kernels = []proto.KernelSpec{good.Kernels[0]}
	cu.Kernels[0].PTX, cu.Kernels[0].CUDA = nil, []byte(`extern "C" __global__ void saxpy(float a) {}`)
	cu.Kernels[0].File, cu.Kernels[0].Options = "k/saxpy.cu", []string{"--fmad=false"}
	if seed, err = msgpack.Marshal(&cu); err != nil {
		f.Fatal(err)
	}
	f.Add(seed) // CUDA C source (issue 13)
	f.Add([]byte{0x80})
	f.Add([]byte{0x82, 0xa1, 'j', 0x07, 0xa1, 'k', 0x90})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := scanMsgpack(b); err != nil {
			return
		}
		var r proto.JobKernels
		if decodeBody(b, &r) != nil || r.Validate() != nil {
			return
		}
		total := 0
		for _, k := range r.Kernels {
			if !proto.ValidKernelName(k.Name) || len(k.Module()) == 0 || (len(k.PTX) > 0 && len(k.CUDA) > 0) || len(k.Params) > proto.MaxKernelParams {
				t.Fatalf("validated kernel %q breaks the bounds", k.Name)
			}
			total += len(k.Module())
		}
		if total > proto.MaxKernelModule || len(r.Kernels) > proto.MaxKernelsPerRequest {
			t.Fatalf("validated request of %d kernels, %d bytes breaks the bounds", len(r.Kernels), total)
		}
		enc, err := msgpack.Marshal(&r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var r2 proto.JobKernels
		if err := decodeBody(enc, &r2); err != nil {
			t.Fatalf("decode of the re-encoded request: %v", err)
		}
		enc2, err := msgpack.Marshal(&r2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the request: %x, %v; want %x", enc2, err, enc)
		}
		if err := r2.Validate(); err != nil {
			t.Fatalf("round trip of a valid request does not validate: %v", err)
		}
	})
}
