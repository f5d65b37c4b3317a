package devicetest

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/acpp/acpp/device"
)

// Exported fake memory, by handle: the in-process stand-in for CUDA IPC,
// so that pages by reference run in tests without a GPU.
var (
	shared     sync.Map // uint64 → *fakeMem
	nextShared atomic.Uint64
)

var _ device.MemSharer = (*Fake)(nil)

// ExportMem implements device.MemSharer for a Shareable Fake: an 8-byte
// handle to m's memory, which must be its own device memory.
func (f *Fake) ExportMem(m *device.Mem) ([]byte, error) {
	fm, ok := m.Handle.(*fakeMem)
	if !f.shareable || !ok || m.Device != f.info.ID || m.Kind != device.MemDevice {
		return nil, fmt.Errorf("%w: %s exports only its own device memory, and only when Shareable", device.ErrUnsupported, f.info.ID)
	}
	id := nextShared.Add(1)
	shared.Store(id, fm)
	return binary.LittleEndian.AppendUint64(nil, id), nil
}

// ImportMem implements device.MemSharer: memory another Fake exported, of
// exactly bytes bytes, as device memory of f.
func (f *Fake) ImportMem(handle []byte, bytes int) (*device.Mem, error) {
	if !f.shareable || len(handle) != 8 {
		return nil, fmt.Errorf("%w: %s cannot map handle %x", device.ErrUnsupported, f.info.ID, handle)
	}
	v, ok := shared.Load(binary.LittleEndian.Uint64(handle))
	if !ok || len(v.(*fakeMem).b) != bytes {
		return nil, fmt.Errorf("%w: %s: no exported memory of %d bytes under handle %x", device.ErrBadOp, f.info.ID, bytes, handle)
	}
	return &device.Mem{Device: f.info.ID, Kind: device.MemDevice, Bytes: bytes, Addr: f.nextAddr.Add(uint64(bytes+4095) &^ 4095), Handle: v.(*fakeMem)}, nil
}
