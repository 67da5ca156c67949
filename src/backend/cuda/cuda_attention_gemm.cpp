// ATTENTION for single-head, wide-head f16/bf16 cases (the VAE mid-block: one head of 512
// channels over up to 16384 tokens) through cuBLASLt: per chunk of queries, S = Q K^T into the
// workspace, a row softmax with the scale folded in, then O = S V. Only one chunk of scores
// ([chunk, Nk]) exists at a time, so memory stays bounded (Note [op semantics], ATTENTION).
#include <algorithm>

#include "backend/cuda/cuda_ops.h"

namespace hr::cuda {

namespace {
// Bytes of scores one chunk may take; chosen so 16384 keys give 2048-query chunks.
constexpr size_t kScoreBudget = size_t(64) << 20;

int64_t chunk_rows(int64_t nq, int64_t nk, size_t esize) {
  int64_t c = int64_t(kScoreBudget / std::max<size_t>(1, size_t(nk) * esize));
  return std::clamp<int64_t>(c, 1, std::max<int64_t>(nq, 1));
}
}  // namespace

bool attention_gemm_applies(DType t, int heads, int64_t d, int64_t dv, bool causal) {
  return (t == DType::F16 || t == DType::BF16) && heads == 1 && !causal && d > 160 && dv > 160;
}

size_t attention_gemm_workspace(DType t, int64_t nq, int64_t nk) {
  size_t es = dtype_size(t);
  return kGemmWorkspace + size_t(chunk_rows(nq, nk, es)) * size_t(nk) * es;
}

Status attention_gemm(CudaContext& ctx, const OpCall& c, float scale, cudaStream_t s) {
  const TensorRef& q = c.inputs[0];
  const TensorRef& k = c.inputs[1];
  const TensorRef& v = c.inputs[2];
  const DType t = q.desc.dtype;
  const size_t es = dtype_size(t);
  const int64_t b = q.desc.shape[0], nq = q.desc.shape[1], d = q.desc.shape[2];
  const int64_t nk = k.desc.shape[1], dv = v.desc.shape[2];
  const int64_t chunk = chunk_rows(nq, nk, es);
  if (c.workspace_bytes < attention_gemm_workspace(t, nq, nk))
    return make_error(ErrorCode::INTERNAL, "attention: workspace {} below {}", c.workspace_bytes,
                      attention_gemm_workspace(t, nq, nk));
  char* gemm_ws = static_cast<char*>(c.workspace);
  char* scores = gemm_ws + kGemmWorkspace;
  OpParams pt;
  pt.trans_b = true;
  OpParams pn;
  for (int64_t bi = 0; bi < b; ++bi) {
    const char* qb = static_cast<const char*>(q.data) + size_t(bi * nq * d) * es;
    const char* kb = static_cast<const char*>(k.data) + size_t(bi * nk * d) * es;
    const char* vb = static_cast<const char*>(v.data) + size_t(bi * nk * dv) * es;
    char* ob = static_cast<char*>(c.output.data) + size_t(bi * nq * dv) * es;
    for (int64_t r0 = 0; r0 < nq; r0 += chunk) {
      const int64_t rows = std::min(chunk, nq - r0);
      TensorRef qa{{t, Shape{rows, d}}, const_cast<char*>(qb + size_t(r0 * d) * es)};
      TensorRef ka{{t, Shape{nk, d}}, const_cast<char*>(kb)};
      TensorRef sa{{t, Shape{rows, nk}}, scores};
      TensorRef in1[2] = {qa, ka};
      OpCall mm1{OpKind::MATMUL, &pt, in1, sa, gemm_ws, kGemmWorkspace};
      HR_TRY(matmul(ctx, mm1, s));
      cudaError_t e = softmax(t, scores, scores, rows, nk, scale, s);
      if (e != cudaSuccess)
        return make_error(ErrorCode::INTERNAL, "attention: softmax: {}", cudaGetErrorString(e));
      TensorRef va{{t, Shape{nk, dv}}, const_cast<char*>(vb)};
      TensorRef oa{{t, Shape{rows, dv}}, ob + size_t(r0 * dv) * es};
      TensorRef in2[2] = {sa, va};
      OpCall mm2{OpKind::MATMUL, &pn, in2, oa, gemm_ws, kGemmWorkspace};
      HR_TRY(matmul(ctx, mm2, s));
    }
  }
  return Status();
}

}  // namespace hr::cuda
