// LINEAR and MATMUL through cuBLASLt: f32/f16/bf16 storage, f32 compute (no TF32), the linear
// bias fused through CUBLASLT_EPILOGUE_BIAS, broadcast batches as strided batches; LINEAR_FP8
// as an fp8 GEMM (e4m3 operands, the weight's scale as cuBLASLt's A scale).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/env.h"

namespace hr::cuda {
namespace {

// Note [row-major GEMM on cuBLAS]
// cuBLAS is column-major. A row-major [r, c] matrix is the column-major [c, r] matrix with the
// same bytes, so the row-major C[m, n] = A[m, k] op(B) is computed as the column-major
// C^T[n, m] = op(B)^T[n, k] A^T[k, m]: cuBLASLt's "A" is our B and its "B" is our A. Our B is
// row-major [k, n] (column-major n x k, ld n, no transpose) or, with trans_b, [n, k]
// (column-major k x n, ld k, transposed). The bias epilogue adds a vector over the rows of the
// column-major result, which are our n output features.
struct GemmCall {
  DType dtype = DType::F32;
  int64_t m = 0, n = 0, k = 0;
  bool trans_b = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batch entries
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;    // [n] or null
  const void* addend = nullptr;  // like c (added with beta = 1: LINEAR's add_input) or null
  bool fp8 = false;              // a and b are F8_E4M3 (LINEAR_FP8); dtype is c's
  const float* b_scale = nullptr;  // fp8: b's scale on the device, or null for 1
};

cudaDataType_t lt_type(DType t) {
  return t == DType::F16 ? CUDA_R_16F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

int64_t align_of(const void* p, int64_t stride_bytes, int64_t batch) {
  uint64_t v = uint64_t(reinterpret_cast<uintptr_t>(p));
  if (batch > 1 && stride_bytes) v |= uint64_t(stride_bytes);
  if (v == 0) return 256;
  return std::min<int64_t>(256, int64_t(v & (~v + 1)));
}

struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Status set_batch(const char* opn, cublasLtMatrixLayout_t l, int64_t batch, int64_t stride) {
  if (batch <= 1) return Status();
  int32_t count = int32_t(batch);
  HR_CUBLAS_CHECK(opn, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  HR_CUBLAS_CHECK(opn, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  return Status();
}

// Builds the descriptors; `fuse_bias` selects the epilogue.
Status make_descs(const char* opn, const GemmCall& g, bool fuse_bias, size_t ws_bytes, LtDescs& d) {
  const cudaDataType_t t = lt_type(g.dtype), t_in = g.fp8 ? CUDA_R_8F_E4M3 : t;
  HR_CUBLAS_CHECK(opn, cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (g.b_scale)  // our B is cuBLASLt's A
    HR_CUBLAS_CHECK(opn, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale, sizeof(g.b_scale)));
  cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  HR_CUBLAS_CHECK(opn, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  HR_CUBLAS_CHECK(opn, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (fuse_bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    HR_CUBLAS_CHECK(opn, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    HR_CUBLAS_CHECK(opn, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  }
  // Our B (cuBLASLt's A), see Note [row-major GEMM on cuBLAS].
  if (g.trans_b)
    HR_CUBLAS_CHECK(opn, cublasLtMatrixLayoutCreate(&d.a, t_in, uint64_t(g.k), uint64_t(g.n), g.k));
  else
    HR_CUBLAS_CHECK(opn, cublasLtMatrixLayoutCreate(&d.a, t_in, uint64_t(g.n), uint64_t(g.k), g.n));
  HR_CUBLAS_CHECK(opn, cublasLtMatrixLayoutCreate(&d.b, t_in, uint64_t(g.k), uint64_t(g.m), g.k));
  HR_CUBLAS_CHECK(opn, cublasLtMatrixLayoutCreate(&d.c, t, uint64_t(g.n), uint64_t(g.m), g.n));
  HR_TRY(set_batch(opn, d.a, g.batch, g.stride_b));
  HR_TRY(set_batch(opn, d.b, g.batch, g.stride_a));
  HR_TRY(set_batch(opn, d.c, g.batch, g.stride_c));

  HR_CUBLAS_CHECK(opn, cublasLtMatmulPreferenceCreate(&d.pref));
  uint64_t ws = ws_bytes;
  HR_CUBLAS_CHECK(opn, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const int64_t es = int64_t(dtype_size(g.dtype)), es_in = g.fp8 ? 1 : es;
  uint32_t al_a = uint32_t(align_of(g.b, g.stride_b * es_in, g.batch));  // cuBLASLt's A is our B
  uint32_t al_b = uint32_t(align_of(g.a, g.stride_a * es_in, g.batch));
  uint32_t al_c = uint32_t(align_of(g.c, g.stride_c * es, g.batch));
  if (g.addend) al_c = std::min(al_c, uint32_t(align_of(g.addend, g.stride_c * es, g.batch)));
  HR_CUBLAS_CHECK(opn, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  HR_CUBLAS_CHECK(opn, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  HR_CUBLAS_CHECK(opn, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  HR_CUBLAS_CHECK(opn, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  return Status();
}

// Output tiles of `rows` x `cols` (cuBLASLt's m, our n, by its n, our m) over every batch entry.
int64_t output_tiles(const GemmCall& g, int64_t rows = 128, int64_t cols = 128) {
  return (g.n + rows - 1) / rows * ((g.m + cols - 1) / cols) * g.batch;
}

// Note [split-K for small GEMMs]
// cuBLASLt's heuristic candidates for SDXL's cross-attention K and V projections (the 77-token
// context, m = 154 rows of k = 2048 against n = 1280 or 640 features: 10-20 output tiles of
// 128 x 128 for 132 SMs) each stream the whole of k through one CTA per tile: ~8 us for 5 MB of
// weights (bench_profile: 140 such nodes, 1.4 ms of the step). SDXL's 2048 x 1280 outputs are
// 160 tiles for 132 SMs (a second wave of 28). When the output has fewer 128 x 128 tiles than
// two waves and k >= 1024, autotuning also times split-K versions of the candidates
// that support it (k split 2 to 16 ways, partial sums reduced in f32 in the workspace: a fixed
// order, so replays stay bitwise equal), when cublasLtMatmulAlgoCheck accepts them within the
// planned workspace (kGemmWorkspace, 8 MiB: enough for the projections' 154 x 1280 partial sums
// up to 8 ways, not for the 2048 x 1280 outputs' 10 MiB per split, which so keep their single
// pass). HEADROOM_GEMM_SPLITK=0 leaves them out (for same-run comparisons).
void splitk_variants(CudaContext& ctx, const GemmCall& g, const LtDescs& d, size_t ws_bytes,
                     std::vector<cublasLtMatmulAlgo_t>& cands) {
  static const bool enabled = env_switch("HEADROOM_GEMM_SPLITK", true);
  if (!enabled || g.k < 1024 || output_tiles(g) >= 2 * int64_t(sm_count())) return;
  const size_t base = std::min<size_t>(cands.size(), 4);
  for (size_t i = 0; i < base; ++i) {
    int32_t splitk_ok = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&cands[i], CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok,
                                          sizeof(splitk_ok), &written) != CUBLAS_STATUS_SUCCESS ||
        !splitk_ok)
      continue;
    for (uint32_t splits : {2u, 4u, 8u, 16u}) {
      if (g.k / int64_t(splits) < 128) break;
      cublasLtMatmulAlgo_t a = cands[i];
      const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                               sizeof(splits)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                               sizeof(scheme)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoCheck(ctx.lt, d.op, d.a, d.b, d.c, d.c, &a, &check) !=
              CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize > ws_bytes)
        continue;
      cands.push_back(a);
    }
  }
}

// Tile shapes by their cublasLtMatmulTile_t number, for HEADROOM_GEMM_LOG's lines.
struct TileDims {
  uint32_t id;
  int64_t rows, cols;  // cuBLASLt's m (our n) by its n (our m)
};
constexpr TileDims kLargeTiles[] = {
    {CUBLASLT_MATMUL_TILE_64x128, 64, 128},   {CUBLASLT_MATMUL_TILE_128x64, 128, 64},
    {CUBLASLT_MATMUL_TILE_64x256, 64, 256},   {CUBLASLT_MATMUL_TILE_128x128, 128, 128},
    {CUBLASLT_MATMUL_TILE_256x64, 256, 64},   {CUBLASLT_MATMUL_TILE_128x256, 128, 256},
    {CUBLASLT_MATMUL_TILE_256x128, 256, 128}, {CUBLASLT_MATMUL_TILE_96x128, 96, 128},
    {CUBLASLT_MATMUL_TILE_128x160, 128, 160}, {CUBLASLT_MATMUL_TILE_160x128, 160, 128},
    {CUBLASLT_MATMUL_TILE_192x128, 192, 128}, {CUBLASLT_MATMUL_TILE_128x192, 128, 192},
    {CUBLASLT_MATMUL_TILE_128x96, 128, 96},   {CUBLASLT_MATMUL_TILE_64x96, 64, 96},
    {CUBLASLT_MATMUL_TILE_96x64, 96, 64},
};

const TileDims* tile_dims(uint32_t id) {
  for (const TileDims& t : kLargeTiles)
    if (t.id == id) return &t;
  return nullptr;
}

// One line per tuned GEMM shape with HEADROOM_GEMM_LOG=1 (stderr): what autotuning chose and
// what it gained over the heuristic's first candidate.
void log_choice(const GemmCall& g, const cublasLtMatmulAlgo_t& a, size_t n, float first_ms,
                float best_ms) {
  static const bool on = env_switch("HEADROOM_GEMM_LOG", false);
  if (!on) return;
  uint32_t tile = 0, stages = 0;
  int32_t id = 0, splits = 1;
  uint16_t cluster = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                       sizeof(stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                       sizeof(splits), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof(cluster), &w);
  const TileDims* td = tile_dims(tile);  // other tiles by their cublasLtMatmulTile_t number
  const std::string tile_name = td ? std::to_string(td->rows) + "x" + std::to_string(td->cols)
                                   : "id " + std::to_string(tile);
  std::fprintf(stderr,
               "gemm m=%lld n=%lld k=%lld batch=%lld%s%s: %zu candidates, first %.2f us, chosen "
               "%.2f us (algo %d, tile %s, stages %u, split-k %d, cluster %u)\n",
               (long long)g.m, (long long)g.n, (long long)g.k, (long long)g.batch,
               g.bias ? " bias" : "", g.addend ? " addend" : "", n, first_ms * 1e3 / 3,
               best_ms * 1e3 / 3, id, tile_name.c_str(), stages, splits, unsigned(cluster));
}

// How many of cuBLASLt's heuristic candidates autotuning times (before split-K variants): 8, or
// HEADROOM_GEMM_CANDIDATES (1-64). 32 chose the same kernels for every large SDXL shape and
// changed the step by less than the noise (bench/PERF_NOTES.md, v11).
int heuristic_candidates() {
  static const int n = [] {
    const char* e = std::getenv("HEADROOM_GEMM_CANDIDATES");
    const int v = e ? std::atoi(e) : 0;
    return v >= 1 && v <= 64 ? v : 8;
  }();
  return n;
}

// Note [autotuning]: times each candidate (one warm-up and three launches between events) and
// returns the index of the fastest; 0 when none could be timed.
size_t fastest(CudaContext& ctx, const GemmCall& g, const LtDescs& d,
               const std::vector<cublasLtMatmulAlgo_t>& cands, const void* cin, float beta,
               void* ws, size_t ws_bytes, cudaStream_t s) {
  const float alpha = 1.0f;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    if (e0) cudaEventDestroy(e0);
    cudaGetLastError();
    return 0;
  }
  float best_ms = 1e30f, first_ms = 0.0f;
  size_t best = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    auto launch = [&] {
      return cublasLtMatmul(ctx.lt, d.op, &alpha, g.b, d.a, g.a, d.b, &beta, cin, d.c, g.c, d.c,
                            &cands[i], ws, ws_bytes, s);
    };
    if (launch() != CUBLAS_STATUS_SUCCESS) continue;
    cudaEventRecord(e0, s);
    bool ok = true;
    for (int r = 0; r < 3 && ok; ++r) ok = launch() == CUBLAS_STATUS_SUCCESS;
    cudaEventRecord(e1, s);
    float ms = 0;
    if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
      ok = false;
    if (ok && i == 0) first_ms = ms;
    if (ok && ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  log_choice(g, cands[best], cands.size(), first_ms, best_ms);
  return best;
}

Status gemm_run(CudaContext& ctx, const char* opn, const GemmCall& g, void* ws, size_t ws_bytes,
                cudaStream_t s) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return Status();
  if (!ws) ws_bytes = 0;
  const int64_t es = int64_t(dtype_size(g.dtype)), es_in = g.fp8 ? 1 : es;
  // fp8 GEMMs key apart (their dtype field also says fp8 and whether b is scaled).
  const int64_t dtype_key = int64_t(g.dtype) | (g.fp8 ? 0x100 : 0) | (g.b_scale ? 0x200 : 0);
  GemmKey key{dtype_key, g.m, g.n, g.k, g.trans_b, g.batch, g.stride_a, g.stride_b,
              g.stride_c, g.bias != nullptr, int64_t(ws_bytes),
              align_of(g.a, g.stride_a * es_in, g.batch), align_of(g.b, g.stride_b * es_in, g.batch),
              align_of(g.c, g.stride_c * es, g.batch),
              g.bias ? align_of(g.bias, 0, 1) : 0, g.addend != nullptr,
              g.addend ? align_of(g.addend, g.stride_c * es, g.batch) : 0};

  GemmAlgo chosen;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(ctx.mu);
    auto it = ctx.gemm_algos.find(key);
    if (it != ctx.gemm_algos.end()) {
      chosen = it->second;
      cached = true;
    }
  }
  const float alpha = 1.0f, beta = g.addend ? 1.0f : 0.0f;
  const void* cin = g.addend ? g.addend : g.c;
  if (!cached) {
    // Prefer the fused bias; fall back to a separate bias kernel when no algorithm has it.
    bool found = false;
    for (bool fuse : {true, false}) {
      if (fuse && !g.bias) continue;
      LtDescs d;
      HR_TRY(make_descs(opn, g, fuse, ws_bytes, d));
      const bool tune = autotune_allowed(s);
      std::vector<cublasLtMatmulHeuristicResult_t> res(size_t(tune ? heuristic_candidates() : 1));
      int count = 0;
      cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, d.op, d.a, d.b, d.c, d.c, d.pref,
                                                         int(res.size()), res.data(), &count);
      if (st == CUBLAS_STATUS_SUCCESS && count > 0) {
        std::vector<cublasLtMatmulAlgo_t> cands;
        for (int i = 0; i < count; ++i)
          if (res[i].state == CUBLAS_STATUS_SUCCESS) cands.push_back(res[i].algo);
        if (cands.empty()) cands.push_back(res[0].algo);
        if (tune) splitk_variants(ctx, g, d, ws_bytes, cands);
        const size_t best =
            tune && cands.size() > 1 ? fastest(ctx, g, d, cands, cin, beta, ws, ws_bytes, s) : 0;
        HR_CUDA_CHECK(opn, cudaGetLastError());
        chosen.algo = cands[best];
        chosen.bias_fused = fuse;
        found = true;
        break;
      }
      if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
        return cublas_status(st, opn, "cublasLtMatmulAlgoGetHeuristic");
    }
    if (!found)
      return make_error(ErrorCode::UNSUPPORTED,
                        "{}: cuBLASLt has no algorithm for {} m={} n={} k={} batch={}{}", opn,
                        dtype_name(g.dtype), g.m, g.n, g.k, g.batch, g.trans_b ? " trans_b" : "");
    std::lock_guard<std::mutex> lock(ctx.mu);
    ctx.gemm_algos[key] = chosen;
  }

  LtDescs d;
  HR_TRY(make_descs(opn, g, chosen.bias_fused, ws_bytes, d));
  // cuBLASLt's A is our B: Note [row-major GEMM on cuBLAS]. C = the addend (or unused), D = c.
  HR_CUBLAS_CHECK(opn, cublasLtMatmul(ctx.lt, d.op, &alpha, g.b, d.a, g.a, d.b, &beta, cin, d.c,
                                      g.c, d.c, &chosen.algo, ws, ws_bytes, s));
  if (g.bias && !chosen.bias_fused)
    HR_CUDA_CHECK(opn, add_channel_bias(g.dtype, g.c, g.bias, g.batch * g.m, g.n, 1, s));
  return Status();
}

}  // namespace

bool autotune_allowed(cudaStream_t s) {
  static const bool enabled = env_switch("HEADROOM_AUTOTUNE", true);
  if (!enabled) return false;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone;
}

Status linear(CudaContext& ctx, const OpCall& c, cudaStream_t s) {
  const TensorRef& x = c.inputs[0];
  const TensorRef& w = c.inputs[1];
  GemmCall g;
  g.dtype = x.desc.dtype;
  g.k = w.desc.shape[1];
  g.n = w.desc.shape[0];
  g.m = g.k ? x.desc.numel() / g.k : 0;
  g.trans_b = true;  // w is [N, K]
  g.a = x.data;
  g.b = w.data;
  g.c = c.output.data;
  const bool add = c.params && c.params->add_input;
  g.bias = c.inputs.size() - (add ? 1 : 0) > 2 ? c.inputs[2].data : nullptr;
  g.addend = add ? c.inputs.back().data : nullptr;
  if (g.k == 0) {  // an empty sum: zeros (plus the bias and the added input)
    if (g.addend)
      HR_CUDA_CHECK("linear", copy_2d(c.output.data, c.output.desc.bytes(), g.addend,
                                      c.output.desc.bytes(), c.output.desc.bytes(), 1, s));
    else
      HR_CUDA_CHECK("linear", cudaMemsetAsync(c.output.data, 0, c.output.desc.bytes(), s));
    if (g.bias)
      HR_CUDA_CHECK("linear", add_channel_bias(g.dtype, g.c, g.bias, c.output.desc.numel() / g.n, g.n, 1, s));
    return Status();
  }
  return gemm_run(ctx, "linear", g, c.workspace, c.workspace_bytes, s);
}

// Note [fp8 linear] in graph/pass_fp8.cpp: x and w are e4m3, w [N, K] (cuBLASLt's "TN").
Status linear_fp8(CudaContext& ctx, const OpCall& c, cudaStream_t s) {
  const OpParams p = c.params ? *c.params : OpParams();
  const TensorRef& x = c.inputs[0];
  const TensorRef& w = c.inputs[1];
  GemmCall g;
  g.dtype = c.output.desc.dtype;
  g.fp8 = true;
  g.k = w.desc.shape[1];
  g.n = w.desc.shape[0];
  g.m = g.k ? x.desc.numel() / g.k : 0;
  g.trans_b = true;
  g.a = x.data;
  g.b = w.data;
  g.c = c.output.data;
  g.b_scale = p.weight_scale ? static_cast<const float*>(c.inputs[2].data) : nullptr;
  const size_t fixed = (p.weight_scale ? 3u : 2u) + (p.add_input ? 1u : 0u);
  g.bias = c.inputs.size() > fixed ? c.inputs[fixed - (p.add_input ? 1 : 0)].data : nullptr;
  g.addend = p.add_input ? c.inputs.back().data : nullptr;
  if (g.k % 16 || g.n % 16)
    return make_error(ErrorCode::UNSUPPORTED,
                      "linear_fp8: cuBLASLt's fp8 GEMM needs K and N multiples of 16 (K={}, N={})",
                      g.k, g.n);
  return gemm_run(ctx, "linear_fp8", g, c.workspace, c.workspace_bytes, s);
}

Status matmul(CudaContext& ctx, const OpCall& c, cudaStream_t s) {
  const OpParams p = c.params ? *c.params : OpParams();
  const Shape& as = c.inputs[0].desc.shape;
  const Shape& bs = c.inputs[1].desc.shape;
  const Shape& os = c.output.desc.shape;
  GemmCall g;
  g.dtype = c.inputs[0].desc.dtype;
  g.m = as[-2];
  g.k = as[-1];
  g.n = os[-1];
  g.trans_b = p.trans_b;
  const int64_t na = as.prod(0, as.rank - 2), nb = bs.prod(0, bs.rank - 2);
  const int64_t nout = os.prod(0, os.rank - 2);
  const int64_t es = int64_t(dtype_size(g.dtype));
  if (g.k == 0) {
    HR_CUDA_CHECK("matmul", cudaMemsetAsync(c.output.data, 0, c.output.desc.bytes(), s));
    return Status();
  }
  g.a = c.inputs[0].data;
  g.b = c.inputs[1].data;
  g.c = c.output.data;
  if (nb == 1 && na == nout) {  // one B for every batch entry: fold the batch into M
    g.m *= nout;
    return gemm_run(ctx, "matmul", g, c.workspace, c.workspace_bytes, s);
  }
  if ((na == nout || na == 1) && (nb == nout || nb == 1)) {
    GemmCall sb = g;
    sb.batch = nout;
    sb.stride_a = na == 1 ? 0 : g.m * g.k;
    sb.stride_b = nb == 1 ? 0 : g.k * g.n;
    sb.stride_c = g.m * g.n;
    Status st = gemm_run(ctx, "matmul", sb, c.workspace, c.workspace_bytes, s);
    if (st.code() != ErrorCode::UNSUPPORTED) return st;  // else: one GEMM per batch entry below
  }
  // Batch dims broadcast on both sides: one GEMM per output batch entry.
  const int rank = os.rank - 2;
  for (int64_t i = 0; i < nout; ++i) {
    int64_t rem = i, ia = 0, ib = 0, sa = 1, sbb = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = rem % os.dims[d];
      rem /= os.dims[d];
      const int da = as.rank - 2 - rank + d, db = bs.rank - 2 - rank + d;
      const int64_t ad = da >= 0 ? as.dims[da] : 1, bd = db >= 0 ? bs.dims[db] : 1;
      if (ad != 1) ia += idx * sa;
      if (bd != 1) ib += idx * sbb;
      sa *= ad;
      sbb *= bd;
    }
    GemmCall one = g;
    one.a = static_cast<const uint8_t*>(g.a) + ia * g.m * g.k * es;
    one.b = static_cast<const uint8_t*>(g.b) + ib * g.k * g.n * es;
    one.c = static_cast<uint8_t*>(g.c) + i * g.m * g.n * es;
    HR_TRY(gemm_run(ctx, "matmul", one, c.workspace, c.workspace_bytes, s));
  }
  return Status();
}

}  // namespace hr::cuda
