// SOFTMAX over the last dim of (x * scale): one block per row, max / sum-of-exp / write passes
// with f32 statistics.
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

template <typename T>
__global__ void softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, float scale) {
  __shared__ float scratch[32];
  const T* row = x + int64_t(blockIdx.x) * n;
  T* out = y + int64_t(blockIdx.x) * n;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, to_f32(row[i]) * scale);
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(to_f32(row[i]) * scale - m);
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    out[i] = from_f32<T>(expf(to_f32(row[i]) * scale - m) * inv);
}

}  // namespace

cudaError_t softmax(DType t, const void* x, void* y, int64_t rows, int64_t n, float scale,
                    cudaStream_t s) {
  if (rows == 0 || n == 0) return cudaSuccess;
  const int block = n <= 128 ? 64 : n <= 1024 ? 128 : 256;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    // One block per row: rows beyond the 2^31-1 grid limit do not occur (checked by the caller).
    return launch(softmax_kernel<T>, dim3(unsigned(rows)), dim3(unsigned(block)), 0, s,
                  static_cast<const T*>(x), static_cast<T*>(y), n, scale);
  });
}

}  // namespace hr::cuda
