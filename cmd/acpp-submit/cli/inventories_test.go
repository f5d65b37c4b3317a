package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/proto"
)

// hangingClient answers the inventory of members whose address does not
// start with "hung"; a dial to the others hangs until its context ends,
// as one to a stopped host, still listed alive, does.
type hangingClient struct{}

func (hangingClient) Connect(ctx context.Context, addr string) (string, error) {
	if strings.HasPrefix(addr, "hung") {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return addr, nil
}

func (hangingClient) Inventory(ctx context.Context, node string) (*proto.Inventory, error) {
	return &proto.Inventory{Kernels: []string{"k"}}, nil
}

// TestInventoriesAskEveryMemberAtOnce_C1: status, kernels, check and run
// ask every alive member's inventory at once, so three members listed
// alive but hung cost the 3 s wait once. They were asked in turn: one
// SIGSTOPped node held acpp-submit run 3 s before it opened the job (chaos
// campaign, 2026-11-28), three would hold it 9 s, and five would run out
// the commands' 15 s.
func TestInventoriesAskEveryMemberAtOnce_C1(t *testing.T) {
	ms := []proto.Member{
		{Name: "h1", State: "alive", QUICAddr: "hung1"},
		{Name: "h2", State: "alive", QUICAddr: "hung2"},
		{Name: "h3", State: "alive", QUICAddr: "hung3"},
		{Name: "gone", State: "failed", QUICAddr: "hung4"},
		{Name: "ok", State: "alive", QUICAddr: "ok"},
	}
	start := time.Now()
	got := inventories(context.Background(), hangingClient{}, ms)
	took := time.Since(start)
	if took > 5*time.Second {
		t.Errorf("three hung members took %v: they should be asked at once (3 s), not in turn", took)
	}
	for i, name := range []string{"h1", "h2", "h3"} {
		if got[i].err == nil {
			t.Errorf("%s hangs: want an error, got an inventory", name)
		}
	}
	if got[3].inv != nil || got[3].err != nil {
		t.Errorf("a failed member is not asked: got %+v", got[3])
	}
	if got[4].err != nil || got[4].inv == nil || got[4].inv.Kernels[0] != "k" {
		t.Errorf("ok answers: got %+v", got[4])
	}
}
