// Experiment (bench/dev, not in the product): the first channels-last group norm (v1 of Note
// [channels-last group norm] in src/backend/cuda/cuda_norm.cu): gn_partial with column tiles of
// kGnThreads packs, gn_finalize with 64-bit indices at 256 threads, and gn_apply_kernel (per
// 16-byte pack a 64-bit modulo and division for the channel and sample, per element a division by
// the group width). Note [vectorised norms] says what limited it; PERF_NOTES v6 measured the
// vectorised kernels against it (group norm 1.3-2.1x). It left the product on 2026-12-02 (only
// bench_norms ran it); bench_dev_group_norm_v1 times it against the production kernels.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_common.h"
#include "core/alignment.h"
#include "dev/dev_kernels.h"

namespace hr::dev {
namespace {

using namespace hr::cuda;

constexpr int kGnThreads = 256;

// V consecutive elements loaded or stored as one access (16 bytes for the production paths).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__global__ void gn_partial_kernel(const T* __restrict__ x, float2* __restrict__ partial,
                                  int64_t s, int64_t c, int64_t rows_per_chunk, int64_t chunks,
                                  int64_t tile) {
  __shared__ float sh1[kGnThreads * V];
  __shared__ float sh2[kGnThreads * V];
  __shared__ float shift[kGnThreads * V];
  const int64_t chunk = blockIdx.x, nb = blockIdx.y;
  const int64_t ncols = c / V;
  // blockIdx.z picks a tile of at most `tile` <= kGnThreads packs.
  const int64_t col0 = int64_t(blockIdx.z) * tile;
  const int tile_cols = int(min(tile, ncols - col0));
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

template <typename I>
__global__ void gn_finalize_kernel(const float2* __restrict__ partial, float2* __restrict__ stats,
                                   int64_t s, int64_t c, int groups, int64_t rows_per_chunk,
                                   int64_t chunks, float eps) {
  __shared__ Moments sh[32];
  const int64_t nb = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t cpg = c / groups;
  Moments acc{0.0f, 0.0f, 0.0f};
  // Four independent loads in flight per thread before merging (the merges are serial).
  constexpr int kLoads = 4;
  const I total = I(chunks * cpg), cpg_i = I(cpg);
  for (I i0 = I(threadIdx.x); i0 < total; i0 += I(blockDim.x) * kLoads) {
    float2 p[kLoads];
    float cnt[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const I i = i0 + I(u) * I(blockDim.x);
      p[u] = make_float2(0.0f, 0.0f);
      cnt[u] = 0.0f;
      if (i < total) {
        const I chunk = i / cpg_i;
        const int64_t ch = g * cpg + (i - chunk * cpg_i);
        p[u] = partial[(nb * chunks + chunk) * c + ch];
        cnt[u] = float(min(rows_per_chunk, s - int64_t(chunk) * rows_per_chunk));
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

// The first version: column tiles of kGnThreads packs, gn_finalize at 256 threads with 64-bit
// indices, gn_apply_kernel.
template <typename T, int V>
cudaError_t group_norm_nhwc_launch_v1(const GroupNormNhwcPlan& pl, const T* x, const T* gamma,
                                      const T* beta, T* y, int64_t n, int64_t s, int64_t c,
                                      int groups, float eps, bool silu, void* ws, cudaStream_t st) {
  auto* partial = static_cast<float2*>(ws);
  auto* stats = reinterpret_cast<float2*>(static_cast<uint8_t*>(ws) + pl.partial_bytes);
  const int64_t ncols = c / V;
  const dim3 grid1(unsigned(pl.chunks), unsigned(n), unsigned((ncols + kGnThreads - 1) / kGnThreads));
  if (cudaError_t e = launch(gn_partial_kernel<T, V>, grid1, dim3(kGnThreads), 0, st, x, partial, s,
                            c, pl.rows_per_chunk, pl.chunks, int64_t(kGnThreads));
      e != cudaSuccess)
    return e;
  if (cudaError_t e = launch(gn_finalize_kernel<int64_t>, dim3(unsigned(n * groups)), dim3(256), 0,
                            st, partial, stats, s, c, groups, pl.rows_per_chunk, pl.chunks, eps);
      e != cudaSuccess)
    return e;
  const int64_t packs = n * s * c / V;
  return launch(gn_apply_kernel<T, V>, dim3(grid_1d(packs, 256)), dim3(256), 0, st, x, gamma, beta,
                stats, y, packs, s, c, groups, silu);
}

bool aligned16(const void* a, const void* b, const void* c, const void* d) {
  return (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
          reinterpret_cast<uintptr_t>(c) | reinterpret_cast<uintptr_t>(d)) %
             16 ==
         0;
}

}  // namespace

GroupNormNhwcPlan group_norm_nhwc_plan_v1(int64_t n, int64_t s, int64_t c, int groups) {
  GroupNormNhwcPlan p;
  // About four blocks per SM of an H200-class GPU in all, each chunk at least 32 rows (more,
  // smaller chunks lengthen gn_finalize's serial merges).
  const int64_t want = std::max<int64_t>(1, (528 + n - 1) / std::max<int64_t>(n, 1));
  const int64_t most = std::max<int64_t>(1, s / 32);
  const int64_t chunks = std::min(want, most);
  p.rows_per_chunk = std::max<int64_t>(1, (s + chunks - 1) / chunks);
  p.chunks = std::max<int64_t>(1, (s + p.rows_per_chunk - 1) / p.rows_per_chunk);
  p.partial_bytes = align_up(size_t(n * p.chunks * c) * sizeof(float2));
  p.stats_bytes = align_up(size_t(n * groups) * sizeof(float2));
  return p;
}

cudaError_t group_norm_nhwc_v1(DType t, const void* x, const void* gamma, const void* beta,
                               void* y, int64_t n, int64_t s, int64_t c, int groups, float eps,
                               bool silu, void* workspace, cudaStream_t st) {
  if (n * s * c == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    auto px = static_cast<const T*>(x);
    auto pg = static_cast<const T*>(gamma);
    auto pb = static_cast<const T*>(beta);
    auto py = static_cast<T*>(y);
    constexpr int kVec = sizeof(T) == 2 ? 8 : 4;
    const bool packs = c % kVec == 0 && aligned16(x, y, gamma, beta);
    const GroupNormNhwcPlan pl = group_norm_nhwc_plan_v1(n, s, c, groups);
    if (packs)
      return group_norm_nhwc_launch_v1<T, kVec>(pl, px, pg, pb, py, n, s, c, groups, eps, silu,
                                                workspace, st);
    return group_norm_nhwc_launch_v1<T, 1>(pl, px, pg, pb, py, n, s, c, groups, eps, silu,
                                           workspace, st);
  });
}

}  // namespace hr::dev
