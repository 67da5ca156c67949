// Host-side internals of the CUDA backend shared by its .cpp files: error conversion, the
// per-backend library handles and caches (CudaContext), and the cuBLASLt / cuDNN op entry points.
#pragma once

#include <cublasLt.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"

namespace hr::cuda {

// Non-OK Status naming the op and the failed call ("conv2d: cudnnConvolutionForward failed:
// ..."); allocation failures become OUT_OF_MEMORY. `call` may be a whole expression: only the
// text before '(' is kept.
Status cuda_status(cudaError_t e, const char* op, const char* call);
Status cublas_status(cublasStatus_t e, const char* op, const char* call);
Status cudnn_status(cudnnStatus_t e, const char* op, const char* call);

#define HR_CUDA_CHECK(op, expr)                                              \
  do {                                                                       \
    cudaError_t hr_e_ = (expr);                                              \
    if (hr_e_ != cudaSuccess) return ::hr::cuda::cuda_status(hr_e_, op, #expr); \
  } while (0)
#define HR_CUBLAS_CHECK(op, expr)                                                     \
  do {                                                                                \
    cublasStatus_t hr_e_ = (expr);                                                    \
    if (hr_e_ != CUBLAS_STATUS_SUCCESS) return ::hr::cuda::cublas_status(hr_e_, op, #expr); \
  } while (0)
#define HR_CUDNN_CHECK(op, expr)                                                     \
  do {                                                                               \
    cudnnStatus_t hr_e_ = (expr);                                                    \
    if (hr_e_ != CUDNN_STATUS_SUCCESS) return ::hr::cuda::cudnn_status(hr_e_, op, #expr); \
  } while (0)

// How one convolution shape runs (Note [conv algorithm choice] in cuda_conv2d.cpp).
struct ConvPlan {
  bool use_cudnn = false;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool pre_pad = false;   // Note [asymmetric conv padding]
  size_t pad_bytes = 0;   // padded input at the start of the workspace (size rounded to kDeviceAlignment)
  size_t algo_bytes = 0;  // cuDNN's workspace for `algo`, after the padded input
  bool fuse_refused = false;  // cuDNN refused the fused bias (Note [fused conv bias])
  size_t workspace() const { return pad_bytes + algo_bytes; }
};

struct GemmAlgo {
  cublasLtMatmulAlgo_t algo{};
  bool bias_fused = false;  // the bias epilogue was available for this shape
};

// Note [autotuning]
// cuBLASLt's heuristic picks a GEMM algorithm without running anything; the first time a GEMM
// shape runs on real buffers outside a CUDA-graph capture, the backend also times up to 8 of the
// heuristic's candidates (and split-K versions of them for GEMMs with few output tiles: Note
// [split-K for small GEMMs] in cuda_gemm.cpp) with events and keeps the fastest (the workspace
// the planner saw does not change, so plans stay deterministic). The executor's first run of a plan is never
// captured, so captured replays use tuned algorithms. HEADROOM_AUTOTUNE=0 keeps the heuristic's
// first choice. Convolutions keep cuDNN's heuristic choice: cuDNN's Find (tried in v2 of
// bench/PERF_NOTES.md) picked algorithms that doubled SD1.5's convolution time.
bool autotune_allowed(cudaStream_t s);

using GemmKey = std::array<int64_t, 17>;
using ConvKey = std::array<int64_t, 18>;

// Note [cuDNN attention] (cuda_attention_dnn.cpp): one execution plan per shape, keyed by
// {dtype, batch, queries, keys, heads, head dim, value head dim, row pitch of q, k, v (0:
// dense, H * D; wider for the column windows of a stacked projection, Note [stacked context
// projections] in graph/pass_stack.cpp)}.
using DnnAttentionKey = std::array<int64_t, 10>;
struct DnnAttentionPlan {
  void* plan = nullptr;  // cudnnBackendDescriptor_t of the execution plan; null: refused
  size_t workspace = 0;
  std::shared_ptr<std::vector<std::shared_ptr<void>>> owned;  // every descriptor it refers to
  std::string refused;  // why the engine refused the shape
  bool ok() const { return plan != nullptr; }
};

// Library handles of one backend, plus caches that op_workspace (const) and op_run share.
struct CudaContext {
  int device = 0;
  bool fp8_gemm = false;  // compute capability 8.9 or later: fp8 tensor cores (LINEAR_FP8)
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  std::mutex mu;  // guards the caches and serialises use of the cuDNN handle
  std::map<GemmKey, GemmAlgo> gemm_algos;
  std::map<ConvKey, ConvPlan> conv_plans;
  std::map<DnnAttentionKey, DnnAttentionPlan> attention_plans;
};

// cuBLASLt workspace each LINEAR/MATMUL asks for (op_workspace); a smaller one (even none) still
// runs, with the algorithms that fit.
constexpr size_t kGemmWorkspace = size_t(8) << 20;
// The largest cuDNN workspace an algorithm may need to be chosen.
constexpr size_t kConvWorkspaceLimit = size_t(256) << 20;

Status linear(CudaContext& ctx, const OpCall& c, cudaStream_t s);  // cuda_gemm.cpp
Status linear_fp8(CudaContext& ctx, const OpCall& c, cudaStream_t s);  // cuda_gemm.cpp
Status matmul(CudaContext& ctx, const OpCall& c, cudaStream_t s);  // cuda_gemm.cpp
// cuda_attention_gemm.cpp: single-head, wide-head (D > 160) f16/bf16 attention via cuBLASLt.
bool attention_gemm_applies(DType t, int heads, int64_t d, int64_t dv, bool causal);
size_t attention_gemm_workspace(DType t, int64_t nq, int64_t nk);
Status attention_gemm(CudaContext& ctx, const OpCall& c, float scale, cudaStream_t s);
// cuda_attention_dnn.cpp (Note [cuDNN attention]): f16/bf16, not causal, D == Dv, D % 8 == 0,
// D <= 256, at least 512 queries and keys (Note [cuDNN attention shapes]);
// HEADROOM_CUDNN_ATTENTION=0 turns it off. attention_dnn_plan builds (once, then from the cache)
// the plan of a shape; a refused shape's plan is !ok() and runs on our kernels.
bool attention_dnn_applies(DType t, int64_t nq, int64_t nk, int64_t d, int64_t dv, bool causal);
DnnAttentionKey attention_dnn_key(DType t, int64_t b, int64_t nq, int64_t nk, int64_t heads,
                                  int64_t d, int64_t dv, int64_t ldq = 0, int64_t ldk = 0,
                                  int64_t ldv = 0);
const DnnAttentionPlan& attention_dnn_plan(CudaContext& ctx, const DnnAttentionKey& k);
Status attention_dnn(CudaContext& ctx, const DnnAttentionPlan& p, const OpCall& c, float scale,
                     cudaStream_t s);
// The plan when cuDNN takes this attention (it applies and the engine accepted the shape), else
// null: what op_workspace and op_run both ask.
const DnnAttentionPlan* attention_dnn_for(CudaContext& ctx, DType t, int64_t b, int64_t nq,
                                          int64_t nk, int64_t heads, int64_t d, int64_t dv,
                                          bool causal, int64_t ldq = 0, int64_t ldk = 0,
                                          int64_t ldv = 0);
size_t conv2d_workspace(CudaContext& ctx, const OpParams& p, std::span<const TensorDesc> in,
                        const TensorDesc& out);                    // cuda_conv2d.cpp
Status conv2d(CudaContext& ctx, const OpCall& c, cudaStream_t s);  // cuda_conv2d.cpp

}  // namespace hr::cuda
