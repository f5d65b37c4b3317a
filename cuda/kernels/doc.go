// Package kernels is the CUDA backend's built-in kernel library: one .cu
// source per kernel in src/, the PTX that nvcc made of it in ptx/ (checked
// in, embedded with go:embed), the declaration of each kernel's parameters
// for the device registry, and a parser of PTX entry points that checks a
// module's parameter list against a launch's argument layout.
//
// # Regenerating the PTX
//
// On a machine with nvcc (the GPU machine): cuda/kernels/gen.sh, then commit
// ptx/. The PTX targets compute_80 and is JIT-compiled by the driver for the
// GPU at hand (Ampere and later, H100/H200 included); see docs/CUDA.md.
//
// # Argument layout (V4, A3)
//
// Every kernel takes, before its declared parameters, the launch's ND range
// (struct acpp_nd in src/acpp.cuh: global range and global offset, three
// u64 each, dimension 2 fastest). Then each declared parameter, packed at
// its natural alignment:
//
//	pointer (raw accessor, USM)   8 bytes: the device address
//	unranged accessor             32 bytes: address, buffer range[3]
//	ranged accessor               80 bytes: address, buffer range[3], access offset[3], access range[3]
//	local memory                  8 bytes: byte offset into the dynamic shared memory
//	scalar                        its bytes, aligned to min(size, 8)
//
// # Launch hints
//
// A built-in may come with a Launch hint (LaunchFor): the block and how many
// items of the range each thread covers, so that the CUDA backend launches a
// grid a few times smaller than the range (jacobi2d: column strips of 8 rows;
// copy_f32: 4 elements of a row). Such a kernel shares the range out over the
// threads it is given, so it is right under any grid; the hint only makes it
// fast. The bytes of the built-in's PTX (or a copy of them) carry the hint,
// nothing else does.
//
// Jobs can ship their own PTX: Entries lists a module's entry points and
// their parameter sizes, and CheckLayout compares them with the layout above.
package kernels
