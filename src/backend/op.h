// The op set: every operation a backend implements, its parameters, and shape inference.
// Semantics of each op are defined here once (Note [op semantics]); backends, the graph
// and the op-test harness all follow these definitions. Every op has exactly one output.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// Note [op semantics]
// Layouts are row-major and contiguous. Images are NCHW. Token sequences are [B, N, C].
// "?b" marks an optional last input (bias); its presence is inputs.size().
//
// LINEAR      x[..., K], w[N, K], ?b[N] -> [..., N]          y = x w^T + b  (PyTorch nn.Linear)
// MATMUL      a[..., M, K], b[..., K, N] -> [..., M, N]       batch dims broadcast;
//             params.trans_b: b is [..., N, K].
// CONV2D      x[N, C, H, W], w[O, C/groups, KH, KW], ?b[O] -> [N, O, OH, OW]
//             params.stride[2] (h, w), params.pad[4] (top, bottom, left, right; zero padding),
//             params.dilation[2], params.groups.  OH = (H + pt + pb - dil*(KH-1) - 1)/sh + 1.
//             params.channels_last: x[N, H, W, C], w[O, KH, KW, C/groups] -> [N, OH, OW, O].
// LINEAR and CONV2D with params.add_input: one more input r after the bias (if any) is added
//             to the result: r has the output's shape, or (CONV2D only) the output's rank with
//             every spatial dim 1 ([N, O, 1, 1], channels-last [N, 1, 1, O]): a per-sample,
//             per-channel term. Graph passes create these from LINEAR/CONV2D followed by ADD.
// GROUP_NORM  x[N, C, ...], gamma[C], beta[C] -> same; params.groups, params.eps;
//             params.fuse_silu applies SiLU to the result.
//             params.channels_last: x[N, ..., C] (channels in the last dim).
// LAYER_NORM  x[..., C], gamma[C], ?beta[C] -> same; normalises the last dim; params.eps.
// SOFTMAX     x[..., N] -> same; softmax over the last dim of (x * params.alpha)
//             (alpha 0 means 1).
// ATTENTION   q[B, Nq, H*D], k[B, Nk, H*D], v[B, Nk, H*Dv] -> [B, Nq, H*Dv]
//             params.heads = H; softmax(q k^T * scale) v per head, scale = params.alpha
//             (0 means 1/sqrt(D)); params.causal masks key j > query i.
//             Implementations must not materialise all heads' [Nq, Nk] scores at once.
//             params.kv_window: k[B, Nk, Ck] and v[B, Nk, Cv] are wider tensors (often one
//             tensor, Note [stacked context projections] in graph/pass_stack.cpp) holding K and V
//             as column windows: K = k[..., start : start + H*D], V = v[..., end : end + H*D]
//             (Dv = D); the output is [B, Nq, H*D]. params.q_width > 0 (with kv_window): q
//             is a window too, Q = q[..., q_start : q_start + q_width], and H*D = q_width.
// GELU        erf form: 0.5 x (1 + erf(x / sqrt 2)).
// GELU_TANH   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// QUICK_GELU  x * sigmoid(1.702 x).
// SILU        x * sigmoid(x).
// TANH        tanh(x) (Z-Image's adaLN gates).
// GEGLU       x[..., 2N] -> [..., N]: x[..., :N] * gelu_erf(x[..., N:])  (diffusers GEGLU).
// ADD SUB MUL DIV   a, b -> broadcast(a, b) (NumPy rules, right-aligned).
// SCALE       x -> x * params.alpha + params.beta.
// CONCAT      inputs (2 or more) with equal shapes except params.axis -> concatenated.
// SLICE       x -> x[..., start:end:step, ...] along params.axis (end clamped; step > 0).
// PERMUTE     x -> transposed with params.perm (out dim i = in dim perm[i]).
// RESHAPE     x -> params.shape (same numel; a view: backends may alias or copy).
// UPSAMPLE_NEAREST  x[N, C, H, W] -> [N, C, H*f, W*f] with f = params.factor;
//             params.channels_last: x[N, H, W, C] -> [N, H*f, W*f, C].
// EMBEDDING   ids[...] (I32 or I64), table[V, D] -> [..., D] in table's dtype;
//             an id outside [0, V) is an error reported by the backend.
// TIMESTEP_EMBEDDING  t[N] (F32) -> [N, params.dim] F32-or-params.dtype:
//             half = dim/2, f_i = exp(-ln(max_period) * i / (half - params.freq_shift)),
//             [cos(t f), sin(t f)] when params.flip_sin_to_cos else [sin, cos]; odd dim
//             pads a zero column at the end.
// LINEAR_FP8  x[..., K] (F8_E4M3), w[N, K] (F8_E4M3), ?scale f32 {1} (when params.weight_scale),
//             ?b[N] (params.dtype), ?r (params.add_input, as LINEAR's) -> [..., N] in params.dtype
//             (f16 or bf16):
//             (x w^T) * scale + b (+ r), products summed in f32 and rounded once (torch._scaled_mm; Note [fp8 linear] in
//             graph/pass_fp8.cpp). The GPU runs it on fp8 tensor cores (sm_89 and later).
// CAST        x -> params.dtype; with a second input, a scale f32 {1}: the dequantizing cast
//             of an fp8 weight, x and scale each cast to params.dtype, multiplied and rounded
//             once (Note [fp8 weights] in graph/graph.h). To F8_E4M3 (from f32/f16/bf16):
//             clamped to +-448, then rounded to nearest even (ComfyUI's activation cast).
// COPY        x -> same (a contiguous copy).
// RMS_NORM    x[..., C], ?gamma[C] -> same; y = x / sqrt(mean over the last dim of x^2 +
//             params.eps) * gamma (no mean subtraction, no beta); Note [rms norm rounding]
//             in backend/cpu/cpu_rms_norm.cpp says how each dtype rounds.
// ROPE        x[B, L, H, D], cs[L, D/2, 2] or cs[B, L, D/2, 2] (always F32) -> x's shape and
//             dtype. Rotates D/2 pairs of each head's vector by per-position angles: for pair
//             p at position l, (c, s) = cs[(b,) l, p, 0..1] (cos and sin of the angle) and
//             (u, v) -> (c u - s v, s u + c v). The pairs are (2p, 2p+1) (Flux's interleaved
//             pairs, comfy/ldm/flux/math.py), or (p, p + D/2) with params.rope_half_split (the
//             HF "rotate_half" layout of Llama/Qwen). D even. The table's builders are in
//             models/rope_table.h; Note [rope arithmetic] in backend/cpu/cpu_rope.cpp says how
//             it rounds. x is token-major, [B, L, H, D], because ATTENTION's q and k
//             [B, L, H*D] are a free reshape of it (ComfyUI rotates [B, H, L, D]; the
//             arithmetic per element is the same).
// QKV_ROPE    x_1, gq_1, gk_1, ..., x_n, gq_n, gk_n, cs -> [B, L_1 + ... + L_n, 3C] in x's dtype
//             (n >= 1 groups of three; C = params.heads * D, D = params.dim, even): each
//             x_i [B, L_i, W_i >= 3C] holds a stream's q, k, v as its first 3C columns (a fused
//             QKV projection, or the front of a wider one); gq_i, gk_i [D] are its QK RMSNorm
//             weights; cs [L_1 + ... + L_n, D/2, 2] F32 the rotation table of the joint sequence.
//             The streams' tokens are concatenated in order; per head, q = ROPE(RMS_NORM(q, gq_i))
//             and k likewise with gk_i (params.eps, params.rope_half_split), v copied. Each step
//             rounds as RMS_NORM and then ROPE do, so the op equals the chain of SLICEs,
//             RMS_NORMs, ROPEs and CONCATs it replaces; ATTENTION reads the three windows in place
//             (params.kv_window, q_width). Note [fused qk norm and rope] in
//             backend/cpu/cpu_qkv_rope.cpp.
enum class OpKind : uint8_t {
  LINEAR = 0,
  MATMUL,
  CONV2D,
  GROUP_NORM,
  LAYER_NORM,
  SOFTMAX,
  ATTENTION,
  GELU,
  GELU_TANH,
  QUICK_GELU,
  SILU,
  GEGLU,
  ADD,
  SUB,
  MUL,
  DIV,
  SCALE,
  CONCAT,
  SLICE,
  PERMUTE,
  RESHAPE,
  UPSAMPLE_NEAREST,
  EMBEDDING,
  TIMESTEP_EMBEDDING,
  CAST,
  COPY,
  LINEAR_FP8,
  RMS_NORM,
  ROPE,
  QKV_ROPE,
  TANH,
  COUNT_,  // number of ops; not an op
};

const char* op_name(OpKind kind);  // "linear", "conv2d", ...

// Flat parameter block shared by all ops; each op reads the fields its note names.
struct OpParams {
  float eps = 1e-5f;
  float alpha = 0.0f;  // SCALE multiplier, SOFTMAX/ATTENTION scale (0 = default)
  float beta = 0.0f;   // SCALE offset
  int32_t groups = 1;
  int32_t heads = 1;
  int32_t axis = 0;
  int32_t factor = 2;
  int32_t dim = 0;
  int32_t stride[2] = {1, 1};
  int32_t pad[4] = {0, 0, 0, 0};  // top, bottom, left, right
  int32_t dilation[2] = {1, 1};
  int32_t perm[kMaxDims] = {0, 1, 2, 3, 4, 5};
  int64_t start = 0, end = 0, step = 1;
  float max_period = 10000.0f;
  float freq_shift = 0.0f;
  bool flip_sin_to_cos = true;
  bool causal = false;
  bool fuse_silu = false;
  bool trans_b = false;
  bool channels_last = false;  // CONV2D, GROUP_NORM, UPSAMPLE_NEAREST
  bool add_input = false;      // LINEAR(_FP8), CONV2D: the last input is added to the result
  bool weight_scale = false;   // LINEAR_FP8: inputs[2] is the weight's scale
  bool kv_window = false;      // ATTENTION: k and v are column windows at start / end
  int64_t q_start = 0, q_width = 0;  // ATTENTION with kv_window: q's window (width 0: all of q)
  bool rope_half_split = false;  // ROPE: pairs (p, p + D/2) instead of (2p, 2p+1)
  DType dtype = DType::F32;
  Shape shape;

  bool operator==(const OpParams& o) const;
  // Fields that matter for `kind`, for plan keys and printing.
  std::string str(OpKind kind) const;
};

// Output descriptor of an op, or INVALID_ARGUMENT naming the op and the mismatch.
Result<TensorDesc> op_infer(OpKind kind, const OpParams& params,
                            std::span<const TensorDesc> inputs);

// Multiply-adds x 2 of an op (for GFLOP/s reporting); 0 for data-movement ops.
double op_flops(OpKind kind, const OpParams& params, std::span<const TensorDesc> inputs,
                const TensorDesc& output);

}  // namespace hr
