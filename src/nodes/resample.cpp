// Resampling kernels (host, float32), following PyTorch's upsample formulas.
#include "nodes/resample.h"

#include <algorithm>
#include <cmath>

namespace hr {
namespace {

double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

// One axis of a separable filter: for each output index, source indices and weights.
struct Taps {
  std::vector<int64_t> idx;  // n_out * k
  std::vector<double> w;
  int k = 1;
};

Taps taps_for(int64_t in, int64_t out, const std::string& m) {
  Taps t;
  double scale = double(in) / double(out);
  if (m == "nearest-exact") {
    t.k = 1;
    for (int64_t o = 0; o < out; ++o) {
      int64_t s = std::min<int64_t>(int64_t(std::floor((double(o) + 0.5) * scale)), in - 1);
      t.idx.push_back(s);
      t.w.push_back(1.0);
    }
  } else if (m == "bilinear") {
    t.k = 2;
    for (int64_t o = 0; o < out; ++o) {
      double src = std::max(0.0, (double(o) + 0.5) * scale - 0.5);
      int64_t i0 = std::min<int64_t>(int64_t(src), in - 1);
      int64_t i1 = std::min<int64_t>(i0 + 1, in - 1);
      double l = src - double(i0);
      t.idx.insert(t.idx.end(), {i0, i1});
      t.w.insert(t.w.end(), {1.0 - l, l});
    }
  } else if (m == "bicubic") {
    t.k = 4;
    const double a = -0.75;
    for (int64_t o = 0; o < out; ++o) {
      double real = (double(o) + 0.5) * scale - 0.5;
      double fl = std::floor(real);
      double f = real - fl;
      int64_t i = int64_t(fl);
      double ws[4] = {cubic2(f + 1, a), cubic1(f, a), cubic1(1 - f, a), cubic2(2 - f, a)};
      for (int j = 0; j < 4; ++j) {
        t.idx.push_back(std::clamp<int64_t>(i - 1 + j, 0, in - 1));
        t.w.push_back(ws[j]);
      }
    }
  } else {  // area = adaptive average pooling
    int64_t kmax = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int64_t o = 0; o < out; ++o) {
      int64_t s = (o * in) / out;
      int64_t e = ((o + 1) * in + out - 1) / out;
      ranges.push_back({s, e});
      kmax = std::max(kmax, e - s);
    }
    t.k = int(kmax);
    for (auto [s, e] : ranges) {
      for (int64_t j = 0; j < kmax; ++j) {
        bool in_range = s + j < e;
        t.idx.push_back(in_range ? s + j : s);
        t.w.push_back(in_range ? 1.0 / double(e - s) : 0.0);
      }
    }
  }
  return t;
}

}  // namespace

const std::vector<std::string>& resample_methods() {
  static const std::vector<std::string> m = {"nearest-exact", "bilinear", "area", "bicubic"};
  return m;
}

Result<HostTensor> resample(const HostTensor& x, int64_t out_h, int64_t out_w,
                            const std::string& method) {
  if (x.dtype() != DType::F32 || x.shape().rank != 4)
    return make_error(ErrorCode::INVALID_ARGUMENT, "resample expects f32 NCHW, got {}",
                      x.desc().str());
  if (std::find(resample_methods().begin(), resample_methods().end(), method) ==
      resample_methods().end())
    return make_error(ErrorCode::INVALID_ARGUMENT, "unknown upscale method '{}'", method);
  if (out_h < 1 || out_w < 1)
    return make_error(ErrorCode::INVALID_ARGUMENT, "resample to {}x{}: sizes must be >= 1", out_w,
                      out_h);
  const Shape& s = x.shape();
  int64_t nc = s[0] * s[1], in_h = s[2], in_w = s[3];
  Taps th = taps_for(in_h, out_h, method), tw = taps_for(in_w, out_w, method);
  HostTensor out(DType::F32, Shape{s[0], s[1], out_h, out_w});
  std::vector<double> row(static_cast<size_t>(in_w));
  for (int64_t p = 0; p < nc; ++p) {
    const float* src = x.f32() + p * in_h * in_w;
    float* dst = out.f32() + p * out_h * out_w;
    for (int64_t oy = 0; oy < out_h; ++oy) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int j = 0; j < th.k; ++j) {
        double wy = th.w[size_t(oy * th.k + j)];
        if (wy == 0.0) continue;
        const float* r = src + th.idx[size_t(oy * th.k + j)] * in_w;
        for (int64_t ix = 0; ix < in_w; ++ix) row[size_t(ix)] += wy * double(r[ix]);
      }
      for (int64_t ox = 0; ox < out_w; ++ox) {
        double v = 0;
        for (int j = 0; j < tw.k; ++j)
          v += tw.w[size_t(ox * tw.k + j)] * row[size_t(tw.idx[size_t(ox * tw.k + j)])];
        dst[oy * out_w + ox] = float(v);
      }
    }
  }
  return out;
}

Result<HostTensor> common_upscale(const HostTensor& x, int64_t out_w, int64_t out_h,
                                  const std::string& method, const std::string& crop) {
  if (crop != "center") return resample(x, out_h, out_w, method);
  const Shape& s = x.shape();
  int64_t old_w = s[3], old_h = s[2];
  double old_aspect = double(old_w) / double(old_h), new_aspect = double(out_w) / double(out_h);
  int64_t cx = 0, cy = 0;
  // Python round() is half-to-even; std::nearbyint in the default rounding mode matches it.
  if (old_aspect > new_aspect)
    cx = int64_t(std::nearbyint((double(old_w) - double(old_w) * (new_aspect / old_aspect)) / 2));
  else if (old_aspect < new_aspect)
    cy = int64_t(std::nearbyint((double(old_h) - double(old_h) * (old_aspect / new_aspect)) / 2));
  int64_t h = old_h - 2 * cy, w = old_w - 2 * cx;
  HostTensor c(DType::F32, Shape{s[0], s[1], h, w});
  for (int64_t p = 0; p < s[0] * s[1]; ++p)
    for (int64_t y = 0; y < h; ++y)
      std::copy_n(x.f32() + (p * old_h + y + cy) * old_w + cx, w, c.f32() + (p * h + y) * w);
  return resample(c, out_h, out_w, method);
}

HostTensor nhwc_to_nchw(const HostTensor& x) {
  const Shape& s = x.shape();
  HostTensor o(DType::F32, Shape{s[0], s[3], s[1], s[2]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t y = 0; y < s[1]; ++y)
      for (int64_t xx = 0; xx < s[2]; ++xx)
        for (int64_t c = 0; c < s[3]; ++c)
          o.f32()[((b * s[3] + c) * s[1] + y) * s[2] + xx] =
              x.f32()[((b * s[1] + y) * s[2] + xx) * s[3] + c];
  return o;
}

HostTensor nchw_to_nhwc(const HostTensor& x) {
  const Shape& s = x.shape();
  HostTensor o(DType::F32, Shape{s[0], s[2], s[3], s[1]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t y = 0; y < s[2]; ++y)
        for (int64_t xx = 0; xx < s[3]; ++xx)
          o.f32()[((b * s[2] + y) * s[3] + xx) * s[1] + c] =
              x.f32()[((b * s[1] + c) * s[2] + y) * s[3] + xx];
  return o;
}

}  // namespace hr
