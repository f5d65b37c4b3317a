package cuda

import (
	"fmt"

	"github.com/acpp/acpp/cuda/driver"
)

// Attributes are what discovery reads of one GPU: what the scheduler needs
// to place work and what the linking decision needs.
type Attributes struct {
	Ordinal  int
	Name     string
	TotalMem uint64 // bytes
	// Major and Minor are the compute capability.
	Major, Minor int
	// Integrated: the GPU shares the host's physical memory.
	Integrated bool
	// CanMapHost: the GPU can map pinned host memory into its address space.
	CanMapHost bool
	// PageableMemoryAccess: kernels can access pageable host memory;
	// PageableUsesHostPageTables: through the host's own page tables
	// (hardware coherence, e.g. Grace Hopper).
	PageableMemoryAccess, PageableUsesHostPageTables bool
	// ManagedMemory and ConcurrentManagedAccess describe managed (shared
	// USM) memory support.
	ManagedMemory, ConcurrentManagedAccess bool
	UnifiedAddressing                      bool
	// AsyncEngines is the number of copy engines (copies overlap kernels
	// and each other up to this many).
	AsyncEngines           int
	Multiprocessors        int
	MaxThreadsPerBlock     int
	MaxSharedPerBlock      int // bytes without opt-in
	MaxSharedPerBlockOptin int // bytes with cuFuncSetAttribute
	WarpSize               int
}

// HostUnified reports whether the GPU shares memory with the host closely
// enough that a buffer's device allocation should be the host allocation
// (L2, L3): an integrated GPU, or one that reads pageable host memory
// through the host's page tables.
func (a Attributes) HostUnified() bool {
	return (a.Integrated && a.CanMapHost) || (a.PageableMemoryAccess && a.PageableUsesHostPageTables)
}

// linkDecision applies Config.Link to a GPU's attributes and says why, for
// the debug log line.
func linkDecision(a Attributes, mode Link) (bool, string) {
	switch mode {
	case LinkAlways:
		if !a.CanMapHost {
			return false, "Link=LinkAlways, but the GPU cannot map host memory: separate device allocations"
		}
		return true, "Link=LinkAlways: MemDevice is mapped pinned host memory"
	case LinkNever:
		return false, "Link=LinkNever: separate device allocations"
	}
	switch {
	case a.Integrated && a.CanMapHost:
		return true, "integrated GPU shares host memory: linked to the host allocation"
	case a.PageableMemoryAccess && a.PageableUsesHostPageTables:
		return true, "GPU accesses host memory through the host page tables: linked to the host allocation"
	}
	return false, fmt.Sprintf("discrete GPU without host-unified memory (integrated=%v pageableMemoryAccess=%v usesHostPageTables=%v): separate device allocations, pages copied", a.Integrated, a.PageableMemoryAccess, a.PageableUsesHostPageTables)
}

// readAttributes fingerprints device ordinal o.
func readAttributes(l *driver.Lib, o int) (Attributes, driver.Device, error) {
	d, err := l.DeviceGet(o)
	if err != nil {
		return Attributes{}, 0, err
	}
	a := Attributes{Ordinal: o}
	if a.Name, err = l.DeviceGetName(d); err != nil {
		return a, d, err
	}
	if a.TotalMem, err = l.DeviceTotalMem(d); err != nil {
		return a, d, err
	}
	ints := []struct {
		attr driver.DeviceAttribute
		dst  *int
	}{
		{driver.AttrComputeCapabilityMajor, &a.Major},
		{driver.AttrComputeCapabilityMinor, &a.Minor},
		{driver.AttrAsyncEngineCount, &a.AsyncEngines},
		{driver.AttrMultiprocessorCount, &a.Multiprocessors},
		{driver.AttrMaxThreadsPerBlock, &a.MaxThreadsPerBlock},
		{driver.AttrMaxSharedMemoryPerBlock, &a.MaxSharedPerBlock},
		{driver.AttrMaxSharedMemoryPerBlockOptin, &a.MaxSharedPerBlockOptin},
		{driver.AttrWarpSize, &a.WarpSize},
	}
	for _, x := range ints {
		if *x.dst, err = l.DeviceGetAttribute(x.attr, d); err != nil {
			return a, d, err
		}
	}
	bools := []struct {
		attr driver.DeviceAttribute
		dst  *bool
	}{
		{driver.AttrIntegrated, &a.Integrated},
		{driver.AttrCanMapHostMemory, &a.CanMapHost},
		{driver.AttrPageableMemoryAccess, &a.PageableMemoryAccess},
		{driver.AttrPageableMemoryUsesHostPT, &a.PageableUsesHostPageTables},
		{driver.AttrManagedMemory, &a.ManagedMemory},
		{driver.AttrConcurrentManagedAccess, &a.ConcurrentManagedAccess},
		{driver.AttrUnifiedAddressing, &a.UnifiedAddressing},
	}
	for _, x := range bools {
		v, err := l.DeviceGetAttribute(x.attr, d)
		if err != nil {
			return a, d, err
		}
		*x.dst = v != 0
	}
	if a.MaxSharedPerBlockOptin < a.MaxSharedPerBlock {
		a.MaxSharedPerBlockOptin = a.MaxSharedPerBlock
	}
	return a, d, nil
}
