//go:build !amd64

package cpu

// haveStream is false: only amd64 has streamRepeat; fills are
// device.FillHost.
const haveStream = false

const streamUnit = 128

func streamRepeat(dst, src []byte) { panic("cpu: streamRepeat without streaming stores") }

func addrOf(b []byte) uintptr { return 0 }
