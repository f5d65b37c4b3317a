package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/cpu"
	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// deviceFilter is the parsed Config.Devices: kinds and single devices the
// node exposes. A nil filter exposes everything.
type deviceFilter struct {
	kinds   map[device.Kind]bool
	ids     map[device.ID]bool
	entries []string // as given, trimmed: for errors
}

// CheckDevices reports whether s is a well-formed Config.Devices list
// ("all", or kinds and kind:index separated by commas), for a caller that
// names the setting in its own error (acpp-node's --devices). Whether each
// entry matches a device of the machine is known only at Run.
func CheckDevices(s string) error {
	_, err := parseDeviceFilter(s)
	return err
}

func parseDeviceFilter(s string) (*deviceFilter, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return nil, nil
	}
	f := &deviceFilter{kinds: map[device.Kind]bool{}, ids: map[device.ID]bool{}}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" { // "cpu, cuda:0," as "cpu,cuda:0"
			continue
		}
		f.entries = append(f.entries, part)
		kind, idx, hasIdx := strings.Cut(part, ":")
		k, err := device.ParseKind(kind)
		if err != nil {
			return nil, fmt.Errorf("%q: %w (the list is like cpu,cuda:0,cuda:2)", part, err)
		}
		if !hasIdx {
			f.kinds[k] = true
			continue
		}
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("%q: device index %q must be a number >= 0", part, idx)
		}
		f.ids[device.ID{Kind: k, Index: i}] = true
	}
	if len(f.entries) == 0 {
		return nil, nil
	}
	return f, nil
}

// unmatched lists the entries of f that match none of devs, in the order
// given.
func (f *deviceFilter) unmatched(devs []device.Device) []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, e := range f.entries {
		kind, idx, hasIdx := strings.Cut(e, ":")
		k, _ := device.ParseKind(kind) // parsed before
		i, _ := strconv.Atoi(idx)
		found := false
		for _, d := range devs {
			id := d.Info().ID
			if id.Kind == k && (!hasIdx || id.Index == i) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, e)
		}
	}
	return out
}

func (f *deviceFilter) allows(id device.ID) bool {
	return f == nil || f.kinds[id.Kind] || f.ids[id]
}

// memory is one physical memory of the node: the unit of allocation
// (coherence.MemID). Memory 0 is host memory, allocated by the CPU device;
// every device that is not host-unified has a memory of its own.
type memory struct {
	id    uint32
	dev   device.Device // allocates it
	host  bool
	bytes uint64 // its size (host: cpu.HostMemory); 0 when unknown

	// budget admits the allocations and page staging of every job in this
	// memory (staging is host memory, so it counts against memory 0).
	budget *device.Budget

	// pool keeps pinned staging buffers of this (device) memory for reuse:
	// allocating pinned memory costs far more than moving the pages.
	pool stagingPool
}

// name names the memory in errors and logs.
func (m *memory) name() string {
	if m.host {
		return "host memory"
	}
	return m.dev.Info().ID.String() + " memory"
}

// stagingPool caches pinned host buffers of one device.
type stagingPool struct {
	mu    sync.Mutex    // guards free and bytes
	free  []*device.Mem // idle buffers, any order
	bytes int           // their total size
}

// Limits of a staging pool: idle buffers kept per device memory.
const (
	poolMaxBuffers = 4
	poolMaxBytes   = 1 << 30
)

// get returns an idle buffer of at least n bytes (the smallest that fits),
// or nil.
func (p *stagingPool) get(n int) *device.Mem {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i, m := range p.free {
		if m.Bytes >= n && (best < 0 || m.Bytes < p.free[best].Bytes) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	m := p.free[best]
	p.free = append(p.free[:best], p.free[best+1:]...)
	p.bytes -= m.Bytes
	return m
}

// put keeps m for reuse if the pool has room; it reports whether it did
// (if not, the caller frees m).
func (p *stagingPool) put(m *device.Mem) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) >= poolMaxBuffers || p.bytes+m.Bytes > poolMaxBytes {
		return false
	}
	p.free = append(p.free, m)
	p.bytes += m.Bytes
	return true
}

func (p *stagingPool) drain() []*device.Mem {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.free
	p.free, p.bytes = nil, 0
	return out
}

// devices is the node's device manager. It is built once by openDevices and
// read-only afterwards.
type devices struct {
	all   []device.Device // every opened device, closed by close
	list  []device.Device // exposed devices, sorted by kind and index
	byID  map[string]device.Device
	memOf map[string]uint32 // device ID → its memory
	mems  []*memory
	// hostSize says where host memory's size came from, or why it is
	// unknown (for the start-up log).
	hostSize string
}

func openDevices(ctx context.Context, cfg Config) (*devices, error) {
	filter, err := parseDeviceFilter(cfg.Devices)
	if err != nil {
		return nil, err
	}
	d := &devices{byID: map[string]device.Device{}, memOf: map[string]uint32{}}
	cpus, err := cpu.Open(ctx, device.OpenConfig{Workers: cfg.CPUWorkers})
	if err != nil {
		return nil, fmt.Errorf("node: open CPU device: %w", err)
	}
	d.all = append(d.all, cpus...)
	// Host memory is always there, whatever the filter says.
	d.mems = append(d.mems, &memory{id: 0, dev: cpus[0], host: true})
	for _, b := range device.Backends() {
		if b.Kind == device.KindCPU {
			continue
		}
		if filter != nil && !filter.kinds[b.Kind] && !filterHasKind(filter, b.Kind) {
			continue
		}
		devs, err := b.Open(ctx, device.OpenConfig{Logger: cfg.Logger})
		if err != nil {
			d.close()
			return nil, fmt.Errorf("node: open %s devices: %w", b.Kind, err)
		}
		d.all = append(d.all, devs...)
	}
	d.all = append(d.all, cfg.ExtraDevices...)
	for _, dev := range d.all {
		if filter.allows(dev.Info().ID) {
			d.list = append(d.list, dev)
		}
	}
	// Every entry must match a device: `cpu,cuda:7` on a machine without
	// cuda:7 is a typo or the wrong machine, not "cpu only".
	if miss := filter.unmatched(d.all); len(miss) > 0 {
		d.close()
		return nil, fmt.Errorf("node: --devices %q: %s match%s no device of this machine (it has %s); list kinds or kind:index of those, or all",
			cfg.Devices, strings.Join(miss, ", "), map[bool]string{true: "", false: "es"}[len(miss) > 1], d.describeAll())
	}
	if len(d.list) == 0 {
		d.close()
		return nil, fmt.Errorf("node: --devices %q selects none of this machine's devices (%s); list kinds or kind:index", cfg.Devices, d.describeAll())
	}
	sort.SliceStable(d.list, func(i, j int) bool {
		a, b := d.list[i].Info().ID, d.list[j].Info().ID
		return a.Kind < b.Kind || a.Kind == b.Kind && a.Index < b.Index
	})
	for _, dev := range d.list {
		info := dev.Info()
		id := info.ID.String()
		d.byID[id] = dev
		if info.Caps.HostUnified {
			d.memOf[id] = 0
			continue
		}
		m := &memory{id: uint32(len(d.mems)), dev: dev, bytes: uint64(max(info.Caps.MemBytes, 0))}
		d.mems = append(d.mems, m)
		d.memOf[id] = m.id
	}
	size, src, err := cpu.HostMemory()
	d.mems[0].bytes, d.hostSize = size, src
	if err != nil {
		d.hostSize = err.Error()
	}
	limit := cfg.memoryLimit()
	for _, m := range d.mems {
		m.budget = device.NewBudget(limit.Budget(m.bytes, m.host))
	}
	return d, nil
}

// host is host memory (memory 0), where page staging lives.
func (d *devices) host() *memory { return d.mems[0] }

func filterHasKind(f *deviceFilter, k device.Kind) bool {
	for id := range f.ids {
		if id.Kind == k {
			return true
		}
	}
	return false
}

func (d *devices) describeAll() string {
	var s []string
	for _, dev := range d.all {
		s = append(s, dev.Info().ID.String())
	}
	return strings.Join(s, ", ")
}

func (d *devices) mem(id uint32) (*memory, error) {
	if int(id) >= len(d.mems) {
		return nil, fmt.Errorf("memory %d does not exist on this node (it has %d; see the inventory)", id, len(d.mems))
	}
	return d.mems[id], nil
}

func (d *devices) close() error {
	var errs []error
	for _, m := range d.mems {
		for _, pm := range m.pool.drain() {
			if err := m.dev.Free(pm); err != nil {
				errs = append(errs, fmt.Errorf("free staging of %s: %w", m.dev.Info().ID, err))
			}
		}
	}
	for _, dev := range d.all {
		if err := dev.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", dev.Info().ID, err))
		}
	}
	return errors.Join(errs...)
}

// summary is the compact device list gossiped in the cluster metadata.
// lostDevice is an exposed device that reports itself lost
// (device.Health): a GPU whose context a faulting kernel made unusable.
type lostDevice struct {
	id  string
	err error
}

// lostErr is dev's Lost, or nil for a device that cannot be lost.
func lostErr(dev device.Device) error {
	if h, ok := dev.(device.Health); ok {
		return h.Lost()
	}
	return nil
}

// canLose reports whether any exposed device can be lost (watchDevices
// has something to watch).
func (d *devices) canLose() bool {
	for _, dev := range d.list {
		if _, ok := dev.(device.Health); ok {
			return true
		}
	}
	return false
}

// lost lists the exposed devices that are lost, in list order.
func (d *devices) lost() []lostDevice {
	var out []lostDevice
	for _, dev := range d.list {
		if err := lostErr(dev); err != nil {
			out = append(out, lostDevice{dev.Info().ID.String(), err})
		}
	}
	return out
}

// summary is what the node gossips of its devices: the devices that are
// not lost, by kind.
func (d *devices) summary() []cluster.DeviceSummary {
	byKind := map[device.Kind]*cluster.DeviceSummary{}
	var kinds []device.Kind
	for _, dev := range d.list {
		if lostErr(dev) != nil {
			continue
		}
		info := dev.Info()
		s := byKind[info.ID.Kind]
		if s == nil {
			s = &cluster.DeviceSummary{Kind: cluster.DeviceKind(info.ID.Kind), Unified: true}
			byKind[info.ID.Kind] = s
			kinds = append(kinds, info.ID.Kind)
		}
		s.Count++
		s.MemBytes += uint64(max(info.Caps.MemBytes, 0))
		s.Unified = s.Unified && info.Caps.HostUnified
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	out := make([]cluster.DeviceSummary, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, *byKind[k])
	}
	return out
}

// inventory lists the devices jobs can use and their memories; a lost
// device and its own memory are left out (new jobs place nothing there),
// and listed in lost as "id: why".
func (d *devices) inventory() (devs []proto.DeviceInv, mems []proto.MemoryInv, lost []string) {
	gone := map[device.Device]bool{}
	for _, dev := range d.list {
		if err := lostErr(dev); err != nil {
			gone[dev] = true
			lost = append(lost, fmt.Sprintf("%s: %v", dev.Info().ID, err))
			continue
		}
		info := dev.Info()
		inv := proto.DeviceInv{
			ID: info.ID.String(), Name: info.Name, HostUnified: info.Caps.HostUnified,
			MemBytes: uint64(max(info.Caps.MemBytes, 0)), Queues: info.Caps.Queues, Mem: d.memOf[info.ID.String()],
		}
		for _, f := range info.Caps.KernelForms {
			inv.Forms = append(inv.Forms, f.String())
		}
		devs = append(devs, inv)
	}
	for _, m := range d.mems {
		if gone[m.dev] && !m.host {
			continue
		}
		mems = append(mems, proto.MemoryInv{ID: m.id, Device: m.dev.Info().ID.String(), Host: m.host, Bytes: m.bytes,
			Budget: m.budget.Limit(), Used: m.budget.Used()})
	}
	return devs, mems, lost
}
