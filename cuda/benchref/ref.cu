// Hand-written CUDA C references for the built-in kernels' benchmarks
// (scripts/bench, cuda's BenchmarkKernels). Simple, honest kernels of the
// kind one writes by hand, not tuned down: 32-bit indices, const
// __restrict__ inputs, nothing else. They take plain arguments, not acpp's
// layout, and are launched raw by the benchmark.

// jacobi_naive: one point per thread; launched with 32x8 blocks.
extern "C" __global__ void jacobi_naive(const float *__restrict__ a, float *__restrict__ b, int n) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= n || y >= n) return;
  int i = y * n + x;
  if (x == 0 || y == 0 || x == n - 1 || y == n - 1) {
    b[i] = a[i];
    return;
  }
  b[i] = 0.25f * (a[i - n] + a[i + n] + a[i - 1] + a[i + 1]);
}

// jacobi_strip: one column strip of rows_per_thread rows per thread; the
// launch's blockDim.y * gridDim.y * rows_per_thread covers n.
extern "C" __global__ void jacobi_strip(const float *__restrict__ a, float *__restrict__ b, int n, int rows_per_thread) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= n) return;
  int y0 = (blockIdx.y * blockDim.y + threadIdx.y) * rows_per_thread;
  int y1 = min(y0 + rows_per_thread, n);
  for (int y = y0; y < y1; y++) {
    int i = y * n + x;
    if (x == 0 || y == 0 || x == n - 1 || y == n - 1)
      b[i] = a[i];
    else
      b[i] = 0.25f * (a[i - n] + a[i + n] + a[i - 1] + a[i + 1]);
  }
}

// saxpy: one element per thread, 256 threads per block.
extern "C" __global__ void saxpy(int n, float a, const float *__restrict__ x, float *__restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// empty: for launch and submit->wait baselines.
extern "C" __global__ void empty() {}

// fill: one element per thread, 256 threads per block.
extern "C" __global__ void fill(float *__restrict__ p, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

// copy: one element per thread, 256 threads per block.
extern "C" __global__ void copy(const float *__restrict__ s, float *__restrict__ d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] = s[i];
}
