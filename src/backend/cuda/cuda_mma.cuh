// Warp-level tensor-core helpers shared by the attention kernels (cuda_attention_tc.cu,
// cuda_attention_fa2.cu): cp.async, ldmatrix, mma.sync m16n8k16 with f32 accumulation (sm_80+).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_common.h"

namespace hr::cuda::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; bytes = 0 writes zeros without reading src.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}

// c += a b for one m16n8k16 tile.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                 uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a T pair in one register, the first in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// 2^x (ex2.approx.ftz: no range handling; the attention kernels fold the scale into x).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Copies `rows` rows of D elements (row pitch `ld` elements) starting at row `r0` of `src` into
// a tile of pitch `stride`; rows at or past `nrows` become zeros.
template <typename T, int D, int kRows, int kThreads, int kStride>
__device__ __forceinline__ void rows_load(T* dst, const T* src, int64_t ld, int r0, int nrows) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
#pragma unroll 4
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx - r * kChunks;
    const int row = r0 + r;
    const bool ok = row < nrows;
    const T* p = src + (ok ? int64_t(row) * ld : 0) + c * 8;
    cp_async16(dst + r * kStride + c * 8, p, ok ? 16 : 0);
  }
}

// s = Q K^T for one warp's 16 query rows against NT * 8 keys: qf holds the rows' A fragments
// (KS k-steps of 16), kt the keys' rows in shared memory with pitch `stride` (the m16n8 layout
// of Note [tensor-core attention layout]).
template <typename T, int NT, int KS>
__device__ __forceinline__ void scores_16rows(float (&s)[NT][4], const uint32_t (&qf)[KS][4],
                                              const T* kt, int stride, int lane) {
  static_assert(NT % 2 == 0, "key tiles come in pairs (one ldmatrix_x4 each)");
#pragma unroll
  for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  const int mi = lane / 8;
  const int key = (mi / 2) * 8 + lane % 8, col = (mi % 2) * 8;
#pragma unroll
  for (int n = 0; n < NT; n += 2) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t bf[4];
      ldmatrix_x4(bf, kt + (n * 8 + key) * stride + kk * 16 + col);
      mma16816<T>(s[n], qf[kk], bf[0], bf[1]);
      mma16816<T>(s[n + 1], qf[kk], bf[2], bf[3]);
    }
  }
}

}  // namespace hr::cuda::mma
