// Attention through cuDNN's fused flash-attention engine (cuDNN backend graph API).
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/env.h"

// The handle attributes of operation graphs and execution plans are marked deprecated in newer
// cuDNN 9 headers (a device-less build path replaces them) but remain the way to bind a plan to a
// device; the warning would fail builds with warnings as errors.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace hr::cuda {

#if CUDNN_VERSION >= 90000  // the backend graph API as used here (and cudnnGetLastErrorString)

// Note [cuDNN attention]
// cuDNN 9 has a fused flash-attention forward engine on Hopper that runs SD's self-attention
// shapes about twice as fast as our mma.sync kernel (bench/torch_attention.py through PyTorch,
// then bench_attention; bench/PERF_NOTES.md, v7). It is reached through the backend graph API (no cudnn_frontend here): the
// operation graph must have exactly the shape the engine recognises, the one cudnn_frontend
// builds for scaled dot-product attention in inference:
//   S = matmul(Q, K^T) -> S * scale -> M = max over keys -> E = exp(S - M) -> Z = sum of E
//   -> (stats: M + log Z, virtual) -> P = E / Z -> O = matmul(P, V)
// with every intermediate a virtual f32 tensor except P, which is in the inputs' type. Q, K, V and
// O keep our layout, [B, N, H * D] viewed as [B, H, N, D] by strides; K^T is K's memory with the
// last two dimensions swapped. The scale is a by-value scalar. The engine compiles its kernel at
// run time (not timed alone: bench_attention makes 17 plans and times 7 kernels at each of 17
// shapes in 18 s), so plans are made once per shape (from op_workspace, outside any capture) and
// cached; a shape the engine refuses is remembered and runs on our own kernels.

namespace {

struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
};
using DescPtr = std::shared_ptr<Desc>;

Status dnn_error(cudnnStatus_t st, const char* what) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return make_error(st == CUDNN_STATUS_NOT_SUPPORTED ? ErrorCode::UNSUPPORTED : ErrorCode::INTERNAL,
                    "cuDNN attention: {}: {} {}", what, cudnnGetErrorString(st), detail);
}

#define HR_DNN(what, expr)                                              \
  do {                                                                  \
    cudnnStatus_t hr_st_ = (expr);                                      \
    if (hr_st_ != CUDNN_STATUS_SUCCESS) return dnn_error(hr_st_, what); \
  } while (0)

// Builds descriptors and keeps every one alive as long as the plan (the plan refers to them).
class Builder {
 public:
  Result<DescPtr> make(cudnnBackendDescriptorType_t type) {
    auto p = std::make_shared<Desc>();
    HR_DNN("create descriptor", cudnnBackendCreateDescriptor(type, &p->d));
    keep.push_back(p);
    return p;
  }
  static Status set(const DescPtr& p, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                    int64_t n, const void* v) {
    HR_DNN("set attribute", cudnnBackendSetAttribute(p->d, a, t, n, v));
    return Status();
  }
  static Status set_desc(const DescPtr& p, cudnnBackendAttributeName_t a, const DescPtr& v) {
    return set(p, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v->d);
  }
  static Status finalize(const DescPtr& p, const char* what) {
    HR_DNN(what, cudnnBackendFinalize(p->d));
    return Status();
  }

  // A 4-d tensor; by_value: a host scalar passed in the variant pack.
  Result<DescPtr> tensor(int64_t uid, cudnnDataType_t t, std::array<int64_t, 4> dims,
                         std::array<int64_t, 4> strides, bool is_virtual, bool by_value = false) {
    HR_ASSIGN_OR_RETURN(DescPtr p, make(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
    const int64_t align = 16;
    const bool virt = is_virtual, value = by_value;
    HR_TRY(set(p, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t));
    HR_TRY(set(p, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()));
    HR_TRY(set(p, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data()));
    HR_TRY(set(p, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    HR_TRY(set(p, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    HR_TRY(set(p, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    if (value) HR_TRY(set(p, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &value));
    HR_TRY(finalize(p, "tensor"));
    return p;
  }

  Result<DescPtr> matmul(const DescPtr& a, const DescPtr& b, const DescPtr& c) {
    HR_ASSIGN_OR_RETURN(DescPtr mm, make(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    HR_TRY(set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    HR_TRY(finalize(mm, "matmul descriptor"));
    HR_ASSIGN_OR_RETURN(DescPtr op, make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm));
    HR_TRY(finalize(op, "matmul"));
    return op;
  }

  // y = mode(x[, b]) in f32.
  Result<DescPtr> pointwise(cudnnPointwiseMode_t mode, const DescPtr& x, const DescPtr& b,
                            const DescPtr& y) {
    HR_ASSIGN_OR_RETURN(DescPtr pw, make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    HR_TRY(set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    HR_TRY(set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    HR_TRY(finalize(pw, "pointwise descriptor"));
    HR_ASSIGN_OR_RETURN(DescPtr op, make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x));
    if (b) HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
    HR_TRY(finalize(op, "pointwise"));
    return op;
  }

  Result<DescPtr> reduction(cudnnReduceTensorOp_t mode, const DescPtr& x, const DescPtr& y) {
    HR_ASSIGN_OR_RETURN(DescPtr red, make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    HR_TRY(set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode));
    HR_TRY(set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    HR_TRY(finalize(red, "reduction descriptor"));
    HR_ASSIGN_OR_RETURN(DescPtr op, make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y));
    HR_TRY(set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, red));
    HR_TRY(finalize(op, "reduction"));
    return op;
  }

  std::vector<DescPtr> keep;
};

// The engine configurations heuristics mode A proposes for `graph`.
Status heuristic_configs(Builder& g, const DescPtr& graph, std::vector<DescPtr>& cfgs) {
  HR_ASSIGN_OR_RETURN(DescPtr heur, g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  HR_TRY(Builder::set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph));
  HR_TRY(Builder::set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  HR_TRY(Builder::finalize(heur, "engine heuristics"));
  int64_t count = 0;
  HR_DNN("engine heuristics results",
         cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    HR_ASSIGN_OR_RETURN(DescPtr c, g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    cfgs.push_back(c);
    raw.push_back(c->d);
  }
  int64_t got = 0;
  if (count > 0)
    HR_DNN("engine configs",
           cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  cfgs.resize(size_t(std::clamp<int64_t>(got, 0, count)));
  return Status();
}

// An execution plan of `cfg` into `out`; false (with the reason appended to `why`) when refused.
bool plan_try(Builder& g, cudnnHandle_t h, const DescPtr& cfg, DnnAttentionPlan& out,
              std::string& why) {
  Result<DescPtr> plan = g.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  Status st = plan.status();
  if (st.ok()) st = Builder::set(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (st.ok()) st = Builder::set_desc(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  if (st.ok()) st = Builder::finalize(*plan, "execution plan");
  int64_t ws = 0;
  if (st.ok() &&
      cudnnBackendGetAttribute((*plan)->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                               CUDNN_TYPE_INT64, 1, nullptr, &ws) != CUDNN_STATUS_SUCCESS)
    st = make_error(ErrorCode::INTERNAL, "workspace size");
  if (!st.ok()) {
    why += st.message() + "; ";
    return false;
  }
  out.workspace = size_t(ws);
  out.plan = (*plan)->d;
  out.owned = std::make_shared<std::vector<std::shared_ptr<void>>>();
  for (const DescPtr& keep : g.keep) out.owned->push_back(keep);
  return true;
}

enum Uid : int64_t { kQ = 1, kK, kV, kO, kScale, kS, kS1, kM, kS2, kE, kZ, kL, kStats, kP };

// The operation graph of Note [cuDNN attention] for one shape, into `graph`.
Status graph_build(Builder& g, cudnnHandle_t h, const DnnAttentionKey& k, DescPtr& graph) {
  const int64_t b = k[1], nq = k[2], nk = k[3], heads = k[4], d = k[5], dv = k[6];
  const cudnnDataType_t io = DType(k[0]) == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  // [B, N, H * D] as [B, H, N, D]; rows `ld` apart (0: dense).
  auto bhsd = [&](int64_t n, int64_t dd, int64_t ld = 0) {
    if (ld == 0) ld = heads * dd;
    return std::array<int64_t, 4>{n * ld, dd, ld, 1};
  };
  const std::array<int64_t, 4> s_dims{b, heads, nq, nk}, s_str{heads * nq * nk, nq * nk, nk, 1};
  const std::array<int64_t, 4> r_dims{b, heads, nq, 1}, r_str{heads * nq, nq, 1, 1};
  HR_ASSIGN_OR_RETURN(DescPtr q, g.tensor(kQ, io, {b, heads, nq, d}, bhsd(nq, d, k[7]), false));
  const std::array<int64_t, 4> ks = bhsd(nk, d, k[8]);
  HR_ASSIGN_OR_RETURN(DescPtr kt,
                      g.tensor(kK, io, {b, heads, d, nk}, {ks[0], ks[1], 1, ks[2]}, false));
  HR_ASSIGN_OR_RETURN(DescPtr v, g.tensor(kV, io, {b, heads, nk, dv}, bhsd(nk, dv, k[9]), false));
  HR_ASSIGN_OR_RETURN(DescPtr o, g.tensor(kO, io, {b, heads, nq, dv}, bhsd(nq, dv), false));
  HR_ASSIGN_OR_RETURN(DescPtr scale,
                      g.tensor(kScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true));
  HR_ASSIGN_OR_RETURN(DescPtr s, g.tensor(kS, f32, s_dims, s_str, true));
  HR_ASSIGN_OR_RETURN(DescPtr s1, g.tensor(kS1, f32, s_dims, s_str, true));
  HR_ASSIGN_OR_RETURN(DescPtr m, g.tensor(kM, f32, r_dims, r_str, true));
  HR_ASSIGN_OR_RETURN(DescPtr s2, g.tensor(kS2, f32, s_dims, s_str, true));
  HR_ASSIGN_OR_RETURN(DescPtr e, g.tensor(kE, f32, s_dims, s_str, true));
  HR_ASSIGN_OR_RETURN(DescPtr z, g.tensor(kZ, f32, r_dims, r_str, true));
  HR_ASSIGN_OR_RETURN(DescPtr l, g.tensor(kL, f32, r_dims, r_str, true));
  HR_ASSIGN_OR_RETURN(DescPtr stats, g.tensor(kStats, f32, r_dims, r_str, true));
  // P is the second matmul's A: the engine wants it in V's type (cuDNN 9.14: "A and B need to
  // have the same datatype in the matmul").
  HR_ASSIGN_OR_RETURN(DescPtr p, g.tensor(kP, io, s_dims, s_str, true));
  std::vector<DescPtr> ops;
  auto add = [&](Result<DescPtr> r) -> Status {
    HR_TRY(r.status());
    ops.push_back(*r);
    return Status();
  };
  HR_TRY(add(g.matmul(q, kt, s)));
  HR_TRY(add(g.pointwise(CUDNN_POINTWISE_MUL, s, scale, s1)));
  HR_TRY(add(g.reduction(CUDNN_REDUCE_TENSOR_MAX, s1, m)));
  HR_TRY(add(g.pointwise(CUDNN_POINTWISE_SUB, s1, m, s2)));
  HR_TRY(add(g.pointwise(CUDNN_POINTWISE_EXP, s2, nullptr, e)));
  HR_TRY(add(g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z)));
  HR_TRY(add(g.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, l)));
  HR_TRY(add(g.pointwise(CUDNN_POINTWISE_ADD, m, l, stats)));
  HR_TRY(add(g.pointwise(CUDNN_POINTWISE_DIV, e, z, p)));
  HR_TRY(add(g.matmul(p, v, o)));

  HR_ASSIGN_OR_RETURN(graph, g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const DescPtr& op : ops) raw.push_back(op->d);
  HR_TRY(Builder::set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  HR_TRY(Builder::set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                      int64_t(raw.size()), raw.data()));
  return Builder::finalize(graph, "operation graph");
}

// The first execution plan of `graph` the engine accepts: the heuristics' configurations first,
// then every engine of the graph by index. `why` collects what each refusal said.
Status plan_find(Builder& g, cudnnHandle_t h, const DescPtr& graph, DnnAttentionPlan& out) {
  std::string why;
  std::vector<DescPtr> cfgs;
  Status heur = heuristic_configs(g, graph, cfgs);
  if (!heur.ok()) why += heur.message() + "; ";
  why += fmt::format("{} heuristic configs; ", cfgs.size());
  for (const DescPtr& cfg : cfgs)
    if (plan_try(g, h, cfg, out, why)) return Status();
  int64_t engines = 0;
  HR_DNN("engine count",
         cudnnBackendGetAttribute(graph->d, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                  CUDNN_TYPE_INT64, 1, nullptr, &engines));
  why += fmt::format("{} engines: ", engines);
  for (int64_t i = 0; i < engines; ++i) {
    HR_ASSIGN_OR_RETURN(DescPtr engine, g.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
    HR_TRY(Builder::set_desc(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph));
    HR_TRY(Builder::set(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i));
    if (cudnnBackendFinalize(engine->d) != CUDNN_STATUS_SUCCESS) continue;
    HR_ASSIGN_OR_RETURN(DescPtr cfg, g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    HR_TRY(Builder::set_desc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, engine));
    Status st = Builder::finalize(cfg, "engine config");
    why += fmt::format("#{} ", i);
    if (!st.ok()) {
      why += st.message() + "; ";
      continue;
    }
    if (plan_try(g, h, cfg, out, why)) return Status();
  }
  return make_error(ErrorCode::UNSUPPORTED, "cuDNN attention: no plan ({})", why);
}

// The graph and plan of one shape; the plan keeps every descriptor `g` made alive.
Status plan_build(cudnnHandle_t h, const DnnAttentionKey& k, DnnAttentionPlan& out) {
  Builder g;
  DescPtr graph;
  HR_TRY(graph_build(g, h, k, graph));
  return plan_find(g, h, graph, out);
}

}  // namespace

bool attention_dnn_enabled() {
  static const bool on = env_switch("HEADROOM_CUDNN_ATTENTION", true);
  return on;
}


// Note [cuDNN attention shapes]: measured side by side in one run (bench_attention; the figures
// are in bench/PERF_NOTES.md, v7), cuDNN's engine wins on the long self-attentions (about 1.5-2x
// at 1024 and 4096 tokens), is even at 256 tokens and loses on 64-token self-attention and every
// 77-key cross-attention, where the fused engine's launch and fixed costs dominate. So it takes
// attention with at least 512 queries and 512 keys.
bool attention_dnn_applies(DType t, int64_t nq, int64_t nk, int64_t d, int64_t dv, bool causal) {
  return attention_dnn_enabled() && (t == DType::F16 || t == DType::BF16) && !causal && d == dv &&
         d % 8 == 0 && d <= 256 && nq >= 512 && nk >= 512;
}

const DnnAttentionPlan& attention_dnn_plan(CudaContext& ctx, const DnnAttentionKey& k) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  auto it = ctx.attention_plans.find(k);
  if (it != ctx.attention_plans.end()) return it->second;
  DnnAttentionPlan p;
  Status st = plan_build(ctx.dnn, k, p);
  if (!st.ok()) {
    p = DnnAttentionPlan();
    p.refused = st.message();
  }
  return ctx.attention_plans.emplace(k, std::move(p)).first->second;
}

Status attention_dnn(CudaContext& ctx, const DnnAttentionPlan& p, const OpCall& c, float scale,
                     cudaStream_t s) {
  if (c.workspace_bytes < p.workspace || (p.workspace && !c.workspace))
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "cuDNN attention: workspace of {} bytes given, the plan needs {}",
                      c.workspace_bytes, p.workspace);
  std::lock_guard<std::mutex> lock(ctx.mu);
  HR_DNN("set stream", cudnnSetStream(ctx.dnn, s));
  Builder g;
  HR_ASSIGN_OR_RETURN(DescPtr pack, g.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  std::array<int64_t, 5> uids{kQ, kK, kV, kO, kScale};
  std::array<void*, 5> ptrs{const_cast<void*>(c.inputs[0].data),
                            const_cast<void*>(c.inputs[1].data),
                            const_cast<void*>(c.inputs[2].data), c.output.data, &scale};
  void* ws = p.workspace ? c.workspace : nullptr;
  HR_TRY(Builder::set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids.data()));
  HR_TRY(Builder::set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5,
                      ptrs.data()));
  HR_TRY(Builder::set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  HR_TRY(Builder::finalize(pack, "variant pack"));
  HR_DNN("execute",
         cudnnBackendExecute(ctx.dnn, static_cast<cudnnBackendDescriptor_t>(p.plan), pack->d));
  return Status();
}

#else  // older cuDNN: our kernels only

bool attention_dnn_applies(DType, int64_t, int64_t, int64_t, int64_t, bool) { return false; }
const DnnAttentionPlan& attention_dnn_plan(CudaContext& ctx, const DnnAttentionKey& k) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  DnnAttentionPlan& p = ctx.attention_plans[k];
  p.refused = "cuDNN older than 9.0";
  return p;
}
Status attention_dnn(CudaContext&, const DnnAttentionPlan&, const OpCall&, float, cudaStream_t) {
  return make_error(ErrorCode::UNSUPPORTED, "cuDNN attention needs cuDNN 9");
}

#endif

DnnAttentionKey attention_dnn_key(DType t, int64_t b, int64_t nq, int64_t nk, int64_t heads,
                                  int64_t d, int64_t dv, int64_t ldq, int64_t ldk, int64_t ldv) {
  return {int64_t(t), b, nq, nk, heads, d, dv, ldq, ldk, ldv};
}

const DnnAttentionPlan* attention_dnn_for(CudaContext& ctx, DType t, int64_t b, int64_t nq,
                                          int64_t nk, int64_t heads, int64_t d, int64_t dv,
                                          bool causal, int64_t ldq, int64_t ldk, int64_t ldv) {
  if (!attention_dnn_applies(t, nq, nk, d, dv, causal)) return nullptr;
  const DnnAttentionPlan& p =
      attention_dnn_plan(ctx, attention_dnn_key(t, b, nq, nk, heads, d, dv, ldq, ldk, ldv));
  return p.ok() ? &p : nullptr;
}

}  // namespace hr::cuda
