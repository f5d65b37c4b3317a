// jacobi2d: one Jacobi step on a 2D grid (range {1, rows, cols}):
// out = 0.25*(north + south + west + east) inside, out = in on the border.
// in and out are unranged accessors of the same shape.
#include "acpp.cuh"

extern "C" __global__ void jacobi2d(acpp_nd nd, acpp_unranged in, acpp_unranged out) {
  u64 id[3];
  if (!acpp_id(nd, id)) return;
  u64 y = id[1] + nd.offset[1], x = id[2] + nd.offset[2];
  u64 rows = in.range[1], cols = in.range[2];
  const float *a = (const float *)in.ptr;
  float *b = (float *)out.ptr;
  u64 i = y * cols + x;
  if (y == 0 || x == 0 || y + 1 >= rows || x + 1 >= cols) {
    b[i] = a[i];
    return;
  }
  float s = a[i - cols] + a[i + cols];
  s = s + a[i - 1];
  s = s + a[i + 1];
  b[i] = 0.25f * s;
}
