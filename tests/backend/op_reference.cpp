// Naive float64 reference ops for the op-test harness (see op_reference.h). Every op is the
// loop nest its definition in Note [op semantics] spells out; speed does not matter here.
#include "op_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "core/fp8_round.h"

namespace hr::test {
namespace {

Status ref_error(OpKind kind, const std::string& why) {
  return Status(ErrorCode::INVALID_ARGUMENT, fmt::format("reference {}: {}", op_name(kind), why));
}

RefTensor ref_make(DType dtype, const Shape& shape) {
  RefTensor t;
  t.desc = TensorDesc{dtype, shape};
  t.data.assign(size_t(shape.numel()), 0.0);
  return t;
}

// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(size_t(s.rank), 1);
  for (int i = s.rank - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i) + 1] * s.dims[i + 1];
  return st;
}

// Offset into an operand of shape `s` for output coordinates `coord` (rank out_rank),
// right-aligned NumPy broadcasting: size-1 and missing dims read index 0.
int64_t broadcast_offset(const Shape& s, const std::vector<int64_t>& coord, int out_rank) {
  std::vector<int64_t> st = strides_of(s);
  int64_t off = 0;
  for (int i = 0; i < s.rank; ++i) {
    int oi = out_rank - s.rank + i;
    if (s.dims[i] != 1) off += coord[size_t(oi)] * st[size_t(i)];
  }
  return off;
}

void unravel(int64_t flat, const Shape& s, std::vector<int64_t>& coord) {
  coord.assign(size_t(s.rank), 0);
  for (int i = s.rank - 1; i >= 0; --i) {
    coord[size_t(i)] = flat % s.dims[i];
    flat /= s.dims[i];
  }
}

Result<Shape> broadcast_shape(OpKind kind, const Shape& a, const Shape& b) {
  Shape out;
  out.rank = std::max(a.rank, b.rank);
  for (int i = 0; i < out.rank; ++i) {
    int ia = a.rank - out.rank + i, ib = b.rank - out.rank + i;
    int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return ref_error(kind, "shapes do not broadcast");
    out.dims[i] = da == 1 ? db : da;
  }
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

double unary_value(OpKind kind, const OpParams& p, double x) {
  switch (kind) {
    case OpKind::GELU:
      return gelu_erf(x);
    case OpKind::GELU_TANH: {
      double c = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case OpKind::QUICK_GELU:
      return x * sigmoid(1.702 * x);
    case OpKind::SILU:
      return x * sigmoid(x);
    case OpKind::TANH:
      return std::tanh(x);
    case OpKind::SCALE:
      return x * double(p.alpha) + double(p.beta);
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

Result<RefTensor> ref_linear(const OpParams&, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  const Shape& ws = in[1].desc.shape;
  if (ws.rank != 2 || xs.rank < 1 || xs[-1] != ws[1]) return ref_error(OpKind::LINEAR, "shapes");
  int64_t k = ws[1], n = ws[0], rows = xs.numel() / k;
  Shape os = xs;
  os[-1] = n;
  RefTensor out = ref_make(in[0].desc.dtype, os);
  const double* b = in.size() > 2 ? in[2].data.data() : nullptr;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = b ? b[j] : 0.0;
      for (int64_t i = 0; i < k; ++i)
        s += in[0].data[size_t(r * k + i)] * in[1].data[size_t(j * k + i)];
      out.data[size_t(r * n + j)] = s;
    }
  return out;
}

// LINEAR_FP8 (op.h): x w^T * scale + bias (+ the added input), exactly.
Result<RefTensor> ref_linear_fp8(const OpParams& p, std::span<const RefTensor> in) {
  const size_t fixed = (p.weight_scale ? 3u : 2u) + (p.add_input ? 1u : 0u);
  std::vector<RefTensor> lin = {in[0], in[1]};
  if (in.size() > fixed) lin.push_back(in[fixed - (p.add_input ? 1 : 0)]);
  const double scale = p.weight_scale ? in[2].data.at(0) : 1.0;
  if (lin.size() == 3)  // the bias, divided so that the plain linear's sum times scale adds it
    for (double& b : lin[2].data) b /= scale;
  HR_ASSIGN_OR_RETURN(RefTensor out, ref_linear(p, lin));
  out.desc.dtype = p.dtype;
  for (size_t i = 0; i < out.data.size(); ++i)
    out.data[i] = out.data[i] * scale + (p.add_input ? in.back().data[i] : 0.0);
  return out;
}

Result<RefTensor> ref_matmul(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& as = in[0].desc.shape;
  const Shape& bs = in[1].desc.shape;
  if (as.rank < 2 || bs.rank < 2) return ref_error(OpKind::MATMUL, "rank");
  int64_t m = as[-2], k = as[-1];
  int64_t kb = p.trans_b ? bs[-1] : bs[-2], n = p.trans_b ? bs[-2] : bs[-1];
  if (k != kb) return ref_error(OpKind::MATMUL, "inner dims");
  Shape ab = as, bb = bs;
  ab.rank -= 2;
  bb.rank -= 2;
  HR_ASSIGN_OR_RETURN(Shape batch, broadcast_shape(OpKind::MATMUL, ab, bb));
  Shape os = batch;
  os.dims[os.rank++] = m;
  os.dims[os.rank++] = n;
  RefTensor out = ref_make(in[0].desc.dtype, os);
  std::vector<int64_t> coord;
  for (int64_t bi = 0; bi < batch.numel(); ++bi) {
    unravel(bi, batch, coord);
    const double* a = in[0].data.data() + broadcast_offset(ab, coord, batch.rank) * m * k;
    const double* b = in[1].data.data() + broadcast_offset(bb, coord, batch.rank) * k * n;
    double* o = out.data.data() + bi * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (int64_t t = 0; t < k; ++t)
          s += a[i * k + t] * (p.trans_b ? b[j * k + t] : b[t * n + j]);
        o[i * n + j] = s;
      }
  }
  return out;
}

Result<RefTensor> ref_conv2d(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  const Shape& ws = in[1].desc.shape;
  if (xs.rank != 4 || ws.rank != 4 || p.groups < 1 || ws[1] * p.groups != xs[1] ||
      ws[0] % p.groups != 0)
    return ref_error(OpKind::CONV2D, "shapes");
  int64_t nb = xs[0], c = xs[1], h = xs[2], w = xs[3];
  int64_t o = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  int64_t og = o / p.groups;
  int64_t oh = (h + p.pad[0] + p.pad[1] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
  int64_t ow = (w + p.pad[2] + p.pad[3] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
  RefTensor out = ref_make(in[0].desc.dtype, Shape{nb, o, oh, ow});
  const std::vector<double>& x = in[0].data;
  const std::vector<double>& wt = in[1].data;
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t oc = 0; oc < o; ++oc) {
      int64_t g = oc / og;
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          double s = in.size() > 2 ? in[2].data[size_t(oc)] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t dy = 0; dy < kh; ++dy)
              for (int64_t dx = 0; dx < kw; ++dx) {
                int64_t iy = y * p.stride[0] - p.pad[0] + dy * p.dilation[0];
                int64_t ix = xo * p.stride[1] - p.pad[2] + dx * p.dilation[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += x[size_t(((n * c + g * cg + ci) * h + iy) * w + ix)] *
                     wt[size_t(((oc * cg + ci) * kh + dy) * kw + dx)];
              }
          out.data[size_t(((n * o + oc) * oh + y) * ow + xo)] = s;
        }
    }
  return out;
}

Result<RefTensor> ref_group_norm(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  if (xs.rank < 2 || p.groups < 1 || xs[1] % p.groups != 0)
    return ref_error(OpKind::GROUP_NORM, "shapes");
  int64_t nb = xs[0], c = xs[1], spatial = xs.prod(2, xs.rank), cpg = c / p.groups;
  RefTensor out = ref_make(in[0].desc.dtype, xs);
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t g = 0; g < p.groups; ++g) {
      int64_t base = (n * c + g * cpg) * spatial, count = cpg * spatial;
      double mean = 0.0;
      for (int64_t i = 0; i < count; ++i) mean += in[0].data[size_t(base + i)];
      mean /= double(count);
      double var = 0.0;
      for (int64_t i = 0; i < count; ++i) {
        double d = in[0].data[size_t(base + i)] - mean;
        var += d * d;
      }
      var /= double(count);  // biased, as PyTorch
      double inv = 1.0 / std::sqrt(var + double(p.eps));
      for (int64_t ci = 0; ci < cpg; ++ci) {
        int64_t ch = g * cpg + ci;
        for (int64_t s = 0; s < spatial; ++s) {
          size_t i = size_t(base + ci * spatial + s);
          double y = (in[0].data[i] - mean) * inv * in[1].data[size_t(ch)] + in[2].data[size_t(ch)];
          out.data[i] = p.fuse_silu ? y * sigmoid(y) : y;
        }
      }
    }
  return out;
}

Result<RefTensor> ref_layer_norm(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  if (xs.rank < 1) return ref_error(OpKind::LAYER_NORM, "rank");
  int64_t c = xs[-1], rows = xs.numel() / c;
  RefTensor out = ref_make(in[0].desc.dtype, xs);
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = in[0].data.data() + r * c;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < c; ++i) mean += x[i];
    mean /= double(c);
    for (int64_t i = 0; i < c; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= double(c);
    double inv = 1.0 / std::sqrt(var + double(p.eps));
    for (int64_t i = 0; i < c; ++i)
      out.data[size_t(r * c + i)] = (x[i] - mean) * inv * in[1].data[size_t(i)] +
                                    (in.size() > 2 ? in[2].data[size_t(i)] : 0.0);
  }
  return out;
}

Result<RefTensor> ref_softmax(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  if (xs.rank < 1) return ref_error(OpKind::SOFTMAX, "rank");
  double alpha = p.alpha != 0.0f ? double(p.alpha) : 1.0;
  int64_t n = xs[-1], rows = xs.numel() / n;
  RefTensor out = ref_make(in[0].desc.dtype, xs);
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = in[0].data.data() + r * n;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i] * alpha);
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] * alpha - mx);
    for (int64_t i = 0; i < n; ++i) out.data[size_t(r * n + i)] = std::exp(x[i] * alpha - mx) / sum;
  }
  return out;
}

Result<RefTensor> ref_attention(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& qs = in[0].desc.shape;
  const Shape& ks = in[1].desc.shape;
  const Shape& vs = in[2].desc.shape;
  if (qs.rank != 3 || ks.rank != 3 || vs.rank != 3 || p.heads < 1 || ks[1] != vs[1] ||
      qs[0] != ks[0] || qs[0] != vs[0])
    return ref_error(OpKind::ATTENTION, "shapes");
  // Q, K and V: column windows [q_at, q_at + width) of q, [k_at, k_at + width) of k and
  // [v_at, v_at + v_width) of v, whose rows are qs[2], ks[2] and vs[2] wide. Without kv_window
  // the windows are the whole rows; with it, Q is q's window at q_start when q_width > 0 (else
  // all of q) and K and V are as wide as Q (Dv = D).
  int64_t q_at = 0, k_at = 0, v_at = 0, width = qs[2], v_width = vs[2];
  if (p.kv_window) {
    if (p.q_width > 0) {
      q_at = p.q_start;
      width = p.q_width;
    } else if (p.q_start != 0) {
      return ref_error(OpKind::ATTENTION, "q_start without q_width");
    }
    k_at = p.start;
    v_at = p.end;
    v_width = width;
    if (q_at < 0 || k_at < 0 || v_at < 0 || q_at + width > qs[2] || k_at + width > ks[2] ||
        v_at + v_width > vs[2])
      return ref_error(OpKind::ATTENTION, "windows outside q, k or v");
  } else if (ks[2] != qs[2] || vs[2] % p.heads != 0) {
    return ref_error(OpKind::ATTENTION, "shapes");
  }
  if (width % p.heads != 0) return ref_error(OpKind::ATTENTION, "width not divisible by heads");
  const int64_t ldq = qs[2], ldk = ks[2], ldv = vs[2];
  int64_t b = qs[0], nq = qs[1], nk = ks[1], h = p.heads, d = width / h, dv = v_width / h;
  double scale = p.alpha != 0.0f ? double(p.alpha) : 1.0 / std::sqrt(double(d));
  RefTensor out = ref_make(in[0].desc.dtype, Shape{b, nq, h * dv});
  std::vector<double> score(static_cast<size_t>(nk));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < nq; ++i) {
        const double* q = in[0].data.data() + (bi * nq + i) * ldq + q_at + hi * d;
        double mx = -INFINITY;
        for (int64_t j = 0; j < nk; ++j) {
          if (p.causal && j > i) {
            score[size_t(j)] = -INFINITY;
            continue;
          }
          const double* k = in[1].data.data() + (bi * nk + j) * ldk + k_at + hi * d;
          double s = 0.0;
          for (int64_t t = 0; t < d; ++t) s += q[t] * k[t];
          score[size_t(j)] = s * scale;
          mx = std::max(mx, score[size_t(j)]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < nk; ++j) {
          score[size_t(j)] = std::isinf(score[size_t(j)]) ? 0.0 : std::exp(score[size_t(j)] - mx);
          sum += score[size_t(j)];
        }
        double* o = out.data.data() + (bi * nq + i) * h * dv + hi * dv;
        for (int64_t t = 0; t < dv; ++t) {
          double s = 0.0;
          for (int64_t j = 0; j < nk; ++j)
            s += score[size_t(j)] * in[2].data[size_t((bi * nk + j) * ldv + v_at + hi * dv + t)];
          o[t] = s / sum;
        }
      }
  return out;
}

Result<RefTensor> ref_geglu(std::span<const RefTensor> in) {
  Shape s = in[0].desc.shape;
  if (s.rank < 1 || s[-1] % 2 != 0) return ref_error(OpKind::GEGLU, "odd last dim");
  int64_t n = s[-1] / 2, rows = s.numel() / (2 * n);
  s[-1] = n;
  RefTensor out = ref_make(in[0].desc.dtype, s);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const double* x = in[0].data.data() + r * 2 * n;
      out.data[size_t(r * n + i)] = x[i] * gelu_erf(x[n + i]);
    }
  return out;
}

Result<RefTensor> ref_binary(OpKind kind, std::span<const RefTensor> in) {
  const Shape& as = in[0].desc.shape;
  const Shape& bs = in[1].desc.shape;
  HR_ASSIGN_OR_RETURN(Shape os, broadcast_shape(kind, as, bs));
  RefTensor out = ref_make(in[0].desc.dtype, os);
  std::vector<int64_t> coord;
  for (int64_t i = 0; i < os.numel(); ++i) {
    unravel(i, os, coord);
    double a = in[0].data[size_t(broadcast_offset(as, coord, os.rank))];
    double b = in[1].data[size_t(broadcast_offset(bs, coord, os.rank))];
    double r = 0.0;
    switch (kind) {
      case OpKind::ADD:
        r = a + b;
        break;
      case OpKind::SUB:
        r = a - b;
        break;
      case OpKind::MUL:
        r = a * b;
        break;
      default:
        r = a / b;
        break;
    }
    out.data[size_t(i)] = r;
  }
  return out;
}

Result<RefTensor> ref_concat(const OpParams& p, std::span<const RefTensor> in) {
  if (in.size() < 2) return ref_error(OpKind::CONCAT, "needs 2 inputs");
  Shape os = in[0].desc.shape;
  int axis = p.axis < 0 ? p.axis + os.rank : p.axis;
  if (axis < 0 || axis >= os.rank) return ref_error(OpKind::CONCAT, "axis");
  for (size_t i = 1; i < in.size(); ++i) os.dims[axis] += in[i].desc.shape.dims[axis];
  RefTensor out = ref_make(in[0].desc.dtype, os);
  int64_t outer = os.prod(0, axis), inner = os.prod(axis + 1, os.rank);
  int64_t at = 0;  // running offset along the axis
  for (const RefTensor& t : in) {
    int64_t len = t.desc.shape.dims[axis];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t a = 0; a < len; ++a)
        for (int64_t i = 0; i < inner; ++i)
          out.data[size_t((o * os.dims[axis] + at + a) * inner + i)] =
              t.data[size_t((o * len + a) * inner + i)];
    at += len;
  }
  return out;
}

Result<RefTensor> ref_slice(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  int axis = p.axis < 0 ? p.axis + xs.rank : p.axis;
  if (axis < 0 || axis >= xs.rank || p.step < 1) return ref_error(OpKind::SLICE, "axis/step");
  int64_t end = std::min(p.end, xs.dims[axis]);
  Shape os = xs;
  os.dims[axis] = 0;
  for (int64_t i = p.start; i < end; i += p.step) ++os.dims[axis];
  RefTensor out = ref_make(in[0].desc.dtype, os);
  int64_t outer = xs.prod(0, axis), inner = xs.prod(axis + 1, xs.rank);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < os.dims[axis]; ++a)
      for (int64_t i = 0; i < inner; ++i)
        out.data[size_t((o * os.dims[axis] + a) * inner + i)] =
            in[0].data[size_t((o * xs.dims[axis] + p.start + a * p.step) * inner + i)];
  return out;
}

Result<RefTensor> ref_permute(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  Shape os = xs;
  for (int i = 0; i < xs.rank; ++i) {
    if (p.perm[i] < 0 || p.perm[i] >= xs.rank) return ref_error(OpKind::PERMUTE, "perm");
    os.dims[i] = xs.dims[p.perm[i]];
  }
  RefTensor out = ref_make(in[0].desc.dtype, os);
  std::vector<int64_t> ist = strides_of(xs), coord;
  for (int64_t i = 0; i < os.numel(); ++i) {
    unravel(i, os, coord);
    int64_t src = 0;
    for (int d = 0; d < os.rank; ++d) src += coord[size_t(d)] * ist[size_t(p.perm[d])];
    out.data[size_t(i)] = in[0].data[size_t(src)];
  }
  return out;
}

Result<RefTensor> ref_upsample(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  if (xs.rank != 4 || p.factor < 1) return ref_error(OpKind::UPSAMPLE_NEAREST, "shape");
  int64_t f = p.factor, h = xs[2], w = xs[3];
  RefTensor out = ref_make(in[0].desc.dtype, Shape{xs[0], xs[1], h * f, w * f});
  for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc)
    for (int64_t y = 0; y < h * f; ++y)
      for (int64_t x = 0; x < w * f; ++x)
        out.data[size_t((nc * h * f + y) * w * f + x)] =
            in[0].data[size_t((nc * h + y / f) * w + x / f)];
  return out;
}

Result<RefTensor> ref_embedding(std::span<const RefTensor> in) {
  const Shape& ids = in[0].desc.shape;
  const Shape& ts = in[1].desc.shape;
  if (ts.rank != 2) return ref_error(OpKind::EMBEDDING, "table rank");
  int64_t v = ts[0], d = ts[1];
  Shape os = ids;
  os.dims[os.rank++] = d;
  RefTensor out = ref_make(in[1].desc.dtype, os);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    double id = in[0].data[size_t(i)];
    if (!(id >= 0 && id < double(v)))
      return ref_error(OpKind::EMBEDDING, fmt::format("id {} outside [0, {})", id, v));
    for (int64_t j = 0; j < d; ++j)
      out.data[size_t(i * d + j)] = in[1].data[size_t(int64_t(id) * d + j)];
  }
  return out;
}

Result<RefTensor> ref_timestep_embedding(const OpParams& p, std::span<const RefTensor> in) {
  if (in[0].desc.shape.rank != 1 || p.dim < 2)
    return ref_error(OpKind::TIMESTEP_EMBEDDING, "shape");
  int64_t n = in[0].desc.shape[0], dim = p.dim, half = dim / 2;
  RefTensor out = ref_make(p.dtype, Shape{n, dim});
  for (int64_t r = 0; r < n; ++r) {
    double t = in[0].data[size_t(r)];
    for (int64_t i = 0; i < half; ++i) {
      double f = std::exp(-std::log(double(p.max_period)) * double(i) /
                          (double(half) - double(p.freq_shift)));
      double c = std::cos(t * f), s = std::sin(t * f);
      out.data[size_t(r * dim + i)] = p.flip_sin_to_cos ? c : s;
      out.data[size_t(r * dim + half + i)] = p.flip_sin_to_cos ? s : c;
    }
    // an odd dim leaves the last column at zero
  }
  return out;
}

Result<RefTensor> ref_rms_norm(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  if (xs.rank < 1) return ref_error(OpKind::RMS_NORM, "rank");
  const int64_t c = xs[-1], rows = c ? xs.numel() / c : 0;
  RefTensor out = ref_make(in[0].desc.dtype, xs);
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = in[0].data.data() + r * c;
    double ms = 0.0;
    for (int64_t i = 0; i < c; ++i) ms += x[i] * x[i];
    ms /= double(c);
    const double inv = 1.0 / std::sqrt(ms + double(p.eps));
    for (int64_t i = 0; i < c; ++i)
      out.data[size_t(r * c + i)] = x[i] * inv * (in.size() > 1 ? in[1].data[size_t(i)] : 1.0);
  }
  return out;
}

// Written from the definition: pair p of head h at (b, l) is (x[.., e0], x[.., e1]) with
// e0 = 2p, e1 = 2p + 1 (or p, p + D/2); it turns by the angle whose cos and sin the table holds.
Result<RefTensor> ref_rope(const OpParams& p, std::span<const RefTensor> in) {
  const Shape& xs = in[0].desc.shape;
  const Shape& ts = in[1].desc.shape;
  if (xs.rank != 4 || xs[3] % 2 != 0 || (ts.rank != 3 && ts.rank != 4) || ts[-1] != 2 ||
      ts[-2] != xs[3] / 2 || ts[-3] != xs[1] || (ts.rank == 4 && ts[0] != xs[0]))
    return ref_error(OpKind::ROPE, "shapes");
  const int64_t nb = xs[0], nl = xs[1], nh = xs[2], d = xs[3], half = d / 2;
  RefTensor out = ref_make(in[0].desc.dtype, xs);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t q = 0; q < half; ++q) {
          const int64_t t = ((ts.rank == 4 ? b * nl : 0) + l) * half + q;
          const double c = in[1].data[size_t(2 * t)], s = in[1].data[size_t(2 * t + 1)];
          const int64_t e0 = p.rope_half_split ? q : 2 * q;
          const int64_t e1 = p.rope_half_split ? q + half : 2 * q + 1;
          const int64_t base = ((b * nl + l) * nh + h) * d;
          const double u = in[0].data[size_t(base + e0)], v = in[0].data[size_t(base + e1)];
          out.data[size_t(base + e0)] = c * u - s * v;
          out.data[size_t(base + e1)] = s * u + c * v;
        }
  return out;
}


// The op as the chain it replaces (op.h): per group, the q and k heads RMS-normalised with the
// group's weights, rounded to the dtype as RMS_NORM's output is, then rotated by the joint row.
Result<RefTensor> ref_qkv_rope(const OpParams& p, std::span<const RefTensor> in) {
  const int64_t d = p.dim, width = int64_t(p.heads) * d, half = d / 2, nb = in[0].desc.shape[0];
  const DType t = in[0].desc.dtype;
  int64_t len = 0;
  for (size_t g = 0; g + 1 < in.size(); g += 3) len += in[g].desc.shape[1];
  RefTensor out = ref_make(t, Shape{nb, len, 3 * width});
  const RefTensor& cs = in.back();
  auto head = [&](const double* x, const RefTensor& w, int64_t row, double* y) {
    double ms = 0.0;
    for (int64_t i = 0; i < d; ++i) ms += x[i] * x[i];
    const double inv = 1.0 / std::sqrt(ms / double(d) + double(p.eps));
    std::vector<double> n(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) n[size_t(i)] = dtype_round(x[i] * inv * w.data[size_t(i)], t);
    for (int64_t q = 0; q < half; ++q) {
      const double c = cs.data[size_t(2 * (row * half + q))];
      const double s = cs.data[size_t(2 * (row * half + q) + 1)];
      const int64_t e0 = p.rope_half_split ? q : 2 * q;
      const int64_t e1 = p.rope_half_split ? q + half : 2 * q + 1;
      y[e0] = c * n[size_t(e0)] - s * n[size_t(e1)];
      y[e1] = s * n[size_t(e0)] + c * n[size_t(e1)];
    }
  };
  int64_t first = 0;
  for (size_t g = 0; g + 1 < in.size(); g += 3) {
    const int64_t nl = in[g].desc.shape[1], pitch = in[g].desc.shape[2];
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t l = 0; l < nl; ++l) {
        const double* src = in[g].data.data() + (b * nl + l) * pitch;
        double* dst = out.data.data() + (b * len + first + l) * 3 * width;
        for (int64_t h = 0; h < p.heads; ++h) {
          head(src + h * d, in[g + 1], first + l, dst + h * d);
          head(src + width + h * d, in[g + 2], first + l, dst + width + h * d);
        }
        std::copy(src + 2 * width, src + 3 * width, dst + 2 * width);
      }
    first += nl;
  }
  return out;
}

}  // namespace

double dtype_round(double x, DType t) {
  switch (t) {
    case DType::F32:
      return double(float(x));
    case DType::F16:
      return double(f16_to_f32(f32_to_f16(float(x))));
    case DType::BF16:
      return double(bf16_to_f32(f32_to_bf16(float(x))));
    case DType::F8_E4M3:
      return double(f8e4m3_to_f32(f32_to_f8e4m3(float(x))));
    case DType::F8_E5M2:
      return double(f8e5m2_to_f32(f32_to_f8e5m2(float(x))));
    case DType::I32:
    case DType::I64:
      return std::trunc(x);
    default:
      return x;
  }
}

double dtype_load(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::F32:
      return double(static_cast<const float*>(data)[i]);
    case DType::F16:
      return double(f16_to_f32(static_cast<const uint16_t*>(data)[i]));
    case DType::BF16:
      return double(bf16_to_f32(static_cast<const uint16_t*>(data)[i]));
    case DType::F8_E4M3:
      return double(f8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]));
    case DType::F8_E5M2:
      return double(f8e5m2_to_f32(static_cast<const uint8_t*>(data)[i]));
    case DType::I32:
      return double(static_cast<const int32_t*>(data)[i]);
    case DType::I64:
      return double(static_cast<const int64_t*>(data)[i]);
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

void dtype_store(void* data, DType t, size_t i, double x) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(data)[i] = float(x);
      break;
    case DType::F16:
      static_cast<uint16_t*>(data)[i] = f32_to_f16(float(x));
      break;
    case DType::BF16:
      static_cast<uint16_t*>(data)[i] = f32_to_bf16(float(x));
      break;
    case DType::F8_E4M3:
      static_cast<uint8_t*>(data)[i] = f32_to_f8e4m3(float(x));
      break;
    case DType::F8_E5M2:
      static_cast<uint8_t*>(data)[i] = f32_to_f8e5m2(float(x));
      break;
    case DType::I32:
      static_cast<int32_t*>(data)[i] = int32_t(x);
      break;
    case DType::I64:
      static_cast<int64_t*>(data)[i] = int64_t(x);
      break;
    default:
      break;
  }
}

namespace {

// t with its dims permuted (out dim i = in dim perm[i]).
RefTensor ref_permuted(const RefTensor& t, const std::vector<int>& perm) {
  OpParams q;
  for (size_t i = 0; i < perm.size(); ++i) q.perm[i] = perm[i];
  return ref_permute(q, std::span<const RefTensor>(&t, 1)).value();
}

Result<RefTensor> ref_add_input(OpKind kind, const OpParams& p, std::span<const RefTensor> in) {
  OpParams q = p;
  q.add_input = false;
  HR_ASSIGN_OR_RETURN(RefTensor out, op_reference(kind, q, in.first(in.size() - 1)));
  const RefTensor& r = in.back();
  const Shape& os = out.desc.shape;
  if (r.desc.shape == os) {
    for (size_t i = 0; i < out.data.size(); ++i) out.data[i] += r.data[i];
    return out;
  }
  if (kind != OpKind::CONV2D || os.rank != 4) return ref_error(kind, "added input shape");
  const int64_t n = os[0], c = p.channels_last ? os[3] : os[1];
  if (r.desc.numel() != n * c) return ref_error(kind, "added input shape");
  const int64_t per_sample = os.numel() / n;
  for (int64_t i = 0; i < os.numel(); ++i) {
    const int64_t b = i / per_sample;
    const int64_t ch = p.channels_last ? i % c : (i % per_sample) / (os[2] * os[3]);
    out.data[size_t(i)] += r.data[size_t(b * c + ch)];
  }
  return out;
}

Result<RefTensor> ref_channels_last(OpKind kind, const OpParams& p, std::span<const RefTensor> in) {
  OpParams q = p;
  q.channels_last = false;
  const int rank = in[0].desc.shape.rank;
  if (rank < 2) return ref_error(kind, "channels-last rank");
  // [N, S..., C] -> [N, C, S...] and back.
  std::vector<int> to_first = {0, rank - 1}, to_last = {0};
  for (int i = 1; i < rank - 1; ++i) to_first.push_back(i);
  for (int i = 2; i < rank; ++i) to_last.push_back(i);
  to_last.push_back(1);
  std::vector<RefTensor> args(in.begin(), in.end());
  args[0] = ref_permuted(in[0], to_first);
  if (kind == OpKind::CONV2D) args[1] = ref_permuted(in[1], {0, 3, 1, 2});  // OHWI -> OIHW
  HR_ASSIGN_OR_RETURN(RefTensor out, op_reference(kind, q, args));
  return ref_permuted(out, to_last);
}

}  // namespace

Result<RefTensor> op_reference(OpKind kind, const OpParams& p, std::span<const RefTensor> in) {
  static constexpr size_t kMinInputs[] = {2, 2, 2, 3, 2, 1, 3, 1, 1, 1, 1, 1, 2, 2,
                                          2, 2, 1, 2, 1, 1, 1, 1, 2, 1, 1, 1, 2, 1, 2, 4, 1};
  static_assert(std::size(kMinInputs) == size_t(OpKind::COUNT_));
  if (kind >= OpKind::COUNT_ || in.size() < kMinInputs[size_t(kind)])
    return ref_error(kind, fmt::format("{} inputs", in.size()));
  for (const RefTensor& t : in)
    if (t.data.size() != size_t(t.desc.numel())) return ref_error(kind, "data size != numel");

  // The add_input and channels-last forms (op.h) in terms of the plain ones.
  if ((kind == OpKind::LINEAR || kind == OpKind::CONV2D) && p.add_input)
    return ref_add_input(kind, p, in);
  if (p.channels_last &&
      (kind == OpKind::CONV2D || kind == OpKind::GROUP_NORM || kind == OpKind::UPSAMPLE_NEAREST))
    return ref_channels_last(kind, p, in);

  switch (kind) {
    case OpKind::LINEAR:
      return ref_linear(p, in);
    case OpKind::MATMUL:
      return ref_matmul(p, in);
    case OpKind::CONV2D:
      return ref_conv2d(p, in);
    case OpKind::GROUP_NORM:
      return ref_group_norm(p, in);
    case OpKind::LAYER_NORM:
      return ref_layer_norm(p, in);
    case OpKind::SOFTMAX:
      return ref_softmax(p, in);
    case OpKind::ATTENTION:
      return ref_attention(p, in);
    case OpKind::GELU:
    case OpKind::GELU_TANH:
    case OpKind::QUICK_GELU:
    case OpKind::SILU:
    case OpKind::TANH:
    case OpKind::SCALE: {
      RefTensor out = in[0];
      for (double& x : out.data) x = unary_value(kind, p, x);
      return out;
    }
    case OpKind::GEGLU:
      return ref_geglu(in);
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV:
      return ref_binary(kind, in);
    case OpKind::CONCAT:
      return ref_concat(p, in);
    case OpKind::SLICE:
      return ref_slice(p, in);
    case OpKind::PERMUTE:
      return ref_permute(p, in);
    case OpKind::RESHAPE: {
      if (p.shape.numel() != in[0].desc.numel()) return ref_error(kind, "numel");
      RefTensor out = in[0];
      out.desc.shape = p.shape;
      return out;
    }
    case OpKind::UPSAMPLE_NEAREST:
      return ref_upsample(p, in);
    case OpKind::EMBEDDING:
      return ref_embedding(in);
    case OpKind::TIMESTEP_EMBEDDING:
      return ref_timestep_embedding(p, in);
    case OpKind::CAST: {  // with a scale: x and the scale in the target, one rounding
      RefTensor out = in[0];
      out.desc.dtype = p.dtype;
      const double scale = in.size() > 1 ? dtype_round(in[1].data.at(0), p.dtype) : 1.0;
      const bool to_e4m3 = p.dtype == DType::F8_E4M3;  // clamped to +-448 first (op.h)
      for (double& x : out.data) {
        if (to_e4m3) x = std::clamp(x, -448.0, 448.0);
        x = dtype_round(dtype_round(x, p.dtype) * scale, p.dtype);
      }
      return out;
    }
    case OpKind::LINEAR_FP8:
      return ref_linear_fp8(p, in);
    case OpKind::COPY:
      return in[0];
    case OpKind::RMS_NORM:
      return ref_rms_norm(p, in);
    case OpKind::ROPE:
      return ref_rope(p, in);
    case OpKind::QKV_ROPE:
      return ref_qkv_rope(p, in);
    case OpKind::COUNT_:
      break;
  }
  return ref_error(kind, "unknown op");
}

}  // namespace hr::test
