package cuda

import (
	"fmt"

	"github.com/acpp/acpp/cuda/driver"
	"github.com/acpp/acpp/device"
)

// Sharing device memory with other processes of the host (CUDA IPC), for
// page moves between GPUs driven by different acpp-node processes:
// device.MemSharer.

var _ device.MemSharer = (*Device)(nil)

// ExportMem returns m's IPC handle (64 bytes). m must be plain device
// memory of d: pinned, managed and imported memory cannot be exported.
func (d *Device) ExportMem(m *device.Mem) ([]byte, error) {
	d.mu.Lock()
	st, ok := d.mems[m]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s did not allocate this %s memory; only its own device memory can be exported", device.ErrBadOp, d.info.ID, m.Kind)
	}
	if st.pinned || st.managed || st.imported {
		return nil, fmt.Errorf("%w: %s: only device memory (not host, shared or imported memory) can be exported to another process", device.ErrUnsupported, d.info.ID)
	}
	var h driver.IpcMemHandle
	err := d.Do(func(*Thread) error {
		var err error
		h, err = d.lib.IpcGetMemHandle(st.devPtr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: exporting device memory: %w", d.info.ID, err)
	}
	return h[:], nil
}

// ImportMem maps device memory that another process of this host exported
// (ExportMem there) into d's context, with peer access to its GPU enabled
// as needed. The mapping is MemDevice memory of d for copies (the driver
// routes them over NVLink or PCIe to the owning GPU); Free unmaps it. A
// handle exported by this same process cannot be opened (CUDA refuses).
func (d *Device) ImportMem(handle []byte, bytes int) (*device.Mem, error) {
	var h driver.IpcMemHandle
	if len(handle) != len(h) || bytes <= 0 {
		return nil, fmt.Errorf("%w: %s: an IPC handle has %d bytes (got %d) and maps a non-empty allocation (got %d bytes)", device.ErrBadOp, d.info.ID, len(h), len(handle), bytes)
	}
	copy(h[:], handle)
	var p driver.DevicePtr
	err := d.Do(func(*Thread) error {
		var err error
		if p, err = d.lib.IpcOpenMemHandle(h, driver.IpcMemLazyEnablePeerAccess); err != nil {
			return err
		}
		// The peer says how large the allocation is; copies trust that
		// size, so check it against the mapping (a copy past its end
		// would fault this GPU's context).
		_, size, err := d.lib.MemGetAddressRange(p)
		if err == nil && size < uint64(bytes) {
			err = fmt.Errorf("%w: the mapped allocation has %d bytes, the peer said %d", device.ErrBadOp, size, bytes)
		}
		if err != nil {
			_ = d.lib.IpcCloseMemHandle(p)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: mapping another process's device memory: %w", d.info.ID, err)
	}
	st := &memState{dev: d, kind: device.MemDevice, devPtr: p, imported: true}
	m := &device.Mem{Device: d.info.ID, Kind: device.MemDevice, Bytes: bytes, Addr: uint64(p), Handle: st}
	d.mu.Lock()
	d.mems[m] = st
	d.mu.Unlock()
	return m, nil
}
