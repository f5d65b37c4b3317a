// matmul_tiled: C[M×N] = A[M×K] · B[K×N] (row-major, raw pointers) with two
// local accessors (tiles of A and B in dynamic shared memory, A3). Launched
// grouped: global {1, M, N}, local {1, T, T}; K may be any size.
#include "acpp.cuh"

extern "C" __global__ void matmul_tiled(acpp_nd nd, const float *A, const float *B, float *C,
                                        u64 M, u64 N, u64 K, u64 tileA, u64 tileB) {
  const unsigned T = blockDim.x;
  float *As = (float *)(acpp_local + tileA);
  float *Bs = (float *)(acpp_local + tileB);
  u64 row = (u64)blockIdx.y * T + threadIdx.y;
  u64 col = (u64)blockIdx.x * T + threadIdx.x;
  float acc = 0.0f;
  for (u64 t = 0; t < K; t += T) {
    u64 ka = t + threadIdx.x, kb = t + threadIdx.y;
    As[threadIdx.y * T + threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
    Bs[threadIdx.y * T + threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
    __syncthreads();
    for (unsigned k = 0; k < T; k++) {
      acc = acc + As[threadIdx.y * T + k] * Bs[k * T + threadIdx.x];
    }
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
