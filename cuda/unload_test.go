package cuda

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/acpp/acpp/device"
)

// loaded reports whether d's module cache holds the module of exactly mod.
func loaded(t *testing.T, d *Device, mod []byte) bool {
	t.Helper()
	var ok bool
	if err := d.Do(func(*Thread) error {
		_, ok = d.funcs[moduleKey{unsafe.SliceData(mod), len(mod)}]
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestUnloadModuleThenReload_C6_B1: a job's module, once its last job is
// done, leaves the GPU (B1: the node returns to its baseline) and only
// that module: UnloadModule drops the cache entry and cuModuleUnload runs;
// unloading it again, an equal module at another address or an empty one
// is a no-op; a later launch from the same slice loads it again and runs;
// after Close it reports ErrClosed.
func TestUnloadModuleThenReload_C6_B1(t *testing.T) {
	d := openGPUs(t, Config{})[0]
	mod := []byte(userPTX)
	k := addOneKernel(mod)
	n := 1000
	m := mustAlloc(t, d, device.MemHost, 4*n)
	launch := device.LaunchOp{Kernel: k, Range: device.NDRange{Global: [3]int{1, 1, n}}, Args: []device.Arg{ptrArg(m, 4), scalarU32(uint32(n))}}
	check := func(add uint32) {
		t.Helper()
		for i, v := range u32s(m.Host) {
			if v != uint32(i)+add {
				t.Fatalf("after %d launches of add_one: [%d] = %d, want %d", add, i, v, uint32(i)+add)
			}
		}
	}
	for i := range u32s(m.Host) {
		u32s(m.Host)[i] = uint32(i)
	}
	if err := do(t, d, 0, launch); err != nil {
		t.Fatal(err)
	}
	check(1)
	if !loaded(t, d, mod) {
		t.Fatal("the module is not in the device's cache after a launch")
	}
	if err := d.UnloadModule([]byte(userPTX)); err != nil || !loaded(t, d, mod) {
		t.Fatalf("UnloadModule(an equal module at another address) = %v, loaded %v; want nil and still loaded", err, loaded(t, d, mod))
	}
	if err := d.UnloadModule(nil); err != nil {
		t.Fatalf("UnloadModule(nil) = %v, want nil", err)
	}
	if err := d.UnloadModule(mod); err != nil {
		t.Fatalf("UnloadModule = %v", err)
	}
	if loaded(t, d, mod) {
		t.Fatal("the module is still cached after UnloadModule")
	}
	if _, ok := entryCache.Load(moduleKey{unsafe.SliceData(mod), len(mod)}); ok {
		t.Error("the module's parsed entries are still cached after UnloadModule")
	}
	if err := d.UnloadModule(mod); err != nil {
		t.Fatalf("UnloadModule of a module no longer loaded = %v, want nil", err)
	}
	if err := do(t, d, 0, launch); err != nil {
		t.Fatalf("launch after unloading its module: %v (it should load it again)", err)
	}
	check(2)
	if !loaded(t, d, mod) {
		t.Fatal("the module is not cached again after the launch that reloaded it")
	}
	if err := d.UnloadModule(mod); err != nil {
		t.Fatalf("second UnloadModule = %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.UnloadModule(mod); !errors.Is(err, device.ErrClosed) {
		t.Errorf("UnloadModule after Close = %v, want ErrClosed", err)
	}
}
