// FlashAttention-2-style tensor-core attention for f16/bf16 (mma.sync m16n8k16, f32
// accumulation, sm_80+, tuned on the H200): the default of attention_tc() for SD's head dims.
#include <cstdint>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_mma.cuh"

namespace hr::cuda {
namespace {

using namespace mma;

// Note [attention v2]
// The layout of Note [tensor-core attention layout] (cuda_attention_tc.cu: m16n8 accumulator
// fragments, P kept in registers as the A operand of P V, K/V tiles double-buffered with cp.async
// and zero-filled past Nk, rows padded to DP + 8) with what made that kernel issue-bound rather
// than tensor-bound:
//  - a warp owns RT = 2 row tiles (32 queries) where registers allow, so every K and V fragment
//    read from shared memory (ldmatrix) feeds two MMAs instead of one;
//  - blocks of 128 queries (4 warps x 32 rows, or 8 warps x 16 rows for D = 160 whose output
//    accumulator leaves no room for a second row tile): each K/V tile in shared memory serves
//    twice the queries, halving L2 -> shared traffic per FLOP;
//  - the running max is kept in raw score units and the scale folded into the exponent,
//    p = 2^(s c - m c) with c = scale log2 e: one FFMA and one ex2.approx per score (exp2f adds
//    range handling; the old kernel also multiplied every score by the scale first). This needs
//    scale > 0 (the max of raw scores is the max of scaled ones), which attention_tc checks;
//  - masking of keys past Nk only on the last tile (the old kernel compared every key index).
// l still sums the f32 probabilities while P V uses P rounded to T, as before.
//
// Note [attention v2 shapes]
// Blocks of 128 queries are ~7 % more efficient per query than blocks of 64 once an SM is full,
// but they come in half the number, and the busiest SM sets the time: SDXL's 1024-query layers
// (20 heads, batch 2) make 320 blocks of 128 for 132 SMs (3 on the busiest, 2.4 on average)
// against 640 of 64 (5 on the busiest, 4.8 on average), and the 64-query kernel is 19 % faster
// there. AUTO compares busiest-SM blocks x queries per block (x 0.93 for 128). Keys per tile are
// 64, or 80 when Nk <= 80: the 77-token cross-attention is then one tile (with 64 the second
// tile would be 13 keys of 64). The 4-warp 128-query kernel needs 234-255 registers for
// D = 64 / 80 and 178 for D = 40 (two blocks per SM); capping D = 40 at 168 registers for three
// blocks per SM (no spills) measured 5 % slower on the H200, so no block count is forced.

template <int D, int RT, int W, int BK>
struct Fa2Shape {
  static constexpr int kDP = (D + 15) / 16 * 16;  // D rounded up to the MMA k-step
  static constexpr int kStride = kDP + 8;         // shared row pitch in elements
  static constexpr int kThreads = W * 32;
  static constexpr int kWarpRows = 16 * RT;       // query rows per warp
  static constexpr int kBlockQ = W * kWarpRows;   // query rows per block
  static constexpr int kTile = BK * kStride;      // elements of one K or V tile
  static constexpr size_t kSmemBytes = size_t(4) * kTile * 2;  // K and V, two stages
  static_assert(BK % 16 == 0, "P V steps over keys 16 at a time");
  static_assert(kBlockQ <= 2 * BK, "Q is staged in the second stage's K and V buffers");
};

template <typename T, int D, int RT, int W, int BK>
__global__ void __launch_bounds__(W * 32) attention_fa2_kernel(AttentionArgs a) {
  using S = Fa2Shape<D, RT, W, BK>;
  constexpr int kDP = S::kDP, kStride = S::kStride, kTile = S::kTile, kThreads = S::kThreads;
  constexpr int kKSteps = kDP / 16;  // k-steps of Q K^T
  constexpr int kNTiles = D / 8;     // 8-wide output tiles of P V
  constexpr int kSTiles = BK / 8;    // 8-wide score tiles per key tile
  extern __shared__ uint4 smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  // Stage st holds K at smem + 2 st kTile and V right after it; Q is staged in stage 1.
  auto k_stage = [&](int st) { return smem + 2 * st * kTile; };
  auto v_stage = [&](int st) { return smem + (2 * st + 1) * kTile; };
  T* qs = k_stage(1);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * S::kBlockQ;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t ld = int64_t(a.heads) * D;
  const int64_t ldq = a.ldq ? a.ldq : ld;  // AttentionArgs::ldq
  const int64_t ldk = a.ldk ? a.ldk : ld, ldv = a.ldv ? a.ldv : ld;
  const T* qp = static_cast<const T*>(a.q) + int64_t(b) * a.nq * ldq + int64_t(h) * D;
  const T* kp = static_cast<const T*>(a.k) + int64_t(b) * a.nk * ldk + int64_t(h) * D;
  const T* vp = static_cast<const T*>(a.v) + int64_t(b) * a.nk * ldv + int64_t(h) * D;

  // Zero columns D..DP in every buffer: K's and Q's are read by Q K^T (Q spans both buffers of
  // stage 1 when it has 2 BK rows); V's are never read.
  if constexpr (kDP > D) {
    constexpr int kPad = kDP - D;
    for (int idx = threadIdx.x; idx < 4 * BK * kPad; idx += kThreads)
      smem[(idx / kPad) * kStride + D + idx % kPad] = from_f32<T>(0.0f);
  }

  rows_load<T, D, S::kBlockQ, kThreads, kStride>(qs, qp, ldq, q0, a.nq);
  cp_async_commit();
  rows_load<T, D, BK, kThreads, kStride>(k_stage(0), kp, ldk, 0, a.nk);
  rows_load<T, D, BK, kThreads, kStride>(v_stage(0), vp, ldv, 0, a.nk);
  cp_async_commit();
  cp_async_wait<1>();  // Q has landed
  __syncthreads();

  uint32_t qf[RT][kKSteps][4];
  {
    const int mi = lane / 8;
    const int col = (mi / 2) * 8;
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
      const int row = warp * S::kWarpRows + rt * 16 + (mi % 2) * 8 + lane % 8;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
        ldmatrix_x4(qf[rt][kk], qs + row * kStride + kk * 16 + col);
    }
  }
  __syncthreads();  // Q is in registers; its buffers may take K and V

  float o[RT][kNTiles][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) o[rt][n][0] = o[rt][n][1] = o[rt][n][2] = o[rt][n][3] = 0.0f;
  // Row i of row tile rt is lane/4 + 8 i; m in raw score units (Note [attention v2]).
  float m[RT][2], l[RT][2];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) m[rt][0] = m[rt][1] = -INFINITY, l[rt][0] = l[rt][1] = 0.0f;
  const float c = a.scale * 1.4426950408889634f;  // log2(e)
  const int tiles = (a.nk + BK - 1) / BK;

  for (int t = 0; t < tiles; ++t) {
    const int st = t & 1;
    if (t + 1 < tiles) {
      rows_load<T, D, BK, kThreads, kStride>(k_stage(st ^ 1), kp, ldk, (t + 1) * BK, a.nk);
      rows_load<T, D, BK, kThreads, kStride>(v_stage(st ^ 1), vp, ldv, (t + 1) * BK, a.nk);
    }
    cp_async_commit();  // possibly empty: keeps the group count uniform
    cp_async_wait<1>();
    __syncthreads();
    const T* kt = k_stage(st);
    const T* vt = v_stage(st);

    // S = Q K^T: each K fragment feeds the warp's RT row tiles.
    float s[RT][kSTiles][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) s[rt][n][0] = s[rt][n][1] = s[rt][n][2] = s[rt][n][3] = 0.0f;
    {
      const int mi = lane / 8;
      const int key = (mi / 2) * 8 + lane % 8, col = (mi % 2) * 8;
#pragma unroll
      for (int n = 0; n < kSTiles; n += 2) {
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          uint32_t bf[4];
          ldmatrix_x4(bf, kt + (n * 8 + key) * kStride + kk * 16 + col);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            mma16816<T>(s[rt][n], qf[rt][kk], bf[0], bf[1]);
            mma16816<T>(s[rt][n + 1], qf[rt][kk], bf[2], bf[3]);
          }
        }
      }
    }

    // Keys past Nk (their K rows are zeros) only exist in the last tile.
    if ((t + 1) * BK > a.nk) {
      const int kbase = t * BK + 2 * (lane % 4);
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int n = 0; n < kSTiles; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (kbase + n * 8 + (e & 1) >= a.nk) s[rt][n][e] = -INFINITY;
    }

    // Online softmax; every tile has a key, so the new max is finite.
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
      float mx[2] = {m[rt][0], m[rt][1]};
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        mx[0] = fmaxf(mx[0], fmaxf(s[rt][n][0], s[rt][n][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[rt][n][2], s[rt][n][3]));
      }
      float corr[2], mc[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        corr[i] = fast_exp2((m[rt][i] - mx[i]) * c);  // 0 on the first tile (m = -inf)
        m[rt][i] = mx[i];
        mc[i] = mx[i] * c;
      }
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = fast_exp2(fmaf(s[rt][n][e], c, -mc[e / 2]));
          s[rt][n][e] = p;
          rs[e / 2] += p;
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) l[rt][i] = l[rt][i] * corr[i] + rs[i];
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
        o[rt][n][0] *= corr[0];
        o[rt][n][1] *= corr[0];
        o[rt][n][2] *= corr[1];
        o[rt][n][3] *= corr[1];
      }
    }

    // O += P V: P's accumulator layout is the A-fragment layout of the next MMA; each V
    // fragment feeds the RT row tiles.
    {
      const int mi = lane / 8;
      const int key = (mi % 2) * 8 + lane % 8, col = (mi / 2) * 8;
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        uint32_t pa[RT][4];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          pa[rt][0] = pack2<T>(s[rt][2 * kk][0], s[rt][2 * kk][1]);
          pa[rt][1] = pack2<T>(s[rt][2 * kk][2], s[rt][2 * kk][3]);
          pa[rt][2] = pack2<T>(s[rt][2 * kk + 1][0], s[rt][2 * kk + 1][1]);
          pa[rt][3] = pack2<T>(s[rt][2 * kk + 1][2], s[rt][2 * kk + 1][3]);
        }
        const T* vrow = vt + (kk * 16 + key) * kStride + col;
#pragma unroll
        for (int n = 0; n + 1 < kNTiles; n += 2) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, vrow + n * 8);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            mma16816<T>(o[rt][n], pa[rt], bf[0], bf[1]);
            mma16816<T>(o[rt][n + 1], pa[rt], bf[2], bf[3]);
          }
        }
        if constexpr (kNTiles % 2 == 1) {
          // Lanes 16..31 pass addresses the x2 form ignores; keep them inside the tile.
          uint32_t bf[2];
          ldmatrix_x2_trans(bf, vt + (kk * 16 + key) * kStride + (kNTiles - 1) * 8);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) mma16816<T>(o[rt][kNTiles - 1], pa[rt], bf[0], bf[1]);
        }
      }
    }
    __syncthreads();  // this stage is read; the next iteration's loads may overwrite it
  }

  // Normalise and store rows q0 + warp rows + 16 rt + lane/4 (+ 8).
  T* op = static_cast<T*>(a.o) + int64_t(b) * a.nq * ld + int64_t(h) * D;
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float li = l[rt][i];
      li += __shfl_xor_sync(0xffffffffu, li, 1);
      li += __shfl_xor_sync(0xffffffffu, li, 2);
      const int row = q0 + warp * S::kWarpRows + rt * 16 + lane / 4 + i * 8;
      if (row >= a.nq) continue;
      const float inv = 1.0f / li;
      T* orow = op + int64_t(row) * ld + 2 * (lane % 4);
#pragma unroll
      for (int n = 0; n < kNTiles; ++n)
        *reinterpret_cast<uint32_t*>(orow + n * 8) =
            pack2<T>(o[rt][n][2 * i] * inv, o[rt][n][2 * i + 1] * inv);
    }
  }
}

template <typename T, int D, int RT, int W, int BK>
cudaError_t launch_fa2(const AttentionArgs& a, cudaStream_t s) {
  using S = Fa2Shape<D, RT, W, BK>;
  if constexpr (S::kSmemBytes > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(attention_fa2_kernel<T, D, RT, W, BK>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(S::kSmemBytes));
    if (e != cudaSuccess) return e;
  }
  dim3 grid(unsigned((a.nq + S::kBlockQ - 1) / S::kBlockQ), unsigned(a.heads), unsigned(a.b));
  return launch(attention_fa2_kernel<T, D, RT, W, BK>, grid, dim3(S::kThreads), S::kSmemBytes, s,
                a);
}

// 128 queries per block: 4 warps of 32 rows, or 8 of 16 for D = 160 (Note [attention v2]).
template <typename T, int D, int BK>
cudaError_t launch_q128(const AttentionArgs& a, cudaStream_t s) {
  if constexpr (D >= 160) return launch_fa2<T, D, 1, 8, BK>(a, s);
  else return launch_fa2<T, D, 2, 4, BK>(a, s);
}

template <typename T, int D>
cudaError_t launch_for_kernel(const AttentionArgs& a, AttentionTc k, cudaStream_t s) {
  switch (k) {
    case AttentionTc::Q64_K64: return launch_fa2<T, D, 1, 4, 64>(a, s);
    case AttentionTc::Q64_K80: return launch_fa2<T, D, 1, 4, 80>(a, s);
    case AttentionTc::Q128_K64: return launch_q128<T, D, 64>(a, s);
    case AttentionTc::Q128_K80: return launch_q128<T, D, 80>(a, s);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t launch_for_dim(const AttentionArgs& a, AttentionTc k, cudaStream_t s) {
  switch (a.d) {
    case 40: return launch_for_kernel<T, 40>(a, k, s);
    case 64: return launch_for_kernel<T, 64>(a, k, s);
    case 80: return launch_for_kernel<T, 80>(a, k, s);
    case 160: return launch_for_kernel<T, 160>(a, k, s);
    default: return cudaErrorInvalidValue;
  }
}

// Note [attention v2 shapes].
AttentionTc auto_kernel(const AttentionArgs& a) {
  const int64_t sms = sm_count(), bh = int64_t(a.heads) * a.b;
  const int64_t busiest64 = (int64_t((a.nq + 63) / 64) * bh + sms - 1) / sms;
  const int64_t busiest128 = (int64_t((a.nq + 127) / 128) * bh + sms - 1) / sms;
  const bool q128 = double(busiest128) * 128 * 0.93 < double(busiest64) * 64;
  if (a.nk <= 80) return q128 ? AttentionTc::Q128_K80 : AttentionTc::Q64_K80;
  return q128 ? AttentionTc::Q128_K64 : AttentionTc::Q64_K64;
}

}  // namespace

bool attention_strided_supported(const AttentionArgs& a) {
  return attention_tc_supported(a) && a.scale > 0.0f && a.ldq % 8 == 0 && a.ldk % 8 == 0 &&
         a.ldv % 8 == 0;
}

cudaError_t attention_tc(const AttentionArgs& a, cudaStream_t s, AttentionTc kernel) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return cudaErrorInvalidValue;
  // The folded scale needs scale > 0 (Note [attention v2]); the first kernel takes any.
  if (kernel == AttentionTc::V1 || !(a.scale > 0.0f)) {
    if (a.ldq || a.ldk || a.ldv) return cudaErrorInvalidValue;  // the first kernel reads dense
    return attention_tc_v1(a, s);
  }
  if (kernel == AttentionTc::AUTO) kernel = auto_kernel(a);
  if (a.dtype == DType::F16) return launch_for_dim<__half>(a, kernel, s);
  return launch_for_dim<__nv_bfloat16>(a, kernel, s);
}

}  // namespace hr::cuda
