package node_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
	"github.com/acpp/acpp/internal/testlog"
	"github.com/acpp/acpp/node"
	"github.com/acpp/acpp/proto"
	"github.com/acpp/acpp/transport"
)

// TestLostDeviceReported_C1: a device lost while the node runs (a GPU
// whose CUDA context a job's faulting kernel made unusable; here a Fake
// told to Lose) is reported and withdrawn, and the node stays up for its
// other devices: /healthz answers 503 "degraded" naming it and saying to
// restart the node, acpp_node_devices_lost counts it, the inventory
// leaves it and its memory out (new jobs place nothing there) and lists
// it under Lost, and the gossiped device summary drops it.
func TestLostDeviceReported_C1(t *testing.T) {
	fake := devicetest.NewFake(devicetest.FakeConfig{})
	nodes := startNodes(t, 1, func(_ int, cfg *node.Config) {
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.ExtraDevices = []device.Device{fake}
	})
	n := nodes[0]
	hasFake := func() (inInventory, inMemories, inGossip bool) {
		inv := n.Inventory()
		for _, d := range inv.Devices {
			inInventory = inInventory || d.ID == "fake:0"
		}
		for _, m := range inv.Memories {
			inMemories = inMemories || m.Device == "fake:0"
		}
		for _, s := range n.Cluster().LocalMeta().Devices {
			inGossip = inGossip || s.Kind == cluster.DeviceFake
		}
		return
	}
	if a, b, c := hasFake(); !a || !b || !c {
		t.Fatalf("before the loss: fake:0 in inventory %v, memories %v, gossip %v; want all", a, b, c)
	}
	if code, body := healthz(t, n); code != http.StatusOK {
		t.Fatalf("healthz before the loss = %d %q", code, body)
	}
	fake.Lose("CUDA_ERROR_ILLEGAL_ADDRESS in a test")
	eventually(t, 10*time.Second, "the lost device leaves the gossiped summary", func() bool {
		_, _, g := hasFake()
		return !g
	})
	if a, b, _ := hasFake(); a || b {
		t.Errorf("after the loss: fake:0 in inventory %v, memories %v; want neither", a, b)
	}
	inv := n.Inventory()
	if len(inv.Lost) != 1 || !strings.HasPrefix(inv.Lost[0], "fake:0: ") || !strings.Contains(inv.Lost[0], "ILLEGAL_ADDRESS") {
		t.Errorf("inventory Lost = %q, want fake:0 and why", inv.Lost)
	}
	if !slices.ContainsFunc(inv.Devices, func(d proto.DeviceInv) bool { return d.ID == "cpu:0" }) {
		t.Errorf("the CPU left the inventory too: %+v", inv.Devices)
	}
	code, body := healthz(t, n)
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "degraded n0: fake:0 lost") || !strings.Contains(body, "restart acpp-node") {
		t.Errorf("healthz after the loss = %d %q, want 503 degraded naming fake:0 and saying to restart", code, body)
	}
	if v := gaugeValue(t, n, "acpp_node_devices_lost"); v != 1 {
		t.Errorf("acpp_node_devices_lost = %v, want 1", v)
	}
}

// gaugeValue is the value of an unlabelled gauge of n's metrics.
func gaugeValue(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	mfs, err := n.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestStartedLineNamesTheHTTPAddress: the "node started" line gives the
// HTTP address too, so that the port --http-addr HOST:0 picked can be
// found (and "off" without an endpoint).
func TestStartedLineNamesTheHTTPAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", ""} {
		var buf testlog.Buffer
		nodes := startNodes(t, 1, func(_ int, cfg *node.Config) {
			cfg.HTTPAddr = addr
			cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		})
		want := "http=off"
		if addr != "" {
			want = "http=" + nodes[0].HTTPAddr()
		}
		line := ""
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, `msg="node started"`) {
				line = l
			}
		}
		if !strings.Contains(line, want+" ") {
			t.Errorf("--http-addr %q: started line %q lacks %s", addr, line, want)
		}
	}
}

// TestRecoveredPanicMakesNodeDegraded: a message handler that panics is
// recovered by the transport (the node serves on), but what it held stays
// as it was: /healthz answers 503 "degraded" asking for a restart, and
// acpp_node_handler_panics_total counts it.
func TestRecoveredPanicMakesNodeDegraded(t *testing.T) {
	nodes := startNodes(t, 2, func(_ int, cfg *node.Config) { cfg.HTTPAddr = "127.0.0.1:0" })
	const msgBoom = proto.MsgFirstApp + 900
	transport.HandleFunc(nodes[0].TransportForTest(), msgBoom, func(context.Context, credentials.Identity, *struct{}) (*struct{}, error) {
		panic("a handler's bug")
	})
	if code, body := healthz(t, nodes[0]); code != http.StatusOK {
		t.Fatalf("healthz before = %d %q", code, body)
	}
	err := nodes[1].TransportForTest().Call(testCtx(t), credentials.Node("n0"), msgBoom, &struct{}{}, nil)
	var re *transport.RemoteError
	if !errors.As(err, &re) || re.Code != proto.CodeInternal {
		t.Fatalf("call of the panicking handler: %v, want CodeInternal", err)
	}
	code, body := healthz(t, nodes[0])
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "degraded n0: 1 message handler panics recovered") || !strings.Contains(body, "restart acpp-node") {
		t.Errorf("healthz after a recovered panic = %d %q, want 503 degraded asking for a restart", code, body)
	}
	if v := counter(t, nodes[0], "acpp_node_handler_panics_total", nil); v != 1 {
		t.Errorf("acpp_node_handler_panics_total = %v, want 1", v)
	}
}
