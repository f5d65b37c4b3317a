// Package nvrtc compiles CUDA C source to PTX at run time with NVIDIA's
// runtime compiler, libnvrtc, loaded with github.com/ebitengine/purego like
// the driver (cuda/driver): no cgo, every binary still builds with
// CGO_ENABLED=0, and a machine without libnvrtc just cannot compile CUDA C
// (ErrNoNVRTC says how to get it); PTX kernels work without it.
//
// Compile targets one compute capability (--gpu-architecture=compute_XY,
// lowered to the newest architecture this NVRTC supports when the GPU is
// newer) and caches the PTX on disk, keyed by the SHA-256 of the source,
// its file name, the options, the architecture and NVRTC's version. A
// cached entry carries a checksum of its PTX; one that does not match
// (a torn or edited file) is compiled again and rewritten. Entries are
// written to a temporary file and renamed into place, so concurrent
// compilers (two nodes on one host) never see half an entry.
//
// A compile error comes back as a *CompileError whose Error text is the
// compiler's log with each "name(line): error: ..." rewritten to
// "name:line: error: ...", the form editors and go vet print, so the file
// and line are those of the user's source.
//
// # Usage
//
//	c := nvrtc.NewCompiler(nvrtc.Config{})          // Lib loaded on first use
//	r, err := c.Compile(nvrtc.Program{Source: src, Name: "saxpy.cu"}, 9, 0)
//	// errors.Is(err, nvrtc.ErrNoNVRTC): install libnvrtc (see ErrNoNVRTC)
//	// errors.As(err, new(*nvrtc.CompileError)): the user's source is wrong
//	mod := r.PTX                                      // load with cuModuleLoadData
package nvrtc
