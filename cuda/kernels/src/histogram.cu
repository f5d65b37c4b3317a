// histogram_u32: bins[in[i] % nbins] += 1 for i < n, counted per work-group
// in local memory with shared-memory atomics, then merged into bins with
// global atomics. Launched grouped, 1D; lbins is a local accessor of nbins
// uint32 (A3).
#include "acpp.cuh"

extern "C" __global__ void histogram_u32(acpp_nd nd, const unsigned *in, u64 n, unsigned *bins,
                                         unsigned nbins, u64 lbins) {
  unsigned *lb = (unsigned *)(acpp_local + lbins);
  for (unsigned b = threadIdx.x; b < nbins; b += blockDim.x) lb[b] = 0;
  __syncthreads();
  u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    atomicAdd(&lb[in[i] % nbins], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < nbins; b += blockDim.x) {
    if (lb[b]) atomicAdd(&bins[b], lb[b]);
  }
}
