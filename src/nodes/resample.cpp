// Resampling kernels (host, float32), following PyTorch's upsample formulas, ComfyUI's bislerp
// and Pillow's LANCZOS resize.
#include "nodes/resample.h"

#include <algorithm>
#include <cmath>
#include <numbers>

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

// comfy.utils.bislerp's index data for one axis: F.interpolate(bilinear) of the coordinates
// 0..n-1 (giving index and ratio) and of 1..n-1,n-1 (the second index), in float as torch does.
struct SlerpAxis {
  std::vector<int64_t> i1, i2;
  std::vector<float> r;
};

SlerpAxis slerp_axis(int64_t in, int64_t out) {
  SlerpAxis a;
  const float scale = float(in) / float(out);
  for (int64_t o = 0; o < out; ++o) {
    float src = std::max(0.0f, scale * (float(o) + 0.5f) - 0.5f);
    int64_t i0 = std::min<int64_t>(int64_t(src), in - 1);
    int64_t ip = i0 < in - 1 ? 1 : 0;
    float l1 = std::clamp(src - float(i0), 0.0f, 1.0f), l0 = 1.0f - l1;
    auto c2 = [in](int64_t k) { return float(k < in - 1 ? k + 1 : in - 1); };
    float v1 = float(i0) * l0 + float(i0 + ip) * l1;
    float v2 = c2(i0) * l0 + c2(i0 + ip) * l1;
    a.i1.push_back(int64_t(v1));
    a.i2.push_back(int64_t(v2));
    a.r.push_back(v1 - std::floor(v1));
  }
  return a;
}

// comfy.utils.bislerp's slerp of two channel vectors (elements `stride` apart; `os` in out)
// with ratio r: direction slerped, norm lerped; b1 where they are (nearly) parallel, the lerp
// where opposite.
void slerp_pixel(const float* b1, const float* b2, int64_t c, int64_t stride, float r, float* out,
                 int64_t os) {
  float n1 = 0, n2 = 0;
  for (int64_t k = 0; k < c; ++k) {
    n1 += b1[k * stride] * b1[k * stride];
    n2 += b2[k * stride] * b2[k * stride];
  }
  n1 = std::sqrt(n1);
  n2 = std::sqrt(n2);
  float dot = 0;
  for (int64_t k = 0; k < c; ++k)
    dot += (n1 == 0 ? 0 : b1[k * stride] / n1) * (n2 == 0 ? 0 : b2[k * stride] / n2);
  if (dot > 1 - 1e-5f) {
    for (int64_t k = 0; k < c; ++k) out[k * os] = b1[k * stride];
    return;
  }
  if (dot < 1e-5f - 1) {
    for (int64_t k = 0; k < c; ++k) out[k * os] = b1[k * stride] * (1 - r) + b2[k * stride] * r;
    return;
  }
  float omega = std::acos(dot), so = std::sin(omega);
  float w1 = std::sin((1 - r) * omega) / so, w2 = std::sin(r * omega) / so;
  float norm = n1 * (1 - r) + n2 * r;
  for (int64_t k = 0; k < c; ++k) {
    float u1 = n1 == 0 ? 0 : b1[k * stride] / n1, u2 = n2 == 0 ? 0 : b2[k * stride] / n2;
    out[k * os] = (w1 * u1 + w2 * u2) * norm;
  }
}

// comfy.utils.bislerp: slerp along the width, then along the height, over the channel vector
// of each pixel.
HostTensor bislerp(const HostTensor& x, int64_t out_h, int64_t out_w) {
  const Shape& s = x.shape();
  int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  SlerpAxis ax = slerp_axis(w, out_w), ay = slerp_axis(h, out_h);
  HostTensor mid(DType::F32, Shape{n, c, h, out_w});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t o = 0; o < out_w; ++o) {
        const float* base = x.f32() + b * c * h * w + y * w;
        slerp_pixel(base + ax.i1[size_t(o)], base + ax.i2[size_t(o)], c, h * w, ax.r[size_t(o)],
                    mid.f32() + b * c * h * out_w + y * out_w + o, h * out_w);
      }
  HostTensor out(DType::F32, Shape{n, c, out_h, out_w});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < out_h; ++o)
      for (int64_t xx = 0; xx < out_w; ++xx) {
        const float* base = mid.f32() + b * c * h * out_w + xx;
        slerp_pixel(base + ay.i1[size_t(o)] * out_w, base + ay.i2[size_t(o)] * out_w, c, h * out_w,
                    ay.r[size_t(o)], out.f32() + b * c * out_h * out_w + o * out_w + xx,
                    out_h * out_w);
      }
  return out;
}

// Pillow's LANCZOS resize of 8-bit planes (Resample.c: precompute_coeffs, normalize_coeffs_8bpc,
// ImagingResampleHorizontal/Vertical_8bpc): support 3 widened by the downscale factor, weights in
// 22-bit fixed point, horizontal pass first with a uint8 intermediate.
constexpr int kPilPrecisionBits = 32 - 8 - 2;

double lanczos_kernel(double x) {
  auto sinc = [](double v) { return v == 0.0 ? 1.0 : std::sin(v * std::numbers::pi) / (v * std::numbers::pi); };
  return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0;
}

struct PilCoeffs {
  std::vector<int64_t> xmin, count;
  std::vector<int32_t> k;  // out * ksize
  int64_t ksize = 0;
};

PilCoeffs pil_coeffs(int64_t in, int64_t out) {
  PilCoeffs p;
  double scale = double(in) / double(out), filterscale = std::max(scale, 1.0);
  double support = 3.0 * filterscale;
  p.ksize = int64_t(std::ceil(support)) * 2 + 1;
  p.k.assign(size_t(out * p.ksize), 0);
  std::vector<double> w(size_t(p.ksize));
  for (int64_t o = 0; o < out; ++o) {
    double center = (double(o) + 0.5) * scale, ss = 1.0 / filterscale, sum = 0;
    int64_t lo = std::max<int64_t>(int64_t(center - support + 0.5), 0);
    int64_t hi = std::min<int64_t>(int64_t(center + support + 0.5), in);
    for (int64_t j = 0; j < hi - lo; ++j) sum += w[size_t(j)] = lanczos_kernel((double(j + lo) - center + 0.5) * ss);
    for (int64_t j = 0; j < hi - lo; ++j) {
      double v = sum != 0.0 ? w[size_t(j)] / sum : w[size_t(j)];
      v *= double(1 << kPilPrecisionBits);
      p.k[size_t(o * p.ksize + j)] = int32_t(v < 0 ? v - 0.5 : v + 0.5);
    }
    p.xmin.push_back(lo);
    p.count.push_back(hi - lo);
  }
  return p;
}

uint8_t pil_clip8(int64_t ss) {
  return uint8_t(std::clamp<int64_t>(ss >> kPilPrecisionBits, 0, 255));
}

// One pass over a [planes, h, w] uint8 buffer along w (horizontal) or h.
std::vector<uint8_t> pil_pass(const std::vector<uint8_t>& src, int64_t planes, int64_t h, int64_t w,
                              int64_t out, bool horizontal) {
  PilCoeffs p = pil_coeffs(horizontal ? w : h, out);
  int64_t oh = horizontal ? h : out, ow = horizontal ? out : w;
  std::vector<uint8_t> dst(size_t(planes * oh * ow));
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x) {
        int64_t o = horizontal ? x : y;
        int64_t ss = int64_t(1) << (kPilPrecisionBits - 1);
        for (int64_t j = 0; j < p.count[size_t(o)]; ++j) {
          int64_t i = p.xmin[size_t(o)] + j;
          uint8_t v = src[size_t(pl * h * w + (horizontal ? y * w + i : i * w + x))];
          ss += int64_t(v) * p.k[size_t(o * p.ksize + j)];
        }
        dst[size_t((pl * oh + y) * ow + x)] = pil_clip8(ss);
      }
  return dst;
}

// comfy.utils.lanczos: uint8(clip(255 x)) (truncating), Pillow LANCZOS, then / 255.
HostTensor lanczos(const HostTensor& x, int64_t out_h, int64_t out_w) {
  const Shape& s = x.shape();
  int64_t planes = s[0] * s[1], h = s[2], w = s[3];
  std::vector<uint8_t> buf(size_t(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i)
    buf[size_t(i)] = uint8_t(std::clamp(255.0f * x.f32()[i], 0.0f, 255.0f));
  if (out_w != w) buf = pil_pass(buf, planes, h, w, out_w, true);
  if (out_h != h) buf = pil_pass(buf, planes, h, out_w, out_h, false);
  HostTensor out(DType::F32, Shape{s[0], s[1], out_h, out_w});
  for (int64_t i = 0; i < out.numel(); ++i) out.f32()[i] = float(buf[size_t(i)]) / 255.0f;
  return out;
}

}  // namespace

const std::vector<std::string>& resample_methods() {
  static const std::vector<std::string> m = {"nearest-exact", "bilinear", "area",
                                             "bicubic",       "bislerp",  "lanczos"};
  return m;
}

const std::vector<std::string>& latent_upscale_methods() {
  static const std::vector<std::string> m = {"nearest-exact", "bilinear", "area", "bicubic",
                                             "bislerp"};
  return m;
}

const std::vector<std::string>& image_upscale_methods() {
  static const std::vector<std::string> m = {"nearest-exact", "bilinear", "area", "bicubic",
                                             "lanczos"};
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
  if (method == "bislerp") return bislerp(x, out_h, out_w);
  if (method == "lanczos") return lanczos(x, out_h, out_w);
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
