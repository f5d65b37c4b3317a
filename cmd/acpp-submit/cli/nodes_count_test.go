package cli

import (
	"testing"

	"github.com/acpp/acpp/proto"
)

// TestMemberCounts: nodes and status count the members by state, so that
// "3 members" is never printed while the node's /healthz says members=2
// (it counts alive ones).
func TestMemberCounts(t *testing.T) {
	m := func(state string, leaving bool) proto.Member { return proto.Member{State: state, Leaving: leaving} }
	for _, tt := range []struct {
		members []proto.Member
		want    string
	}{
		{[]proto.Member{m("alive", false), m("alive", false), m("alive", false)}, "3 members, all alive"},
		{[]proto.Member{m("alive", false)}, "1 member, alone in its cluster"}, // was "1 members, all alive"
		{[]proto.Member{m("alive", false), m("alive", false), m("left", false)}, "2 alive, 1 left"},
		{[]proto.Member{m("failed", false), m("alive", false), m("left", false), m("failed", false)}, "1 alive, 2 failed, 1 left"},
		{[]proto.Member{m("alive", false), m("alive", true)}, "2 alive (1 draining)"},
		{nil, "0 members, all alive"},
	} {
		if got := memberCounts(&proto.Members{Members: tt.members}, "members, all alive"); got != tt.want {
			t.Errorf("memberCounts(%v) = %q, want %q", tt.members, got, tt.want)
		}
	}
}
