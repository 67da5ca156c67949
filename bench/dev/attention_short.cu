// Experiment (bench/dev, not in the product): tensor-core attention for short key sequences
// (Nk <= 80: the 77-token text context of SD's cross-attentions), f16/bf16, sm_80+: a persistent
// kernel that keeps one head's K and V in shared memory and streams query tiles through two
// stages (Note [short-key attention]). It was HEADROOM_ATTN_SHORT in src/backend/cuda until
// 2026-12-02; bench_dev_attention_short checks and times it against the production kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_mma.cuh"
#include "dev/dev_kernels.h"

namespace hr::dev {
namespace {

using namespace hr::cuda;
using namespace hr::cuda::mma;

// Note [short-key attention]
// SD's cross-attentions have Nk = 77 keys: one tile of 80. The v2 kernels (Note [attention v2])
// give every block one query tile, so SDXL's 1024x77 layers launch 640 blocks of 64 queries for
// ~528 resident slots (1.2 waves), and the resident blocks all load, then all compute, then all
// store: an SM's tensor cores idle while its blocks wait for Q, its memory while they compute.
// Such a layer took ~11 us, ~4x what its 10.5 MB of Q and O need at HBM speed.
// Here the grid is as many blocks as fit at once (occupancy x SMs), and each block walks a
// contiguous run of query tiles (tiles ordered by batch, head, then query position), so it keeps
// one head's K and V for many tiles. Tile t+1's Q (and, where the run crosses into the next head,
// that head's K and V, into the other K/V stage) is in flight while tile t computes.
// With all keys in one tile the softmax needs no running max: scores, row max, exponentials,
// row sum and P V once per tile, in registers, in the m16n8 fragment layout of Note
// [tensor-core attention layout]; the scale is folded into the exponent as in Note [attention
// v2] (so scale > 0). Keys past Nk are zero rows of K masked to -inf, and zero rows of V.
// W warps of 16 query rows each make a tile of 16 W queries.
// Measured on the H200 (bench/PERF_NOTES.md v10, v11 and "Removed from the product"): faster
// alone on SDXL's shapes, no gain in the UNet step, so it left the product.
template <int D, int W>
struct ShortShape {
  static constexpr int kBK = 80;                  // key rows: every key of Nk <= 80
  static constexpr int kDP = (D + 15) / 16 * 16;  // D rounded up to the MMA k-step
  static constexpr int kStride = kDP + 8;         // shared row pitch in elements
  static constexpr int kThreads = W * 32;
  static constexpr int kBlockQ = W * 16;          // queries per tile
  static constexpr int kQ = kBlockQ * kStride;    // elements of one Q stage
  static constexpr int kKV = kBK * kStride;       // elements of one K (or V) stage
  static constexpr int kRows = 2 * kBlockQ + 4 * kBK;  // shared rows: 2 Q, 2 K and 2 V stages
  static constexpr size_t kSmemBytes = size_t(kRows) * kStride * 2;
};

// The tile's scores s (rows lane/4: e = 0, 1, and lane/4 + 8: e = 2, 3) become exp2(s c - max c)
// with keys at or past nk masked out; l gets this lane's part of each row's sum.
template <int NT>
__device__ __forceinline__ void softmax_16rows(float (&s)[NT][4], float (&l)[2], int nk, float c,
                                               int lane) {
  if (nk < NT * 8) {
    const int kbase = 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (kbase + n * 8 + (e & 1) >= nk) s[n][e] = -INFINITY;
  }
  float mc[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    mc[0] = fmaxf(mc[0], fmaxf(s[n][0], s[n][1]));
    mc[1] = fmaxf(mc[1], fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mc[i] = fmaxf(mc[i], __shfl_xor_sync(0xffffffffu, mc[i], 1));
    mc[i] = fmaxf(mc[i], __shfl_xor_sync(0xffffffffu, mc[i], 2));
    mc[i] *= c;
  }
  l[0] = l[1] = 0.0f;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = fast_exp2(fmaf(s[n][e], c, -mc[e / 2]));
      s[n][e] = p;
      l[e / 2] += p;
    }
}

// o = P V for one warp's 16 rows: P (the probabilities s, NT * 8 keys) in its accumulator layout,
// which is the A-fragment layout of the next MMA; V's rows in shared memory with pitch `stride`.
template <typename T, int NT, int NO>
__device__ __forceinline__ void pv_16rows(float (&o)[NO][4], const float (&s)[NT][4], const T* vt,
                                          int stride, int lane) {
#pragma unroll
  for (int n = 0; n < NO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  const int mi = lane / 8;
  const int key = (mi % 2) * 8 + lane % 8, col = (mi / 2) * 8;
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                            pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                            pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
    const T* vrow = vt + (kk * 16 + key) * stride;
#pragma unroll
    for (int n = 0; n + 1 < NO; n += 2) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, vrow + col + n * 8);
      mma16816<T>(o[n], pa, bf[0], bf[1]);
      mma16816<T>(o[n + 1], pa, bf[2], bf[3]);
    }
    if constexpr (NO % 2 == 1) {
      // Lanes 16..31 pass addresses the x2 form ignores; keep them inside the tile.
      uint32_t bf[2];
      ldmatrix_x2_trans(bf, vrow + (NO - 1) * 8);
      mma16816<T>(o[NO - 1], pa, bf[0], bf[1]);
    }
  }
}

// Rows row0 + lane/4 (+ 8) of o / l into out (row pitch ld), skipping rows at or past nq.
template <typename T, int NO>
__device__ __forceinline__ void store_16rows(T* out, int64_t ld, int row0, int nq,
                                             const float (&o)[NO][4], const float (&l)[2], int lane) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float li = l[i];
    li += __shfl_xor_sync(0xffffffffu, li, 1);
    li += __shfl_xor_sync(0xffffffffu, li, 2);
    const int row = row0 + lane / 4 + i * 8;
    if (row >= nq) continue;
    const float inv = 1.0f / li;
    T* orow = out + int64_t(row) * ld + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < NO; ++n)
      *reinterpret_cast<uint32_t*>(orow + n * 8) = pack2<T>(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
  }
}

template <typename T, int D, int W>
__global__ void __launch_bounds__(W * 32) attention_short_kernel(AttentionArgs a, int q_tiles) {
  using S = ShortShape<D, W>;
  constexpr int kDP = S::kDP, kStride = S::kStride, kThreads = S::kThreads, kBK = S::kBK;
  constexpr int kKSteps = kDP / 16;  // k-steps of Q K^T
  constexpr int kNTiles = D / 8;     // 8-wide output tiles of P V
  constexpr int kSTiles = kBK / 8;   // 8-wide score tiles
  extern __shared__ uint4 smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  auto q_stage = [&](int st) { return smem + st * S::kQ; };
  auto k_stage = [&](int st) { return smem + 2 * S::kQ + 2 * st * S::kKV; };
  auto v_stage = [&](int st) { return smem + 2 * S::kQ + (2 * st + 1) * S::kKV; };

  const int64_t total = int64_t(q_tiles) * a.heads * a.b;
  const int64_t begin = total * blockIdx.x / gridDim.x;
  const int64_t end = total * (blockIdx.x + 1) / gridDim.x;
  if (begin >= end) return;

  // Columns D..DP of Q and K are read by Q K^T: zero them once (cp.async never writes them).
  if constexpr (kDP > D) {
    constexpr int kPad = kDP - D;
    for (int idx = threadIdx.x; idx < S::kRows * kPad; idx += kThreads)
      smem[(idx / kPad) * kStride + D + idx % kPad] = from_f32<T>(0.0f);
  }

  const int64_t ld = int64_t(a.heads) * D;
  const int64_t ldq = a.ldq ? a.ldq : ld, ldk = a.ldk ? a.ldk : ld, ldv = a.ldv ? a.ldv : ld;
  // Tile `tile`'s Q into Q stage qst, and with kv its head's K and V into K/V stage kvst.
  auto load = [&](int64_t tile, int qst, int kvst, bool kv) {
    const int64_t bh = tile / q_tiles;
    const int qt = int(tile - bh * q_tiles);
    const int64_t b = bh / a.heads, h = bh - b * a.heads;
    const T* qp = static_cast<const T*>(a.q) + b * a.nq * ldq + h * D;
    rows_load<T, D, S::kBlockQ, kThreads, kStride>(q_stage(qst), qp, ldq, qt * S::kBlockQ, a.nq);
    if (kv) {
      const T* kp = static_cast<const T*>(a.k) + b * a.nk * ldk + h * D;
      const T* vp = static_cast<const T*>(a.v) + b * a.nk * ldv + h * D;
      rows_load<T, D, kBK, kThreads, kStride>(k_stage(kvst), kp, ldk, 0, a.nk);
      rows_load<T, D, kBK, kThreads, kStride>(v_stage(kvst), vp, ldv, 0, a.nk);
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, mi = lane / 8;
  const float c = a.scale * 1.4426950408889634f;  // log2(e)
  load(begin, 0, 0, true);
  cp_async_commit();
  int kvs = 0;
  for (int64_t t = begin; t < end; ++t) {
    const int qs = int((t - begin) & 1);
    const bool next = t + 1 < end;
    const bool new_head = next && (t + 1) / q_tiles != t / q_tiles;
    if (next) load(t + 1, qs ^ 1, kvs ^ 1, new_head);
    cp_async_commit();  // possibly empty: keeps the group count uniform
    cp_async_wait<1>();  // tile t's loads have landed
    __syncthreads();
    const T* qt = q_stage(qs);
    const T* kt = k_stage(kvs);
    const T* vt = v_stage(kvs);

    uint32_t qf[kKSteps][4];
    {
      const int row = warp * 16 + (mi % 2) * 8 + lane % 8, col = (mi / 2) * 8;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) ldmatrix_x4(qf[kk], qt + row * kStride + kk * 16 + col);
    }
    // S = Q K^T over all 80 key rows, its softmax, O = P V, normalised and stored (dense).
    float s[kSTiles][4], l[2], o[kNTiles][4];
    scores_16rows<T>(s, qf, kt, kStride, lane);
    softmax_16rows(s, l, a.nk, c, lane);
    pv_16rows<T>(o, s, vt, kStride, lane);
    const int64_t bh = t / q_tiles, b = bh / a.heads, h = bh - b * a.heads;
    const int q0 = int(t - bh * q_tiles) * S::kBlockQ;
    store_16rows(static_cast<T*>(a.o) + b * a.nq * ld + h * D, ld, q0 + warp * 16, a.nq, o, l, lane);
    __syncthreads();  // this tile's stages are read; the next iteration's loads may refill them
    if (new_head) kvs ^= 1;
  }
}

// Blocks of the kernel that fit on one SM at once (0: it cannot launch), asked once per kernel.
template <typename T, int D, int W>
int blocks_per_sm() {
  using S = ShortShape<D, W>;
  static const int n = [] {
    auto kernel = attention_short_kernel<T, D, W>;
    if (S::kSmemBytes > 48 * 1024 &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(S::kSmemBytes)) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, S::kThreads,
                                                      S::kSmemBytes) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return per_sm;
  }();
  return n;
}

template <typename T, int D, int W>
cudaError_t launch_short(const AttentionArgs& a, cudaStream_t s) {
  using S = ShortShape<D, W>;
  const int per_sm = blocks_per_sm<T, D, W>();
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int q_tiles = (a.nq + S::kBlockQ - 1) / S::kBlockQ;
  const int64_t total = int64_t(q_tiles) * a.heads * a.b;
  const int64_t grid = std::min<int64_t>(total, int64_t(per_sm) * sm_count());
  return launch(attention_short_kernel<T, D, W>, dim3(unsigned(grid)), dim3(S::kThreads),
                S::kSmemBytes, s, a, q_tiles);
}

template <typename T, int W>
cudaError_t launch_short_for_dim(const AttentionArgs& a, cudaStream_t s) {
  switch (a.d) {
    case 40: return launch_short<T, 40, W>(a, s);
    case 64: return launch_short<T, 64, W>(a, s);
    case 80: return launch_short<T, 80, W>(a, s);
    case 160: return launch_short<T, 160, W>(a, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool attention_short_supported(const AttentionArgs& a) {
  return attention_strided_supported(a) && a.nk >= 1 && a.nk <= 80 && a.nq >= 1;
}

cudaError_t attention_short(const AttentionArgs& a, cudaStream_t s, int warps) {
  if (!attention_short_supported(a)) return cudaErrorInvalidValue;
  const bool f16 = a.dtype == DType::F16;
  if (warps == 2)
    return f16 ? launch_short_for_dim<__half, 2>(a, s) : launch_short_for_dim<__nv_bfloat16, 2>(a, s);
  if (warps == 4)
    return f16 ? launch_short_for_dim<__half, 4>(a, s) : launch_short_for_dim<__nv_bfloat16, 4>(a, s);
  return cudaErrorInvalidValue;
}

}  // namespace hr::dev
