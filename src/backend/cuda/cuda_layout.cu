// Data movement on the GPU: PERMUTE (rank <= 6), strided SLICE, UPSAMPLE_NEAREST and CAST.
// CONCAT, unit-step SLICE, RESHAPE and COPY are copy_2d kernels issued by the backend (cuda_copy.cu).
#include <type_traits>

#include <cuda_fp8.h>

#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

template <typename F>
cudaError_t dispatch_size(size_t esize, F&& f) {
  switch (esize) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: return cudaErrorInvalidValue;
  }
}

struct PermuteIndex {
  int rank;
  int64_t out_dims[kMaxDims];
  int64_t in_strides[kMaxDims];  // input stride of the dim that becomes output dim i
};

template <typename E>
__global__ void permute_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, PermuteIndex p) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, off = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t idx = rem % p.out_dims[d];
      rem /= p.out_dims[d];
      off += idx * p.in_strides[d];
    }
    y[i] = x[off];
  }
}

template <typename E>
__global__ void slice_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t in_dim,
                             int64_t inner, int64_t start, int64_t step, int64_t out_dim) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t in_ = i % inner, r = i / inner;
    const int64_t k = r % out_dim, o = r / out_dim;
    y[i] = x[(o * in_dim + start + k * step) * inner + in_];
  }
}

template <typename E>
__global__ void upsample_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n, int64_t h,
                                int64_t w, int factor) {
  const int64_t ow = w * factor, oh = h * factor;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t xo = i % ow, r = i / ow;
    const int64_t yo = r % oh, plane = r / oh;
    y[i] = x[(plane * h + yo / factor) * w + xo / factor];
  }
}

// Channels-last: whole channel rows move; `E` is the widest unit that divides a row.
template <typename E>
__global__ void upsample_nhwc_kernel(const E* __restrict__ x, E* __restrict__ y, int64_t n,
                                     int64_t h, int64_t w, int64_t units, int factor) {
  const int64_t ow = w * factor, oh = h * factor;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t u = i % units, r = i / units;
    const int64_t xo = r % ow, r2 = r / ow;
    const int64_t yo = r2 % oh, b = r2 / oh;
    y[i] = x[((b * h + yo / factor) * w + xo / factor) * units + u];
  }
}

// Conversions matching dtype_convert: floats round to nearest even, float -> integer
// truncates toward zero, integer -> 16-bit float goes through f32 (as the CPU does).
template <typename S>
__device__ __forceinline__ float widen(S v) { return to_f32(v); }
template <>
__device__ __forceinline__ float widen<int32_t>(int32_t v) { return float(v); }
template <>
__device__ __forceinline__ float widen<int64_t>(int64_t v) { return float(v); }
template <>
__device__ __forceinline__ float widen<__nv_fp8_e4m3>(__nv_fp8_e4m3 v) { return float(v); }
template <>
__device__ __forceinline__ float widen<__nv_fp8_e5m2>(__nv_fp8_e5m2 v) { return float(v); }

template <typename D, typename S>
__device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_integral_v<D> && std::is_integral_v<S>) {
    return D(v);
  } else if constexpr (std::is_integral_v<D>) {
    return D(widen(v));  // truncation toward zero
  } else if constexpr (std::is_same_v<D, float>) {
    return widen(v);
  } else {
    return from_f32<D>(widen(v));
  }
}

template <typename D, typename S>
__global__ void cast_kernel(const S* __restrict__ x, D* __restrict__ y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = convert<D, S>(x[i]);
}

template <typename F>
cudaError_t dispatch_compute(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t permute(size_t esize, const void* x, const Shape& in, const int* perm, void* y,
                    cudaStream_t s) {
  const int64_t n = in.numel();
  if (n == 0) return cudaSuccess;
  int64_t strides[kMaxDims];
  int64_t r = 1;
  for (int d = in.rank - 1; d >= 0; --d) {
    strides[d] = r;
    r *= in.dims[d];
  }
  PermuteIndex p{};
  p.rank = in.rank;
  for (int i = 0; i < in.rank; ++i) {
    p.out_dims[i] = in.dims[perm[i]];
    p.in_strides[i] = strides[perm[i]];
  }
  return dispatch_size(esize, [&](auto tag) -> cudaError_t {
    using E = decltype(tag);
    return launch(permute_kernel<E>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                  static_cast<const E*>(x), static_cast<E*>(y), n, p);
  });
}

cudaError_t slice_strided(size_t esize, const void* x, int64_t outer, int64_t in_dim,
                          int64_t inner, int64_t start, int64_t step, int64_t out_dim, void* y,
                          cudaStream_t s) {
  const int64_t n = outer * out_dim * inner;
  if (n == 0) return cudaSuccess;
  return dispatch_size(esize, [&](auto tag) -> cudaError_t {
    using E = decltype(tag);
    return launch(slice_kernel<E>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                  static_cast<const E*>(x), static_cast<E*>(y), n, in_dim, inner, start, step,
                  out_dim);
  });
}

cudaError_t upsample_nearest_nhwc(size_t esize, const void* x, int64_t n, int64_t h, int64_t w,
                                  int64_t c, int factor, void* y, cudaStream_t s) {
  const size_t row = size_t(c) * esize;
  const int64_t pixels = n * h * w * factor * factor;
  if (pixels == 0 || row == 0) return cudaSuccess;
  auto go = [&](auto tag) -> cudaError_t {
    using E = decltype(tag);
    const int64_t units = int64_t(row / sizeof(E)), total = pixels * units;
    return launch(upsample_nhwc_kernel<E>, dim3(grid_1d(total, 256)), dim3(256), 0, s,
                  static_cast<const E*>(x), static_cast<E*>(y), total, h, w, units, factor);
  };
  const uintptr_t al = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
  if (row % 16 == 0 && al % 16 == 0) return go(uint4{});
  if (row % 8 == 0 && al % 8 == 0) return go(uint2{});
  if (row % 4 == 0 && al % 4 == 0) return go(uint32_t{});
  if (row % 2 == 0 && al % 2 == 0) return go(uint16_t{});
  return go(uint8_t{});
}

cudaError_t upsample_nearest(size_t esize, const void* x, int64_t planes, int64_t h, int64_t w,
                             int factor, void* y, cudaStream_t s) {
  const int64_t n = planes * h * w * factor * factor;
  if (n == 0) return cudaSuccess;
  return dispatch_size(esize, [&](auto tag) -> cudaError_t {
    using E = decltype(tag);
    return launch(upsample_kernel<E>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                  static_cast<const E*>(x), static_cast<E*>(y), n, h, w, factor);
  });
}

// Eight fp8 elements per load (8 bytes), written as two groups of four: the dequantizing CAST,
// times the scale, or unscaled when `scale` is null (times 1 is exact, so both round as the
// one-element kernels do). The plain form is the one UNETLoader's weight_dtype fp8 models take;
// it ran one byte per thread before (Note [dequantize cost] in graph/pass_stack.cpp).
template <typename D, typename S>
__global__ void cast_fp8_x8_kernel(const S* __restrict__ x, const float* __restrict__ scale,
                                   D* __restrict__ y, int64_t n8) {
  const float sc = scale ? widen(convert<D, float>(*scale)) : 1.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint2 raw = reinterpret_cast<const uint2*>(x)[i];
    const S* e = reinterpret_cast<const S*>(&raw);
    store4(y + i * 8, make_float4(widen(e[0]) * sc, widen(e[1]) * sc, widen(e[2]) * sc,
                                  widen(e[3]) * sc));
    store4(y + i * 8 + 4, make_float4(widen(e[4]) * sc, widen(e[5]) * sc, widen(e[6]) * sc,
                                      widen(e[7]) * sc));
  }
}

// Whether the eight-element kernels take x and y: n a multiple of 8, x aligned to its loads
// (x_align bytes) and y to its stores (y_align).
static bool x8_aligned(const void* x, size_t x_align, const void* y, size_t y_align, int64_t n) {
  const uintptr_t al = reinterpret_cast<uintptr_t>(x) % x_align |
                       reinterpret_cast<uintptr_t>(y) % y_align;
  return al == 0 && n % 8 == 0;
}

// Note [fp8 weights]: an fp8 weight reaches the compute dtype through CAST (graph.h).
template <typename S>
cudaError_t cast_from(const void* x, DType to, void* y, int64_t n, cudaStream_t s) {
  return dispatch_compute(to, [&](auto dtag) -> cudaError_t {
    using D = decltype(dtag);
    if constexpr (!std::is_integral_v<D>) {
      if (x8_aligned(x, 8, y, 4 * sizeof(D), n))
        return launch(cast_fp8_x8_kernel<D, S>, dim3(grid_1d(n / 8, 256)), dim3(256), 0, s,
                      static_cast<const S*>(x), static_cast<const float*>(nullptr),
                      static_cast<D*>(y), n / 8);
    }
    return launch(cast_kernel<D, S>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                  static_cast<const S*>(x), static_cast<D*>(y), n);
  });
}

// The dequantizing cast (CAST with a scale, op.h): y = D(float(x) * float(D(scale))), rounded once.
template <typename D, typename S>
__device__ __forceinline__ D scaled(S v, float sc) {
  return convert<D, float>(widen(v) * sc);
}

template <typename D, typename S>
__global__ void cast_scaled_kernel(const S* __restrict__ x, const float* __restrict__ scale,
                                   D* __restrict__ y, int64_t n) {
  const float sc = widen(convert<D, float>(*scale));
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = scaled<D>(x[i], sc);
}

template <typename S>
cudaError_t cast_scaled_from(const void* x, const float* scale, DType to, void* y, int64_t n,
                             cudaStream_t s) {
  return dispatch_compute(to, [&](auto dtag) -> cudaError_t {
    using D = decltype(dtag);
    if constexpr (std::is_integral_v<D>) {
      return cudaErrorInvalidValue;
    } else {
      if (sizeof(S) == 1 && x8_aligned(x, 8, y, 4 * sizeof(D), n))
        return launch(cast_fp8_x8_kernel<D, S>, dim3(grid_1d(n / 8, 256)), dim3(256), 0, s,
                      static_cast<const S*>(x), scale, static_cast<D*>(y), n / 8);
      return launch(cast_scaled_kernel<D, S>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                    static_cast<const S*>(x), scale, static_cast<D*>(y), n);
    }
  });
}

cudaError_t cast_scaled(DType from, const void* x, const float* scale, DType to, void* y,
                        int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  switch (from) {
    case DType::F8_E4M3: return cast_scaled_from<__nv_fp8_e4m3>(x, scale, to, y, n, s);
    case DType::F8_E5M2: return cast_scaled_from<__nv_fp8_e5m2>(x, scale, to, y, n, s);
    case DType::F32: return cast_scaled_from<float>(x, scale, to, y, n, s);
    case DType::F16: return cast_scaled_from<__half>(x, scale, to, y, n, s);
    case DType::BF16: return cast_scaled_from<__nv_bfloat16>(x, scale, to, y, n, s);
    default: return cudaErrorInvalidValue;
  }
}

// CAST to F8_E4M3 (op.h): clamped to +-448 (NaN stays NaN), then round to nearest even.
__device__ __forceinline__ __nv_fp8_storage_t to_e4m3(float v) {
  v = v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v;
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

template <typename S>
__global__ void cast_to_e4m3_kernel(const S* __restrict__ x, __nv_fp8_storage_t* __restrict__ y,
                                    int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = to_e4m3(widen(x[i]));
}

// The same, eight elements a thread (two loads of four, one 8-byte store): the `_fast` path's
// activation quantization before every fp8 GEMM (Note [fp8 linear] in graph/pass_fp8.cpp).
template <typename S>
__global__ void cast_to_e4m3_x8_kernel(const S* __restrict__ x, uint2* __restrict__ y,
                                       int64_t n8) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = load4(x + i * 8), b = load4(x + i * 8 + 4);
    uint2 raw;
    __nv_fp8_storage_t* e = reinterpret_cast<__nv_fp8_storage_t*>(&raw);
    e[0] = to_e4m3(a.x), e[1] = to_e4m3(a.y), e[2] = to_e4m3(a.z), e[3] = to_e4m3(a.w);
    e[4] = to_e4m3(b.x), e[5] = to_e4m3(b.y), e[6] = to_e4m3(b.z), e[7] = to_e4m3(b.w);
    y[i] = raw;
  }
}

cudaError_t cast(DType from, const void* x, DType to, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (to == DType::F8_E4M3 && from != DType::F8_E4M3)
    return dispatch_compute(from, [&](auto stag) -> cudaError_t {
      using S = decltype(stag);
      if constexpr (std::is_integral_v<S>) {
        return cudaErrorInvalidValue;
      } else {
        if (x8_aligned(x, 4 * sizeof(S), y, 8, n))
          return launch(cast_to_e4m3_x8_kernel<S>, dim3(grid_1d(n / 8, 256)), dim3(256), 0, s,
                        static_cast<const S*>(x), static_cast<uint2*>(y), n / 8);
        return launch(cast_to_e4m3_kernel<S>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                      static_cast<const S*>(x), static_cast<__nv_fp8_storage_t*>(y), n);
      }
    });
  if (from == DType::F8_E4M3) return cast_from<__nv_fp8_e4m3>(x, to, y, n, s);
  if (from == DType::F8_E5M2) return cast_from<__nv_fp8_e5m2>(x, to, y, n, s);
  return dispatch_compute(from, [&](auto stag) -> cudaError_t {
    using S = decltype(stag);
    return dispatch_compute(to, [&](auto dtag) -> cudaError_t {
      using D = decltype(dtag);
      return launch(cast_kernel<D, S>, dim3(grid_1d(n, 256)), dim3(256), 0, s,
                    static_cast<const S*>(x), static_cast<D*>(y), n);
    });
  });
}

}  // namespace hr::cuda
