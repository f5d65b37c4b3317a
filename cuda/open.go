package cuda

import (
	"context"
	"errors"
	"fmt"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

func init() {
	device.RegisterBackend(device.Backend{Kind: device.KindCUDA, Open: openBackend})
}

// openBackend is the device registry's entry point. It logs to the
// logger of whoever opens it (cfg.Logger: acpp.WithLogger, a node's
// logger); nil discards.
func openBackend(ctx context.Context, cfg device.OpenConfig) ([]device.Device, error) {
	devs, err := Open(ctx, Config{Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	out := make([]device.Device, len(devs))
	for i, d := range devs {
		out[i] = d
	}
	return out, nil
}

// Open loads the driver, fingerprints the GPUs and starts one owner
// goroutine per GPU. A machine without a driver or without a GPU yields no
// devices and a nil error, with one log line saying why. The caller closes
// every returned device.
func Open(ctx context.Context, cfg Config) ([]*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	lib, err := driver.Open(cfg.Library)
	if err != nil {
		log.Info("no CUDA driver; running without GPUs", "error", err)
		return nil, nil
	}
	if err := lib.Init(); err != nil {
		log.Info("CUDA driver cannot initialise; running without GPUs", "error", err)
		return nil, nil
	}
	n, err := lib.DeviceGetCount()
	if err != nil || n == 0 {
		log.Info("no CUDA device; running without GPUs", "error", err)
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ordinals := cfg.Devices
	if ordinals == nil {
		for o := 0; o < n; o++ {
			ordinals = append(ordinals, o)
		}
	}
	g := &group{devs: map[int]*Device{}}
	var devs []*Device
	fail := func(err error) ([]*Device, error) {
		for _, d := range devs {
			if d.stopped != nil {
				_ = d.Close()
			} else {
				_ = lib.DevicePrimaryCtxRelease(d.dev)
			}
		}
		return nil, err
	}
	for _, o := range ordinals {
		if o >= n {
			return fail(fmt.Errorf("%w: Devices lists GPU %d, the machine has %d", ErrConfig, o, n))
		}
		if g.devs[o] != nil {
			continue
		}
		attrs, dev, err := readAttributes(lib, o)
		if err != nil {
			return fail(fmt.Errorf("cuda: reading the attributes of GPU %d: %w", o, err))
		}
		cctx, err := lib.DevicePrimaryCtxRetain(dev)
		if err != nil {
			return fail(fmt.Errorf("cuda: GPU %d context: %w", o, err))
		}
		d := newDevice(cfg, lib, attrs, dev, cctx, g)
		devs = append(devs, d)
		g.devs[o] = d
		log.Debug("cuda link decision", "device", d.info.ID.String(), "linked", d.linked, "reason", d.linkWhy)
	}
	// Test hook: extra logical devices on the first GPU, to exercise copies
	// between devices (staged through host memory) on a one-GPU machine.
	for i := 0; i < cfg.virtualDevices && len(devs) > 0; i++ {
		a := devs[0].attrs
		a.Ordinal = 1000 + i
		cctx, err := lib.DevicePrimaryCtxRetain(devs[0].dev)
		if err != nil {
			return fail(err)
		}
		d := newDevice(cfg, lib, a, devs[0].dev, cctx, g)
		devs = append(devs, d)
		g.devs[a.Ordinal] = d
	}
	// Peer access candidates; the owners enable them on their threads.
	for _, a := range devs {
		for _, b := range devs {
			if a == b || a.dev == b.dev || cfg.NoPeer {
				continue
			}
			if ok, err := lib.DeviceCanAccessPeer(a.dev, b.dev); err == nil && ok {
				a.peers[b.attrs.Ordinal] = true
			}
		}
	}
	for _, d := range devs {
		ready := make(chan error, 1)
		d.stopped = make(chan struct{})
		g.open.Add(1)
		go d.run(ready)
		if err := <-ready; err != nil {
			<-d.stopped // the owner returned without running a task
			g.open.Add(-1)
			_ = lib.DevicePrimaryCtxRelease(d.dev)
			for i := range devs {
				if devs[i] == d {
					devs = append(devs[:i], devs[i+1:]...)
					break
				}
			}
			return fail(fmt.Errorf("cuda: starting %s: %w", d.info.ID, err))
		}
	}
	for _, d := range devs {
		a := d.attrs
		log.Info("cuda device", "device", d.info.ID.String(), "name", a.Name, "memory_mib", a.TotalMem>>20,
			"cc", fmt.Sprintf("%d.%d", a.Major, a.Minor), "linked", d.linked, "streams", len(d.streams), "peers", len(d.peers))
	}
	return devs, nil
}

func newDevice(cfg Config, lib *driver.Lib, a Attributes, dev driver.Device, cctx driver.Context, g *group) *Device {
	d := &Device{cfg: cfg, log: cfg.Logger, lib: lib, attrs: a, dev: dev, ctx: cctx, group: g,
		peers: map[int]bool{}, wake: make(chan struct{}, 1), mems: map[*device.Mem]*memState{}}
	d.linked, d.linkWhy = linkDecision(a, cfg.Link)
	kinds := []device.MemKind{device.MemDevice, device.MemHost}
	if a.ManagedMemory {
		kinds = append(kinds, device.MemShared)
	}
	d.info = device.Info{
		ID:   device.ID{Kind: device.KindCUDA, Index: a.Ordinal},
		Name: a.Name,
		Caps: device.Capabilities{
			HostUnified:   d.linked,
			Queues:        cfg.Streams,
			LocalMemBytes: a.MaxSharedPerBlockOptin,
			MaxGroupSize:  a.MaxThreadsPerBlock,
			MemBytes:      int64(a.TotalMem),
			USMKinds:      kinds,
			KernelForms:   []device.Form{device.FormPTX},
		},
	}
	d.comp = newCompleter(d)
	return d
}

// enablePeers runs on the owner thread at start: peer access from this
// context to each candidate's memory.
func (d *Device) enablePeers() {
	for o, want := range d.peers {
		if !want {
			continue
		}
		err := d.lib.CtxEnablePeerAccess(d.group.devs[o].ctx)
		var de *driver.Error
		if err != nil && !(errors.As(err, &de) && de.Code == driver.ErrorPeerEnabled) {
			d.peers[o] = false
			d.log.Info("cuda peer access refused; copies stage through host memory", "device", d.info.ID.String(), "peer", o, "error", err)
		}
	}
}
