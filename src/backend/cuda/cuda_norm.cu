// GROUP_NORM (optionally fused with SiLU) and LAYER_NORM: two-pass f32 statistics (mean, then
// the sum of squared deviations), so large offsets do not cancel; vector loads where aligned.
#include <algorithm>

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

// One warp per row, the row held in registers (read once): rows up to 32 * 4 * R elements,
// c a multiple of 4.
template <typename T, int R>
__global__ void layer_norm_regs_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                       const T* __restrict__ beta, T* __restrict__ y,
                                       int64_t rows, int64_t c, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together
  const T* xr = x + row * c;
  T* yr = y + row * c;
  float4 v[R];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t i = int64_t(k * 32 + lane) * 4;
    v[k] = i < c ? load4(xr + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  }
  const float mean = warp_sum(sum) / float(c);
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t i = int64_t(k * 32 + lane) * 4;
    if (i < c) {
      const float a = v[k].x - mean, b = v[k].y - mean, d = v[k].z - mean, e = v[k].w - mean;
      sq += (a * a + b * b) + (d * d + e * e);
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / float(c) + eps);
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t i = int64_t(k * 32 + lane) * 4;
    if (i >= c) continue;
    const float4 g = load4(gamma + i);
    const float4 b = beta ? load4(beta + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    store4(yr + i, make_float4((v[k].x - mean) * rstd * g.x + b.x, (v[k].y - mean) * rstd * g.y + b.y,
                               (v[k].z - mean) * rstd * g.z + b.z, (v[k].w - mean) * rstd * g.w + b.w));
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

// Note [channels-last group norm]
// x is [N, S, C] (channels last). A group's elements are spread over every row, so one block
// per group (as above) would read strided memory with only N * groups blocks. Instead:
// 1. gn_partial: blocks over (row chunk, sample, column tile) read whole rows coalesced (V
//    channels per thread) and write each channel's (mean, M2) over the chunk, from sums shifted
//    by the chunk's first row (so a large common offset does not cancel);
// 2. gn_finalize: one block per (sample, group) merges its chunks x channels partials with
//    Chan's formula into (mean, 1/std);
// 3. gn_apply: an element-wise pass normalises, applies gamma/beta and optionally SiLU.
// x is read twice and y written once; the partials live in the op's workspace.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

constexpr int kGnThreads = 256;

template <typename T, int V>
__global__ void gn_partial_kernel(const T* __restrict__ x, float2* __restrict__ partial,
                                  int64_t s, int64_t c, int64_t rows_per_chunk, int64_t chunks) {
  __shared__ float sh1[kGnThreads * V];
  __shared__ float sh2[kGnThreads * V];
  __shared__ float shift[kGnThreads * V];
  const int64_t chunk = blockIdx.x, nb = blockIdx.y;
  const int64_t ncols = c / V;
  const int64_t col0 = int64_t(blockIdx.z) * kGnThreads;
  const int tile_cols = int(min(int64_t(kGnThreads), ncols - col0));
  const int rows_per_pass = kGnThreads / tile_cols;
  const int lc = threadIdx.x % tile_cols, lr = threadIdx.x / tile_cols;
  const int64_t r0 = chunk * rows_per_chunk, r1 = min(s, r0 + rows_per_chunk);
  const float cnt = float(r1 - r0);
  const T* base = x + nb * s * c + (col0 + lc) * V;
  float s1[V], s2[V], sft[V];
  if (lr < rows_per_pass) {
    const Pack<T, V> first = *reinterpret_cast<const Pack<T, V>*>(base + r0 * c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      sft[k] = to_f32(first.v[k]);
      s1[k] = s2[k] = 0.0f;
    }
    // Four rows' loads in flight per thread (rows past the chunk contribute d = 0).
    constexpr int kRows = 4;
    for (int64_t r = r0 + lr; r < r1; r += int64_t(rows_per_pass) * kRows) {
      Pack<T, V> p[kRows];
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        const int64_t rr = r + int64_t(u) * rows_per_pass;
        if (rr < r1) p[u] = *reinterpret_cast<const Pack<T, V>*>(base + rr * c);
        else p[u] = first;
      }
#pragma unroll
      for (int u = 0; u < kRows; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = to_f32(p[u].v[k]) - sft[k];
          s1[k] += d;
          s2[k] += d * d;
        }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      sh1[threadIdx.x * V + k] = s1[k];
      sh2[threadIdx.x * V + k] = s2[k];
      if (lr == 0) shift[lc * V + k] = sft[k];
    }
  }
  __syncthreads();
  const int width = tile_cols * V;
  for (int ch = threadIdx.x; ch < width; ch += kGnThreads) {
    float a = 0.0f, b = 0.0f;
    for (int r = 0; r < rows_per_pass; ++r) {
      a += sh1[r * width + ch];
      b += sh2[r * width + ch];
    }
    const float mean = shift[ch] + a / cnt;
    const float m2 = fmaxf(b - a * a / cnt, 0.0f);
    partial[(nb * chunks + chunk) * c + col0 * V + ch] = make_float2(mean, m2);
  }
}

struct Moments {
  float n, mean, m2;
};

__device__ __forceinline__ Moments moments_merge(Moments a, Moments b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;
  const float d = b.mean - a.mean;
  const float f = b.n / n;
  return Moments{n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
}

__global__ void gn_finalize_kernel(const float2* __restrict__ partial, float2* __restrict__ stats,
                                   int64_t s, int64_t c, int groups, int64_t rows_per_chunk,
                                   int64_t chunks, float eps) {
  __shared__ Moments sh[32];
  const int64_t nb = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t cpg = c / groups;
  Moments acc{0.0f, 0.0f, 0.0f};
  // Four independent loads in flight per thread before merging (the merges are serial).
  constexpr int kLoads = 4;
  const int64_t total = chunks * cpg;
  for (int64_t i0 = threadIdx.x; i0 < total; i0 += int64_t(blockDim.x) * kLoads) {
    float2 p[kLoads];
    float cnt[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int64_t i = i0 + int64_t(u) * blockDim.x;
      p[u] = make_float2(0.0f, 0.0f);
      cnt[u] = 0.0f;
      if (i < total) {
        const int64_t chunk = i / cpg, ch = g * cpg + i % cpg;
        p[u] = partial[(nb * chunks + chunk) * c + ch];
        cnt[u] = float(min(rows_per_chunk, s - chunk * rows_per_chunk));
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) acc = moments_merge(acc, Moments{cnt[u], p[u].x, p[u].y});
  }
  for (int o = 16; o > 0; o >>= 1) {
    Moments b{__shfl_down_sync(0xffffffffu, acc.n, o), __shfl_down_sync(0xffffffffu, acc.mean, o),
              __shfl_down_sync(0xffffffffu, acc.m2, o)};
    acc = moments_merge(acc, b);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    Moments t = sh[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w) t = moments_merge(t, sh[w]);
    const float var = t.n > 0.0f ? t.m2 / t.n : 0.0f;
    stats[nb * groups + g] = make_float2(t.mean, rsqrtf(var + eps));
  }
}

template <typename T, int V>
__global__ void gn_apply_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                const T* __restrict__ beta, const float2* __restrict__ stats,
                                T* __restrict__ y, int64_t packs, int64_t s, int64_t c, int groups,
                                bool silu) {
  const int64_t cpg = c / groups;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * V;
    const int64_t ch0 = e % c, nb = e / (s * c);
    const Pack<T, V> p = reinterpret_cast<const Pack<T, V>*>(x)[i];
    // ch0 is a multiple of V and so are the affine vectors' rows: one pack each.
    const Pack<T, V> ga = reinterpret_cast<const Pack<T, V>*>(gamma)[ch0 / V];
    const Pack<T, V> be = reinterpret_cast<const Pack<T, V>*>(beta)[ch0 / V];
    const float2* st_n = stats + nb * groups;
    Pack<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int64_t ch = ch0 + k;
      const float2 st = __ldg(st_n + ch / cpg);
      float r = (to_f32(p.v[k]) - st.x) * st.y * to_f32(ga.v[k]) + to_f32(be.v[k]);
      if (silu) r = r / (1.0f + __expf(-r));
      out.v[k] = from_f32<T>(r);
    }
    reinterpret_cast<Pack<T, V>*>(y)[i] = out;
  }
}

template <typename T, int V>
cudaError_t group_norm_nhwc_launch(const GroupNormNhwcPlan& pl, const T* x, const T* gamma,
                                   const T* beta, T* y, int64_t n, int64_t s, int64_t c,
                                   int groups, float eps, bool silu, void* ws, cudaStream_t st) {
  auto* partial = static_cast<float2*>(ws);
  auto* stats = reinterpret_cast<float2*>(static_cast<uint8_t*>(ws) + pl.partial_bytes);
  const int64_t ncols = c / V;
  const dim3 grid1(unsigned(pl.chunks), unsigned(n), unsigned((ncols + kGnThreads - 1) / kGnThreads));
  gn_partial_kernel<T, V><<<grid1, kGnThreads, 0, st>>>(x, partial, s, c, pl.rows_per_chunk, pl.chunks);
  gn_finalize_kernel<<<unsigned(n * groups), 256, 0, st>>>(partial, stats, s, c, groups,
                                                           pl.rows_per_chunk, pl.chunks, eps);
  const int64_t packs = n * s * c / V;
  gn_apply_kernel<T, V><<<grid_1d(packs, 256), 256, 0, st>>>(x, gamma, beta, stats, y, packs, s, c,
                                                            groups, silu);
  return cudaGetLastError();
}

}  // namespace

GroupNormNhwcPlan group_norm_nhwc_plan(int64_t n, int64_t s, int64_t c, int groups) {
  GroupNormNhwcPlan p;
  // About four blocks per SM of an H200-class GPU in all, each chunk at least 32 rows (more,
  // smaller chunks lengthen gn_finalize's serial merges).
  const int64_t want = std::max<int64_t>(1, (528 + n - 1) / std::max<int64_t>(n, 1));
  const int64_t most = std::max<int64_t>(1, s / 32);
  const int64_t chunks = std::min(want, most);
  p.rows_per_chunk = std::max<int64_t>(1, (s + chunks - 1) / chunks);
  p.chunks = std::max<int64_t>(1, (s + p.rows_per_chunk - 1) / p.rows_per_chunk);
  p.partial_bytes = (size_t(n * p.chunks * c) * sizeof(float2) + 255) / 256 * 256;
  p.stats_bytes = (size_t(n * groups) * sizeof(float2) + 255) / 256 * 256;
  return p;
}

cudaError_t group_norm_nhwc(DType t, const void* x, const void* gamma, const void* beta, void* y,
                            int64_t n, int64_t s, int64_t c, int groups, float eps, bool silu,
                            void* workspace, cudaStream_t st) {
  if (n * s * c == 0) return cudaSuccess;
  const GroupNormNhwcPlan pl = group_norm_nhwc_plan(n, s, c, groups);
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    auto px = static_cast<const T*>(x);
    auto pg = static_cast<const T*>(gamma);
    auto pb = static_cast<const T*>(beta);
    auto py = static_cast<T*>(y);
    constexpr int kVec = sizeof(T) == 2 ? 8 : 4;
    const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                          reinterpret_cast<uintptr_t>(gamma) | reinterpret_cast<uintptr_t>(beta)) %
                             16 == 0;
    if (c % kVec == 0 && aligned)
      return group_norm_nhwc_launch<T, kVec>(pl, px, pg, pb, py, n, s, c, groups, eps, silu, workspace, st);
    return group_norm_nhwc_launch<T, 1>(pl, px, pg, pb, py, n, s, c, groups, eps, silu, workspace, st);
  });
}

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
    const uintptr_t al = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                         reinterpret_cast<uintptr_t>(gamma) | reinterpret_cast<uintptr_t>(beta);
    if (c % 4 == 0 && al % (4 * sizeof(T)) == 0 && c <= 128 * 3)
      layer_norm_regs_kernel<T, 3><<<blocks, kWarps * 32, 0, s>>>(px, pg, pb, py, rows, c, eps);
    else if (c % 4 == 0 && al % (4 * sizeof(T)) == 0 && c <= 128 * 10)
      layer_norm_regs_kernel<T, 10><<<blocks, kWarps * 32, 0, s>>>(px, pg, pb, py, rows, c, eps);
    else if (c % 4 == 0)
      layer_norm_kernel<T, true><<<blocks, kWarps * 32, 0, s>>>(px, pg, pb, py, rows, c, eps);
    else
      layer_norm_kernel<T, false><<<blocks, kWarps * 32, 0, s>>>(px, pg, pb, py, rows, c, eps);
    return cudaGetLastError();
  });
}

}  // namespace hr::cuda
