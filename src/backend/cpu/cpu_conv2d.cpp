// CPU CONV2D: im2col over a band of output rows + one sgemm per (image, group, band);
// 1x1 stride-1 unpadded convolutions multiply the input directly.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {
namespace {

// Note [conv2d workspace]
// The im2col matrix of a whole image can be huge (a VAE conv at 512x512 with 128 channels
// would need 1.2 GB), so conv2d lowers a band of output rows at a time. The band height is
// the largest that keeps the column buffer under kColumnBytes (at least one row); the
// workspace is exactly one band's column buffer, and conv2d derives the band from the same
// function, so the planned bytes and the bytes used agree.
constexpr size_t kColumnBytes = size_t(16) << 20;

struct ConvGeometry {
  int64_t n, c, h, w;        // input
  int64_t o, kh, kw;         // weight (o output channels)
  int64_t oh, ow;            // output
  int64_t groups, cg, og;    // per-group channels in / out
  int64_t sh, sw, dh, dw, pt, pl;
  int64_t kcol;              // rows of the column matrix: cg * kh * kw
  bool direct;               // 1x1, stride 1, no padding: x is already the column matrix
  int64_t band;              // output rows lowered at a time
};

ConvGeometry conv_geometry(const OpParams& p, const Shape& x, const Shape& w, const Shape& y) {
  ConvGeometry g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3];
  g.oh = y[2], g.ow = y[3];
  g.groups = p.groups, g.cg = g.c / g.groups, g.og = g.o / g.groups;
  g.sh = p.stride[0], g.sw = p.stride[1], g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.pt = p.pad[0], g.pl = p.pad[2];
  g.kcol = g.cg * g.kh * g.kw;
  g.direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && p.pad[0] == 0 &&
             p.pad[1] == 0 && p.pad[2] == 0 && p.pad[3] == 0;
  const size_t row_bytes = size_t(std::max<int64_t>(g.kcol * g.ow, 1)) * sizeof(float);
  g.band = std::clamp<int64_t>(int64_t(kColumnBytes / row_bytes), 1, std::max<int64_t>(g.oh, 1));
  return g;
}

// Lowers output rows [r0, r0 + rows) of one group of one image into col[kcol][rows * ow].
void im2col_band(const ConvGeometry& g, const float* x, int64_t r0, int64_t rows, float* col) {
  const int64_t cols = rows * g.ow;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < g.kcol; ++r) {
    const int64_t ci = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const float* xc = x + ci * g.h * g.w;
    float* dst = col + r * cols;
    // Output columns whose input column lies inside the image: [lo, hi).
    const int64_t off = kj * g.dw - g.pl;
    int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
    int64_t hi = g.w - 1 - off >= 0 ? (g.w - 1 - off) / g.sw + 1 : 0;
    lo = std::min(lo, g.ow);
    hi = std::clamp(hi, lo, g.ow);
    for (int64_t oy = r0; oy < r0 + rows; ++oy, dst += g.ow) {
      const int64_t iy = oy * g.sh - g.pt + ki * g.dh;
      if (iy < 0 || iy >= g.h) {
        std::memset(dst, 0, size_t(g.ow) * sizeof(float));
        continue;
      }
      const float* src = xc + iy * g.w;  // src[ox * sw + off] for ox in [lo, hi)
      std::fill(dst, dst + lo, 0.0f);
      if (g.sw == 1) {
        if (hi > lo) std::memcpy(dst + lo, src + lo + off, size_t(hi - lo) * sizeof(float));
      } else {
        for (int64_t ox = lo; ox < hi; ++ox) dst[ox] = src[ox * g.sw + off];
      }
      std::fill(dst + hi, dst + g.ow, 0.0f);
    }
  }
}

}  // namespace

size_t conv2d_workspace(const OpParams& p, std::span<const TensorDesc> in, const TensorDesc& out) {
  if (in.size() < 2 || in[0].dtype != DType::F32) return 0;
  ConvGeometry g = conv_geometry(p, in[0].shape, in[1].shape, out.shape);
  if (g.direct || g.oh == 0 || g.ow == 0) return 0;
  return size_t(g.kcol) * size_t(g.band * g.ow) * sizeof(float);
}

Status conv2d(const OpCall& c) {
  for (const TensorRef& t : c.inputs)
    if (t.desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu conv2d: dtype {} (f32 only)",
                        dtype_name(t.desc.dtype));
  TensorDesc descs[2] = {c.inputs[0].desc, c.inputs[1].desc};
  const ConvGeometry g = conv_geometry(*c.params, descs[0].shape, descs[1].shape,
                                       c.output.desc.shape);
  const size_t need = conv2d_workspace(*c.params, descs, c.output.desc);
  if (c.workspace_bytes < need || (need && !c.workspace))
    return make_error(ErrorCode::INVALID_ARGUMENT, "cpu conv2d: workspace {} bytes, need {}",
                      c.workspace_bytes, need);
  if (g.og > INT_MAX || g.kcol > INT_MAX || g.oh * g.ow > INT_MAX)
    return make_error(ErrorCode::UNSUPPORTED, "cpu conv2d: {} too large for BLAS",
                      descs[1].shape.str());
  const float* x = c.inputs[0].as<const float>();
  const float* w = c.inputs[1].as<const float>();
  const float* bias = c.inputs.size() > 2 ? c.inputs[2].as<const float>() : nullptr;
  float* y = c.output.as<float>();
  float* col = static_cast<float*>(c.workspace);
  const int64_t plane = g.oh * g.ow;
  if (c.output.desc.numel() == 0) return Status();

  // Bias first, so every sgemm accumulates onto it (beta = 1).
  const int64_t planes = g.n * g.o;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < planes; ++i) {
    float v = bias ? bias[i % g.o] : 0.0f;
    std::fill(y + i * plane, y + (i + 1) * plane, v);
  }
  if (g.kcol == 0) return Status();

  for (int64_t img = 0; img < g.n; ++img) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const float* xg = x + (img * g.c + gi * g.cg) * g.h * g.w;
      const float* wg = w + gi * g.og * g.kcol;
      float* yg = y + (img * g.o + gi * g.og) * plane;
      if (g.direct) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(g.og), int(plane),
                    int(g.kcol), 1.0f, wg, int(g.kcol), xg, int(plane), 1.0f, yg, int(plane));
        continue;
      }
      for (int64_t r0 = 0; r0 < g.oh; r0 += g.band) {
        const int64_t rows = std::min(g.band, g.oh - r0);
        const int64_t cols = rows * g.ow;
        im2col_band(g, xg, r0, rows, col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(g.og), int(cols),
                    int(g.kcol), 1.0f, wg, int(g.kcol), col, int(cols), 1.0f, yg + r0 * g.ow,
                    int(plane));
      }
    }
  }
  return Status();
}

}  // namespace hr::cpu
