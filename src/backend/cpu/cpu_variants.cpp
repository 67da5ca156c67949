// CPU forms of the layout and fusion variants of ops (op.h): channels-last CONV2D, GROUP_NORM
// and UPSAMPLE_NEAREST, and LINEAR/CONV2D with params.add_input. They are the reference the
// CUDA kernels are tested against, so they are built from the plain kernels: the channels-last
// ops rearrange into NCHW in their workspace, run the NCHW kernel and rearrange back; the added
// input is one more pass over the result.
#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "core/alignment.h"

namespace hr::cpu {
namespace {

// dst = src permuted by perm (out dim i = in dim perm[i]).
Status permute_into(const TensorRef& src, const TensorRef& dst, std::initializer_list<int> perm) {
  OpParams p;
  int i = 0;
  for (int d : perm) p.perm[i++] = d;
  OpCall c;
  c.kind = OpKind::PERMUTE;
  c.params = &p;
  c.inputs = std::span<const TensorRef>(&src, 1);
  c.output = dst;
  return permute(c);
}

Shape nhwc_to_nchw(const Shape& s) { return Shape{s[0], s[3], s[1], s[2]}; }

// y += r, with r either y's shape or the per-sample, per-channel form of op.h (Note on
// add_input): [N, C, 1, 1] for NCHW y, [N, 1, 1, C] for channels-last y.
Status add_term(const TensorRef& y, const TensorRef& r, bool channels_last) {
  if (y.desc.dtype != DType::F32 || r.desc.dtype != DType::F32)
    return make_error(ErrorCode::UNSUPPORTED, "cpu: the added input must be f32, got {}",
                      r.desc.str());
  float* yd = y.as<float>();
  const float* rd = r.as<const float>();
  const int64_t n = y.desc.numel();
  if (r.desc.shape == y.desc.shape) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) yd[i] += rd[i];
    return Status();
  }
  const Shape& s = y.desc.shape;
  if (s.rank != 4 || r.desc.numel() != s[0] * (channels_last ? s[3] : s[1]))
    return make_error(ErrorCode::INVALID_ARGUMENT, "cpu: added input {} does not fit output {}",
                      r.desc.str(), y.desc.str());
  if (channels_last) {
    const int64_t c = s[3], hw = s[1] * s[2];
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < s[0] * hw; ++row) {
      const float* rr = rd + (row / hw) * c;
      float* yy = yd + row * c;
      for (int64_t k = 0; k < c; ++k) yy[k] += rr[k];
    }
  } else {
    const int64_t hw = s[2] * s[3];
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < s[0] * s[1]; ++plane) {
      const float v = rd[plane];
      float* yy = yd + plane * hw;
      for (int64_t k = 0; k < hw; ++k) yy[k] += v;
    }
  }
  return Status();
}

// Workspace pieces of a channels-last convolution: x, w and y in NCHW, then the NCHW kernel's.
struct ConvParts {
  TensorDesc x, w, y;
  size_t x_off = 0, w_off = 0, y_off = 0, inner_off = 0, inner = 0, total = 0;
};

ConvParts conv_parts(const OpParams& p, std::span<const TensorDesc> in, const TensorDesc& out) {
  ConvParts s;
  s.x = TensorDesc{in[0].dtype, nhwc_to_nchw(in[0].shape)};
  s.w = TensorDesc{in[1].dtype, nhwc_to_nchw(in[1].shape)};
  s.y = TensorDesc{out.dtype, nhwc_to_nchw(out.shape)};
  OpParams q = p;
  q.channels_last = false;
  q.add_input = false;
  TensorDesc inner_in[3] = {s.x, s.w, in.size() > 2 ? in[2] : TensorDesc{}};
  const size_t n_in = (in.size() - (p.add_input ? 1 : 0)) > 2 ? 3 : 2;
  s.inner = conv2d_workspace(q, std::span<const TensorDesc>(inner_in, n_in), s.y);
  s.x_off = 0;
  s.w_off = s.x_off + align_up(s.x.bytes());
  s.y_off = s.w_off + align_up(s.w.bytes());
  s.inner_off = s.y_off + align_up(s.y.bytes());
  s.total = s.inner_off + align_up(s.inner);
  return s;
}

}  // namespace

size_t conv2d_variant_workspace(const OpParams& p, std::span<const TensorDesc> in,
                                const TensorDesc& out) {
  if (!p.channels_last) {
    OpParams q = p;
    q.add_input = false;
    return conv2d_workspace(q, in.first(in.size() - (p.add_input ? 1 : 0)), out);
  }
  return conv_parts(p, in, out).total;
}

Status conv2d_variant(const OpCall& c) {
  const OpParams p = c.params ? *c.params : OpParams();
  OpParams q = p;
  q.channels_last = false;
  q.add_input = false;
  const size_t n_main = c.inputs.size() - (p.add_input ? 1 : 0);
  if (n_main < 2) return make_error(ErrorCode::INVALID_ARGUMENT, "conv2d: too few inputs");
  if (!p.channels_last) {
    OpCall inner = c;
    inner.params = &q;
    inner.inputs = c.inputs.first(n_main);
    HR_TRY(conv2d(inner));
  } else {
    std::vector<TensorDesc> descs;
    for (const TensorRef& r : c.inputs) descs.push_back(r.desc);
    const ConvParts s = conv_parts(p, descs, c.output.desc);
    if (c.workspace_bytes < s.total)
      return make_error(ErrorCode::INVALID_ARGUMENT, "conv2d: workspace of {} bytes, needs {}",
                        c.workspace_bytes, s.total);
    auto* ws = static_cast<uint8_t*>(c.workspace);
    TensorRef x{s.x, ws + s.x_off}, w{s.w, ws + s.w_off}, y{s.y, ws + s.y_off};
    HR_TRY(permute_into(c.inputs[0], x, {0, 3, 1, 2}));
    HR_TRY(permute_into(c.inputs[1], w, {0, 3, 1, 2}));
    TensorRef ins[3] = {x, w, n_main > 2 ? c.inputs[2] : TensorRef{}};
    OpCall inner;
    inner.kind = OpKind::CONV2D;
    inner.params = &q;
    inner.inputs = std::span<const TensorRef>(ins, n_main > 2 ? 3 : 2);
    inner.output = y;
    inner.workspace = s.inner ? ws + s.inner_off : nullptr;
    inner.workspace_bytes = s.inner;
    HR_TRY(conv2d(inner));
    HR_TRY(permute_into(y, c.output, {0, 2, 3, 1}));
  }
  if (p.add_input) HR_TRY(add_term(c.output, c.inputs.back(), p.channels_last));
  return Status();
}

Status linear_variant(const OpCall& c) {
  const OpParams p = c.params ? *c.params : OpParams();
  OpParams q = p;
  q.add_input = false;
  OpCall inner = c;
  inner.params = &q;
  inner.inputs = c.inputs.first(c.inputs.size() - (p.add_input ? 1 : 0));
  HR_TRY(linear(inner));
  if (p.add_input) HR_TRY(add_term(c.output, c.inputs.back(), false));
  return Status();
}

size_t group_norm_variant_workspace(const OpParams& p, std::span<const TensorDesc> in,
                                    const TensorDesc&) {
  if (!p.channels_last) return 0;
  return 2 * align_up(in[0].bytes());
}

Status group_norm_variant(const OpCall& c) {
  const OpParams p = c.params ? *c.params : OpParams();
  if (!p.channels_last) return group_norm(c);
  // [N, S..., C] viewed as [N, S, C] -> [N, C, S], normalised there, and back.
  const Shape& xs = c.inputs[0].desc.shape;
  int64_t spatial = 1;
  for (int i = 1; i + 1 < xs.rank; ++i) spatial *= xs[i];
  const int64_t n = xs[0], ch = xs[-1];
  const DType t = c.inputs[0].desc.dtype;
  const size_t bytes = c.inputs[0].desc.bytes();
  if (c.workspace_bytes < 2 * align_up(bytes))
    return make_error(ErrorCode::INVALID_ARGUMENT, "group_norm: workspace of {} bytes, needs {}",
                      c.workspace_bytes, 2 * align_up(bytes));
  auto* ws = static_cast<uint8_t*>(c.workspace);
  TensorRef x3{TensorDesc{t, Shape{n, spatial, ch}}, c.inputs[0].data};
  TensorRef xc{TensorDesc{t, Shape{n, ch, spatial}}, ws};
  TensorRef yc{TensorDesc{t, Shape{n, ch, spatial}}, ws + align_up(bytes)};
  TensorRef y3{TensorDesc{t, Shape{n, spatial, ch}}, c.output.data};
  HR_TRY(permute_into(x3, xc, {0, 2, 1}));
  OpParams q = p;
  q.channels_last = false;
  TensorRef ins[3] = {xc, c.inputs[1], c.inputs[2]};
  OpCall inner;
  inner.kind = OpKind::GROUP_NORM;
  inner.params = &q;
  inner.inputs = std::span<const TensorRef>(ins, 3);
  inner.output = yc;
  HR_TRY(group_norm(inner));
  return permute_into(yc, y3, {0, 2, 1});
}

Status upsample_variant(const OpCall& c) {
  const OpParams p = c.params ? *c.params : OpParams();
  if (!p.channels_last) return upsample_nearest(c);
  const TensorDesc& id = c.inputs[0].desc;
  const TensorDesc& od = c.output.desc;
  const int64_t f = p.factor;
  if (id.shape.rank != 4 || od.shape.rank != 4 || f < 1 || od.dtype != id.dtype ||
      od.shape[0] != id.shape[0] || od.shape[3] != id.shape[3] ||
      od.shape[1] != id.shape[1] * f || od.shape[2] != id.shape[2] * f)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "upsample_nearest: {} -> {} with factor {} (channels last)", id.str(),
                      od.str(), f);
  const size_t row = size_t(id.shape[3]) * dtype_size(id.dtype);
  const int64_t h = id.shape[1], w = id.shape[2], oh = od.shape[1], ow = od.shape[2];
  const auto* src = c.inputs[0].as<const uint8_t>();
  auto* dst = c.output.as<uint8_t>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < id.shape[0] * oh; ++r) {
    const int64_t b = r / oh, y = r % oh;
    const uint8_t* s = src + size_t((b * h + y / f) * w) * row;
    uint8_t* d = dst + size_t(r * ow) * row;
    for (int64_t x = 0; x < ow; ++x) std::memcpy(d + size_t(x) * row, s + size_t(x / f) * row, row);
  }
  return Status();
}

}  // namespace hr::cpu
