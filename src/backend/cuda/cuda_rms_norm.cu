// RMS_NORM on the GPU: one warp per row, f32 sum of squares, y = (x * rstd) * w in f32 rounded
// once to the dtype (Note [rms norm rounding] in backend/cpu/cpu_rms_norm.cpp).
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

constexpr int kRmsWarps = 8;  // rows per block

// kVec: c % 4 == 0 and every row starts 4-element aligned, so rows move as packs of four.
// The second pass rereads x from L1/L2 (rows are at most a few KB) rather than holding the row in
// registers, so one kernel takes any width.
template <typename T, bool kVec>
__global__ void rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                T* __restrict__ y, int64_t rows, int64_t c, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kRmsWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together
  const T* xr = x + row * c;
  T* yr = y + row * c;
  float sum = 0.0f;
  if (kVec) {
    for (int64_t i = int64_t(lane) * 4; i < c; i += 128) {
      const float4 v = load4(xr + i);
      sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int64_t i = lane; i < c; i += 32) {
      const float v = to_f32(xr[i]);
      sum += v * v;
    }
  }
  sum = warp_sum(sum);
  const float rstd = 1.0f / sqrtf(__fdiv_rn(sum, float(c)) + eps);
  auto scale = [&](float v, int64_t i) {
    const float n = __fmul_rn(v, rstd);
    return w ? __fmul_rn(n, to_f32(w[i])) : n;
  };
  if (kVec) {
    for (int64_t i = int64_t(lane) * 4; i < c; i += 128) {
      const float4 v = load4(xr + i);
      store4(yr + i, make_float4(scale(v.x, i), scale(v.y, i + 1), scale(v.z, i + 2),
                                 scale(v.w, i + 3)));
    }
  } else {
    for (int64_t i = lane; i < c; i += 32) yr[i] = from_f32<T>(scale(to_f32(xr[i]), i));
  }
}

}  // namespace

cudaError_t rms_norm(DType t, const void* x, const void* w, void* y, int64_t rows, int64_t c,
                     float eps, cudaStream_t s) {
  if (rows * c == 0) return cudaSuccess;
  const int64_t blocks = (rows + kRmsWarps - 1) / kRmsWarps;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    const T* pw = static_cast<const T*>(w);
    T* py = static_cast<T*>(y);
    const uintptr_t align = uintptr_t(x) | uintptr_t(y);
    if (c % 4 == 0 && align % (4 * sizeof(T)) == 0)
      return launch(rms_norm_kernel<T, true>, dim3(unsigned(blocks)), dim3(32 * kRmsWarps), 0, s, px, pw,
                    py, rows, c, eps);
    return launch(rms_norm_kernel<T, false>, dim3(unsigned(blocks)), dim3(32 * kRmsWarps), 0, s, px, pw, py,
                  rows, c, eps);
  });
}

}  // namespace hr::cuda
