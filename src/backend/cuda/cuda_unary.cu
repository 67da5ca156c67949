// Element-wise activations on the GPU: GELU (erf and tanh forms), QuickGELU, SiLU, tanh, SCALE and
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
  } else if constexpr (OP == UnaryOp::TANH) {
    return tanhf(x);
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

// 16 bytes per thread (Note [vectorised binary] in cuda_binary.cu): n % kVec == 0, x and y
// 16-byte aligned.
template <typename T, UnaryOp OP>
__global__ void unary_vec_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t nv,
                                 float alpha, float beta) {
  constexpr int kVec = kVecOf<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 a = x[i];
    const T* av = reinterpret_cast<const T*>(&a);
    uint4 o;
    T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
    for (int j = 0; j < kVec; ++j) ov[j] = from_f32<T>(apply<OP>(to_f32(av[j]), alpha, beta));
    y[i] = o;
  }
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

// Note [vectorised GEGLU]
// GEGLU reads 2n and writes n values per row and does little arithmetic: memory bound (5 GB per
// SDXL step). One thread per element with 2-byte loads and a 64-bit division per element ran at
// ~1.2 TB/s (4.1 ms of the SDXL step, the v3 profile in bench/PERF_NOTES.md). Here each thread
// moves 16 bytes of each half and writes 16 bytes, with one division per 16 bytes: rows whose n
// is a multiple of 16 / sizeof(T) (every UNet's: 1280 to 5120) with 16-byte aligned tensors.
template <typename T>
__global__ void geglu_vec_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                 int64_t n) {
  constexpr int kVec = kVecOf<T>;
  const int64_t nv = n / kVec, total = rows * nv;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / nv, c = (i - r * nv) * kVec;
    const T* row = x + r * 2 * n;
    const uint4 a = *reinterpret_cast<const uint4*>(row + c);
    const uint4 g = *reinterpret_cast<const uint4*>(row + n + c);
    const T* av = reinterpret_cast<const T*>(&a);
    const T* gv = reinterpret_cast<const T*>(&g);
    uint4 o;
    T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
    for (int j = 0; j < kVec; ++j) ov[j] = from_f32<T>(to_f32(av[j]) * gelu_erf(to_f32(gv[j])));
    *reinterpret_cast<uint4*>(y + r * n + c) = o;
  }
}

template <typename T, UnaryOp OP>
cudaError_t launch_unary(const void* x, void* y, int64_t n, float alpha, float beta,
                         cudaStream_t s) {
  constexpr int kVec = kVecOf<T>;
  const bool aligned = aligned16(x) && aligned16(y);
  if (aligned && n % kVec == 0)
    return launch(unary_vec_kernel<T, OP>, dim3(grid_1d(n / kVec, 256)), dim3(256), 0, s,
                  static_cast<const uint4*>(x), static_cast<uint4*>(y), n / kVec, alpha, beta);
  return launch(unary_kernel<T, OP>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                static_cast<const T*>(x), static_cast<T*>(y), n, alpha, beta);
}

}  // namespace

cudaError_t unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, float alpha, float beta,
                  cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    switch (op) {
      case UnaryOp::GELU:
        return launch_unary<T, UnaryOp::GELU>(x, y, n, alpha, beta, s);
      case UnaryOp::GELU_TANH:
        return launch_unary<T, UnaryOp::GELU_TANH>(x, y, n, alpha, beta, s);
      case UnaryOp::QUICK_GELU:
        return launch_unary<T, UnaryOp::QUICK_GELU>(x, y, n, alpha, beta, s);
      case UnaryOp::SILU:
        return launch_unary<T, UnaryOp::SILU>(x, y, n, alpha, beta, s);
      case UnaryOp::TANH:
        return launch_unary<T, UnaryOp::TANH>(x, y, n, alpha, beta, s);
      case UnaryOp::SCALE:
        return launch_unary<T, UnaryOp::SCALE>(x, y, n, alpha, beta, s);
    }
    return cudaErrorInvalidValue;
  });
}

cudaError_t geglu(DType t, const void* x, void* y, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows * n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    constexpr int kVec = kVecOf<T>;
    const bool aligned = aligned16(x) && aligned16(y);
    if (aligned && n % kVec == 0)  // Note [vectorised GEGLU]
      return launch(geglu_vec_kernel<T>, dim3(grid_1d(rows * (n / kVec), 256)), dim3(256), 0, s,
                    static_cast<const T*>(x), static_cast<T*>(y), rows, n);
    return launch(geglu_kernel<T>, dim3(grid_1d(rows * n, 256)), dim3(256), 0, s,
                  static_cast<const T*>(x), static_cast<T*>(y), rows, n);
  });
}

}  // namespace hr::cuda
