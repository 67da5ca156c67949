// GROUP_NORM (optionally fused with SiLU) and LAYER_NORM: two-pass f32 statistics (mean, then
// the sum of squared deviations), so large offsets do not cancel; vector loads where aligned
// (16-byte packs on the production paths, Note [vectorised norms]).
#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_norm.h"
#include "core/alignment.h"
#include "core/env.h"

namespace hr::cuda {
namespace {

// V consecutive elements loaded or stored as one access (16 bytes for the production paths).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

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

// Note [vectorised norms]
// What limited the first kernels (layer_norm_regs_kernel, still layer_norm_v1: the fallback below;
// gn_apply_kernel, whose version of group norm is now bench/dev/group_norm_v1.cu, timed against
// these by bench_dev_group_norm_v1):
// - layer norm: one warp per row with 8-byte loads, the row held as f32 (one register per
//   element). At c = 640 the R = 10 instance needs 64 registers, so an H200 holds 32 warps per
//   SM, 4224 rows at once: SDXL's 8192 rows took two waves, each waiting out DRAM latency; at
//   c = 320 half the lanes loaded 3 packs and half 2.
// - group norm apply: per 16-byte pack a 64-bit modulo and division for the channel and sample,
//   then per element a 64-bit division by the group width and a load of the group's statistics:
//   integer work, not bandwidth, bounded it.
// - group norm partial: one column tile of up to 256 packs (c = 1280 in f16 is 160 packs: 96 of
//   256 threads idle) and chunks of at least 32 rows, so [2, 32*32, 1280] ran 64 blocks on 132
//   SMs with ~10 KiB of loads in flight per busy SM (~32-64 KiB are needed to cover HBM latency).
// The kernels here:
// - layer_norm_packs_kernel: 16-byte packs (8 halves, 4 floats); a row is handled by a group of
//   L = 4..32 lanes (a power of two), the smallest L for which each lane holds at most
//   kLnMaxPacks = 5 packs, so 32 / L rows share a warp: SD's widths give every lane exactly 5
//   packs (c = 320: L = 8, 640: 16, 1280: 32; 80 bytes of loads in flight per lane). Mean, then the
//   sum of squared deviations, in f32 from the registers, reduced with shuffles inside the lane
//   group, as before. gamma and beta are read as packs after the statistics (L1 hits; holding
//   them from the start would double the registers). At most 64 registers (launch bounds, no
//   spills up to 5 packs; bf16 spills beyond, hence the limit), so 32 warps per SM: c = 640 x 8192
//   rows is 4096 warps, one wave. Wider rows (c > 1280 in 16-bit types, > 640 in f32) take the
//   first kernels.
// - gn_apply_rows_kernel: each thread keeps one channel pack (column) and steps over rows
//   `row_step` apart, so its groups and per-channel scale = rstd * gamma and shift = beta -
//   mean * scale are computed once (y = x * scale + shift: the fold's f32 rounding is far below
//   the 16-bit input's own; the statistics stay two-pass); the row step gives about one wave of
//   threads a multiple of four rows each, four 16-byte loads in flight per thread (64 KiB per SM
//   at 4 blocks of 256, 64 registers); blockIdx.y is the sample. SiLU is a template parameter and
//   divides with __fdividef (an approximate reciprocal: 0 where e^-x nears f32's range, x below
//   about -87, where the exact result is below 1e-35 in magnitude).
// - gn_partial_kernel with column tiles of at most 128 packs (at least two rows per pass), and
//   chunks of at least 16 rows sized for ~4 blocks per SM counting the tiles; gn_finalize with
//   32-bit indices and 512 threads, since the smaller chunks give it more partials to merge.
// Misaligned pointers or widths not a multiple of the pack take the first layer norm kernels and
// one-element packs in group norm (16-byte packs need c % 8 == 0 for 16-bit types, c % 4 == 0
// for f32, and every pointer 16-byte aligned).
constexpr int kLnThreads = 128;
constexpr int kLnMaxPacks = 5;

// Pairwise sum of a pack's elements (after subtracting `mean`, squared, when SQ).
template <bool SQ, typename T, int V>
__device__ __forceinline__ float pack_sum(const Pack<T, V>& p, float mean) {
  float a[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float d = to_f32(p.v[e]) - mean;
    a[e] = SQ ? d * d : d;
  }
#pragma unroll
  for (int w = V / 2; w > 0; w >>= 1)
#pragma unroll
    for (int e = 0; e < w; ++e) a[e] = a[2 * e] + a[2 * e + 1];
  return a[0];
}

// Sum over an aligned group of `lanes` lanes (a power of two); every lane of the warp takes part.
__device__ __forceinline__ float lanes_sum(float v, int lanes) {
  for (int o = lanes >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Note [vectorised norms]: 1 << shift lanes per row, R packs per lane; c a multiple of the pack,
// every pointer 16-byte aligned.
template <typename T, int R>
__global__ void __launch_bounds__(kLnThreads, 8)
    layer_norm_packs_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                            const T* __restrict__ beta, T* __restrict__ y, int64_t rows, int64_t c,
                            int shift, float eps) {
  constexpr int V = 16 / int(sizeof(T));
  using P = Pack<T, V>;
  const int lanes = 1 << shift;
  const int lane = threadIdx.x & 31;
  const int64_t first =
      (int64_t(blockIdx.x) * (kLnThreads / 32) + (threadIdx.x >> 5)) << (5 - shift);
  if (first >= rows) return;  // whole warps leave together
  const int64_t row = first + (lane >> shift);
  const int l = lane & (lanes - 1);
  // A lane group past the last row loads nothing but still joins the shuffles.
  const int have = row < rows ? int(c / V) : 0;
  const int64_t at = (row < rows ? row : first) * c;
  const P* xr = reinterpret_cast<const P*>(x + at);
  P v[R];
#pragma unroll
  for (int k = 0; k < R; ++k)
    if (k * lanes + l < have) v[k] = xr[k * lanes + l];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < R; ++k)
    if (k * lanes + l < have) sum += pack_sum<false>(v[k], 0.0f);
  const float mean = lanes_sum(sum, lanes) / float(c);
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < R; ++k)
    if (k * lanes + l < have) sq += pack_sum<true>(v[k], mean);
  const float rstd = rsqrtf(lanes_sum(sq, lanes) / float(c) + eps);
  P* yr = reinterpret_cast<P*>(y + at);
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int j = k * lanes + l;
    if (j >= have) continue;
    const P g = reinterpret_cast<const P*>(gamma)[j];
    float b[V];
    if (beta) {
      const P bp = reinterpret_cast<const P*>(beta)[j];
#pragma unroll
      for (int e = 0; e < V; ++e) b[e] = to_f32(bp.v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) b[e] = 0.0f;
    }
    P out;
#pragma unroll
    for (int e = 0; e < V; ++e)
      out.v[e] = from_f32<T>((to_f32(v[k].v[e]) - mean) * rstd * to_f32(g.v[e]) + b[e]);
    yr[j] = out;
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
constexpr int kGnThreads = 256;

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

// 32-bit indices (Note [vectorised norms]; the first version's 64-bit ones are in bench/dev).
__global__ void gn_finalize_kernel(const float2* __restrict__ partial, float2* __restrict__ stats,
                                   int64_t s, int64_t c, int groups, int64_t rows_per_chunk,
                                   int64_t chunks, float eps) {
  using I = int;
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

// Note [vectorised norms]: thread t keeps column t % ncols and takes rows t / ncols,
// + row_step, + 2 row_step, ...; blockIdx.y (with a stride) is the sample.
template <typename T, int V, bool SILU>
__global__ void __launch_bounds__(kGnThreads, 4)
    gn_apply_rows_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                         const T* __restrict__ beta, const float2* __restrict__ stats,
                         T* __restrict__ y, int64_t n, int64_t s, int64_t c, int groups,
                         int64_t row_step) {
  using P = Pack<T, V>;
  const int64_t ncols = c / V;
  const int64_t t = int64_t(blockIdx.x) * kGnThreads + threadIdx.x;
  if (t >= ncols * row_step) return;
  const int64_t col = t % ncols, row0 = t / ncols;
  const int ch0 = int(col) * V, cpg = int(c / groups);
  constexpr int kU = 4;  // rows whose loads are in flight together
#pragma unroll 1
  for (int64_t nb = blockIdx.y; nb < n; nb += gridDim.y) {
    // The affine vectors' rows are one pack at col (c is a multiple of V); read here, not held
    // across samples, to stay within the registers of four blocks per SM.
    const P ga = reinterpret_cast<const P*>(gamma)[col];
    const P be = reinterpret_cast<const P*>(beta)[col];
    // y = x * scale + shift with the mean folded into shift (Note [vectorised norms]).
    float scale[V], shift[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float2 st = stats[nb * groups + (ch0 + k) / cpg];
      scale[k] = st.y * to_f32(ga.v[k]);
      shift[k] = to_f32(be.v[k]) - st.x * scale[k];
    }
    // This thread's rows: row0, row0 + row_step, ... (row0 < row_step <= s); packs step apart.
    const int64_t step = row_step * ncols;
    const P* xp = reinterpret_cast<const P*>(x + nb * s * c) + row0 * ncols + col;
    P* yp = reinterpret_cast<P*>(y + nb * s * c) + row0 * ncols + col;
    auto norm = [&](const P& p) {
      P out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float v = fmaf(to_f32(p.v[k]), scale[k], shift[k]);
        if (SILU) v = __fdividef(v, 1.0f + __expf(-v));
        out.v[k] = from_f32<T>(v);
      }
      return out;
    };
    int64_t left = (s - row0 + row_step - 1) / row_step;
#pragma unroll 1
    for (; left >= kU; left -= kU, xp += kU * step, yp += kU * step) {
      P p[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) p[u] = xp[u * step];
#pragma unroll
      for (int u = 0; u < kU; ++u) yp[u * step] = norm(p[u]);
    }
#pragma unroll 1
    for (; left > 0; --left, xp += step, yp += step) *yp = norm(*xp);
  }
}

// Threads gn_apply_rows_kernel aims for: about one wave of an H200 (132 SMs, 1024 threads each).
constexpr int64_t kGnApplyThreads = 132 * 1024;

// Note [vectorised norms].
template <typename T, int V>
cudaError_t group_norm_nhwc_launch(const GroupNormNhwcPlan& pl, const T* x, const T* gamma,
                                   const T* beta, T* y, int64_t n, int64_t s, int64_t c,
                                   int groups, float eps, bool silu, void* ws, cudaStream_t st) {
  auto* partial = static_cast<float2*>(ws);
  auto* stats = reinterpret_cast<float2*>(static_cast<uint8_t*>(ws) + pl.partial_bytes);
  const int64_t ncols = c / V;
  const int64_t tiles = (ncols + 127) / 128;
  const int64_t tile = (ncols + tiles - 1) / tiles;
  const dim3 grid1(unsigned(pl.chunks), unsigned(n), unsigned(tiles));
  if (cudaError_t e = launch(gn_partial_kernel<T, V>, grid1, dim3(kGnThreads), 0, st, x, partial, s,
                            c, pl.rows_per_chunk, pl.chunks, tile);
      e != cudaSuccess)
    return e;
  if (cudaError_t e = launch(gn_finalize_kernel, dim3(unsigned(n * groups)), dim3(512), 0, st,
                            partial, stats, s, c, groups, pl.rows_per_chunk, pl.chunks, eps);
      e != cudaSuccess)
    return e;
  // Rows per thread: a multiple of gn_apply_rows_kernel's four, at least four.
  int64_t rows_each = (n * s * ncols + kGnApplyThreads - 1) / kGnApplyThreads;
  rows_each = std::max<int64_t>(4, (rows_each + 3) / 4 * 4);
  const int64_t row_step = (s + rows_each - 1) / rows_each;
  const dim3 grid3(unsigned((ncols * row_step + kGnThreads - 1) / kGnThreads),
                   unsigned(std::min<int64_t>(n, 65535)));
  if (silu)
    return launch(gn_apply_rows_kernel<T, V, true>, grid3, dim3(kGnThreads), 0, st, x, gamma, beta,
                  stats, y, n, s, c, groups, row_step);
  return launch(gn_apply_rows_kernel<T, V, false>, grid3, dim3(kGnThreads), 0, st, x, gamma, beta,
                stats, y, n, s, c, groups, row_step);
}

// Note [single-pass group norm]
// The three kernels above read x twice and pay three launches, the partials' round trip and
// gn_finalize's serial merges: [2, 128*128, 320] in f16 took 28 us where reading and writing it
// once takes ~12. For the UNet's shapes one (sample, channel tile) fits in the registers of a
// Hopper thread-block cluster, so gn_cluster_kernel does everything in one launch, reading x once:
// - Tile: TC channels, a multiple of the 16-byte pack (V elements) and of the group width cpg, so
//   no group straddles tiles: TC = lcm(V, cpg) or a multiple of it (cpg 10, 20, 30, 40, 60, 80
//   give TC 40, 40, 120, 40, 120, 80 in 16-bit types). A pack may still touch two groups (cpg 10
//   with V = 8: channels 8..15 are groups 0 and 1), so each thread keeps sums for the first and
//   the second group its pack touches; shapes where a pack would touch three are refused.
// - Cluster: CS = 1, 2, 4 or 8 blocks (portable sizes) per (sample, tile) split the S rows; a
//   block is W = TC / V pack columns x R row lanes (consecutive threads read consecutive packs of
//   one row: each row segment is one coalesced access) and each thread loads its K rows' packs
//   (rows lr, lr + R, ..., rows past S masked) into registers, raw, all at once.
// - Statistics two-pass in f32 from the registers (mean, then the sum of squared deviations), each
//   reduced in a fixed order: per element over the thread's K packs, per column over the R lanes
//   (shared memory, then a shuffle tree), per group over its columns, then over the cluster: every
//   block reads every block's group sums through distributed shared memory in rank order, so all
//   get identical totals and the result is bitwise reproducible (no atomics).
// - Then y = x * scale + shift (+ SiLU), scale = rstd * gamma and shift = beta - mean * scale per
//   channel, exactly as gn_apply_rows_kernel. A block's shared sums are read by the other blocks
//   after the cluster barriers; the last barrier is waited on just before exiting, so no block
//   leaves while another may still read its shared memory.
// gn1_plan picks, once per shape, the tile (multiples of lcm(V, cpg); segments of a multiple of
// 32 bytes preferred, for whole sectors), CS and K (1..32 packs a thread, with launch bounds that
// keep them in registers without spills: gn1_max_threads) among the configurations whose
// clusters all fit on the GPU at once (cudaOccupancyMaxActiveClusters), preferring the most SMs
// busy, aligned tiles, then the smallest cluster. One wave only: a block keeps its rows until its
// cluster's statistics are done, so a second wave waits out the first; on the H200 every
// two- and three-wave configuration measured slower than the three kernels (bench_norms), every
// one-wave configuration 1.3-2.2x faster. A block holds at most 196 KiB (384 threads x 32 packs);
// fewer than 16 clusters of 8 one-SM blocks fit at once, so SDXL's 128*128 norms (16 such
// clusters at c = 320), 64*64 at c = 960 and 1920 and the VAE's take the three kernels, as do GPUs
// before sm_90, widths or pointers the 16-byte packs cannot take, and HEADROOM_GN_CLUSTER=0.
namespace cg = cooperative_groups;

// Packs per thread the single-pass kernel is instantiated for, and its threads per block (the
// launch bounds: K packs take 4K registers, the rest ~40; ptxas, sm_90: K <= 4 64 registers,
// K = 8 80, K = 16 120-127, K = 32 168, none spilled).
constexpr int kGn1Packs[] = {1, 2, 4, 8, 16, 32};
__host__ __device__ constexpr int gn1_max_threads(int k) {
  return k <= 4 ? 1024 : k <= 8 ? 768 : k <= 16 ? 512 : 384;
}
constexpr int kGn1MaxCols = 64;    // packs across a tile
constexpr int kGn1MaxGroups = 64;  // groups in a tile

// The single-pass kernel's device helpers exist for sm_90 and later (thread-block clusters); the
// kernel's body is empty for older architectures (gn1_plan never picks it there).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// A 16-byte pack as f32 and back (rounding to nearest even, as from_f32), two elements at a time.
__device__ __forceinline__ float2 unpack2(uint32_t w, __half) {
  return __half22float2(*reinterpret_cast<const __half2*>(&w));
}
__device__ __forceinline__ float2 unpack2(uint32_t w, __nv_bfloat16) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
}
__device__ __forceinline__ uint32_t pack2(float a, float b, __half) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, __nv_bfloat16) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <typename T>
__device__ __forceinline__ void unpack16(const uint4& u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      f[i] = __uint_as_float(w[i]);
    } else {
      const float2 p = unpack2(w[i], T{});
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
}
// Hides the packs' values from the compiler between passes, so that it converts them again rather
// than keeping the f32 values (twice the registers) alive from one pass to the next.
template <int K>
__device__ __forceinline__ void gn1_opaque(uint4 (&v)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) asm volatile("" : "+r"(v[k].x), "+r"(v[k].y), "+r"(v[k].z), "+r"(v[k].w));
}
template <typename T>
__device__ __forceinline__ uint4 pack16(const float* f) {
  if constexpr (std::is_same_v<T, float>)
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  else
    return make_uint4(pack2(f[0], f[1], T{}), pack2(f[2], f[3], T{}), pack2(f[4], f[5], T{}),
                      pack2(f[6], f[7], T{}));
}

// Note [single-pass group norm]: the cluster-wide sum of (a, b) for the tile's groups (a: this
// thread's sum for the first group its pack touches, b: the second), in a fixed order. Returns
// group threadIdx.x's total in threads below `ngroups` (0 elsewhere). `part` holds blockDim.x
// entries, `grp` kGn1MaxGroups; the caller synchronises the block before reusing `part`.
__device__ __forceinline__ float gn1_cluster_sum(float a, float b, float2* part, float2* colsum,
                                                 float* grp, int w, int r, int cpg, int vec,
                                                 int ngroups) {
  const int t = threadIdx.x, lane = t & 31;
  part[t] = make_float2(a, b);
  __syncthreads();
  // Column cc: lane j sums row lanes j, j + 32, ..., then a shuffle tree.
  for (int cc = t >> 5; cc < w; cc += int(blockDim.x >> 5)) {
    float2 q = make_float2(0.0f, 0.0f);
    for (int i = lane; i < r; i += 32) {
      const float2 p = part[i * w + cc];
      q.x += p.x;
      q.y += p.y;
    }
    for (int o = 16; o > 0; o >>= 1) {
      q.x += __shfl_xor_sync(0xffffffffu, q.x, o);
      q.y += __shfl_xor_sync(0xffffffffu, q.y, o);
    }
    if (lane == 0) colsum[cc] = q;
  }
  __syncthreads();
  if (t < ngroups) {
    // Group t's columns: .x where the column's pack starts in group t, else .y.
    float v = 0.0f;
    for (int cc = t * cpg / vec; cc <= ((t + 1) * cpg - 1) / vec; ++cc)
      v += cc * vec / cpg == t ? colsum[cc].x : colsum[cc].y;
    grp[t] = v;
  }
  cg::this_cluster().sync();  // every block's grp written (and this block's colsum read)
  float total = 0.0f;
  if (t < ngroups)
    for (unsigned q = 0; q < cg::this_cluster().num_blocks(); ++q)
      total += *cg::this_cluster().map_shared_rank(grp + t, int(q));
  return total;
}

#endif  // !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

// Note [single-pass group norm]: grid (CS, tiles, N) in clusters of (CS, 1, 1); block rank q
// takes rows [q R K, (q + 1) R K); threads past W R (the block rounded up to whole warps) only
// join the barriers.
template <typename T, int K, bool SILU>
__global__ void __launch_bounds__(gn1_max_threads(K), 1)
    gn_cluster_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                      const T* __restrict__ beta, T* __restrict__ y, int s, int c, int cpg, int tc,
                      int r, float eps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int V = 16 / int(sizeof(T));
  __shared__ float2 part[gn1_max_threads(K)];
  __shared__ float2 colsum[kGn1MaxCols];
  __shared__ float grp[2][kGn1MaxGroups];  // one per pass: the other blocks read them
  __shared__ float2 stat[kGn1MaxGroups];   // (mean, rstd) per group of the tile
  const int w = tc / V, ngroups = tc / cpg;
  const int t = threadIdx.x, col = t % w, lr = t / w;
  const int lch = col * V, ch = int(blockIdx.y) * tc + lch;
  const int g0 = lch / cpg, split = min(V, (g0 + 1) * cpg - lch);  // elements in group g0
  const int row = int(cg::this_cluster().block_rank()) * r * K + lr;
  const int kv = lr < r && row < s ? min(K, (s - row + r - 1) / r) : 0;  // rows this thread has
  const int64_t at = (int64_t(blockIdx.z) * s + row) * c + ch, step = int64_t(r) * c / V;
  const uint4* xp = reinterpret_cast<const uint4*>(x + (kv > 0 ? at : 0));
  uint4 v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = k < kv ? xp[k * step] : make_uint4(0u, 0u, 0u, 0u);

  // Pass 1: the mean (missing rows are zeros).
  float acc[V], f[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    unpack16<T>(v[k], f);
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] += f[e];
  }
  float a = 0.0f, b = 0.0f;
#pragma unroll
  for (int e = 0; e < V; ++e) (e < split ? a : b) += acc[e];
  const float count = float(cpg) * float(s);
  gn1_opaque(v);
  float tot = gn1_cluster_sum(a, b, part, colsum, grp[0], w, r, cpg, V, ngroups);
  if (t < ngroups) stat[t].x = tot / count;
  __syncthreads();
  float mean[V];
  const float m0 = stat[g0].x, m1 = split < V ? stat[g0 + 1].x : m0;
#pragma unroll
  for (int e = 0; e < V; ++e) mean[e] = e < split ? m0 : m1;

  // Pass 2: the sum of squared deviations.
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k >= kv) continue;
    unpack16<T>(v[k], f);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float d = f[e] - mean[e];
      acc[e] = fmaf(d, d, acc[e]);
    }
  }
  a = b = 0.0f;
#pragma unroll
  for (int e = 0; e < V; ++e) (e < split ? a : b) += acc[e];
  gn1_opaque(v);
  tot = gn1_cluster_sum(a, b, part, colsum, grp[1], w, r, cpg, V, ngroups);
  if (t < ngroups) stat[t].y = rsqrtf(tot / count + eps);
  // This thread's reads of the other blocks' grp are done; they may leave once all have arrived.
  cg::this_cluster().barrier_arrive();
  __syncthreads();

  // y = x * scale + shift (+ SiLU), as gn_apply_rows_kernel.
  float scale[V], shift[V];
  unpack16<T>(*reinterpret_cast<const uint4*>(gamma + ch), scale);
  unpack16<T>(*reinterpret_cast<const uint4*>(beta + ch), shift);
  const float r0 = stat[g0].y, r1 = split < V ? stat[g0 + 1].y : r0;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    scale[e] *= e < split ? r0 : r1;
    shift[e] -= mean[e] * scale[e];
  }
  uint4* yp = reinterpret_cast<uint4*>(y + (kv > 0 ? at : 0));
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k >= kv) continue;
    unpack16<T>(v[k], f);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      f[e] = fmaf(f[e], scale[e], shift[e]);
      if (SILU) f[e] = __fdividef(f[e], 1.0f + __expf(-f[e]));
    }
    yp[k * step] = pack16<T>(f);
  }
  cg::this_cluster().barrier_wait();
#endif
}

// Note [single-pass group norm]: one configuration of gn_cluster_kernel (k == 0: none fits).
struct Gn1Config {
  int k = 0, cs = 1, r = 0, tc = 0, threads = 0;
};

template <typename T, bool SILU>
auto gn1_kernel(int k) {
  switch (k) {
    case 1: return gn_cluster_kernel<T, 1, SILU>;
    case 2: return gn_cluster_kernel<T, 2, SILU>;
    case 4: return gn_cluster_kernel<T, 4, SILU>;
    case 8: return gn_cluster_kernel<T, 8, SILU>;
    case 16: return gn_cluster_kernel<T, 16, SILU>;
    default: return gn_cluster_kernel<T, 32, SILU>;
  }
}

// The cluster launch of configuration g over [n, ., c]: grid (CS, tiles, N) in clusters of CS.
struct Gn1Launch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg{};
  Gn1Launch(const Gn1Config& g, int64_t n, int64_t c, cudaStream_t st) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(g.cs);
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(unsigned(g.cs), unsigned(c / g.tc), unsigned(n));
    cfg.blockDim = dim3(unsigned(g.threads));
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  Gn1Launch(const Gn1Launch&) = delete;  // cfg points into attr
};

template <typename T, bool SILU>
cudaError_t gn1_launch(const Gn1Config& g, const T* x, const T* gamma, const T* beta, T* y,
                       int64_t n, int64_t s, int64_t c, int groups, float eps, cudaStream_t st) {
  const Gn1Launch l(g, n, c, st);
  const cudaError_t e = cudaLaunchKernelEx(&l.cfg, gn1_kernel<T, SILU>(g.k), x, gamma, beta, y,
                                           int(s), int(c), int(c / groups), g.tc, g.r, eps);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// Clusters of `g` that fit on the device at once (0: none, or no sm_90 code for the kernel).
template <typename T, bool SILU>
int gn1_active_clusters(const Gn1Config& g, int64_t n, int64_t c) {
  const auto kernel = gn1_kernel<T, SILU>(g.k);
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess || fa.binaryVersion < 90 ||
      fa.maxThreadsPerBlock < g.threads) {
    cudaGetLastError();
    return 0;
  }
  const Gn1Launch l(g, n, c, nullptr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &l.cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return clusters;
}

// Whether a V-element pack ever touches more than two groups of width cpg.
bool gn1_packs_span_two(int64_t c, int64_t cpg, int vec) {
  for (int64_t ch = 0; ch < c; ch += vec)
    if ((ch + vec - 1) / cpg - ch / cpg > 1) return false;
  return true;
}

// Note [single-pass group norm]: the tile, cluster size and packs per thread for [n, s, c] with
// V-element packs of esize-byte elements; `active(config)` is the number of its clusters the
// GPU holds at once (0: it does not run). Among configurations whose clusters all fit at once,
// ranked by SMs busy (90% of them counts as all), then 32-byte tile rows, the smallest cluster,
// the fewest blocks.
template <typename Active>
Gn1Config gn1_choose(int64_t n, int64_t s, int64_t c, int groups, int vec, int esize, int sms,
                     Active&& active) {
  Gn1Config best;
  if (n > 65535 || s * c > (int64_t(1) << 31) || c % groups != 0) return best;
  const int64_t cpg = c / groups;
  if (!gn1_packs_span_two(c, cpg, vec)) return best;
  const int64_t base = std::lcm(int64_t(vec), cpg);
  const int64_t full = (int64_t(sms) * 9 + 9) / 10;
  std::array<int64_t, 4> best_key{};
  for (int64_t tc = base; tc <= c && tc / vec <= kGn1MaxCols; tc += base) {
    if (c % tc != 0 || tc / cpg > kGn1MaxGroups) continue;
    const int64_t w = tc / vec, clusters = n * (c / tc);
    for (int cs : {1, 2, 4, 8}) {
      const int64_t rows = (s + cs - 1) / cs;
      for (int k : kGn1Packs) {  // the smallest K that fits: the most threads
        const int64_t r = (rows + k - 1) / k;
        const int64_t threads = (w * r + 31) / 32 * 32;
        if (threads > gn1_max_threads(k)) continue;
        if ((cs - 1) * r * k >= s || threads < tc / cpg) break;  // an idle block; too few threads
        Gn1Config g{k, cs, int(r), int(tc), int(threads)};
        // One wave only: a block holds its rows until its cluster is done, so a second wave
        // of clusters would wait out the first (measured slower than the three kernels).
        const int64_t fit = active(g);
        if (fit < clusters) break;
        const int64_t blocks = clusters * cs;
        const std::array<int64_t, 4> key = {-std::min(blocks, full), (tc * esize) % 32 != 0, cs,
                                            blocks};
        if (best.k == 0 || key < best_key) {
          best = g;
          best_key = key;
        }
        break;
      }
    }
  }
  return best;
}

// HEADROOM_GN_CLUSTER=0 keeps channels-last group norm on the three kernels (read once).
bool gn1_enabled() {
  static const bool on = env_switch("HEADROOM_GN_CLUSTER", true);
  return on;
}

// gn1_choose for this call on the current device, once per shape (the occupancy queries are not
// free).
template <typename T, bool SILU>
Gn1Config gn1_plan(int64_t n, int64_t s, int64_t c, int groups) {
  static std::mutex mu;
  static std::map<std::array<int64_t, 4>, Gn1Config> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  const std::array<int64_t, 4> key = {dev, n, s, c * 65536 + groups};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int major = 0, sms = 0;
  Gn1Config g;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      major >= 9) {
    constexpr int V = 16 / int(sizeof(T));
    g = gn1_choose(n, s, c, groups, V, int(sizeof(T)), sms,
                   [&](const Gn1Config& cand) { return gn1_active_clusters<T, SILU>(cand, n, c); });
  }
  cudaGetLastError();
  cache.emplace(key, g);
  return g;
}

// Note [vectorised norms]: lanes per row (1 << shift, at least 4) and packs per lane.
template <typename T>
cudaError_t layer_norm_packs(const T* x, const T* gamma, const T* beta, T* y, int64_t rows,
                             int64_t c, float eps, cudaStream_t s) {
  constexpr int64_t V = 16 / int64_t(sizeof(T));
  const int64_t packs = c / V;  // at most 32 * kLnMaxPacks
  int shift = 2;
  while (((packs + (int64_t(1) << shift) - 1) >> shift) > kLnMaxPacks) ++shift;
  const int per_lane = int((packs + (int64_t(1) << shift) - 1) >> shift);
  const int64_t rows_per_block = int64_t(kLnThreads) >> shift;
  const unsigned blocks = unsigned((rows + rows_per_block - 1) / rows_per_block);
  auto go = [&](auto r) {
    return launch(layer_norm_packs_kernel<T, decltype(r)::value>, dim3(blocks), dim3(kLnThreads), 0,
                  s, x, gamma, beta, y, rows, c, shift, eps);
  };
  switch (per_lane) {
    case 1: return go(std::integral_constant<int, 1>{});
    case 2: return go(std::integral_constant<int, 2>{});
    case 3: return go(std::integral_constant<int, 3>{});
    case 4: return go(std::integral_constant<int, 4>{});
    default: return go(std::integral_constant<int, 5>{});
  }
}

bool aligned16(const void* a, const void* b, const void* c, const void* d) {
  return (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
          reinterpret_cast<uintptr_t>(c) | reinterpret_cast<uintptr_t>(d)) %
             16 ==
         0;
}

}  // namespace

GroupNormNhwcPlan group_norm_nhwc_plan(int64_t n, int64_t s, int64_t c, int groups) {
  GroupNormNhwcPlan p;
  // Note [vectorised norms]: about four gn_partial blocks per SM of an H200-class GPU in all,
  // counting the column tiles of 16-bit types (8 channels a pack, at most 128 packs a tile), each
  // chunk at least 16 rows (more, smaller chunks lengthen gn_finalize's serial merges).
  const int64_t tiles = std::max<int64_t>(1, (c / 8 + 127) / 128);
  const int64_t blocks = std::max<int64_t>(n, 1) * tiles;
  const int64_t want = std::max<int64_t>(1, (528 + blocks - 1) / blocks);
  const int64_t most = std::max<int64_t>(1, s / 16);
  const int64_t chunks = std::min(want, most);
  p.rows_per_chunk = std::max<int64_t>(1, (s + chunks - 1) / chunks);
  p.chunks = std::max<int64_t>(1, (s + p.rows_per_chunk - 1) / p.rows_per_chunk);
  p.partial_bytes = align_up(size_t(n * p.chunks * c) * sizeof(float2));
  p.stats_bytes = align_up(size_t(n * groups) * sizeof(float2));
  return p;
}

namespace {

// The dtype and pack-width dispatch of group_norm_nhwc; `which` picks the kernels (Note
// [single-pass group norm]).
cudaError_t group_norm_nhwc_dispatch(GroupNormNhwcKernels which, DType t, const void* x,
                                     const void* gamma, const void* beta, void* y, int64_t n,
                                     int64_t s, int64_t c, int groups, float eps, bool silu,
                                     void* workspace, cudaStream_t st) {
  if (n * s * c == 0) return cudaSuccess;
  const bool try1 = which == GroupNormNhwcKernels::SINGLE_PASS ||
                    (which == GroupNormNhwcKernels::AUTO && gn1_enabled());
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    auto px = static_cast<const T*>(x);
    auto pg = static_cast<const T*>(gamma);
    auto pb = static_cast<const T*>(beta);
    auto py = static_cast<T*>(y);
    constexpr int kVec = sizeof(T) == 2 ? 8 : 4;
    const bool packs = c % kVec == 0 && aligned16(x, y, gamma, beta);
    if (try1 && packs) {
      const Gn1Config g = silu ? gn1_plan<T, true>(n, s, c, groups)
                               : gn1_plan<T, false>(n, s, c, groups);
      if (g.k > 0 && silu) return gn1_launch<T, true>(g, px, pg, pb, py, n, s, c, groups, eps, st);
      if (g.k > 0) return gn1_launch<T, false>(g, px, pg, pb, py, n, s, c, groups, eps, st);
    }
    if (which == GroupNormNhwcKernels::SINGLE_PASS) return cudaErrorNotSupported;
    const GroupNormNhwcPlan pl = group_norm_nhwc_plan(n, s, c, groups);
    auto launch = [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      return group_norm_nhwc_launch<T, V>(pl, px, pg, pb, py, n, s, c, groups, eps, silu,
                                          workspace, st);
    };
    if (packs) return launch(std::integral_constant<int, kVec>{});
    return launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace

cudaError_t group_norm_nhwc(DType t, const void* x, const void* gamma, const void* beta, void* y,
                            int64_t n, int64_t s, int64_t c, int groups, float eps, bool silu,
                            void* workspace, cudaStream_t st) {
  return group_norm_nhwc_dispatch(GroupNormNhwcKernels::AUTO, t, x, gamma, beta, y, n, s,
                                         c, groups, eps, silu, workspace, st);
}

cudaError_t group_norm_nhwc_kernels(GroupNormNhwcKernels k, DType t, const void* x,
                                    const void* gamma, const void* beta, void* y, int64_t n,
                                    int64_t s, int64_t c, int groups, float eps, bool silu,
                                    void* workspace, cudaStream_t st) {
  return group_norm_nhwc_dispatch(k, t, x, gamma, beta, y, n, s, c, groups, eps, silu,
                                         workspace, st);
}

std::string group_norm_nhwc_single_pass_config(DType t, int64_t n, int64_t s, int64_t c,
                                               int groups, bool silu) {
  std::string out;
  dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if (c % (16 / int64_t(sizeof(T))) != 0) return cudaSuccess;
    const Gn1Config g = silu ? gn1_plan<T, true>(n, s, c, groups)
                             : gn1_plan<T, false>(n, s, c, groups);
    if (g.k > 0)
      out = "tile " + std::to_string(g.tc) + " ch, " + std::to_string(g.cs) +
            " blocks/cluster x " + std::to_string(g.threads) + " threads x " +
            std::to_string(g.k) + " packs";
    return cudaSuccess;
  });
  return out;
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
      return launch(group_norm_kernel<T, true>, dim3(blocks), dim3(unsigned(threads)), 0, s, px, pg,
                    pb, py, c, spatial, groups, eps, silu);
    return launch(group_norm_kernel<T, false>, dim3(blocks), dim3(unsigned(threads)), 0, s, px, pg,
                  pb, py, c, spatial, groups, eps, silu);
  });
}

cudaError_t layer_norm_v1(DType t, const void* x, const void* gamma, const void* beta, void* y,
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
    const dim3 grid(blocks), block(kWarps * 32);
    if (c % 4 == 0 && al % (4 * sizeof(T)) == 0 && c <= 128 * 3)
      return launch(layer_norm_regs_kernel<T, 3>, grid, block, 0, s, px, pg, pb, py, rows, c, eps);
    if (c % 4 == 0 && al % (4 * sizeof(T)) == 0 && c <= 128 * 10)
      return launch(layer_norm_regs_kernel<T, 10>, grid, block, 0, s, px, pg, pb, py, rows, c, eps);
    if (c % 4 == 0)
      return launch(layer_norm_kernel<T, true>, grid, block, 0, s, px, pg, pb, py, rows, c, eps);
    return launch(layer_norm_kernel<T, false>, grid, block, 0, s, px, pg, pb, py, rows, c, eps);
  });
}

cudaError_t layer_norm(DType t, const void* x, const void* gamma, const void* beta, void* y,
                       int64_t rows, int64_t c, float eps, cudaStream_t s) {
  if (rows * c == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    constexpr int64_t kVec = 16 / int64_t(sizeof(T));
    // beta may be null (aligned).
    if (c % kVec == 0 && c / kVec <= 32 * kLnMaxPacks && aligned16(x, y, gamma, beta))
      return layer_norm_packs<T>(static_cast<const T*>(x), static_cast<const T*>(gamma),
                                 static_cast<const T*>(beta), static_cast<T*>(y), rows, c, eps, s);
    return layer_norm_v1(t, x, gamma, beta, y, rows, c, eps, s);
  });
}

}  // namespace hr::cuda
