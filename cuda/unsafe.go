package cuda

import "unsafe"

// uintptrOf is the address of b's first byte (0 for an empty slice). The
// caller keeps b alive while the address is in use.
func uintptrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}
