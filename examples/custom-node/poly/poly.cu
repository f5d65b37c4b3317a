// custom.poly: y[i] = a*x[i]*x[i] + y[i] over a 1D range, x and y raw
// pointers (one pointer each). Compiled by NVRTC on the node's GPU at the
// kernel's first launch (-fmad=false: the same roundings as the Go form).
#include "acpp.cuh"

extern "C" __global__ void poly(acpp_nd nd, float a, const float *x, float *y) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  u64 i = id[2] + nd.offset[2];
  y[i] = a * x[i] * x[i] + y[i];
}
