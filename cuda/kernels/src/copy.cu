// copy_f32: dst[dst.offset + id] = src[src.offset + id] over a 3D range; both
// are ranged accessors (pointer + buffer range + access offset + access
// range). Ids outside either access range are skipped.
//
// Each thread copies elements x, x + nx, x + 2nx, ... of one row (nx the
// threads the grid has along x): one element when the grid covers the range,
// a few with the built-in's launch hint (../kernels.go), which spreads the
// row-base arithmetic over them. Indices are 32-bit when both buffers have
// fewer than 2^31 elements and the range is shorter than 2^31 along x.
#include "acpp.cuh"

template <typename I>
__device__ __forceinline__ I row_base(const acpp_ranged &a, I z, I y) {
  return (((I)a.offset[0] + z) * (I)a.range[1] + (I)a.offset[1] + y) * (I)a.range[2] + (I)a.offset[2];
}

template <typename I>
__device__ __forceinline__ void copy_rows(const acpp_nd &nd, const acpp_ranged &src, const acpp_ranged &dst) {
  I n0 = (I)min(nd.global[0], min(src.arange[0], dst.arange[0]));
  I n1 = (I)min(nd.global[1], min(src.arange[1], dst.arange[1]));
  I n2 = (I)min(nd.global[2], min(src.arange[2], dst.arange[2]));
  I z = (I)blockIdx.z * blockDim.z + threadIdx.z, y = (I)blockIdx.y * blockDim.y + threadIdx.y;
  if (z >= n0 || y >= n1) return;
  const float *s = (const float *)src.ptr + row_base<I>(src, z, y);
  float *o = (float *)dst.ptr + row_base<I>(dst, z, y);
  I nx = (I)gridDim.x * blockDim.x;
  for (I x = (I)blockIdx.x * blockDim.x + threadIdx.x; x < n2; x += nx) o[x] = s[x];
}

extern "C" __global__ void copy_f32(acpp_nd nd, acpp_ranged src, acpp_ranged dst) {
  if (src.range[0] * src.range[1] * src.range[2] < (1ull << 31) &&
      dst.range[0] * dst.range[1] * dst.range[2] < (1ull << 31) && nd.global[2] < (1ull << 31))
    copy_rows<unsigned>(nd, src, dst);
  else
    copy_rows<u64>(nd, src, dst);
}
