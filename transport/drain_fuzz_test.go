package transport

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/acpp/acpp/proto"
)

// FuzzNodeDrain: arbitrary bytes decoded as a MsgNodeDrain body (as a node
// decodes it) or its reply never crash; what decodes re-encodes to the same
// request (acpp-node drain, issue 15).
func FuzzNodeDrain(f *testing.F) {
	seed, err := msgpack.Marshal(&proto.NodeDrain{Reason: "maintenance"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	rep, _ := msgpack.Marshal(&proto.NodeDraining{Node: "n3", Jobs: 2, Already: true})
	f.Add(rep)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := scanMsgpack(b); err != nil {
			return
		}
		var r proto.NodeDraining
		_ = decodeBody(b, &r)
		var d proto.NodeDrain
		if decodeBody(b, &d) != nil {
			return
		}
		again, err := msgpack.Marshal(&d)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", d, err)
		}
		var d2 proto.NodeDrain
		if err := decodeBody(again, &d2); err != nil || d2 != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, d2, err)
		}
	})
}
