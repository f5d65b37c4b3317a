// Utility kernels for tests and benchmarks: empty (launch overhead) and
// spin (a kernel that keeps the GPU busy for a number of clock cycles, to
// measure how much host CPU waiting for it costs).
#include "acpp.cuh"

extern "C" __global__ void empty(acpp_nd nd) {}

extern "C" __global__ void spin(acpp_nd nd, u64 cycles) {
  long long start = clock64();
  while ((u64)(clock64() - start) < cycles) {
  }
}
