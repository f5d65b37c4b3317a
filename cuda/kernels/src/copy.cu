// copy_f32: dst[dst.offset + id] = src[src.offset + id] over a 3D range; both
// are ranged accessors (pointer + buffer range + access offset + access
// range). Ids outside either access range are skipped.
#include "acpp.cuh"

extern "C" __global__ void copy_f32(acpp_nd nd, acpp_ranged src, acpp_ranged dst) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  for (int d = 0; d < 3; d++) {
    if (id[d] >= src.arange[d] || id[d] >= dst.arange[d]) return;
  }
  const float *s = (const float *)src.ptr;
  float *o = (float *)dst.ptr;
  o[acpp_linear(dst.range, dst.offset[0] + id[0], dst.offset[1] + id[1], dst.offset[2] + id[2])] =
      s[acpp_linear(src.range, src.offset[0] + id[0], src.offset[1] + id[1], src.offset[2] + id[2])];
}
