package node_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/node/nodeclient"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

var registerSleep = sync.OnceFunc(func() {
	device.MustRegister(device.Kernel{
		Name: "nodetest.sleep",
		Go:   func(*device.Work) { time.Sleep(300 * time.Millisecond) },
	})
})

func healthz(t *testing.T, n *node.Node) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// counter returns the value of a counter of n's metrics with the given
// labels, or 0.
func counter(t *testing.T, n *node.Node, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := n.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// TestDrainFinishesRunningAndRefusesNewWork: Drain turns /healthz to 503,
// refuses new instructions, lets running ones finish, then frees the jobs.
func TestDrainFinishesRunningAndRefusesNewWork(t *testing.T) {
	registerSleep()
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) { cfg.HTTPAddr = "127.0.0.1:0" })
	n := nodes[0]
	if code, body := healthz(t, n); code != http.StatusOK || !strings.HasPrefix(body, "ok n0 members=1") {
		t.Fatalf("healthz = %d %q, want 200 ok", code, body)
	}
	c := startClient(t, credDir, "alice", n)
	j := openJob(t, c, "n0", 1)
	submit(t, j,
		proto.Instr{ID: 1, Kind: proto.InstrAlloc, Buffer: 1, Range: [3]uint64{1, 1, 64}, ElemSize: 4},
		proto.Instr{ID: 2, Kind: proto.InstrLaunch, Deps: []uint64{1}, Launch: &proto.Launch{Kernel: "nodetest.sleep", Device: "cpu:0", Global: [3]uint64{1, 1, 1}}},
	)
	eventually(t, 5*time.Second, "the kernel runs", func() bool { return n.Allocated() > 0 })
	drained := make(chan error, 1)
	go func() { drained <- n.Drain(testCtx(t)) }()
	eventually(t, 5*time.Second, "healthz turns 503", func() bool {
		code, _ := healthz(t, n)
		return code == http.StatusServiceUnavailable
	})
	// New jobs are refused; the open job's instructions still run (its
	// client moves the pages only this node holds, then closes it).
	if _, err := c.Open(testCtx(t), "n0", 2, nodeclient.JobOptions{}); !isRemoteCode(err, proto.CodeDraining) {
		t.Errorf("Open while draining = %v, want CodeDraining", err)
	}
	if _, err := j.Submit(testCtx(t), proto.Instr{ID: 3, Kind: proto.InstrFree, Deps: []uint64{2}, Buffer: 1}); err != nil {
		t.Errorf("Submit of the open job while draining = %v, want it run", err)
	}
	if err := j.Wait(testCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if got := counter(t, n, "acpp_node_instructions_total", map[string]string{"kind": "launch", "outcome": "ok"}); got != 1 {
		t.Errorf("launches finished ok = %v, want 1: drain must let running work finish", got)
	}
	if n.Jobs() != 0 || n.Allocated() != 0 {
		t.Errorf("after drain: %d jobs, %d bytes; want 0, 0", n.Jobs(), n.Allocated())
	}
	if got := counter(t, n, "acpp_node_drains_total", nil); got != 1 {
		t.Errorf("acpp_node_drains_total = %v, want 1", got)
	}
	if got := counter(t, n, "acpp_node_drain_jobs_released_total", nil); got != 1 {
		t.Errorf("acpp_node_drain_jobs_released_total = %v, want 1 (the client closed its job during the drain)", got)
	}
}

func isRemoteCode(err error, code proto.ErrorCode) bool {
	var re *transport.RemoteError
	return errors.As(err, &re) && re.Code == code
}

// MsgNodeDrain (acpp-node drain): a client may not drain a node; an
// operator may, and the node reports the drain under way (issue 15).
func TestRemoteDrainOperatorsOnly(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	n := nodes[0]
	c := startClient(t, credDir, "alice", n)
	if _, err := c.Drain(testCtx(t), "n0", "test"); !isRemoteCode(err, proto.CodeNotOwner) {
		t.Fatalf("a client's drain = %v, want CodeNotOwner", err)
	}
	select {
	case <-n.DrainRequested():
		t.Fatal("a client's refused drain was recorded")
	default:
	}
	ops := startOperator(t, n)
	r, err := ops.Drain(testCtx(t), "n0", "test")
	if err != nil || r.Node != "n0" || r.Already {
		t.Fatalf("an operator's drain = %+v, %v", r, err)
	}
	select {
	case <-n.DrainRequested():
	default:
		t.Fatal("the operator's drain was not recorded")
	}
	if r, err := ops.Drain(testCtx(t), "n0", "again"); err != nil || !r.Already {
		t.Errorf("a second drain = %+v, %v; want Already", r, err)
	}
}
