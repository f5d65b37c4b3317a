// Package gpucheck holds end-to-end tests of the embedded runtime on a GPU:
// the CUDA backend registered by import, the built-in kernels of package
// kernels, and coherence moving pages between host and GPU. Without a CUDA
// driver and device the tests skip. They live apart from the root package
// so that its own tests stay on the CPU on every machine.
package gpucheck
