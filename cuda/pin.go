package cuda

import (
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// hostPins page-locks other backends' host allocations (the CPU device's
// Go memory, users' slices under L1) on their first copy, so later copies
// run at pinned speed (about 7× faster than pageable on the H200).
//
// Registering garbage-collected memory is safe only if it is unregistered
// before the memory can be reused: otherwise the driver keeps DMAing to the
// old physical pages of a virtual range that now holds something else. So a
// pin holds a strong reference to the registered bytes, and a cleanup on
// each device.Mem that uses them drops one reference; when the last Mem is
// unreachable an owner unregisters the range and only then lets the bytes
// go. A range that cannot be registered (overlapping another registration,
// or refused) is simply copied as pageable memory.
//
// Host memory the group allocated pinned itself (host USM, cuMemHostAlloc)
// is left alone when another Mem views it (a CopyToHost into a slice of
// host USM): the driver already DMAs to it directly, and registering it
// again would only fail, on every copy, since each copy brings a Mem of
// its own.
type hostPins struct {
	mu     sync.Mutex
	byBase map[uintptr]*pin                     // registered ranges by base address; guarded by mu
	mems   map[weak.Pointer[device.Mem]]uintptr // Mems seen → base of their pin (0: not pinned); guarded by mu
	kept   [][]byte                             // guarded by mu: still registered after every device closed
	own    map[uintptr]uintptr                  // the group's pinned host allocations: base → end; guarded by mu
}

// allocated records a pinned host allocation of the group (owner thread).
func (p *hostPins) allocated(base uintptr, n uint64) {
	p.mu.Lock()
	if p.own == nil {
		p.own = map[uintptr]uintptr{}
	}
	p.own[base] = base + uintptr(n)
	p.mu.Unlock()
}

// freed forgets a pinned host allocation of the group before it is freed.
func (p *hostPins) freed(base uintptr) {
	p.mu.Lock()
	delete(p.own, base)
	p.mu.Unlock()
}

// ownedLocked reports whether [base, base+n) lies inside one of the
// group's pinned host allocations.
func (p *hostPins) ownedLocked(base uintptr, n int) bool {
	for b, e := range p.own {
		if base >= b && base+uintptr(n) <= e {
			return true
		}
	}
	return false
}

type pin struct {
	bytes []byte // keeps the registered range alive until it is unregistered
	refs  int    // live Mems using it
}

type pinKey struct {
	wp   weak.Pointer[device.Mem]
	base uintptr
}

// pinFor registers m's host bytes if they are worth it and not yet seen
// (owner thread).
func (d *Device) pinFor(m *device.Mem) {
	if d.cfg.PinMinBytes < 0 || m.Bytes < d.cfg.PinMinBytes || len(m.Host) == 0 {
		return
	}
	if _, ours := m.Handle.(*memState); ours {
		return
	}
	p := &d.group.pins
	wp := weak.Make(m)
	base := uintptrOf(m.Host)
	p.mu.Lock()
	if p.mems == nil {
		p.mems, p.byBase = map[weak.Pointer[device.Mem]]uintptr{}, map[uintptr]*pin{}
	}
	if p.ownedLocked(base, len(m.Host)) {
		p.mu.Unlock()
		return
	}
	if _, seen := p.mems[wp]; seen {
		p.mu.Unlock()
		return
	}
	if e := p.byBase[base]; e != nil {
		if len(e.bytes) == len(m.Host) {
			e.refs++
			p.mems[wp] = base
		} else {
			p.mems[wp] = 0 // overlaps a registration of another size: stays pageable
		}
		p.mu.Unlock()
		runtime.AddCleanup(m, d.group.unpin, pinKey{wp, p.mems[wp]})
		return
	}
	p.mems[wp] = 0 // claimed: a concurrent owner copies it as pageable meanwhile
	p.mu.Unlock()
	err := d.lib.MemHostRegister(unsafe.Pointer(&m.Host[0]), uint64(len(m.Host)), driver.MemHostRegisterPortable)
	key := pinKey{wp, 0}
	p.mu.Lock()
	if err == nil {
		p.byBase[base] = &pin{bytes: m.Host, refs: 1}
		p.mems[wp] = base
		key.base = base
	}
	p.mu.Unlock()
	if err != nil {
		d.log.Debug("cuda host memory stays pageable", "device", d.info.ID.String(), "bytes", m.Bytes, "error", err)
	}
	runtime.AddCleanup(m, d.group.unpin, key)
}

// unpin runs on the runtime's cleanup goroutine when a Mem that used a pin
// is unreachable; the last one hands the unregistration to an owner.
func (g *group) unpin(k pinKey) {
	p := &g.pins
	p.mu.Lock()
	delete(p.mems, k.wp)
	e := p.byBase[k.base]
	if k.base == 0 || e == nil {
		p.mu.Unlock()
		return
	}
	if e.refs--; e.refs > 0 {
		p.mu.Unlock()
		return
	}
	delete(p.byBase, k.base)
	p.mu.Unlock()
	for _, d := range g.devs {
		if d.push(task{run: func(t *Thread) { _ = t.Lib.MemHostUnregister(unsafe.Pointer(&e.bytes[0])) }}) == nil {
			return
		}
	}
	p.mu.Lock()
	p.kept = append(p.kept, e.bytes) // no device left to unregister it: never reuse the range
	p.mu.Unlock()
}

// unpinAll unregisters every range (owner thread of the last device to
// close).
func (g *group) unpinAll(lib *driver.Lib) {
	p := &g.pins
	p.mu.Lock()
	all := p.byBase
	p.byBase = map[uintptr]*pin{}
	p.mu.Unlock()
	for _, e := range all {
		_ = lib.MemHostUnregister(unsafe.Pointer(&e.bytes[0]))
	}
}
