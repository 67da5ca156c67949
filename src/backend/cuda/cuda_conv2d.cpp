// CONV2D through cuDNN's convolution API (NCHW, groups, dilation), with the algorithm chosen
// once per shape and dtype, asymmetric padding by a pad kernel, and a direct-kernel fallback.
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_ops.h"
#include "core/alignment.h"

namespace hr::cuda {
namespace {

// Note [asymmetric conv padding]
// cuDNN pads symmetrically. When top != bottom or left != right (the VAE encoder's stride-2
// downsample pads (0, 1, 0, 1)), cropping a symmetric result would shift the stride-2 sampling
// grid, so instead the input is zero-padded into the start of the workspace (pad2d) and cuDNN
// runs with padding 0. The padded copy is counted in op_workspace.
//
// Note [conv algorithm choice]
// cudnnGetConvolutionForwardAlgorithm_v7 ranks algorithms by cuDNN's heuristics without running
// anything, so planning stays cheap and deterministic. Only the GEMM-family algorithms are kept
// (FFT and Winograd trade accuracy for speed), only those within kConvWorkspaceLimit, and for f32
// only non-tensor-core math (FMA; TF32 would miss the f32 tolerance). f16/bf16 compute in f32 on
// tensor cores. When cuDNN offers nothing (or fails at run time with NOT_SUPPORTED) the op runs
// conv2d_direct, which needs no workspace.

struct Geometry {
  DType dtype;
  int n, c, h, w, o, kh, kw, oh, ow;
  int sh, sw, pt, pb, pl, pr, dh, dw, groups;
  bool cl;  // channels last: x NHWC, w OHWI, y NHWC
  bool asym() const { return pt != pb || pl != pr; }
};

Geometry geometry(const OpParams& p, std::span<const TensorDesc> in, const TensorDesc& out) {
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  const Shape& y = out.shape;
  if (p.channels_last)
    return Geometry{in[0].dtype, int(x[0]), int(x[3]), int(x[1]), int(x[2]), int(w[0]), int(w[1]),
                    int(w[2]), int(y[1]), int(y[2]), p.stride[0], p.stride[1], p.pad[0], p.pad[1],
                    p.pad[2], p.pad[3], p.dilation[0], p.dilation[1], p.groups, true};
  return Geometry{in[0].dtype, int(x[0]), int(x[1]), int(x[2]), int(x[3]), int(w[0]), int(w[2]),
                  int(w[3]), int(y[2]), int(y[3]), p.stride[0], p.stride[1],
                  p.pad[0], p.pad[1], p.pad[2], p.pad[3], p.dilation[0], p.dilation[1],
                  p.groups, false};
}

ConvKey conv_key(const Geometry& g) {
  return ConvKey{int64_t(g.dtype), g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.sh, g.sw, g.pt, g.pb,
                 g.pl, g.pr, g.dh, g.dw, g.groups, g.cl};
}

cudnnDataType_t dnn_type(DType t) {
  return t == DType::F16 ? CUDNN_DATA_HALF : t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

struct DnnDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~DnnDescs() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

Status make_descs(const Geometry& g, cudnnMathType_t math, DnnDescs& d) {
  const char* op = "conv2d";
  const cudnnDataType_t t = dnn_type(g.dtype);
  const bool pre_pad = g.asym();
  const int xh = pre_pad ? g.h + g.pt + g.pb : g.h, xw = pre_pad ? g.w + g.pl + g.pr : g.w;
  const int ph = pre_pad ? 0 : g.pt, pw = pre_pad ? 0 : g.pl;
  HR_CUDNN_CHECK(op, cudnnCreateTensorDescriptor(&d.x));
  HR_CUDNN_CHECK(op, cudnnCreateTensorDescriptor(&d.y));
  HR_CUDNN_CHECK(op, cudnnCreateFilterDescriptor(&d.w));
  HR_CUDNN_CHECK(op, cudnnCreateConvolutionDescriptor(&d.conv));
  const cudnnTensorFormat_t f = g.cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  HR_CUDNN_CHECK(op, cudnnSetTensor4dDescriptor(d.x, f, t, g.n, g.c, xh, xw));
  HR_CUDNN_CHECK(op, cudnnSetTensor4dDescriptor(d.y, f, t, g.n, g.o, g.oh, g.ow));
  HR_CUDNN_CHECK(op, cudnnSetFilter4dDescriptor(d.w, t, f, g.o, g.c / g.groups, g.kh, g.kw));
  HR_CUDNN_CHECK(op, cudnnSetConvolution2dDescriptor(d.conv, ph, pw, g.sh, g.sw, g.dh, g.dw,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  HR_CUDNN_CHECK(op, cudnnSetConvolutionGroupCount(d.conv, g.groups));
  HR_CUDNN_CHECK(op, cudnnSetConvolutionMathType(d.conv, math));
  int on, oc, oh, ow;
  HR_CUDNN_CHECK(op, cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &on, &oc, &oh, &ow));
  if (on != g.n || oc != g.o || oh != g.oh || ow != g.ow)
    return make_error(ErrorCode::INTERNAL, "conv2d: cuDNN output {}x{}x{}x{} differs from {}x{}x{}x{}",
                      on, oc, oh, ow, g.n, g.o, g.oh, g.ow);
  return Status();
}

bool algo_allowed(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}

// Note [conv algorithm choice]. Called with ctx.mu held.
ConvPlan plan_build(CudaContext& ctx, const Geometry& g) {
  ConvPlan plan;  // use_cudnn = false: the direct kernel
  const bool f32 = g.dtype == DType::F32;
  const cudnnMathType_t math = f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  DnnDescs d;
  if (!make_descs(g, math, d).ok()) return plan;
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  if (cudnnGetConvolutionForwardAlgorithm_v7(ctx.dnn, d.x, d.w, d.conv, d.y,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned,
                                             perf) != CUDNN_STATUS_SUCCESS)
    return plan;
  for (int i = 0; i < returned; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS || !algo_allowed(r.algo) || r.memory > kConvWorkspaceLimit)
      continue;
    if (f32 && (r.mathType == CUDNN_TENSOR_OP_MATH || r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    // The size for exactly this algorithm and math type, as it will run.
    size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(ctx.dnn, d.x, d.w, d.conv, d.y, r.algo, &bytes) !=
        CUDNN_STATUS_SUCCESS)
      continue;
    plan.use_cudnn = true;
    plan.algo = r.algo;
    plan.math = f32 ? CUDNN_FMA_MATH : r.mathType;
    plan.algo_bytes = bytes;
    plan.pre_pad = g.asym();
    if (plan.pre_pad)
      plan.pad_bytes = align_up(size_t(g.n) * g.c * (g.h + g.pt + g.pb) * (g.w + g.pl + g.pr) *
                                dtype_size(g.dtype));
    break;
  }
  return plan;
}

ConvPlan plan_get(CudaContext& ctx, const Geometry& g) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  ConvKey key = conv_key(g);
  auto it = ctx.conv_plans.find(key);
  if (it != ctx.conv_plans.end()) return it->second;
  ConvPlan plan = plan_build(ctx, g);
  ctx.conv_plans[key] = plan;
  return plan;
}

Status run_direct(const Geometry& g, const OpCall& c, cudaStream_t s) {
  ConvArgs a;
  a.dtype = g.dtype;
  a.x = c.inputs[0].data;
  a.w = c.inputs[1].data;
  a.y = c.output.data;
  a.n = g.n, a.c = g.c, a.h = g.h, a.wd = g.w, a.o = g.o, a.kh = g.kh, a.kw = g.kw;
  a.oh = g.oh, a.ow = g.ow;
  a.stride[0] = g.sh, a.stride[1] = g.sw, a.pad_top = g.pt, a.pad_left = g.pl;
  a.dilation[0] = g.dh, a.dilation[1] = g.dw, a.groups = g.groups;
  a.channels_last = g.cl;
  HR_CUDA_CHECK("conv2d", conv2d_direct(a, s));
  return Status();
}

// params.add_input: the term after the bias (op.h); null without.
const void* add_term(const OpParams& p, const OpCall& c, bool* per_channel) {
  *per_channel = false;
  if (!p.add_input) return nullptr;
  const TensorRef& r = c.inputs.back();
  *per_channel = r.desc.shape != c.output.desc.shape;
  return r.data;
}

const void* bias_of(const OpParams& p, const OpCall& c) {
  return c.inputs.size() - (p.add_input ? 1 : 0) > 2 ? c.inputs[2].data : nullptr;
}

// Bias and added term after the convolution proper (cuDNN or the direct kernel).
Status epilogue(const Geometry& g, const OpParams& p, const OpCall& c, cudaStream_t s) {
  bool per_channel = false;
  const void* term = add_term(p, c, &per_channel);
  const void* bias = bias_of(p, c);
  HR_CUDA_CHECK("conv2d", conv_epilogue(g.dtype, c.output.data, bias, term, per_channel, g.n, g.o,
                                        int64_t(g.oh) * g.ow, g.cl, s));
  return Status();
}

// Note [fused conv bias]
// cuDNN's cudnnConvolutionForward leaves the bias and the added input (LINEAR/CONV2D add_input,
// op.h) to conv_epilogue, one more pass over the output: SDXL's 51 convolutions write 10-42 MB
// each, so the pass rereads and rewrites them (~0.5 ms of a 1024^2 step). For a bias with no
// added term or a full-shape one (the residual after out_layers, the skip 1x1 convolutions, the
// up/downsamplers) cudnnConvolutionBiasActivationForward does both in the convolution's epilogue:
// y = conv(x) + z + bias with the identity activation, which cuDNN runs only with
// IMPLICIT_PRECOMP_GEMM (the algorithm its heuristic picks for our f16/bf16 shapes). A
// per-sample term ([N, 1, 1, O], the time embedding) has no place there and keeps the epilogue.
// The sums happen in f32 before the one rounding to the output type (the epilogue rounded the
// convolution first). When cuDNN refuses, the shape remembers it and runs as before.
// On for channels-last convolutions, off for NCHW ones; HEADROOM_CONV_FUSE=1 turns it on for
// both, =0 off for both. Why: the channels-last UNet steps were faster with it in both same-run
// attributions, while the one NCHW measurement is against it (bench/PERF_NOTES.md, v8/v9 and
// "Measurements moved from code Notes").
bool conv_fuse_enabled(bool channels_last) {
  static const int mode = [] {  // 1: all, 0: none, -1: channels-last only
    const char* e = std::getenv("HEADROOM_CONV_FUSE");
    if (e && std::string(e) == "1") return 1;
    if (e && std::string(e) == "0") return 0;
    return -1;
  }();
  return mode == 1 || (mode == -1 && channels_last);
}

bool fusable(const ConvPlan& plan, bool channels_last, const void* bias, const void* term,
             bool per_channel) {
  return conv_fuse_enabled(channels_last) && plan.use_cudnn && !plan.fuse_refused && bias &&
         plan.algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM && !(term && per_channel);
}

// One cudnnConvolutionBiasActivationForward; `term` (full shape) or null. Called with ctx.mu held
// and ctx.dnn on the stream.
cudnnStatus_t run_fused(CudaContext& ctx, const Geometry& g, const ConvPlan& plan,
                        const DnnDescs& d, const void* x, const void* w, void* algo_ws,
                        const void* bias, const void* term, void* y) {
  cudnnTensorDescriptor_t bd = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnStatus_t st = cudnnCreateTensorDescriptor(&bd);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnCreateActivationDescriptor(&act);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, dnn_type(g.dtype), 1, g.o, 1, 1);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0);
  if (st == CUDNN_STATUS_SUCCESS) {
    const float alpha1 = 1.0f, alpha2 = term ? 1.0f : 0.0f;
    st = cudnnConvolutionBiasActivationForward(
        ctx.dnn, &alpha1, d.x, x, d.w, w, d.conv, plan.algo, algo_ws, plan.algo_bytes, &alpha2,
        d.y, term ? term : y, bd, bias, act, d.y, y);
  }
  if (act) cudnnDestroyActivationDescriptor(act);
  if (bd) cudnnDestroyTensorDescriptor(bd);
  return st;
}

}  // namespace

size_t conv2d_workspace(CudaContext& ctx, const OpParams& p, std::span<const TensorDesc> in,
                        const TensorDesc& out) {
  return plan_get(ctx, geometry(p, in, out)).workspace();
}

Status conv2d(CudaContext& ctx, const OpCall& c, cudaStream_t s) {
  const OpParams p = c.params ? *c.params : OpParams();
  TensorDesc descs[2] = {c.inputs[0].desc, c.inputs[1].desc};
  const Geometry g = geometry(p, descs, c.output.desc);
  if (c.output.desc.numel() == 0) return Status();
  const ConvPlan plan = plan_get(ctx, g);
  if (!plan.use_cudnn) {
    HR_TRY(run_direct(g, c, s));
    return epilogue(g, p, c, s);
  }
  if (c.workspace_bytes < plan.workspace() || (plan.workspace() && !c.workspace))
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "conv2d: workspace of {} bytes given, op_workspace asked for {}",
                      c.workspace_bytes, plan.workspace());

  const void* x = c.inputs[0].data;
  uint8_t* ws = static_cast<uint8_t*>(c.workspace);
  if (plan.pre_pad) {  // Note [asymmetric conv padding]
    if (g.cl)
      HR_CUDA_CHECK("conv2d", pad2d_nhwc(dtype_size(g.dtype), x, g.n, g.h, g.w, g.c, g.pt, g.pb,
                                         g.pl, g.pr, ws, s));
    else
      HR_CUDA_CHECK("conv2d", pad2d(dtype_size(g.dtype), x, int64_t(g.n) * g.c, g.h, g.w, g.pt,
                                    g.pb, g.pl, g.pr, ws, s));
    x = ws;
  }
  bool per_channel = false;
  const void* term = add_term(p, c, &per_channel);
  const void* bias = bias_of(p, c);
  void* algo_ws = plan.algo_bytes ? ws + plan.pad_bytes : nullptr;
  {
    std::lock_guard<std::mutex> lock(ctx.mu);
    HR_CUDNN_CHECK("conv2d", cudnnSetStream(ctx.dnn, s));
    DnnDescs d;
    HR_TRY(make_descs(g, plan.math, d));
    if (fusable(plan, g.cl, bias, term, per_channel)) {  // Note [fused conv bias]
      if (run_fused(ctx, g, plan, d, x, c.inputs[1].data, algo_ws, bias, term, c.output.data) ==
          CUDNN_STATUS_SUCCESS)
        return Status();
      ctx.conv_plans[conv_key(g)].fuse_refused = true;
      cudaGetLastError();  // a refusal launches nothing; leave no error behind for the next op
    }
    const float alpha = 1.0f, beta = 0.0f;
    cudnnStatus_t st = cudnnConvolutionForward(
        ctx.dnn, &alpha, d.x, x, d.w, c.inputs[1].data, d.conv, plan.algo, algo_ws,
        plan.algo_bytes, &beta, d.y, c.output.data);
    if (st == CUDNN_STATUS_NOT_SUPPORTED) {
      ctx.conv_plans[conv_key(g)] = ConvPlan{};  // later calls go straight to the direct kernel
    } else if (st != CUDNN_STATUS_SUCCESS) {
      return cudnn_status(st, "conv2d", "cudnnConvolutionForward");
    }
    if (st == CUDNN_STATUS_NOT_SUPPORTED) {
      HR_TRY(run_direct(g, c, s));
    }
  }
  return epilogue(g, p, c, s);
}

}  // namespace hr::cuda
