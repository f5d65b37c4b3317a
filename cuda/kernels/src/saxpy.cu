// saxpy: y[i] = a*x[i] + y[i] over a 1D range. x and y are raw accessors
// (one pointer each, V4).
#include "acpp.cuh"

extern "C" __global__ void saxpy(acpp_nd nd, float a, const float *x, float *y) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  u64 i = id[2] + nd.offset[2];
  y[i] = a * x[i] + y[i];
}
