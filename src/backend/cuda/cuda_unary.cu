// Element-wise activations on the GPU: GELU (erf and tanh forms), QuickGELU, SiLU, SCALE and
// GEGLU. Math in f32 whatever the storage dtype, one rounding on store.
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

template <UnaryOp OP>
__device__ __forceinline__ float apply(float x, float alpha, float beta) {
  if constexpr (OP == UnaryOp::GELU) {
    return gelu_erf(x);
  } else if constexpr (OP == UnaryOp::GELU_TANH) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  } else if constexpr (OP == UnaryOp::QUICK_GELU) {
    return x / (1.0f + expf(-1.702f * x));
  } else if constexpr (OP == UnaryOp::SILU) {
    return x / (1.0f + expf(-x));
  } else {
    return x * alpha + beta;
  }
}

template <typename T, UnaryOp OP>
__global__ void unary_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, float alpha,
                             float beta) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(apply<OP>(to_f32(x[i]), alpha, beta));
}

template <typename T>
__global__ void geglu_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n) {
  const int64_t total = rows * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / n, c = i - r * n;
    const T* row = x + r * 2 * n;
    y[i] = from_f32<T>(to_f32(row[c]) * gelu_erf(to_f32(row[n + c])));
  }
}

template <typename T, UnaryOp OP>
cudaError_t launch_unary(const void* x, void* y, int64_t n, float alpha, float beta, cudaStream_t s) {
  unary_kernel<T, OP><<<grid_1d(n, 256), 256, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                       n, alpha, beta);
  return cudaGetLastError();
}

}  // namespace

cudaError_t unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, float alpha, float beta,
                  cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    switch (op) {
      case UnaryOp::GELU: return launch_unary<T, UnaryOp::GELU>(x, y, n, alpha, beta, s);
      case UnaryOp::GELU_TANH: return launch_unary<T, UnaryOp::GELU_TANH>(x, y, n, alpha, beta, s);
      case UnaryOp::QUICK_GELU: return launch_unary<T, UnaryOp::QUICK_GELU>(x, y, n, alpha, beta, s);
      case UnaryOp::SILU: return launch_unary<T, UnaryOp::SILU>(x, y, n, alpha, beta, s);
      case UnaryOp::SCALE: return launch_unary<T, UnaryOp::SCALE>(x, y, n, alpha, beta, s);
    }
    return cudaErrorInvalidValue;
  });
}

cudaError_t geglu(DType t, const void* x, void* y, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    geglu_kernel<T><<<grid_1d(rows * n, 256), 256, 0, s>>>(static_cast<const T*>(x),
                                                           static_cast<T*>(y), rows, n);
    return cudaGetLastError();
  });
}

}  // namespace hr::cuda
