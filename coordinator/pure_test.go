package coordinator

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/credentials"
	"github.com/acpp/acpp/internal/partition"
)

func TestConfigValidate(t *testing.T) {
	creds := &credentials.Credentials{}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; nil: valid
	}{
		{"valid", Config{Nodes: []string{"127.0.0.1:7947"}, Credentials: creds}, nil},
		{"empty", Config{}, []string{"Nodes is empty", "Credentials are required"}},
		{"bad address and duplicate", Config{Nodes: []string{"n1", "a:1", "a:1"}, Credentials: creds}, []string{`Nodes[0] = "n1" is not host:port`, `Nodes[2] = "a:1" is listed twice`}},
		{"port outside 1–65535, no host", Config{Nodes: []string{"a:0", "a:70000", ":7947", "a:b:1"}, Credentials: creds}, []string{`Nodes[0] = "a:0": port "0" must be in [1, 65535]`, `Nodes[1] = "a:70000": port "70000"`, `Nodes[2] = ":7947" is not host:port`, `Nodes[3] = "a:b:1" is not host:port`}},
		{"IPv6 and host names", Config{Nodes: []string{"[::1]:7947", "node-1.example:7947"}, Credentials: creds}, nil},
		{"bandwidths that are not numbers", Config{Nodes: []string{"a:1"}, Credentials: creds, NetworkBandwidth: math.NaN(), LocalBandwidth: math.Inf(1)}, []string{"NetworkBandwidth NaN must be a finite number", "LocalBandwidth +Inf must be a finite number"}},
		{"negative bandwidth", Config{Nodes: []string{"a:1"}, Credentials: creds, LocalBandwidth: -1}, []string{"LocalBandwidth -1"}},
		{"bad placement and negative durations", Config{Nodes: []string{"a:1"}, Credentials: creds, Placement: 9, LostTimeout: -1}, []string{"Placement 9", "must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestChooseAuto(t *testing.T) {
	const net, local = 1e9, 1e10
	tests := []struct {
		name  string
		cands []candidate
		want  int
	}{
		{"data locality", []candidate{{netBytes: 1 << 20}, {netBytes: 0, haveBytes: 1 << 20}, {netBytes: 1 << 20}}, 1},
		{"load beats a small transfer", []candidate{{queue: 1, haveBytes: 1000}, {netBytes: 1000, queue: 0}}, 1},
		{"a big transfer beats a short queue", []candidate{{queue: 0.001, haveBytes: 1 << 30}, {netBytes: 1 << 30}}, 0},
		{"learnt kernel time", []candidate{{kernel: 0.5}, {kernel: 0.1}}, 1},
		{"tie: more data there", []candidate{{haveBytes: 1}, {haveBytes: 2}}, 1},
		{"tie: fewer pending groups", []candidate{{pending: 2}, {pending: 1}, {pending: 1}}, 1},
		{"tie: first", []candidate{{}, {}}, 0},
		{"data beats a slightly shorter queue", []candidate{{netBytes: 192, queue: 30e-6}, {queue: 80e-6, haveBytes: 192}}, 1},
		{"a clearly shorter queue beats the data", []candidate{{netBytes: 192, queue: 30e-6}, {queue: 300e-6, haveBytes: 192}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chooseAuto(tt.cands, net, local); got != tt.want {
				t.Errorf("chooseAuto() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestEstimatorLearns(t *testing.T) {
	var e estimator
	cpu0 := Device{Node: "n1", ID: "cpu:0", Kind: "cpu"}
	cpu1 := Device{Node: "n2", ID: "cpu:0", Kind: "cpu"}
	if got := e.estimate("k", cpu0, 100); got != 0 {
		t.Fatalf("estimate before any observation = %v, want 0", got)
	}
	e.observe("k", cpu0, 100, 100*time.Millisecond)
	if got := e.estimate("k", cpu0, 200); got < 0.199 || got > 0.201 {
		t.Errorf("estimate(200 items) = %v, want 0.2 s", got)
	}
	if got := e.estimate("k", cpu1, 100); got < 0.099 || got > 0.101 {
		t.Errorf("estimate on another device of the kind = %v, want 0.1 s (kind average)", got)
	}
	e.observe("k", cpu0, 100, 200*time.Millisecond)
	if got := e.estimate("k", cpu0, 100); got <= 0.1 || got >= 0.2 {
		t.Errorf("estimate after a slower run = %v, want between 0.1 and 0.2 (moving average)", got)
	}
}

func TestSubtractBoxes_C2(t *testing.T) {
	box := coherence.Box{Hi: Dims{1, 4, 4}}
	holes := []coherence.Box{{Lo: Dims{0, 1, 1}, Hi: Dims{1, 3, 3}}}
	got := subtractBoxes(box, holes)
	vol := 0
	for _, b := range got {
		vol += b.Volume()
		if b.Overlaps(holes[0]) {
			t.Errorf("piece %v overlaps the hole", b)
		}
	}
	if vol != 16-4 {
		t.Errorf("subtractBoxes volume = %d, want 12 (%v)", vol, got)
	}
	if got := mergeBoxes([]coherence.Box{box, holes[0], box}); !slices.Equal(got, []coherence.Box{box}) {
		t.Errorf("mergeBoxes = %v, want only %v", got, box)
	}
}

func TestNodeLostErrorMessage_C5(t *testing.T) {
	e := &NodeLostError{Node: "n2", How: "failed", Lost: []LostRange{{Buffer: `buffer "d"`, Boxes: []coherence.Box{{Hi: Dims{1, 1, 8}}}}}, Groups: []GroupID{3}}
	if !errors.Is(e, ErrNodeLost) {
		t.Error("NodeLostError does not match ErrNodeLost")
	}
	for _, w := range []string{"node n2", `buffer "d"`, "[0,1)", "1 command group", "open a new job"} {
		if !strings.Contains(e.Error(), w) {
			t.Errorf("Error() = %q, want it to mention %q", e.Error(), w)
		}
	}
}

// C4: the split math lives in internal/partition, but a split the
// coordinator refuses is still an ErrInvalid of the coordinator (and a
// partition.ErrBadSplit), and reads as it did: the coordinator's prefix,
// then what to change.
func TestSplitErrorsAreInvalid_C4(t *testing.T) {
	_, _, err := cutSplit(&Split{Borders: -1}, Dims{}, Dims{1, 30, 8}, Dims{}, 3)
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, partition.ErrBadSplit) {
		t.Errorf("cutSplit with negative borders = %v, want ErrInvalid and partition.ErrBadSplit", err)
	}
	if want := "coordinator: invalid request: Split.Borders -1 is negative"; err == nil || err.Error() != want {
		t.Errorf("cutSplit error reads %q, want %q", err, want)
	}
	if _, _, err := cutSplit(&Split{Along: SplitDim(7)}, Dims{}, Dims{1, 1, 10}, Dims{}, 2); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Split.Along 7") {
		t.Errorf("cutSplit along dimension 7 = %v, want ErrInvalid naming Split.Along", err)
	}
	if cs, dev, err := cutSplit(&Split{}, Dims{}, Dims{1, 1, 10}, Dims{}, 3); err != nil || len(cs) != 3 || !slices.Equal(dev, []int{0, 1, 2}) {
		t.Errorf("cutSplit of 10 items over 3 devices = %v, %v, %v; want 3 chunks on devices 0 1 2", cs, dev, err)
	}
	c := Chunk{Offset: Dims{0, 3, 0}, Range: Dims{1, 4, 20}}
	neg := MapFunc(func(Chunk, Dims) (Dims, Dims) { return Dims{}, Dims{1, -1, 1} })
	if _, _, err := mapAccess(neg, c, Dims{1, 10, 20}); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "coordinator: invalid request: range mapper gave a negative range") {
		t.Errorf("mapAccess of a negative range = %v, want ErrInvalid", err)
	}
	if off, rng, err := mapAccess(Neighbourhood(1), c, Dims{1, 10, 20}); err != nil || off != (Dims{0, 2, 0}) || rng != (Dims{1, 6, 20}) {
		t.Errorf("mapAccess(Neighbourhood(1)) = %v, %v, %v; want [0 2 0], [1 6 20]", off, rng, err)
	}
	if err := invalidSplit(ErrNoDevice); err != ErrNoDevice {
		t.Errorf("invalidSplit(ErrNoDevice) = %v, want it unchanged", err)
	}
}

// TestLastNodeLostDuringReopenIsNotWaitedFor_C5: the last node with
// devices lost while a recovery reopens the job on it is taken into the
// recovery like any other: its close and reopen are cancelled (a killed
// node answers them only at their timeouts, 3 s and 10 s) and the
// recovery's failure names it. startRecoveryLocked returned at its "no
// node left" check first, which left the reopen running and the node out
// of the error.
func TestLastNodeLostDuringReopenIsNotWaitedFor_C5(t *testing.T) {
	j := &Job{}
	j.ctx, j.cancel = context.WithCancelCause(context.Background())
	defer j.cancel(nil)
	j.ep = j.newEpoch(0)
	j.res.on = true
	n0, n1 := &nodeState{name: "n0", lost: true}, &nodeState{name: "n1"}
	j.nodes = []*nodeState{n0, n1}
	j.devices = []*Device{{Node: "n0", node: n0, lost: true}, {Node: "n1", node: n1}}
	cancelled := false
	r := &recovery{nodes: []string{"n0"}, reopening: map[*nodeState]context.CancelFunc{n1: func() { cancelled = true }}}
	j.res.recovering = r
	j.nodeLostLocked(n1, "membership: failed")
	if !cancelled {
		t.Error("n1's close and reopen were not cancelled: the recovery waits for their timeouts")
	}
	if !slices.Equal(r.nodes, []string{"n0", "n1"}) || !r.again {
		t.Errorf("recovery nodes %v, again %v: want n0 and n1, and the recovery to start over (and fail: no node left)", r.nodes, r.again)
	}
}
