package transport

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/acpp/acpp/proto"
)

// wireBodies are the bodies of every message of the protocol, requests and
// replies, as a node or a client decodes them (decodeBody after the frame's
// scan). TestEveryWireTypeIsFuzzed holds this list to proto's types.
var wireBodies = []func() any{
	func() any { return new(proto.Hello) },
	func() any { return new(proto.ErrorReply) },
	func() any { return new(proto.PageSegment) },
	func() any { return new(proto.PageAbort) },
	func() any { return new(proto.JobOpen) },
	func() any { return new(proto.JobOpened) },
	func() any { return new(proto.JobRef) },
	func() any { return new(proto.JobClosed) },
	func() any { return new(proto.Submit) },
	func() any { return new(proto.Submitted) },
	func() any { return new(proto.Wait) },
	func() any { return new(proto.WaitResult) },
	func() any { return new(proto.EventsRequest) },
	func() any { return new(proto.EventsReply) },
	func() any { return new(proto.Inventory) },
	func() any { return new(proto.Members) },
	func() any { return new(proto.JobKernels) },
	func() any { return new(proto.JobKernelsRegistered) },
	func() any { return new(proto.NodeDrain) },
	func() any { return new(proto.NodeDraining) },
	func() any { return new(proto.UnmapRef) },
	func() any { return new(proto.UnmapRefDone) },
}

// wireSeeds are valid bodies, one of each message with its fields set.
func wireSeeds(tb testing.TB) [][]byte {
	ref := &proto.PageRef{Host: "boot", PID: 7, Handle: make([]byte, 64), Bytes: 64, Alloc: 3}
	vals := []any{
		&proto.Hello{Version: proto.Version, Cluster: "lab", Name: "n1", Role: proto.RoleNode, Software: "acpp", MaxFrame: 1 << 24, Instance: 9},
		&proto.ErrorReply{Code: proto.CodeRefused, Message: "no"},
		&proto.PageSegment{Transfer: 1, Count: 1, Length: 64, Header: proto.PageHeader{Job: 1, Buffer: 2, Mem: 1, ElemSize: 4, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 16}}}}},
		&proto.PageSegment{Count: 1, Header: proto.PageHeader{Job: 1, Buffer: 2, ElemSize: 4, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 16}}}, Ref: ref}},
		&proto.PageAbort{Transfer: 3, Reason: "cancelled"},
		&proto.JobOpen{Job: 5, Lease: 1e9, MaxBytes: 1 << 20, Recovery: 1},
		&proto.JobOpened{Lease: 1e9, MaxBytes: 1 << 20, Node: "n1", Boot: 0x9e3779b97f4a7c15},
		&proto.JobRef{Job: 5},
		&proto.JobClosed{Freed: 4096},
		&proto.Submit{Job: 1, Instrs: []proto.Instr{{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Mem: 0, Range: [3]uint64{1, 1, 16}, ElemSize: 4},
			{ID: 2, Kind: proto.InstrLaunch, Deps: []uint64{1}, Launch: &proto.Launch{Kernel: "fill_f32", Device: "cpu:0", Global: [3]uint64{1, 1, 16},
				Args: []proto.KArg{{Kind: 2, Buffer: 1, ElemSize: 4}, {Kind: 4, Scalar: []byte{0, 0, 128, 63}}}}},
			{ID: 3, Kind: proto.InstrRecv, Deps: []uint64{1}, Buffer: 1, Boxes: []proto.Box{{Hi: [3]uint64{1, 1, 16}}}, Peer: "n2", PeerBoot: 0x9e3779b97f4a7c15}}},
		&proto.Submitted{Pending: 2},
		&proto.Wait{Job: 1, IDs: []uint64{1, 2}},
		&proto.WaitResult{Done: []uint64{1}, Failed: []proto.InstrError{{ID: 2, Code: proto.CodeNodeLost, Node: "n2", Message: "lost"}}, Pending: []uint64{3}},
		&proto.EventsRequest{Job: 1, After: 4, Max: 16},
		&proto.EventsReply{Events: []proto.Event{{Seq: 5, ID: 2, Start: 1, End: 2}, {Seq: 6, ID: 3, Err: &proto.InstrError{ID: 3, Message: "boom"}}}},
		&proto.Inventory{Node: "n1", Devices: []proto.DeviceInv{{ID: "cpu:0", Name: "Go CPU", Forms: []string{"go"}}}, Memories: []proto.MemoryInv{{Device: "cpu:0", Host: true, Bytes: 1 << 30}},
			Jobs: 1, Kernels: []string{"saxpy"}, KernelDecls: []proto.KernelDecl{{Name: "saxpy", Params: []proto.KernelParam{{Name: "a", Kind: 5, Space: 6, ElemSize: 4}}, Forms: []string{"go"}}},
			JobList: []proto.JobInv{{ID: 1, Client: "alice", Bytes: 64, Allocs: 1}}},
		&proto.Members{Node: "n1", Members: []proto.Member{{Name: "n1", State: "alive", QUICAddr: "127.0.0.1:7951", Devices: []proto.DeviceSummary{{Kind: "cpu", Count: 1}}}}},
		&proto.JobKernels{Job: 7, Kernels: []proto.KernelSpec{{Name: "k@1", Params: []proto.KernelParam{{Name: "a", Kind: 5, Space: 6, ElemSize: 4}}, PTX: []byte(".version 7.0\n"), Entry: "k"}}},
		&proto.JobKernelsRegistered{Kernels: 1, Bytes: 13},
		&proto.NodeDrain{Reason: "maintenance"},
		&proto.NodeDraining{Node: "n3", Jobs: 2, Already: true},
		&proto.UnmapRef{Job: 1, Allocs: []uint64{3, 4}},
		&proto.UnmapRefDone{Unmapped: 2},
	}
	var out [][]byte
	for _, v := range vals {
		b, err := msgpack.Marshal(v)
		if err != nil {
			tb.Fatalf("seed %T: %v", v, err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzMessages: arbitrary bytes, decoded as the body of each message of the
// protocol the way a node or a client decodes it (the frame's scan, then
// decodeBody), never crash or over-allocate, nor does the message's own
// validation; what decodes re-encodes to bytes that decode again to the
// same value.
func FuzzMessages(f *testing.F) {
	for _, b := range wireSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte{0x80})
	f.Add([]byte{0xc0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := scanMsgpack(b); err != nil {
			return // decodeFrame refuses these before any decoder runs
		}
		for _, mk := range wireBodies {
			v := mk()
			if decodeBody(b, v) != nil {
				continue
			}
			switch m := v.(type) {
			case interface{ Validate() error }:
				_ = m.Validate()
			case *proto.PageSegment:
				_, _ = m.Validate(1 << 36)
			}
			enc, err := msgpack.Marshal(v)
			if err != nil {
				t.Fatalf("%T: re-encode %+v: %v", v, v, err)
			}
			w := mk()
			if err := decodeBody(enc, w); err != nil {
				t.Fatalf("%T: decode of the re-encoded %x: %v", v, enc, err)
			}
			if enc2, err := msgpack.Marshal(w); err != nil || !bytes.Equal(enc, enc2) {
				t.Fatalf("%T: round trip changed %x to %x (%v)", v, enc, enc2, err)
			}
		}
	})
}

// TestEveryWireTypeIsFuzzed: every exported struct of package proto is a
// message body in wireBodies (FuzzMessages) or reachable from one, so a
// message added to proto without a fuzz target fails here.
func TestEveryWireTypeIsFuzzed(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../proto", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for name, pkg := range pkgs {
		if name != "proto" {
			continue
		}
		for _, file := range pkg.Files {
			for _, d := range file.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					if _, ok := ts.Type.(*ast.StructType); ok && ts.Name.IsExported() {
						declared = append(declared, ts.Name.Name)
					}
				}
			}
		}
	}
	if len(declared) < 20 {
		t.Fatalf("found %d structs in proto, want the protocol's messages: %v", len(declared), declared)
	}
	reached := map[string]bool{"Envelope": true} // decodeFrame's own, FuzzFrame
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Array {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || rt.PkgPath() != "github.com/acpp/acpp/proto" || reached[rt.Name()] {
			return
		}
		reached[rt.Name()] = true
		for i := range rt.NumField() {
			walk(rt.Field(i).Type)
		}
	}
	for _, mk := range wireBodies {
		walk(reflect.TypeOf(mk()))
	}
	slices.Sort(declared)
	for _, name := range declared {
		if !reached[name] {
			t.Errorf("proto.%s is neither a body in wireBodies nor part of one: add it to FuzzMessages", name)
		}
	}
}

// TestWireSeedsDecode: each seed of FuzzMessages decodes as its own type,
// so the corpus starts from every message.
func TestWireSeedsDecode(t *testing.T) {
	seeds := wireSeeds(t)
	for _, mk := range wireBodies {
		name := reflect.TypeOf(mk()).Elem().Name()
		ok := false
		for _, b := range seeds {
			v := mk()
			if decodeBody(b, v) == nil && !reflect.ValueOf(v).Elem().IsZero() {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("no seed decodes to a non-zero %s", name)
		}
	}
}
