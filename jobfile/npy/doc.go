// Package npy reads and writes NumPy .npy files (format versions 1.0, 2.0
// and 3.0; https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html)
// of little-endian numbers in C order: the element types a job's buffers
// have.
//
// # Usage
//
//	h, err := npy.ReadHeader(r)       // then io.ReadFull(r, dst) for h.DataBytes()
//	a, err := npy.Decode(fileBytes)   // header and data at once
//	err = npy.Write(w, "<f4", []int{512, 512}, data)
//
// # Errors
//
// Every malformed file is an error wrapping ErrFormat that says what is
// wrong; types it does not handle (big-endian, Fortran order, objects,
// strings, complex) wrap ErrUnsupported and say how to convert the array
// in NumPy. Decoding never panics and never allocates more than the input
// justifies (the fuzz target checks it).
package npy
