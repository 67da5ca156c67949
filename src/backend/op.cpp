// Shape inference and names for the op set (see Note [op semantics] in op.h).
#include "backend/op.h"

#include <algorithm>
#include <cstring>

namespace hr {

const char* op_name(OpKind kind) {
  switch (kind) {
    case OpKind::LINEAR: return "linear";
    case OpKind::MATMUL: return "matmul";
    case OpKind::CONV2D: return "conv2d";
    case OpKind::GROUP_NORM: return "group_norm";
    case OpKind::LAYER_NORM: return "layer_norm";
    case OpKind::SOFTMAX: return "softmax";
    case OpKind::ATTENTION: return "attention";
    case OpKind::GELU: return "gelu";
    case OpKind::GELU_TANH: return "gelu_tanh";
    case OpKind::QUICK_GELU: return "quick_gelu";
    case OpKind::SILU: return "silu";
    case OpKind::TANH: return "tanh";
    case OpKind::GEGLU: return "geglu";
    case OpKind::ADD: return "add";
    case OpKind::SUB: return "sub";
    case OpKind::MUL: return "mul";
    case OpKind::DIV: return "div";
    case OpKind::SCALE: return "scale";
    case OpKind::CONCAT: return "concat";
    case OpKind::SLICE: return "slice";
    case OpKind::PERMUTE: return "permute";
    case OpKind::RESHAPE: return "reshape";
    case OpKind::UPSAMPLE_NEAREST: return "upsample_nearest";
    case OpKind::EMBEDDING: return "embedding";
    case OpKind::TIMESTEP_EMBEDDING: return "timestep_embedding";
    case OpKind::CAST: return "cast";
    case OpKind::LINEAR_FP8: return "linear_fp8";
    case OpKind::COPY: return "copy";
    case OpKind::RMS_NORM: return "rms_norm";
    case OpKind::ROPE: return "rope";
    case OpKind::QKV_ROPE: return "qkv_rope";
    case OpKind::COUNT_: break;
  }
  return "?";
}

bool OpParams::operator==(const OpParams& o) const {
  return eps == o.eps && alpha == o.alpha && beta == o.beta && groups == o.groups &&
         heads == o.heads && axis == o.axis && factor == o.factor && dim == o.dim &&
         std::equal(stride, stride + 2, o.stride) && std::equal(pad, pad + 4, o.pad) &&
         std::equal(dilation, dilation + 2, o.dilation) &&
         std::equal(perm, perm + kMaxDims, o.perm) && start == o.start && end == o.end &&
         step == o.step && max_period == o.max_period && freq_shift == o.freq_shift &&
         flip_sin_to_cos == o.flip_sin_to_cos && causal == o.causal &&
         fuse_silu == o.fuse_silu && trans_b == o.trans_b && channels_last == o.channels_last &&
         add_input == o.add_input && weight_scale == o.weight_scale && kv_window == o.kv_window &&
         q_start == o.q_start && q_width == o.q_width && rope_half_split == o.rope_half_split &&
         dtype == o.dtype && shape == o.shape;
}

std::string OpParams::str(OpKind kind) const {
  switch (kind) {
    case OpKind::MATMUL: return trans_b ? "trans_b" : "";
    case OpKind::LINEAR: return add_input ? "+add" : "";
    case OpKind::LINEAR_FP8:
      return fmt::format("-> {}{}{}", dtype_name(dtype), weight_scale ? " scaled" : "",
                         add_input ? " +add" : "");
    case OpKind::CONV2D:
      return fmt::format("stride {}x{} pad {},{},{},{} groups {}{}{}", stride[0], stride[1], pad[0],
                         pad[1], pad[2], pad[3], groups, channels_last ? " nhwc" : "",
                         add_input ? " +add" : "");
    case OpKind::GROUP_NORM:
      return fmt::format("groups {} eps {}{}{}", groups, eps, fuse_silu ? " +silu" : "",
                         channels_last ? " nhwc" : "");
    case OpKind::LAYER_NORM:
    case OpKind::RMS_NORM: return fmt::format("eps {}", eps);
    case OpKind::ROPE: return rope_half_split ? "half-split" : "interleaved";
    case OpKind::QKV_ROPE:
      return fmt::format("heads {} d {} eps {} {}", heads, dim, eps,
                         rope_half_split ? "half-split" : "interleaved");
    case OpKind::SOFTMAX: return alpha != 0 ? fmt::format("scale {}", alpha) : "";
    case OpKind::ATTENTION:
      return fmt::format("heads {}{}{}{}", heads, causal ? " causal" : "",
                         kv_window ? fmt::format(" kv@{},{}", start, end) : "",
                         q_width > 0 ? fmt::format(" q@{}+{}", q_start, q_width) : "");
    case OpKind::SCALE: return fmt::format("x*{}+{}", alpha, beta);
    case OpKind::CONCAT: return fmt::format("axis {}", axis);
    case OpKind::SLICE: return fmt::format("axis {} {}:{}:{}", axis, start, end, step);
    case OpKind::PERMUTE: {
      std::string s = "perm";
      for (int i = 0; i < kMaxDims; ++i) {
        s += ' ';
        s += std::to_string(perm[i]);
      }
      return s;
    }
    case OpKind::RESHAPE: return shape.str();
    case OpKind::UPSAMPLE_NEAREST: return fmt::format("x{}{}", factor, channels_last ? " nhwc" : "");
    case OpKind::TIMESTEP_EMBEDDING:
      return fmt::format("dim {}{}", dim, flip_sin_to_cos ? " cos,sin" : " sin,cos");
    case OpKind::CAST: return dtype_name(dtype);
    default: return "";
  }
}

namespace {

Status bad(OpKind kind, const std::string& why) {
  return Status(ErrorCode::INVALID_ARGUMENT, fmt::format("{}: {}", op_name(kind), why));
}

std::string descs_str(std::span<const TensorDesc> in) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i) s += ", ";
    s += in[i].str();
  }
  return s;
}

bool is_compute_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

Result<Shape> broadcast(OpKind kind, const Shape& a, const Shape& b) {
  Shape out;
  out.rank = std::max(a.rank, b.rank);
  for (int i = 0; i < out.rank; ++i) {
    int ia = a.rank - out.rank + i, ib = b.rank - out.rank + i;
    int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return bad(kind, fmt::format("shapes {} and {} do not broadcast", a.str(), b.str()));
    out.dims[i] = da == 1 ? db : da;
  }
  return out;
}

// QKV_ROPE's inputs (op.h): groups of (x [B, L, W >= 3C], gq [D], gk [D]) and the table.
Result<TensorDesc> qkv_rope_infer(const OpParams& p, std::span<const TensorDesc> in) {
  const OpKind kind = OpKind::QKV_ROPE;
  if (in.size() < 4 || (in.size() - 1) % 3 != 0)
    return bad(kind, fmt::format("expects groups of (x, gq, gk) and a table, got {} inputs ({})",
                                 in.size(), descs_str(in)));
  const int64_t d = p.dim, c = int64_t(p.heads) * d;
  if (d < 2 || d % 2 != 0 || p.heads < 1)
    return bad(kind, fmt::format("heads {} of width {}: the width must be even", p.heads, d));
  const DType t = in[0].dtype;
  if (!is_compute_float(t)) return bad(kind, "x must be f32/f16/bf16, got " + in[0].str());
  int64_t len = 0;
  for (size_t i = 0; i + 1 < in.size(); i += 3) {
    const Shape& x = in[i].shape;
    if (in[i].dtype != t || x.rank != 3 || x[0] != in[0].shape[0] || x[2] < 3 * c)
      return bad(kind, fmt::format("x {} must be [B, L, >= {}] in {} like x 1 {}", in[i].str(),
                                   3 * c, dtype_name(t), in[0].str()));
    for (size_t j = i + 1; j < i + 3; ++j)
      if (in[j].dtype != t || in[j].shape.rank != 1 || in[j].shape[0] != d)
        return bad(kind, fmt::format("norm weight {} must be [{}] in {}", in[j].str(), d,
                                     dtype_name(t)));
    len += x[1];
  }
  const TensorDesc& cs = in.back();
  if (cs.dtype != DType::F32 || cs.shape.rank != 3 || cs.shape[0] != len ||
      cs.shape[1] != d / 2 || cs.shape[2] != 2)
    return bad(kind, fmt::format("table {} must be f32 [{}, {}, 2]", cs.str(), len, d / 2));
  return TensorDesc{t, Shape{in[0].shape[0], len, 3 * c}};
}

}  // namespace

Result<TensorDesc> op_infer(OpKind kind, const OpParams& p, std::span<const TensorDesc> in) {
  auto need = [&](size_t lo, size_t hi) -> Status {
    if (in.size() < lo || in.size() > hi)
      return bad(kind, fmt::format("expects {}..{} inputs, got {} ({})", lo, hi, in.size(),
                                   descs_str(in)));
    return Status();
  };
  auto same_float = [&](size_t n) -> Status {
    for (size_t i = 0; i < n && i < in.size(); ++i) {
      if (!is_compute_float(in[i].dtype))
        return bad(kind, fmt::format("input {} has dtype {}, expected f32/f16/bf16", i,
                                     dtype_name(in[i].dtype)));
      if (in[i].dtype != in[0].dtype)
        return bad(kind, fmt::format("mixed dtypes ({})", descs_str(in)));
    }
    return Status();
  };
  for (const TensorDesc& d : in)
    for (int i = 0; i < d.shape.rank; ++i)
      if (d.shape.dims[i] < 0) return bad(kind, "negative dimension in " + d.str());

  switch (kind) {
    case OpKind::LINEAR: {
      const size_t extra = p.add_input ? 1 : 0;
      HR_TRY(need(2 + extra, 3 + extra));
      HR_TRY(same_float(in.size()));
      const Shape& x = in[0].shape;
      const Shape& w = in[1].shape;
      if (x.rank < 1 || w.rank != 2 || x[-1] != w[1])
        return bad(kind, fmt::format("x {} does not match weight {} (want x[..., K], w[N, K])",
                                     x.str(), w.str()));
      if (in.size() - extra == 3 && (in[2].shape.rank != 1 || in[2].shape[0] != w[0]))
        return bad(kind, fmt::format("bias {} does not match weight {}", in[2].shape.str(),
                                     w.str()));
      Shape out = x;
      out[-1] = w[0];
      if (p.add_input && in.back().shape != out)
        return bad(kind, fmt::format("added input {} does not match the output {}",
                                     in.back().shape.str(), out.str()));
      return TensorDesc{in[0].dtype, out};
    }
    case OpKind::LINEAR_FP8: {
      const size_t scales = p.weight_scale ? 1 : 0, extra = p.add_input ? 1 : 0;
      HR_TRY(need(2 + scales + extra, 3 + scales + extra));
      if (in[0].dtype != DType::F8_E4M3 || in[1].dtype != DType::F8_E4M3)
        return bad(kind, fmt::format("x and w must be f8_e4m3 ({})", descs_str(in)));
      if (p.dtype != DType::F16 && p.dtype != DType::BF16)  // cuBLASLt's fp8 GEMM into f32 rounds
        return bad(kind, "output dtype must be f16/bf16");  // like f16 and misreads the bias
      const Shape& x = in[0].shape;
      const Shape& w = in[1].shape;
      if (x.rank < 1 || w.rank != 2 || x[-1] != w[1])
        return bad(kind, fmt::format("x {} does not match weight {} (want x[..., K], w[N, K])",
                                     x.str(), w.str()));
      if (scales && (in[2].dtype != DType::F32 || in[2].numel() != 1))
        return bad(kind, "the weight scale must be f32 {1}, got " + in[2].str());
      const TensorDesc* bias = in.size() == 3 + scales + extra ? &in[2 + scales] : nullptr;
      if (bias && (bias->dtype != p.dtype || bias->shape.rank != 1 || bias->shape[0] != w[0]))
        return bad(kind, fmt::format("bias {} does not match weight {} in {}", bias->str(),
                                     w.str(), dtype_name(p.dtype)));
      Shape out = x;
      out[-1] = w[0];
      if (p.add_input && (in.back().shape != out || in.back().dtype != p.dtype))
        return bad(kind, fmt::format("added input {} does not match the output {} {}",
                                     in.back().str(), dtype_name(p.dtype), out.str()));
      return TensorDesc{p.dtype, out};
    }
    case OpKind::MATMUL: {
      HR_TRY(need(2, 2));
      HR_TRY(same_float(2));
      const Shape& a = in[0].shape;
      const Shape& b = in[1].shape;
      if (a.rank < 2 || b.rank < 2) return bad(kind, "operands need rank >= 2");
      int64_t m = a[-2], k = a[-1];
      int64_t kb = p.trans_b ? b[-1] : b[-2], n = p.trans_b ? b[-2] : b[-1];
      if (k != kb)
        return bad(kind, fmt::format("inner dims differ: {} x {}{}", a.str(), b.str(),
                                     p.trans_b ? "^T" : ""));
      Shape ba = a, bb = b;
      ba.rank -= 2;
      bb.rank -= 2;
      HR_ASSIGN_OR_RETURN(Shape out, broadcast(kind, ba, bb));
      if (out.rank + 2 > kMaxDims) return bad(kind, "too many dims");
      out.dims[out.rank++] = m;
      out.dims[out.rank++] = n;
      return TensorDesc{in[0].dtype, out};
    }
    case OpKind::CONV2D: {
      const size_t extra = p.add_input ? 1 : 0;
      HR_TRY(need(2 + extra, 3 + extra));
      HR_TRY(same_float(in.size()));
      if (in[0].shape.rank != 4 || in[1].shape.rank != 4)
        return bad(kind, p.channels_last ? "x and w must be 4-d (NHWC, OHWI)"
                                         : "x and w must be 4-d (NCHW, OIHW)");
      // Geometry in NCHW/OIHW terms; channels-last tensors are read through a permutation.
      auto nchw = [&](const Shape& t) {
        return p.channels_last ? Shape{t[0], t[3], t[1], t[2]} : t;
      };
      const Shape x = nchw(in[0].shape);
      const Shape w = nchw(in[1].shape);
      if (p.groups < 1 || x[1] % p.groups != 0 || w[0] % p.groups != 0 ||
          w[1] * p.groups != x[1])
        return bad(kind, fmt::format("channels of x {} do not match weight {} with groups {}",
                                     in[0].shape.str(), in[1].shape.str(), p.groups));
      if (in.size() - extra == 3 && (in[2].shape.rank != 1 || in[2].shape[0] != w[0]))
        return bad(kind, fmt::format("bias {} does not match weight {}", in[2].shape.str(),
                                     w.str()));
      if (p.stride[0] < 1 || p.stride[1] < 1 || p.dilation[0] < 1 || p.dilation[1] < 1)
        return bad(kind, "stride and dilation must be >= 1");
      for (int i = 0; i < 4; ++i)
        if (p.pad[i] < 0) return bad(kind, "negative padding");
      int64_t eh = x[2] + p.pad[0] + p.pad[1] - int64_t(p.dilation[0]) * (w[2] - 1) - 1;
      int64_t ew = x[3] + p.pad[2] + p.pad[3] - int64_t(p.dilation[1]) * (w[3] - 1) - 1;
      if (eh < 0 || ew < 0)
        return bad(kind, fmt::format("kernel {} larger than padded input {}", w.str(), x.str()));
      const int64_t oh = eh / p.stride[0] + 1, ow = ew / p.stride[1] + 1;
      const Shape out = p.channels_last ? Shape{x[0], oh, ow, w[0]} : Shape{x[0], w[0], oh, ow};
      if (p.add_input) {
        const Shape& r = in.back().shape;
        const Shape per_channel = p.channels_last ? Shape{x[0], 1, 1, w[0]} : Shape{x[0], w[0], 1, 1};
        if (r != out && r != per_channel)
          return bad(kind, fmt::format("added input {} is neither the output {} nor {}",
                                       r.str(), out.str(), per_channel.str()));
      }
      return TensorDesc{in[0].dtype, out};
    }
    case OpKind::GROUP_NORM: {
      HR_TRY(need(3, 3));
      HR_TRY(same_float(3));
      const Shape& x = in[0].shape;
      if (x.rank < 2) return bad(kind, p.channels_last ? "x must be [N, ..., C]" : "x must be [N, C, ...]");
      const int64_t c = p.channels_last ? x[-1] : x[1];
      if (p.groups < 1 || c % p.groups != 0)
        return bad(kind, fmt::format("{} channels not divisible by {} groups", c, p.groups));
      for (int i = 1; i < 3; ++i)
        if (in[i].shape.rank != 1 || in[i].shape[0] != c)
          return bad(kind, fmt::format("affine {} does not match {} channels",
                                       in[i].shape.str(), c));
      return in[0];
    }
    case OpKind::LAYER_NORM: {
      HR_TRY(need(2, 3));
      HR_TRY(same_float(in.size()));
      const Shape& x = in[0].shape;
      if (x.rank < 1) return bad(kind, "x must have rank >= 1");
      for (size_t i = 1; i < in.size(); ++i)
        if (in[i].shape.rank != 1 || in[i].shape[0] != x[-1])
          return bad(kind, fmt::format("affine {} does not match last dim of {}",
                                       in[i].shape.str(), x.str()));
      return in[0];
    }
    case OpKind::SOFTMAX:
    case OpKind::GELU:
    case OpKind::GELU_TANH:
    case OpKind::QUICK_GELU:
    case OpKind::SILU:
    case OpKind::TANH:
    case OpKind::SCALE: {
      HR_TRY(need(1, 1));
      HR_TRY(same_float(1));
      if (kind == OpKind::SOFTMAX && in[0].shape.rank < 1) return bad(kind, "rank 0 input");
      return in[0];
    }
    case OpKind::ATTENTION: {
      HR_TRY(need(3, 3));
      HR_TRY(same_float(3));
      const Shape& q = in[0].shape;
      const Shape& k = in[1].shape;
      const Shape& v = in[2].shape;
      if (q.rank != 3 || k.rank != 3 || v.rank != 3)
        return bad(kind, "q, k, v must be [B, N, H*D]");
      if (p.kv_window) {  // only the windows' width is split into heads
        const int64_t w = p.q_width > 0 ? p.q_width : q[2];
        if (p.heads < 1 || w % p.heads != 0)
          return bad(kind, fmt::format("width {} not divisible by {} heads", w, p.heads));
        if (q[0] != k[0] || q[0] != v[0] || k[1] != v[1] || p.start < 0 || p.end < 0 ||
            p.q_start < 0 || p.start + w > k[2] || p.end + w > v[2] ||
            (p.q_width > 0 && p.q_start + w > q[2]) || (p.q_width <= 0 && p.q_start != 0))
          return bad(kind, fmt::format("q {} at {}, k {} at {}, v {} at {} (width {}) do not match",
                                       q.str(), p.q_start, k.str(), p.start, v.str(), p.end, w));
        return TensorDesc{in[0].dtype, Shape{q[0], q[1], w}};
      }
      if (p.heads < 1 || q[2] % p.heads != 0 || v[2] % p.heads != 0)
        return bad(kind, fmt::format("width not divisible by {} heads", p.heads));
      if (q[0] != k[0] || q[0] != v[0] || k[1] != v[1] || q[2] != k[2])
        return bad(kind, fmt::format("q {}, k {}, v {} do not match", q.str(), k.str(), v.str()));
      return TensorDesc{in[0].dtype, Shape{q[0], q[1], v[2]}};
    }
    case OpKind::GEGLU: {
      HR_TRY(need(1, 1));
      HR_TRY(same_float(1));
      Shape s = in[0].shape;
      if (s.rank < 1 || s[-1] % 2 != 0) return bad(kind, "last dim must be even: " + s.str());
      s[-1] /= 2;
      return TensorDesc{in[0].dtype, s};
    }
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV: {
      HR_TRY(need(2, 2));
      HR_TRY(same_float(2));
      HR_ASSIGN_OR_RETURN(Shape s, broadcast(kind, in[0].shape, in[1].shape));
      return TensorDesc{in[0].dtype, s};
    }
    case OpKind::CONCAT: {
      if (in.size() < 2) return bad(kind, "needs at least 2 inputs");
      Shape s = in[0].shape;
      int axis = p.axis < 0 ? p.axis + s.rank : p.axis;
      if (axis < 0 || axis >= s.rank) return bad(kind, fmt::format("axis {} out of range", p.axis));
      for (size_t i = 1; i < in.size(); ++i) {
        const Shape& o = in[i].shape;
        bool ok = o.rank == s.rank && in[i].dtype == in[0].dtype;
        for (int d = 0; ok && d < s.rank; ++d)
          if (d != axis && o.dims[d] != s.dims[d]) ok = false;
        if (!ok) return bad(kind, fmt::format("inputs do not match: {}", descs_str(in)));
        s.dims[axis] += o.dims[axis];
      }
      return TensorDesc{in[0].dtype, s};
    }
    case OpKind::SLICE: {
      HR_TRY(need(1, 1));
      Shape s = in[0].shape;
      int axis = p.axis < 0 ? p.axis + s.rank : p.axis;
      if (axis < 0 || axis >= s.rank) return bad(kind, fmt::format("axis {} out of range", p.axis));
      if (p.step < 1) return bad(kind, "step must be >= 1");
      int64_t end = std::min(p.end, s.dims[axis]);
      if (p.start < 0 || p.start > end)
        return bad(kind, fmt::format("range {}:{} invalid for dim {}", p.start, p.end, s.dims[axis]));
      s.dims[axis] = (end - p.start + p.step - 1) / p.step;
      return TensorDesc{in[0].dtype, s};
    }
    case OpKind::PERMUTE: {
      HR_TRY(need(1, 1));
      const Shape& x = in[0].shape;
      Shape s = x;
      bool seen[kMaxDims] = {};
      for (int i = 0; i < x.rank; ++i) {
        int pi = p.perm[i];
        if (pi < 0 || pi >= x.rank || seen[pi]) return bad(kind, "perm is not a permutation");
        seen[pi] = true;
        s.dims[i] = x.dims[pi];
      }
      return TensorDesc{in[0].dtype, s};
    }
    case OpKind::RESHAPE: {
      HR_TRY(need(1, 1));
      if (p.shape.numel() != in[0].shape.numel())
        return bad(kind, fmt::format("cannot reshape {} to {}", in[0].shape.str(), p.shape.str()));
      return TensorDesc{in[0].dtype, p.shape};
    }
    case OpKind::UPSAMPLE_NEAREST: {
      HR_TRY(need(1, 1));
      Shape s = in[0].shape;
      if (s.rank != 4) return bad(kind, p.channels_last ? "x must be NHWC" : "x must be NCHW");
      if (p.factor < 1) return bad(kind, "factor must be >= 1");
      s[p.channels_last ? 1 : 2] *= p.factor;
      s[p.channels_last ? 2 : 3] *= p.factor;
      return TensorDesc{in[0].dtype, s};
    }
    case OpKind::EMBEDDING: {
      HR_TRY(need(2, 2));
      if (in[0].dtype != DType::I32 && in[0].dtype != DType::I64)
        return bad(kind, "ids must be i32 or i64");
      if (in[1].shape.rank != 2) return bad(kind, "table must be [V, D]");
      Shape s = in[0].shape;
      if (s.rank + 1 > kMaxDims) return bad(kind, "too many dims");
      s.dims[s.rank++] = in[1].shape[1];
      return TensorDesc{in[1].dtype, s};
    }
    case OpKind::TIMESTEP_EMBEDDING: {
      HR_TRY(need(1, 1));
      if (in[0].dtype != DType::F32 || in[0].shape.rank != 1)
        return bad(kind, "timesteps must be f32[N]");
      if (p.dim < 2) return bad(kind, "dim must be >= 2");
      if (!is_compute_float(p.dtype)) return bad(kind, "output dtype must be a float type");
      return TensorDesc{p.dtype, Shape{in[0].shape[0], p.dim}};
    }
    case OpKind::CAST: {
      HR_TRY(need(1, 2));
      if (p.dtype == DType::F8_E4M3) {  // activations for LINEAR_FP8
        if (in.size() != 1 || !is_compute_float(in[0].dtype))
          return bad(kind, "a cast to f8_e4m3 takes one f32/f16/bf16 input");
        return TensorDesc{p.dtype, in[0].shape};
      }
      if (int(p.dtype) > int(DType::I64)) return bad(kind, "target must be a compute dtype");
      if (in.size() == 2 && (in[1].dtype != DType::F32 || in[1].numel() != 1 ||
                             !is_compute_float(p.dtype) || !dtype_is_float(in[0].dtype)))
        return bad(kind, "a scaled cast takes a float input, a float target and a scale f32 {1}");
      return TensorDesc{p.dtype, in[0].shape};
    }
    case OpKind::COPY: {
      HR_TRY(need(1, 1));
      return in[0];
    }
    case OpKind::RMS_NORM: {
      HR_TRY(need(1, 2));
      HR_TRY(same_float(in.size()));
      const Shape& x = in[0].shape;
      if (x.rank < 1) return bad(kind, "x must have rank >= 1");
      if (in.size() > 1 && (in[1].shape.rank != 1 || in[1].shape[0] != x[-1]))
        return bad(kind, fmt::format("weight {} does not match last dim of {}", in[1].shape.str(),
                                     x.str()));
      return in[0];
    }
    case OpKind::ROPE: {
      HR_TRY(need(2, 2));
      HR_TRY(same_float(1));
      const Shape& x = in[0].shape;
      const Shape& cs = in[1].shape;
      if (x.rank != 4 || x[3] % 2 != 0)
        return bad(kind, fmt::format("x {} must be [B, L, H, D] with D even", x.str()));
      if (in[1].dtype != DType::F32) return bad(kind, "the cos/sin table must be f32");
      const bool shared = cs.rank == 3;
      if ((cs.rank != 3 && cs.rank != 4) || (!shared && cs[0] != x[0]) || cs[-3] != x[1] ||
          cs[-2] != x[3] / 2 || cs[-1] != 2)
        return bad(kind, fmt::format("cos/sin table {} does not match x {} (want [L, D/2, 2] or "
                                     "[B, L, D/2, 2])", cs.str(), x.str()));
      return in[0];
    }
    case OpKind::QKV_ROPE: return qkv_rope_infer(p, in);
    case OpKind::COUNT_: break;
  }
  return bad(kind, "unknown op");
}

double op_flops(OpKind kind, const OpParams& p, std::span<const TensorDesc> in,
                const TensorDesc& out) {
  switch (kind) {
    case OpKind::LINEAR:
    case OpKind::LINEAR_FP8: return 2.0 * double(out.numel()) * double(in[1].shape[1]);
    case OpKind::MATMUL: {
      int64_t k = in[0].shape[-1];
      return 2.0 * double(out.numel()) * double(k);
    }
    case OpKind::CONV2D: {
      const Shape& w = in[1].shape;
      return 2.0 * double(out.numel()) * double(w[1] * w[2] * w[3]);
    }
    case OpKind::ATTENTION: {
      const Shape& q = in[0].shape;
      const Shape& k = in[1].shape;
      const Shape& v = in[2].shape;
      const double w = double(p.kv_window && p.q_width > 0 ? p.q_width : q[2]);
      const double width = w + (p.kv_window ? w : double(v[2]));
      double f = 2.0 * double(q[0]) * double(q[1]) * double(k[1]) * width;
      return p.causal ? f / 2 : f;
    }
    default: return 0.0;
  }
}

}  // namespace hr
