package nodeclient

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/acpp/acpp/proto"
)

func TestInstrFailedErrorNamesLostNodes_C5(t *testing.T) {
	tests := []struct {
		name     string
		failed   []proto.InstrError
		lost     []string
		nodeLost bool
	}{
		{"device failure", []proto.InstrError{{ID: 1, Code: proto.CodeDevice, Message: "boom"}}, nil, false},
		{"one node", []proto.InstrError{{ID: 2, Code: proto.CodeNodeLost, Node: "n3", Message: "lost"}, {ID: 3, Code: proto.CodeDepFailed}}, []string{"n3"}, true},
		{"two nodes, sorted, once each", []proto.InstrError{
			{ID: 4, Code: proto.CodeNodeLost, Node: "n9"}, {ID: 5, Code: proto.CodeNodeLost, Node: "n2"}, {ID: 6, Code: proto.CodeNodeLost, Node: "n9"},
		}, []string{"n2", "n9"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &InstrFailedError{Node: "n1", Job: 7, Failed: tt.failed}
			if got := e.LostNodes(); !slices.Equal(got, tt.lost) {
				t.Errorf("LostNodes() = %v, want %v", got, tt.lost)
			}
			if got := errors.Is(e, ErrNodeLost); got != tt.nodeLost {
				t.Errorf("errors.Is(ErrNodeLost) = %v, want %v", got, tt.nodeLost)
			}
			if !strings.Contains(e.Error(), "job 7") || !strings.Contains(e.Error(), "node n1") {
				t.Errorf("Error() = %q; want the job and the node named", e.Error())
			}
		})
	}
}
