// reduce_sum_f32: each work-group sums its items of in (0 past n) by a tree
// in local memory and writes the sum to partial[group]. Launched grouped,
// 1D, with a power-of-two group size; scratch is a local accessor of
// group-size floats (A3).
#include "acpp.cuh"

extern "C" __global__ void reduce_sum_f32(acpp_nd nd, const float *in, float *partial, u64 n, u64 scratch) {
  float *s = (float *)(acpp_local + scratch);
  unsigned t = threadIdx.x;
  u64 i = (u64)blockIdx.x * blockDim.x + t;
  s[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] = s[t] + s[t + stride];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}
