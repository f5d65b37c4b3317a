package acpp

import "github.com/acpp/acpp/device"

// Address-space pointer types for Go kernels (A1, A4), after SYCL's
// multi_ptr: a named space converts implicitly (a method without failure)
// to generic, and a generic pointer converts back explicitly only to the
// space its memory really is in. On the CPU all spaces are host memory; the
// types keep kernels written for the CPU honest about what a GPU version
// may do.

// GlobalPtr points to global memory (a buffer or USM allocation).
type GlobalPtr[T any] struct{ p []T }

// LocalPtr points to work-group local memory.
type LocalPtr[T any] struct{ p []T }

// PrivatePtr points to an item's private memory.
type PrivatePtr[T any] struct{ p []T }

// GenericPtr points to memory of any space; it remembers which.
type GenericPtr[T any] struct {
	p     []T
	space device.AddrSpace
}

// GlobalOf makes a global pointer to an accessor's data.
func GlobalOf[T any](a Unranged[T]) GlobalPtr[T] { return GlobalPtr[T]{a.Slice()} }

// LocalOf makes a local pointer to a group's local memory.
func LocalOf[T any](l Local[T], g Group) LocalPtr[T] { return LocalPtr[T]{l.Slice(g)} }

// PrivateOf makes a private pointer to a slice of the kernel's own.
func PrivateOf[T any](s []T) PrivatePtr[T] { return PrivatePtr[T]{s} }

// Generic converts implicitly to a generic pointer.
func (g GlobalPtr[T]) Generic() GenericPtr[T] { return GenericPtr[T]{g.p, device.Global} }

// Generic converts implicitly to a generic pointer.
func (l LocalPtr[T]) Generic() GenericPtr[T] { return GenericPtr[T]{l.p, device.Local} }

// Generic converts implicitly to a generic pointer.
func (p PrivatePtr[T]) Generic() GenericPtr[T] { return GenericPtr[T]{p.p, device.Private} }

// Space is the space the memory really is in.
func (g GenericPtr[T]) Space() device.AddrSpace { return g.space }

// ToGlobal converts explicitly back; ok is false if the memory is not
// global, and the pointer is then the zero one (it points to nothing).
func (g GenericPtr[T]) ToGlobal() (GlobalPtr[T], bool) {
	if g.space != device.Global {
		return GlobalPtr[T]{}, false
	}
	return GlobalPtr[T]{g.p}, true
}

// ToLocal converts explicitly back; ok is false if the memory is not
// local, and the pointer is then the zero one.
func (g GenericPtr[T]) ToLocal() (LocalPtr[T], bool) {
	if g.space != device.Local {
		return LocalPtr[T]{}, false
	}
	return LocalPtr[T]{g.p}, true
}

// ToPrivate converts explicitly back; ok is false if the memory is not
// private, and the pointer is then the zero one.
func (g GenericPtr[T]) ToPrivate() (PrivatePtr[T], bool) {
	if g.space != device.Private {
		return PrivatePtr[T]{}, false
	}
	return PrivatePtr[T]{g.p}, true
}

// At reads element i.
func (g GlobalPtr[T]) At(i int) T { return g.p[i] }

// Set writes element i.
func (g GlobalPtr[T]) Set(i int, v T) { g.p[i] = v }

// At reads element i.
func (l LocalPtr[T]) At(i int) T { return l.p[i] }

// Set writes element i.
func (l LocalPtr[T]) Set(i int, v T) { l.p[i] = v }

// At reads element i.
func (p PrivatePtr[T]) At(i int) T { return p.p[i] }

// Set writes element i.
func (p PrivatePtr[T]) Set(i int, v T) { p.p[i] = v }

// At reads element i.
func (g GenericPtr[T]) At(i int) T { return g.p[i] }

// Set writes element i.
func (g GenericPtr[T]) Set(i int, v T) { g.p[i] = v }
