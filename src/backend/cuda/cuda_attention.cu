// Fused attention (flash-style): softmax(q k^T * scale) v per head with an online softmax over
// key tiles held in shared memory; the [Nq, Nk] score matrix never exists in device memory.
#include <algorithm>

#include "backend/cuda/cuda_common.h"

namespace hr::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kKeyChunk = 8;           // keys scored together between softmax rescales
constexpr int kSmemBytes = 48 * 1024;  // K and V tiles; within the default per-block limit

// Note [attention thread layout]
// TPQ threads share one query row: lane l of a group holds the 4-vectors l, l + TPQ, ... of the
// query and of the output accumulator (CPL of them), so a group covers 4 * TPQ * CPL dims. A
// score is a partial dot product per lane summed with xor shuffles inside the group (groups are
// aligned within a warp). The block holds 256 / TPQ queries of one (batch, head) and walks the
// keys in tiles of `bk` rows that all threads load, converted to f32, into shared memory. Scores
// are kept in log2 units (q is pre-scaled by scale * log2 e) so exp2f does the exponentials.
template <typename T, int TPQ, int CPL>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a, int bk) {
  extern __shared__ float4 smem[];
  const int d4 = a.d / 4, dv4 = a.dv / 4;
  float4* ks = smem;
  float4* vs = smem + bk * d4;
  constexpr int kQueries = kThreads / TPQ;
  const int group = threadIdx.x / TPQ, lane = threadIdx.x % TPQ;
  const int q0 = blockIdx.x * kQueries;
  const int qi = q0 + group;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t qk_row = int64_t(a.heads) * a.d, v_row = int64_t(a.heads) * a.dv;
  const T* qp = static_cast<const T*>(a.q) + (int64_t(b) * a.nq + min(qi, a.nq - 1)) * qk_row +
                int64_t(h) * a.d;
  const T* kp = static_cast<const T*>(a.k) + int64_t(b) * a.nk * qk_row + int64_t(h) * a.d;
  const T* vp = static_cast<const T*>(a.v) + int64_t(b) * a.nk * v_row + int64_t(h) * a.dv;
  const float qscale = a.scale * 1.4426950408889634f;  // log2(e)
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  float4 q[CPL], acc[CPL];
#pragma unroll
  for (int c = 0; c < CPL; ++c) {
    const int idx = lane + c * TPQ;
    float4 v = idx < d4 ? load4(qp + idx * 4) : zero;
    q[c] = make_float4(v.x * qscale, v.y * qscale, v.z * qscale, v.w * qscale);
    acc[c] = zero;
  }
  float m = -INFINITY, l = 0.0f;
  // Causal: no query of this block sees keys past its last query.
  const int kend = a.causal ? min(a.nk, min(a.nq, q0 + kQueries)) : a.nk;

  for (int t0 = 0; t0 < kend; t0 += bk) {
    __syncthreads();  // the previous tile is no longer read
    for (int idx = threadIdx.x; idx < bk * d4; idx += kThreads) {
      const int j = idx / d4, c = idx - j * d4, key = t0 + j;
      ks[idx] = key < kend ? load4(kp + int64_t(key) * qk_row + c * 4) : zero;
    }
    for (int idx = threadIdx.x; idx < bk * dv4; idx += kThreads) {
      const int j = idx / dv4, c = idx - j * dv4, key = t0 + j;
      vs[idx] = key < kend ? load4(vp + int64_t(key) * v_row + c * 4) : zero;
    }
    __syncthreads();
    const int nk = min(bk, kend - t0);
    for (int j0 = 0; j0 < nk; j0 += kKeyChunk) {
      float s[kKeyChunk];
#pragma unroll
      for (int jj = 0; jj < kKeyChunk; ++jj) {
        const float4* kr = ks + (j0 + jj) * d4;
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
          const int idx = lane + c * TPQ;
          if (idx < d4) {
            const float4 kv = kr[idx];
            dot += q[c].x * kv.x + q[c].y * kv.y + q[c].z * kv.z + q[c].w * kv.w;
          }
        }
#pragma unroll
        for (int off = TPQ / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const int key = t0 + j0 + jj;
        s[jj] = (j0 + jj < nk && (!a.causal || key <= qi)) ? dot : -INFINITY;
      }
      float mx = m;
#pragma unroll
      for (int jj = 0; jj < kKeyChunk; ++jj) mx = fmaxf(mx, s[jj]);
      if (mx == -INFINITY) continue;  // every key so far is masked for this query
      const float corr = exp2f(m - mx);  // 0 on the first visible chunk (m = -inf)
      l *= corr;
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        acc[c].x *= corr;
        acc[c].y *= corr;
        acc[c].z *= corr;
        acc[c].w *= corr;
      }
#pragma unroll
      for (int jj = 0; jj < kKeyChunk; ++jj) {
        const float p = exp2f(s[jj] - mx);
        l += p;
        const float4* vr = vs + (j0 + jj) * dv4;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
          const int idx = lane + c * TPQ;
          if (idx < dv4) {
            const float4 vv = vr[idx];
            acc[c].x += p * vv.x;
            acc[c].y += p * vv.y;
            acc[c].z += p * vv.z;
            acc[c].w += p * vv.w;
          }
        }
      }
      m = mx;
    }
  }

  if (qi < a.nq) {
    const float inv = 1.0f / l;
    T* op = static_cast<T*>(a.o) + (int64_t(b) * a.nq + qi) * v_row + int64_t(h) * a.dv;
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const int idx = lane + c * TPQ;
      if (idx < dv4)
        store4(op + idx * 4, make_float4(acc[c].x * inv, acc[c].y * inv, acc[c].z * inv, acc[c].w * inv));
    }
  }
}

template <typename T, int TPQ, int CPL>
cudaError_t launch(const AttentionArgs& a, cudaStream_t s) {
  const int d4 = a.d / 4, dv4 = a.dv / 4;
  int bk = kSmemBytes / (16 * (d4 + dv4));
  bk = std::min(64, bk / kKeyChunk * kKeyChunk);
  bk = std::max(bk, kKeyChunk);
  const size_t smem = size_t(bk) * size_t(d4 + dv4) * 16;
  constexpr int kQueries = kThreads / TPQ;
  dim3 grid(unsigned((a.nq + kQueries - 1) / kQueries), unsigned(a.heads), unsigned(a.b));
  attention_kernel<T, TPQ, CPL><<<grid, kThreads, smem, s>>>(a, bk);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_for_dims(const AttentionArgs& a, cudaStream_t s) {
  const int w = std::max(a.d, a.dv) / 4;  // 4-vectors per row
  if (w <= 10) return launch<T, 2, 5>(a, s);   // D 40 (SD1 level 1)
  if (w <= 16) return launch<T, 4, 4>(a, s);   // D 64 (SD2, SDXL, CLIP)
  if (w <= 20) return launch<T, 4, 5>(a, s);   // D 80
  if (w <= 32) return launch<T, 8, 4>(a, s);   // D 128
  if (w <= 40) return launch<T, 8, 5>(a, s);   // D 160
  if (w <= 64) return launch<T, 8, 8>(a, s);   // D 256
  return launch<T, 16, 8>(a, s);               // D 512 (VAE mid-block)
}

}  // namespace

bool attention_supported(int d, int dv) {
  return d > 0 && dv > 0 && d % 4 == 0 && dv % 4 == 0 && d <= kAttentionMaxDim &&
         dv <= kAttentionMaxDim;
}

cudaError_t attention(const AttentionArgs& a, cudaStream_t s) {
  if (!attention_supported(a.d, a.dv)) return cudaErrorInvalidValue;
  if (a.b == 0 || a.nq == 0 || a.heads == 0) return cudaSuccess;
  if (a.ldq || a.ldk || a.ldv) {  // only the v2 kernels read strided Q, K and V
    if (a.nk > 0 && attention_strided_supported(a)) return attention_tc(a, s);
    return cudaErrorInvalidValue;
  }
  if (a.nk > 0 && attention_tc_supported(a)) return attention_tc(a, s);
  return dispatch_float(a.dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch_for_dims<T>(a, s);
  });
}

}  // namespace hr::cuda
