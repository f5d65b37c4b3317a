// saxpy_sq: y[i] = a*x[i] + y[i]*y[i], a kernel of the job's own, given as
// CUDA C. acpp-submit does not compile it: NVRTC does, on the machine whose
// GPU runs it (docs/CUDA.md, "CUDA C at run time").
#include "acpp.cuh"

extern "C" __global__ void saxpy_sq(acpp_nd nd, float a, const float *x, float *y) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  u64 i = id[2] + nd.offset[2];
  y[i] = a * x[i] + y[i] * y[i];
}
