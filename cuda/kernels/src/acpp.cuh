// acpp.cuh: the argument layout every acpp kernel shares (see ../doc.go).
//
// Every kernel launched through the runtime takes an acpp_nd first: the
// launch's global range and global offset, dimension 2 fastest (a 1D range n
// is {1, 1, n}). CUDA's x runs along dimension 2, y along 1, z along 0.
// Accessor arguments follow their variant (V4): a raw accessor or USM
// pointer is one pointer; an unranged accessor is acpp_unranged; a ranged
// accessor is acpp_ranged. A local accessor is a byte offset into the
// launch's dynamic shared memory (A3).
#pragma once

typedef unsigned long long u64;

struct acpp_nd {
  u64 global[3];
  u64 offset[3];
};

struct acpp_unranged {
  void *ptr;
  u64 range[3];
};

struct acpp_ranged {
  void *ptr;
  u64 range[3];
  u64 offset[3];
  u64 arange[3];
};

extern __shared__ __align__(16) unsigned char acpp_local[];

// acpp_id computes this thread's global id (without the offset); it returns
// false for threads past the range (the grid is rounded up).
__device__ __forceinline__ bool acpp_id(const acpp_nd &nd, u64 id[3]) {
  id[2] = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  id[1] = (u64)blockIdx.y * blockDim.y + threadIdx.y;
  id[0] = (u64)blockIdx.z * blockDim.z + threadIdx.z;
  return id[0] < nd.global[0] && id[1] < nd.global[1] && id[2] < nd.global[2];
}

__device__ __forceinline__ u64 acpp_linear(const u64 range[3], u64 i0, u64 i1, u64 i2) {
  return (i0 * range[1] + i1) * range[2] + i2;
}
