package cuda

import (
	"errors"
	"fmt"
	"sync"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// memState is a CUDA allocation's backend state (device.Mem.Handle).
type memState struct {
	dev     *Device
	kind    device.MemKind
	devPtr  driver.DevicePtr // the address kernels use
	hostPtr uintptr          // pinned or managed host address; 0 for plain device memory
	managed bool
	pinned  bool // cuMemHostAlloc memory (MemHost, or MemDevice when linked)
	// imported: another process's device memory mapped by ImportMem
	// (cuIpcOpenMemHandle); Free unmaps it.
	imported bool
}

// Alloc allocates bytes of memory of kind on the GPU (B1: exactly that
// size; B2: the address never changes until Free). It blocks until the
// owner has made the driver call.
func (d *Device) Alloc(kind device.MemKind, bytes int) (*device.Mem, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("%w: %s: allocation of %d bytes", device.ErrBadOp, d.info.ID, bytes)
	}
	if !d.info.Caps.Supports(kind) {
		return nil, fmt.Errorf("%w: %s cannot allocate %s memory", device.ErrUnsupported, d.info.ID, kind)
	}
	var m *device.Mem
	err := d.Do(func(t *Thread) error {
		var err error
		m, err = d.alloc(kind, bytes)
		return err
	})
	return m, d.asLost(err)
}

// alloc runs on the owner thread.
func (d *Device) alloc(kind device.MemKind, bytes int) (*device.Mem, error) {
	n := uint64(bytes)
	if n == 0 {
		n = 1 // the driver refuses empty allocations; B1 still reports 0 bytes
	}
	st := &memState{dev: d, kind: kind}
	oom := func(what string, err error) error {
		if errors.Is(err, driver.ErrOutOfMemory) {
			return fmt.Errorf("%s: %s of %d MiB: %w; release buffers or use a device with more memory (%w)", d.info.ID, what, bytes>>20, device.ErrOutOfMemory, err)
		}
		return fmt.Errorf("%s: %s of %d bytes: %w", d.info.ID, what, bytes, err)
	}
	switch {
	case kind == device.MemHost || kind == device.MemDevice && d.linked:
		p, err := d.lib.MemHostAlloc(n, driver.MemHostAllocPortable|driver.MemHostAllocDeviceMap)
		if err != nil {
			return nil, oom("pinned host allocation", err)
		}
		dp, err := d.lib.MemHostGetDevicePointer(p)
		if err != nil {
			_ = d.lib.MemFreeHost(p)
			return nil, fmt.Errorf("%s: mapping pinned host memory: %w", d.info.ID, err)
		}
		st.hostPtr, st.devPtr, st.pinned = p, dp, true
		d.group.pins.allocated(p, n)
	case kind == device.MemShared:
		free, _, err := d.lib.MemGetInfo()
		if err != nil {
			return nil, fmt.Errorf("%s: reading free memory before a managed allocation: %w", d.info.ID, err)
		}
		if n+d.cfg.ManagedReserve > free {
			return nil, fmt.Errorf("%w: %s: shared (managed) allocation of %d MiB refused: %d MiB of device memory free, %d MiB kept in reserve; a managed allocation larger than free memory can hang the GPU; use device memory or a smaller buffer",
				device.ErrOutOfMemory, d.info.ID, bytes>>20, free>>20, d.cfg.ManagedReserve>>20)
		}
		p, err := d.lib.MemAllocManaged(n)
		if err != nil {
			return nil, oom("managed allocation", err)
		}
		st.devPtr, st.hostPtr, st.managed = p, uintptr(p), true
	default:
		p, err := d.lib.MemAlloc(n)
		if err != nil {
			return nil, oom("device allocation", err)
		}
		st.devPtr = p
	}
	m := &device.Mem{Device: d.info.ID, Kind: kind, Bytes: bytes, Addr: uint64(st.devPtr), Handle: st}
	if st.hostPtr != 0 {
		m.Host = hostSlice(st.hostPtr, bytes)
	}
	d.mu.Lock()
	d.mems[m] = st
	d.mu.Unlock()
	return m, nil
}

// Free releases an allocation of this device.
func (d *Device) Free(m *device.Mem) error {
	if m == nil {
		return fmt.Errorf("%w: Free(nil)", device.ErrBadOp)
	}
	d.mu.Lock()
	st, ok := d.mems[m]
	if ok {
		delete(d.mems, m)
	}
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s did not allocate this %d-byte %s memory (it belongs to %s, or was freed already)", device.ErrBadOp, d.info.ID, m.Bytes, m.Kind, m.Device)
	}
	if d.Lost() != nil {
		return nil // gone with the lost context; the driver would only fail
	}
	return d.Do(func(t *Thread) error { return d.freeMem(st) })
}

func (d *Device) freeMem(st *memState) error {
	switch {
	case st.pinned:
		d.group.pins.freed(st.hostPtr)
		return d.lib.MemFreeHost(st.hostPtr)
	case st.imported:
		return d.lib.IpcCloseMemHandle(st.devPtr)
	default:
		return d.lib.MemFree(st.devPtr)
	}
}

// sideKind is where one side of a copy lives, as the driver sees it.
type sideKind uint8

const (
	sideDevice  sideKind = iota + 1 // device memory of a GPU of this group
	sideHost                        // host memory: pinned (ours) or pageable (another backend's)
	sideManaged                     // managed memory
)

// copySide resolves a Mem for copies: where it lives, and the address of its
// byte 0 (device address or host address). owner is the GPU whose device
// memory it is (nil for host and managed memory).
func (d *Device) copySide(m *device.Mem) (sideKind, uint64, error) {
	if m == nil {
		return 0, 0, fmt.Errorf("%w: no memory", device.ErrBadOp)
	}
	if st, ok := m.Handle.(*memState); ok && st.dev.group == d.group {
		switch {
		case st.pinned:
			return sideHost, uint64(st.hostPtr), nil
		case st.managed:
			return sideManaged, uint64(st.devPtr), nil
		}
		return sideDevice, uint64(st.devPtr), nil
	}
	if len(m.Host) > 0 || m.Bytes == 0 {
		// Another backend's host memory (the CPU device's buffers): pageable.
		return sideHost, uint64(uintptrOf(m.Host)), nil
	}
	return 0, 0, fmt.Errorf("%w: %s memory of %s has no host view and is not CUDA memory of this process; copy it through host memory", device.ErrUnsupported, m.Kind, m.Device)
}

// owner returns the GPU whose device memory m is, or nil.
func (d *Device) owner(m *device.Mem) *Device {
	if st, ok := m.Handle.(*memState); ok && st.dev.group == d.group && !st.pinned && !st.managed {
		return st.dev
	}
	return nil
}

// kernelAddr is the address a kernel on d uses for m, or why m is not
// reachable from d's kernels.
func (d *Device) kernelAddr(m *device.Mem) (uint64, error) {
	st, ok := m.Handle.(*memState)
	if !ok || st.dev.group != d.group {
		return 0, fmt.Errorf("%s memory of %s is not accessible from %s kernels; copy it to %s (buffers are copied by the runtime) or allocate host USM on %s", m.Kind, m.Device, d.info.ID, d.info.ID, d.info.ID)
	}
	if st.dev != d && !st.pinned && !st.managed && !d.peers[st.dev.attrs.Ordinal] {
		return 0, fmt.Errorf("device memory of %s is not accessible from %s (no peer access between them); copy it first", m.Device, d.info.ID)
	}
	return uint64(st.devPtr), nil
}

// staging is a pool of pinned host buffers for copies between GPUs without
// peer access. Buffers are reused by size class and freed at Close.
type staging struct {
	mu   sync.Mutex
	free map[int][]uintptr // size class (log2) → buffers; guarded by mu
}

func sizeClass(n uint64) (int, uint64) {
	c := 16 // 64 KiB minimum
	for uint64(1)<<c < n {
		c++
	}
	return c, uint64(1) << c
}

// get returns a pinned buffer of at least n bytes (owner thread only: it may
// call the driver).
func (s *staging) get(d *Device, n uint64) (uintptr, int, error) {
	c, size := sizeClass(n)
	s.mu.Lock()
	if l := s.free[c]; len(l) > 0 {
		p := l[len(l)-1]
		s.free[c] = l[:len(l)-1]
		s.mu.Unlock()
		return p, c, nil
	}
	s.mu.Unlock()
	p, err := d.lib.MemHostAlloc(size, driver.MemHostAllocPortable)
	return p, c, err
}

// put returns a buffer; it never calls the driver (it runs on completers).
func (s *staging) put(p uintptr, c int) {
	s.mu.Lock()
	if s.free == nil {
		s.free = map[int][]uintptr{}
	}
	s.free[c] = append(s.free[c], p)
	s.mu.Unlock()
}

// drain frees the pooled buffers (owner thread of any device of the group).
func (s *staging) drain(d *Device) {
	s.mu.Lock()
	free := s.free
	s.free = nil
	s.mu.Unlock()
	for _, l := range free {
		for _, p := range l {
			_ = d.lib.MemFreeHost(p)
		}
	}
}
