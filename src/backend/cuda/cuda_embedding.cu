// EMBEDDING (row gather with ids checked per Note [deferred op errors]) and TIMESTEP_EMBEDDING
// (f32 math step by step as the CPU reference rounds it).
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

// One thread per 4-byte word of an output row (rows of 16-bit tables with odd D fall back to
// 2-byte units).
template <typename Id, typename W>
__global__ void embedding_kernel(const Id* __restrict__ ids, const W* __restrict__ table,
                                 W* __restrict__ y, int64_t n_ids, int64_t row_words,
                                 int64_t vocab, int* error_flag) {
  const int64_t n = n_ids * row_words;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / row_words, c = i - r * row_words;
    const int64_t id = int64_t(ids[r]);
    if (id < 0 || id >= vocab) {
      y[i] = W(0);
      *reinterpret_cast<volatile int*>(error_flag) = 1;
    } else {
      y[i] = table[id * row_words + c];
    }
  }
}

template <typename T>
__global__ void timestep_kernel(const float* __restrict__ t, T* __restrict__ y, int64_t n, int dim,
                                float neg_log_period, float denom, bool flip) {
  const int half = dim / 2;
  const int64_t total = n * dim;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim;
    const int col = int(i - r * dim);
    float v = 0.0f;  // the odd-dim padding column
    if (col < 2 * half) {
      const int k = col < half ? col : col - half;
      // Each step rounds to f32 as PyTorch does: (-log(P) * k) / denom, then exp, then t * f.
      const float e = __fmul_rn(neg_log_period, float(k));
      const float f = expf(__fdiv_rn(e, denom));
      const float arg = __fmul_rn(t[r], f);
      const bool first = col < half;
      v = (first == flip) ? cosf(arg) : sinf(arg);
    }
    y[i] = from_f32<T>(v);
  }
}

template <typename Id>
cudaError_t launch_embedding(const void* ids, int64_t n_ids, size_t row_bytes, const void* table,
                             int64_t vocab, void* y, int* flag, cudaStream_t s) {
  const Id* pi = static_cast<const Id*>(ids);
  if (row_bytes % 4 == 0) {
    const int64_t words = int64_t(row_bytes / 4);
    return launch(embedding_kernel<Id, uint32_t>, dim3(grid_1d(n_ids * words, 256)), dim3(256), 0,
                  s, pi, static_cast<const uint32_t*>(table), static_cast<uint32_t*>(y), n_ids,
                  words, vocab, flag);
  }
  const int64_t words = int64_t(row_bytes / 2);
  return launch(embedding_kernel<Id, uint16_t>, dim3(grid_1d(n_ids * words, 256)), dim3(256), 0, s,
                pi, static_cast<const uint16_t*>(table), static_cast<uint16_t*>(y), n_ids, words,
                vocab, flag);
}

}  // namespace

cudaError_t embedding(DType id_t, const void* ids, int64_t n_ids, size_t row_bytes,
                      const void* table, int64_t vocab, void* y, int* error_flag,
                      cudaStream_t s) {
  if (n_ids == 0 || row_bytes == 0) return cudaSuccess;
  if (row_bytes % 2 != 0) return cudaErrorInvalidValue;
  if (id_t == DType::I32) return launch_embedding<int32_t>(ids, n_ids, row_bytes, table, vocab, y, error_flag, s);
  if (id_t == DType::I64) return launch_embedding<int64_t>(ids, n_ids, row_bytes, table, vocab, y, error_flag, s);
  return cudaErrorInvalidValue;
}

cudaError_t timestep_embedding(const float* t, int64_t n, int dim, float neg_log_period,
                               float denom, bool flip_sin_to_cos, DType out_t, void* y,
                               cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_float(out_t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch(timestep_kernel<T>, dim3(grid_1d(n * dim, 256)), dim3(256), 0, s, t,
                  static_cast<T*>(y), n, dim, neg_log_period, denom, flip_sin_to_cos);
  });
}

}  // namespace hr::cuda
