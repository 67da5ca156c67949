// Tensor-core fused attention for f16/bf16 (mma.sync m16n8k16, f32 accumulation, sm_80+), the
// first kernel (64 queries per block): kept as attention_tc_v1 for bench_attention's same-run
// comparison; attention_tc (cuda_attention_fa2.cu) runs the FlashAttention-2-style kernel.
#include <cstdint>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_mma.cuh"

namespace hr::cuda {
namespace {

using namespace mma;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockQ = kWarps * 16;  // query rows per block, 16 per warp
constexpr int kBlockK = 64;           // keys per shared-memory tile

// Note [tensor-core attention layout]
// A block owns 64 queries of one (batch, head); warp w owns query rows 16w..16w+15 and keeps
// its Q fragments, its 16 x 64 score tile and its 16 x D output accumulator in registers, with
// the m16n8 accumulator layout (lane l holds rows l/4 and l/4 + 8, columns 2(l%4) and +1 of each
// 8-wide tile), so a row's softmax statistics reduce over the 4 lanes of a quad. K and V tiles of
// 64 keys stream through shared memory in two stages (cp.async, zero-filled past Nk so masked
// keys multiply zeros, never garbage). Rows are padded to DP + 8 elements: D rounds up to the
// 16-deep MMA k-step (40 -> 48) with zero columns in Q and K, and the extra 8 keep ldmatrix free
// of bank conflicts. Q is staged through the second stage's K buffer before the loop starts.
// Scores are in log2 units (scale * log2 e applied to the f32 scores) so exp2f does the
// exponentials; P is rounded to T for the P V product while l sums the f32 values.

template <int D>
struct TcShape {
  static constexpr int kDP = (D + 15) / 16 * 16;  // D rounded up to the MMA k-step
  static constexpr int kStride = kDP + 8;         // shared row pitch in elements
  static constexpr int kTile = kBlockK * kStride; // elements of one K or V tile
  static constexpr int kChunks = D / 8;           // 16-byte chunks per row
  static constexpr size_t kSmemBytes = size_t(4) * kTile * 2;  // K and V, two stages
};

// Copies `rows` rows of D elements (row pitch `ld` elements) starting at row `r0` of `src` into
// a padded tile; rows at or past `nrows` become zeros.
template <typename T, int D>
__device__ __forceinline__ void tile_load(T* dst, const T* src, int64_t ld, int r0, int nrows) {
  using S = TcShape<D>;
  for (int idx = threadIdx.x; idx < kBlockK * S::kChunks; idx += kThreads) {
    const int r = idx / S::kChunks, c = idx - r * S::kChunks;
    const int row = r0 + r;
    const bool ok = row < nrows;
    const T* p = src + (ok ? int64_t(row) * ld : 0) + c * 8;
    cp_async16(dst + r * S::kStride + c * 8, p, ok ? 16 : 0);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attention_tc_kernel(AttentionArgs a) {
  using S = TcShape<D>;
  constexpr int kDP = S::kDP, kStride = S::kStride, kTile = S::kTile;
  constexpr int kKSteps = kDP / 16;  // k-steps of Q K^T
  constexpr int kNTiles = D / 8;     // 8-wide output tiles of P V
  extern __shared__ uint4 smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  // Stage st holds K at smem + 2 st kTile and V right after it.
  auto k_stage = [&](int st) { return smem + 2 * st * kTile; };
  auto v_stage = [&](int st) { return smem + (2 * st + 1) * kTile; };
  T* qs = k_stage(1);  // Q is staged where the second K stage later goes

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kBlockQ;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t ld = int64_t(a.heads) * D;
  const T* qp = static_cast<const T*>(a.q) + int64_t(b) * a.nq * ld + int64_t(h) * D;
  const T* kp = static_cast<const T*>(a.k) + int64_t(b) * a.nk * ld + int64_t(h) * D;
  const T* vp = static_cast<const T*>(a.v) + int64_t(b) * a.nk * ld + int64_t(h) * D;

  // The zero columns D..DP of Q and both K stages (Note [tensor-core attention layout]).
  if constexpr (kDP > D) {
    constexpr int kPad = kDP - D;
    for (int idx = threadIdx.x; idx < 2 * kBlockK * kPad; idx += kThreads) {
      const int stage = idx / (kBlockK * kPad), rem = idx - stage * kBlockK * kPad;
      const int r = rem / kPad, c = D + rem % kPad;
      k_stage(stage)[r * kStride + c] = from_f32<T>(0.0f);
    }
  }

  tile_load<T, D>(qs, qp, ld, q0, a.nq);
  cp_async_commit();
  tile_load<T, D>(k_stage(0), kp, ld, 0, a.nk);
  tile_load<T, D>(v_stage(0), vp, ld, 0, a.nk);
  cp_async_commit();
  cp_async_wait<1>();  // Q has landed
  __syncthreads();

  uint32_t qf[kKSteps][4];
  {
    const int mi = lane / 8;
    const int row = warp * 16 + (mi % 2) * 8 + lane % 8, col = (mi / 2) * 8;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) ldmatrix_x4(qf[kk], qs + row * kStride + kk * 16 + col);
  }
  __syncthreads();  // Q is in registers; its buffer may take K

  float o[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float qk_scale = a.scale * 1.4426950408889634f;  // log2(e)
  const int tiles = (a.nk + kBlockK - 1) / kBlockK;

  for (int t = 0; t < tiles; ++t) {
    const int st = t & 1;
    if (t + 1 < tiles) {
      tile_load<T, D>(k_stage(st ^ 1), kp, ld, (t + 1) * kBlockK, a.nk);
      tile_load<T, D>(v_stage(st ^ 1), vp, ld, (t + 1) * kBlockK, a.nk);
    }
    cp_async_commit();  // possibly empty: keeps the group count uniform
    cp_async_wait<1>();
    __syncthreads();
    const T* kt = k_stage(st);
    const T* vt = v_stage(st);

    // S = Q K^T for this warp's 16 rows and the tile's 64 keys.
    float s[kBlockK / 8][4];
    scores_16rows<T>(s, qf, kt, kStride, lane);

    // Online softmax over rows lane/4 (i = 0) and lane/4 + 8 (i = 1).
    const int kbase = t * kBlockK + 2 * (lane % 4);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kBlockK / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kbase + n * 8 + (e & 1);
        const float v = key < a.nk ? s[n][e] * qk_scale : -INFINITY;
        s[n][e] = v;
        mx[e / 2] = fmaxf(mx[e / 2], v);
      }
    }
    float corr[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      corr[i] = exp2f(m[i] - mx[i]);  // 0 on the first tile (m = -inf); every tile has a key
      m[i] = mx[i];
    }
#pragma unroll
    for (int n = 0; n < kBlockK / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[n][e] - mx[e / 2]);
        s[n][e] = p;
        rs[e / 2] += p;
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * corr[i] + rs[i];
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }

    // O += P V: P's accumulator layout is the A-fragment layout of the next MMA.
    {
      const int mi = lane / 8;
      const int key = (mi % 2) * 8 + lane % 8, col = (mi / 2) * 8;
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        uint32_t pa[4];
        pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const T* vrow = vt + (kk * 16 + key) * kStride + col;
#pragma unroll
        for (int n = 0; n + 1 < kNTiles; n += 2) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, vrow + n * 8);
          mma16816<T>(o[n], pa, bf[0], bf[1]);
          mma16816<T>(o[n + 1], pa, bf[2], bf[3]);
        }
        if constexpr (kNTiles % 2 == 1) {
          // Lanes 16..31 pass addresses the x2 form ignores; keep them inside the tile.
          uint32_t bf[2];
          ldmatrix_x2_trans(bf, vt + (kk * 16 + key) * kStride + (kNTiles - 1) * 8);
          mma16816<T>(o[kNTiles - 1], pa, bf[0], bf[1]);
        }
      }
    }
    __syncthreads();  // this stage is read; the next iteration's loads may overwrite it
  }

  // Normalise and store rows q0 + 16 warp + lane/4 (+ 8).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  T* op = static_cast<T*>(a.o) + int64_t(b) * a.nq * ld + int64_t(h) * D;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = q0 + warp * 16 + lane / 4 + i * 8;
    if (row >= a.nq) continue;
    const float inv = 1.0f / l[i];
    T* orow = op + int64_t(row) * ld + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
      *reinterpret_cast<uint32_t*>(orow + n * 8) =
          pack2<T>(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
  }
}

template <typename T, int D>
cudaError_t launch_tc(const AttentionArgs& a, cudaStream_t s) {
  constexpr size_t smem = TcShape<D>::kSmemBytes;
  if constexpr (smem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(attention_tc_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  dim3 grid(unsigned((a.nq + kBlockQ - 1) / kBlockQ), unsigned(a.heads), unsigned(a.b));
  attention_tc_kernel<T, D><<<grid, kThreads, smem, s>>>(a);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_tc_for_dim(const AttentionArgs& a, cudaStream_t s) {
  switch (a.d) {
    case 40: return launch_tc<T, 40>(a, s);
    case 64: return launch_tc<T, 64>(a, s);
    case 80: return launch_tc<T, 80>(a, s);
    case 160: return launch_tc<T, 160>(a, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool attention_tc_supported(const AttentionArgs& a) {
  if (a.dtype != DType::F16 && a.dtype != DType::BF16) return false;
  if (a.causal || a.d != a.dv) return false;
  if (a.d != 40 && a.d != 64 && a.d != 80 && a.d != 160) return false;
  // cp.async moves 16-byte chunks: every row start must be 16-byte aligned (D % 8 == 0 holds).
  return aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.o);
}

cudaError_t attention_tc_v1(const AttentionArgs& a, cudaStream_t s) {
  if (a.dtype == DType::F16) return launch_tc_for_dim<__half>(a, s);
  if (a.dtype == DType::BF16) return launch_tc_for_dim<__nv_bfloat16>(a, s);
  return cudaErrorInvalidValue;
}

}  // namespace hr::cuda
