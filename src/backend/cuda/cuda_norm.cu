// GROUP_NORM (optionally fused with SiLU) and LAYER_NORM: two-pass f32 statistics (mean, then
// the sum of squared deviations), so large offsets do not cancel; vector loads where aligned.
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

// One block per (batch, group); a group's cg * spatial elements are contiguous. VEC: spatial is a
// multiple of 4, so each 4-vector lies in one channel and is aligned.
template <typename T, bool VEC>
__global__ void group_norm_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, T* __restrict__ y, int64_t c,
                                  int64_t spatial, int groups, float eps, bool silu) {
  __shared__ float scratch[32];
  const int64_t cg = c / groups;
  const int64_t count = cg * spatial;
  const int64_t nb = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t base = (nb * c + g * cg) * spatial;
  const T* xs = x + base;
  T* ys = y + base;

  float sum = 0.0f;
  if constexpr (VEC) {
    for (int64_t i = int64_t(threadIdx.x) * 4; i < count; i += int64_t(blockDim.x) * 4) {
      float4 v = load4(xs + i);
      sum += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += to_f32(xs[i]);
  }
  const float mean = block_sum(sum, scratch) / float(count);

  float sq = 0.0f;
  if constexpr (VEC) {
    for (int64_t i = int64_t(threadIdx.x) * 4; i < count; i += int64_t(blockDim.x) * 4) {
      float4 v = load4(xs + i);
      float a = v.x - mean, b = v.y - mean, d = v.z - mean, e = v.w - mean;
      sq += (a * a + b * b) + (d * d + e * e);
    }
  } else {
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
      float a = to_f32(xs[i]) - mean;
      sq += a * a;
    }
  }
  const float rstd = rsqrtf(block_sum(sq, scratch) / float(count) + eps);

  auto finish = [&](float v, int64_t ch) {
    float r = (v - mean) * rstd * to_f32(gamma[ch]) + to_f32(beta[ch]);
    return silu ? r / (1.0f + expf(-r)) : r;
  };
  if constexpr (VEC) {
    for (int64_t i = int64_t(threadIdx.x) * 4; i < count; i += int64_t(blockDim.x) * 4) {
      const int64_t ch = g * cg + i / spatial;
      float4 v = load4(xs + i);
      store4(ys + i, make_float4(finish(v.x, ch), finish(v.y, ch), finish(v.z, ch), finish(v.w, ch)));
    }
  } else {
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
      ys[i] = from_f32<T>(finish(to_f32(xs[i]), g * cg + i / spatial));
  }
}

// One warp per row.
template <typename T, bool VEC>
__global__ void layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, T* __restrict__ y, int64_t rows,
                                  int64_t c, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together: no shuffle is left waiting
  const T* xr = x + row * c;
  T* yr = y + row * c;
  float sum = 0.0f;
  if constexpr (VEC) {
    for (int64_t i = lane * 4; i < c; i += 128) {
      float4 v = load4(xr + i);
      sum += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t i = lane; i < c; i += 32) sum += to_f32(xr[i]);
  }
  const float mean = warp_sum(sum) / float(c);
  float sq = 0.0f;
  if constexpr (VEC) {
    for (int64_t i = lane * 4; i < c; i += 128) {
      float4 v = load4(xr + i);
      float a = v.x - mean, b = v.y - mean, d = v.z - mean, e = v.w - mean;
      sq += (a * a + b * b) + (d * d + e * e);
    }
  } else {
    for (int64_t i = lane; i < c; i += 32) {
      float a = to_f32(xr[i]) - mean;
      sq += a * a;
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / float(c) + eps);
  auto finish = [&](float v, int64_t i) {
    return (v - mean) * rstd * to_f32(gamma[i]) + (beta ? to_f32(beta[i]) : 0.0f);
  };
  if constexpr (VEC) {
    for (int64_t i = lane * 4; i < c; i += 128) {
      float4 v = load4(xr + i);
      store4(yr + i, make_float4(finish(v.x, i), finish(v.y, i + 1), finish(v.z, i + 2),
                                 finish(v.w, i + 3)));
    }
  } else {
    for (int64_t i = lane; i < c; i += 32) yr[i] = from_f32<T>(finish(to_f32(xr[i]), i));
  }
}

}  // namespace

cudaError_t group_norm(DType t, const void* x, const void* gamma, const void* beta, void* y,
                       int64_t n, int64_t c, int64_t spatial, int groups, float eps, bool silu,
                       cudaStream_t s) {
  if (n * c * spatial == 0) return cudaSuccess;
  const unsigned blocks = unsigned(n * groups);
  const int64_t count = c / groups * spatial;
  const int threads = count >= 8192 ? 1024 : count >= 1024 ? 256 : 64;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    auto px = static_cast<const T*>(x);
    auto pg = static_cast<const T*>(gamma);
    auto pb = static_cast<const T*>(beta);
    auto py = static_cast<T*>(y);
    if (spatial % 4 == 0)
      group_norm_kernel<T, true><<<blocks, threads, 0, s>>>(px, pg, pb, py, c, spatial, groups, eps, silu);
    else
      group_norm_kernel<T, false><<<blocks, threads, 0, s>>>(px, pg, pb, py, c, spatial, groups, eps, silu);
    return cudaGetLastError();
  });
}

cudaError_t layer_norm(DType t, const void* x, const void* gamma, const void* beta, void* y,
                       int64_t rows, int64_t c, float eps, cudaStream_t s) {
  if (rows * c == 0) return cudaSuccess;
  constexpr int kWarps = 8;
  const unsigned blocks = unsigned((rows + kWarps - 1) / kWarps);
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    auto px = static_cast<const T*>(x);
    auto pg = static_cast<const T*>(gamma);
    auto pb = static_cast<const T*>(beta);
    auto py = static_cast<T*>(y);
    if (c % 4 == 0)
      layer_norm_kernel<T, true><<<blocks, kWarps * 32, 0, s>>>(px, pg, pb, py, rows, c, eps);
    else
      layer_norm_kernel<T, false><<<blocks, kWarps * 32, 0, s>>>(px, pg, pb, py, rows, c, eps);
    return cudaGetLastError();
  });
}

}  // namespace hr::cuda
