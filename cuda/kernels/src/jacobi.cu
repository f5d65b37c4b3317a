// jacobi2d: one Jacobi step on a 2D grid (range {1, rows, cols}):
// out = 0.25*(((north + south) + west) + east) inside, out = in on the
// border. in and out are unranged accessors of the same shape.
//
// Each thread computes a strip of rows of one column: the rows of the launch
// range are shared out evenly over the threads the grid has along y, so the
// kernel is right for any grid (one point per thread, the plain stencil, when
// the grid covers the range, as for a kernel of the user's); the built-in's
// launch hint
// (../kernels.go, Builtin.Launch) gives it a grid a few times smaller than
// the range. Down a strip, a point's north and the point itself are the
// previous point's centre and south, kept in registers: three loads per
// point instead of four. Indices are 32-bit when the grid has fewer than
// 2^31 elements. The order of additions is the Go implementation's, so the
// results match it bit for bit (no multiply-add is involved).
#include "acpp.cuh"

template <typename I>
__device__ __forceinline__ void jacobi_rows(const float *__restrict__ a, float *__restrict__ b, I rows, I cols, I x,
                                            I y, I yend) {
  // rows [y, yend) of column x, absolute coordinates; y < yend.
  I i = y * cols + x;
  if (x == 0 || x + 1 >= cols) {
    for (; y < yend; y++, i += cols) b[i] = __ldg(a + i);
    return;
  }
  if (y == 0) {
    b[i] = __ldg(a + i);
    y++;
    i += cols;
  }
  I last = yend < rows - 1 ? yend : rows - 1; // interior rows end here
  if (y < last) {
    float n = __ldg(a + i - cols), c = __ldg(a + i);
#pragma unroll 4
    for (; y < last; y++, i += cols) {
      float s = __ldg(a + i + cols);
      float t = n + s;
      t = t + __ldg(a + i - 1);
      t = t + __ldg(a + i + 1);
      b[i] = 0.25f * t;
      n = c;
      c = s;
    }
  }
  if (y < yend) b[i] = __ldg(a + i); // the last row
}

template <typename I>
__device__ __forceinline__ void jacobi_body(const acpp_nd &nd, const float *__restrict__ a, float *__restrict__ b,
                                            I rows, I cols) {
  I g1 = (I)nd.global[1], g2 = (I)nd.global[2], o1 = (I)nd.offset[1], o2 = (I)nd.offset[2];
  I ty = (I)blockIdx.y * blockDim.y + threadIdx.y, ny = (I)gridDim.y * blockDim.y;
  I x = (I)blockIdx.x * blockDim.x + threadIdx.x, nx = (I)gridDim.x * blockDim.x;
  if (ny >= g1 && nx >= g2) {
    // One point per thread (a grid that covers the range, as without the
    // launch hint): the plain stencil, without the strip's set-up.
    if (ty >= g1 || x >= g2) return;
    I y = ty + o1, cx = x + o2, i = y * cols + cx;
    if (y == 0 || cx == 0 || y + 1 >= rows || cx + 1 >= cols) {
      b[i] = __ldg(a + i);
      return;
    }
    float t = __ldg(a + i - cols) + __ldg(a + i + cols);
    t = t + __ldg(a + i - 1);
    t = t + __ldg(a + i + 1);
    b[i] = 0.25f * t;
    return;
  }
  I per = (g1 + ny - 1) / ny; // rows per thread
  I y0 = ty * per;
  if (y0 >= g1) return;
  I y1 = y0 + per < g1 ? y0 + per : g1;
  for (; x < g2; x += nx) jacobi_rows<I>(a, b, rows, cols, x + o2, y0 + o1, y1 + o1);
}

extern "C" __global__ void jacobi2d(acpp_nd nd, acpp_unranged in, acpp_unranged out) {
  // Dimension 0 of the range is not used (as in the Go implementation):
  // only the first layer of threads along z works.
  if (blockIdx.z * blockDim.z + threadIdx.z != 0 || nd.global[0] == 0) return;
  const float *a = (const float *)in.ptr;
  float *b = (float *)out.ptr;
  u64 rows = in.range[1], cols = in.range[2];
  if (rows * cols < (1ull << 31) && nd.global[1] + nd.offset[1] <= rows && nd.global[2] + nd.offset[2] <= cols)
    jacobi_body<unsigned>(nd, a, b, (unsigned)rows, (unsigned)cols);
  else
    jacobi_body<u64>(nd, a, b, rows, cols);
}
