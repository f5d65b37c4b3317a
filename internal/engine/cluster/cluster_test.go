package cluster

import (
	"testing"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/coordinator"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/internal/engine"
)

// P5: a raw view's region on a cluster is the element box of the view's
// page range, and a discard survives only for an access to all of it.
func TestViewOnClusterRegion_P5(t *testing.T) {
	geo, err := coherence.NewGeometry(coherence.Dims{1, 8, 16}, 4, coherence.Dims{1, 1, 16})
	if err != nil {
		t.Fatal(err)
	}
	view := coherence.View{Range: coherence.Dims{1, 1, 128}, ElemSize: 4}
	for _, tc := range []struct {
		off, rng     [3]int
		wOff, wRng   coordinator.Dims
		noInit, keep bool
	}{
		{[3]int{0, 0, 20}, [3]int{1, 1, 30}, coordinator.Dims{0, 1, 0}, coordinator.Dims{1, 3, 16}, true, false},
		{[3]int{0, 0, 32}, [3]int{1, 1, 16}, coordinator.Dims{0, 2, 0}, coordinator.Dims{1, 1, 16}, false, false},
		{[3]int{}, [3]int{1, 1, 128}, coordinator.Dims{}, coordinator.Dims{1, 8, 16}, true, true},
	} {
		pages, err := geo.ViewPageRange(view, tc.off, tc.rng)
		if err != nil {
			t.Fatal(err)
		}
		r := &engine.Access{Geo: &geo, BRange: view.Range, Elem: 4, Off: tc.off, Rng: tc.rng, Pages: pages}
		acc := coordinator.Accessor{Kind: device.ArgPointer, NoInit: tc.noInit}
		if err := viewOnCluster(r, &acc, nil); err != nil {
			t.Fatal(err)
		}
		if acc.Offset != tc.wOff || acc.Range != tc.wRng || acc.NoInit != tc.keep {
			t.Errorf("view region %v+%v: buffer region %v+%v NoInit %v, want %v+%v NoInit %v", tc.off, tc.rng, acc.Offset, acc.Range, acc.NoInit, tc.wOff, tc.wRng, tc.keep)
		}
	}
}
