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

// Mappings of exported memory, to catch what CUDA leaves undefined: the
// exporter freeing an allocation that an importer has not unmapped.
var (
	mapMu            sync.Mutex
	imports          = map[*device.Mem]*fakeMem{} // live imports; guarded by mapMu
	mapped           = map[*fakeMem]int{}         // live imports per allocation; guarded by mapMu
	freedWhileMapped atomic.Int64
)

// FreedWhileMapped counts, over the process, Frees of exported Fake memory
// while another Fake still had it mapped (ImportMem without its Free). On
// a GPU that is undefined behaviour (cuMemFree before the importer's
// cuIpcCloseMemHandle).
func FreedWhileMapped() int64 { return freedWhileMapped.Load() }

// MappedImports is the number of imports of Fake memory not yet freed.
func MappedImports() int {
	mapMu.Lock()
	defer mapMu.Unlock()
	return len(imports)
}

// freeShared accounts for Free(m): an import is unmapped; an exported
// allocation freed while mapped is counted in FreedWhileMapped.
func freeShared(m *device.Mem) {
	fm, ok := m.Handle.(*fakeMem)
	if !ok {
		return
	}
	mapMu.Lock()
	defer mapMu.Unlock()
	if imp, ok := imports[m]; ok {
		delete(imports, m)
		if mapped[imp]--; mapped[imp] == 0 {
			delete(mapped, imp)
		}
		return
	}
	if mapped[fm] > 0 {
		freedWhileMapped.Add(1)
	}
}

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
	fm := v.(*fakeMem)
	m := &device.Mem{Device: f.info.ID, Kind: device.MemDevice, Bytes: bytes, Addr: f.nextAddr.Add(uint64(bytes+4095) &^ 4095), Handle: fm}
	mapMu.Lock()
	imports[m] = fm
	mapped[fm]++
	mapMu.Unlock()
	return m, nil
}
