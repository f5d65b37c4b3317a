package exec

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/acpp/acpp/coherence"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

// PageStates reads the core while groups run (-race checks the locking):
// a group that brings pages to a device memory shows them as moving
// there while it runs, and once it is done they are valid in both
// memories.
func TestPageStatesWhileRunning(t *testing.T) {
	cd := cpu.New(0, 2)
	fake := devicetest.NewFake(devicetest.FakeConfig{})
	rt, err := New(Config{Devices: []device.Device{cd, fake}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Error(err)
		}
		cd.Close()
		fake.Close()
	}()
	buf, geo := addBuffer(t, rt, 64<<10) // 4 pages of 64 KiB
	host, dev := rt.HostAlloc(), rt.MemOf(fake.Info().ID)
	w, err := rt.Submit(Group{Name: "init", Device: cd, Ops: []device.Op{launch(func() {})},
		Accesses: []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.Write, Target: host, Discard: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a live view
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				rt.PageStates()
			}
		}
	}()
	release := make(chan struct{})
	r, err := rt.Submit(Group{Name: "read on the device", Device: fake, Ops: []device.Op{launch(func() { <-release })},
		Accesses: []coherence.Access{{Buffer: buf, Pages: geo.All(), Mode: coherence.Read, Target: dev}}})
	if err != nil {
		t.Fatal(err)
	}
	var moving []coherence.Box
	for deadline := time.Now().Add(10 * time.Second); len(moving) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, b := range rt.PageStates() {
			for _, a := range b.Allocs {
				if a.Mem == rt.MemName(dev.Mem) {
					moving = a.Moving
				}
			}
		}
	}
	if got := rt.Running(); len(got) != 1 || got[0] != fake.Info().ID.String()+": read on the device" {
		t.Errorf("Running() = %q, want the group on %s", got, fake.Info().ID)
	}
	close(release)
	if len(moving) == 0 {
		t.Error("no pages moving to the device while the group that reads them there runs")
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	bs := rt.PageStates()
	if len(bs) != 1 || len(bs[0].Allocs) != 2 {
		t.Fatalf("PageStates = %+v, want one buffer in two memories", bs)
	}
	for _, a := range bs[0].Allocs {
		if len(a.Outdated) != 0 || len(a.Moving) != 0 {
			t.Errorf("%s: outdated %v, moving %v; want every page valid, none moving", a.Mem, a.Outdated, a.Moving)
		}
	}
}
