// CPU ATTENTION: softmax(q k^T * scale) v per head, in (batch, head, query-chunk) tiles so only
// one tile's scores exist at a time; the two products of each tile are OpenBLAS sgemms.
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

// See Note [vectorised float loops] in cpu_norm.cpp: same clones, same reason for the pragma.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

namespace hr::cpu {
namespace {

// Note [attention tiles]
// A tile is `chunk` query rows of one (batch, head) against all keys: its scores are
// chunk x Nk floats, the whole workspace. The chunk is the largest whose scores fit in
// kScoreBytes (at least one row), so SD's self-attention at 64x64 latents (Nk = 4096) works on
// 256-row tiles and cross-attention (Nk = 77) on all queries at once. q, k, v and the output
// are read and written in place through BLAS leading dimensions (row stride H*D), so no head
// is gathered. Threads split each sgemm (OpenBLAS) and the rows of each softmax (OpenMP).
constexpr size_t kScoreBytes = size_t(4) << 20;

int64_t attention_chunk(int64_t nq, int64_t nk) {
  const size_t row = size_t(std::max<int64_t>(nk, 1)) * sizeof(float);
  return std::clamp<int64_t>(int64_t(kScoreBytes / row), 1, std::max<int64_t>(nq, 1));
}

// exp(x) to ~1 ulp for x in [-87, 88] (clamped outside); branch-free so that it vectorises.
inline float exp_approx(float x) {
  x = x > -87.0f ? x : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  const float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x/ln2)
  float r = x - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((int32_t(fn) + 127) << 23);
}

// In place: s[0, valid) = softmax(s[0, valid)), s[valid, n) = 0 (masked keys).
__attribute__((target_clones("arch=x86-64-v3", "default"))) void softmax_scores(float* s,
                                                                                 int64_t valid,
                                                                                 int64_t n) {
  float m = s[0];
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < valid; ++i) m = m > s[i] ? m : s[i];
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < valid; ++i) {
    const float e = exp_approx(s[i] - m);
    s[i] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t i = 0; i < valid; ++i) s[i] *= inv;
  for (int64_t i = valid; i < n; ++i) s[i] = 0.0f;
}

}  // namespace

size_t attention_workspace(const OpParams& p, std::span<const TensorDesc> in,
                           const TensorDesc& out) {
  if (in.size() < 2 || in[0].dtype != DType::F32) return 0;
  const int64_t nq = in[0].shape[1], nk = in[1].shape[1];
  if (nq == 0 || nk == 0) return 0;
  return size_t(attention_chunk(nq, nk)) * size_t(nk) * sizeof(float);
}

Status attention(const OpCall& c) {
  for (const TensorRef& t : c.inputs)
    if (t.desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu attention: dtype {} (f32 only)",
                        dtype_name(t.desc.dtype));
  const Shape& qs = c.inputs[0].desc.shape;
  const Shape& vs = c.inputs[2].desc.shape;
  const int64_t batch = qs[0], nq = qs[1], nk = c.inputs[1].desc.shape[1];
  const int64_t heads = c.params->heads, d = qs[2] / heads, dv = vs[2] / heads;
  const int64_t ldq = qs[2], ldv = vs[2];
  TensorDesc descs[3] = {c.inputs[0].desc, c.inputs[1].desc, c.inputs[2].desc};
  const size_t need = attention_workspace(*c.params, descs, c.output.desc);
  if (c.workspace_bytes < need || (need && !c.workspace))
    return make_error(ErrorCode::INVALID_ARGUMENT, "cpu attention: workspace {} bytes, need {}",
                      c.workspace_bytes, need);
  if (ldq > INT_MAX || ldv > INT_MAX || nk > INT_MAX)
    return make_error(ErrorCode::UNSUPPORTED, "cpu attention: {} too large for BLAS", qs.str());
  float* out = c.output.as<float>();
  if (c.output.desc.numel() == 0) return Status();
  if (nk == 0) {  // no keys: an empty sum
    std::fill(out, out + c.output.desc.numel(), 0.0f);
    return Status();
  }
  const float scale = c.params->alpha != 0.0f ? c.params->alpha
                                              : float(1.0 / std::sqrt(double(std::max<int64_t>(d, 1))));
  const bool causal = c.params->causal;
  const int64_t chunk = attention_chunk(nq, nk);
  float* scores = static_cast<float*>(c.workspace);

  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* q = c.inputs[0].as<const float>() + b * nq * ldq + h * d;
      const float* k = c.inputs[1].as<const float>() + b * nk * ldq + h * d;
      const float* v = c.inputs[2].as<const float>() + b * nk * ldv + h * dv;
      float* o = out + b * nq * ldv + h * dv;
      for (int64_t q0 = 0; q0 < nq; q0 += chunk) {
        const int64_t rows = std::min(chunk, nq - q0);
        // Causal rows of this tile see keys [0, q0 + rows) at most; the rest stay untouched.
        const int64_t keys = causal ? std::min(nk, q0 + rows) : nk;
        if (d == 0) {
          std::fill(scores, scores + rows * keys, 0.0f);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d),
                      scale, q + q0 * ldq, int(ldq), k, int(ldq), 0.0f, scores, int(keys));
        }
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t valid = causal ? std::min(keys, q0 + i + 1) : keys;
          softmax_scores(scores + i * keys, valid, keys);
        }
        if (dv > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(dv), int(keys),
                      1.0f, scores, int(keys), v, int(ldv), 0.0f, o + q0 * ldv, int(ldv));
      }
    }
  }
  return Status();
}

}  // namespace hr::cpu

#pragma GCC pop_options
