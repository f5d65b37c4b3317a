// fill_f32: out[i] = v for every id of the (up to 3D) range, out an unranged
// accessor (pointer + buffer range).
#include "acpp.cuh"

extern "C" __global__ void fill_f32(acpp_nd nd, acpp_unranged out, float v) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  float *p = (float *)out.ptr;
  p[acpp_linear(out.range, id[0] + nd.offset[0], id[1] + nd.offset[1], id[2] + nd.offset[2])] = v;
}
