// CPU ATTENTION: softmax(q k^T * scale) v per head, in (batch, head, query-chunk) tiles so only
// one tile's scores exist at a time; the two products of each tile are OpenBLAS sgemms.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

// See Note [vectorised float loops] in cpu_norm.cpp: same clones, same reason for the pragma.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#include "backend/cpu/cpu_exp.h"  // inside the region on purpose

namespace hr::cpu {
namespace {

// Note [attention tiles]
// A tile is `chunk` query rows of one (batch, head) against all keys. Tiles are spread over the
// OpenMP threads; each thread owns chunk x Nk floats of the workspace for its tile's scores, so
// memory is threads * chunk * Nk * 4 bytes however long the sequence, and there is one parallel
// region per call (on a busy machine every extra fork/join costs). The chunk is the largest
// whose scores fit in kScoreBytes, cut further so that one batch entry's heads make at least as
// many tiles as threads: from the heads, never the batch, since a row's result depends on where
// it falls in its tile's sgemms (Note [batch-invariant linear] in cpu_linear.cpp) and a batch
// entry must come out the same alone as batched. q, k, v and the output are addressed in place
// through BLAS leading dimensions (row stride H*D), so no head is gathered. The sgemms inside a
// tile must run single-threaded: OpenBLAS (pthreads build) would otherwise start its own pool
// under every OpenMP thread.
constexpr size_t kScoreBytes = size_t(1) << 20;

int64_t attention_chunk(int64_t heads, int64_t nq, int64_t nk, int threads) {
  const size_t row = size_t(std::max<int64_t>(nk, 1)) * sizeof(float);
  int64_t chunk = std::clamp<int64_t>(int64_t(kScoreBytes / row), 1, std::max<int64_t>(nq, 1));
  // Want heads * ceil(nq / chunk) >= threads (per batch entry, Note [attention tiles]).
  const int64_t splits = (threads + heads - 1) / std::max<int64_t>(heads, 1);
  if (splits > 1) chunk = std::min(chunk, std::max<int64_t>((nq + splits - 1) / splits, 1));
  return chunk;
}

size_t attention_bytes(int64_t heads, int64_t nq, int64_t nk, int threads) {
  return size_t(threads) * size_t(attention_chunk(heads, nq, nk, threads)) * size_t(nk) *
         sizeof(float);
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
  return attention_bytes(p.heads, nq, nk, omp_get_max_threads());
}

Status attention(const OpCall& c) {
  for (const TensorRef& t : c.inputs)
    if (t.desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu attention: dtype {} (f32 only)",
                        dtype_name(t.desc.dtype));
  const Shape& qs = c.inputs[0].desc.shape;
  const Shape& vs = c.inputs[2].desc.shape;
  const int64_t batch = qs[0], nq = qs[1], nk = c.inputs[1].desc.shape[1];
  // params.kv_window: K and V are column windows of wider tensors, addressed in place.
  const bool window = c.params->kv_window;
  const int64_t width = window && c.params->q_width > 0 ? c.params->q_width : qs[2];
  const int64_t heads = c.params->heads, d = width / heads, dv = window ? d : vs[2] / heads;
  const int64_t ldq = qs[2], ldk = c.inputs[1].desc.shape[2], ldv = vs[2], ldo = heads * dv;
  if (ldq > INT_MAX || ldk > INT_MAX || ldv > INT_MAX || nk > INT_MAX)
    return make_error(ErrorCode::UNSUPPORTED, "cpu attention: {} too large for BLAS", qs.str());
  float* out = c.output.as<float>();
  if (c.output.desc.numel() == 0) return Status();
  if (nk == 0) {  // no keys: an empty sum
    std::fill(out, out + c.output.desc.numel(), 0.0f);
    return Status();
  }
  // The workspace was sized for omp_get_max_threads() when planned; should fewer bytes be
  // given (the thread count changed since), use as many threads as it holds.
  int threads = omp_get_max_threads();
  while (threads > 1 && attention_bytes(heads, nq, nk, threads) > c.workspace_bytes)
    --threads;
  if (!c.workspace || attention_bytes(heads, nq, nk, threads) > c.workspace_bytes)
    return make_error(ErrorCode::INVALID_ARGUMENT, "cpu attention: workspace {} bytes, need {}",
                      c.workspace_bytes, attention_bytes(heads, nq, nk, threads));
  const float scale = c.params->alpha != 0.0f
                          ? c.params->alpha
                          : float(1.0 / std::sqrt(double(std::max<int64_t>(d, 1))));
  const bool causal = c.params->causal;
  const int64_t chunk = attention_chunk(heads, nq, nk, threads);
  const int64_t chunks = (nq + chunk - 1) / chunk;
  const int64_t tiles = batch * heads * chunks;
  const float* qall = c.inputs[0].as<const float>() + (window ? c.params->q_start : 0);
  const float* kall = c.inputs[1].as<const float>() + (window ? c.params->start : 0);
  const float* vall = c.inputs[2].as<const float>() + (window ? c.params->end : 0);

  const int blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);  // Note [attention tiles]
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t t = 0; t < tiles; ++t) {
    float* scores = static_cast<float*>(c.workspace) + size_t(omp_get_thread_num()) * chunk * nk;
    const int64_t bh = t / chunks, b = bh / heads, h = bh % heads;
    const int64_t q0 = (t % chunks) * chunk, rows = std::min(chunk, nq - q0);
    const float* q = qall + (b * nq + q0) * ldq + h * d;
    const float* k = kall + b * nk * ldk + h * d;
    const float* v = vall + b * nk * ldv + h * dv;
    float* o = out + (b * nq + q0) * ldo + h * dv;
    // Causal rows of this tile see keys [0, q0 + rows) at most; later keys are skipped.
    const int64_t keys = causal ? std::min(nk, q0 + rows) : nk;
    if (d == 0) {
      std::fill(scores, scores + rows * keys, 0.0f);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d), scale,
                  q, int(ldq), k, int(ldk), 0.0f, scores, int(keys));
    }
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t valid = causal ? std::min(keys, q0 + i + 1) : keys;
      softmax_scores(scores + i * keys, valid, keys);
    }
    if (dv > 0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(dv), int(keys), 1.0f,
                  scores, int(keys), v, int(ldv), 0.0f, o, int(ldo));
  }
  openblas_set_num_threads(blas_threads);
  return Status();
}

}  // namespace hr::cpu

#pragma GCC pop_options
