// The tensor rules of ComfyUI's latent nodes; see latent_ops.h.
#include "nodes/latent_ops.h"

#include <algorithm>
#include <cstring>

#include "models/conditioning.h"
#include "nodes/resample.h"

namespace hr {
namespace {

int64_t offset(const Shape& s, int64_t b, int64_t c, int64_t y, int64_t x) {
  return ((b * s[1] + c) * s[2] + y) * s[3] + x;
}

// The source index of output index i along a dimension of size n broadcast to `out`.
int64_t bcast(int64_t i, int64_t n) { return n == 1 ? 0 : i; }

// dst[:, :, rows, cols] = src, src broadcast to the region as torch's copy_ does.
Status latent_paste(HostTensor& dst, PySlice rows, PySlice cols, const HostTensor& src) {
  const Shape &d = dst.shape(), &s = src.shape();
  const int64_t want[4] = {d[0], d[1], rows.size(), cols.size()};
  for (int i = 0; i < 4; ++i)
    if (s[i] != want[i] && s[i] != 1)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "a latent of shape {} does not fit a region of [{}, {}, {}, {}]", s.str(),
                        want[0], want[1], want[2], want[3]);
  for (int64_t b = 0; b < want[0]; ++b)
    for (int64_t c = 0; c < want[1]; ++c)
      for (int64_t y = 0; y < want[2]; ++y)
        for (int64_t x = 0; x < want[3]; ++x)
          dst.f32()[offset(d, b, c, rows.begin + y, cols.begin + x)] =
              src.f32()[offset(s, bcast(b, s[0]), bcast(c, s[1]), bcast(y, s[2]), bcast(x, s[3]))];
  return Status();
}

HostTensor ones(const Shape& s) {
  HostTensor t(DType::F32, s);
  std::fill(t.f32(), t.f32() + t.numel(), 1.0f);
  return t;
}

float mul(float a, float b) { return a * b; }
float add(float a, float b) { return a + b; }
float rsub(float a, float b) { return b - a; }

// Note [composite feather]: LatentComposite's ramp multiplies rows and columns of a ones mask
// in place, in this order per t, with Python slices: on a region smaller than the feather the
// bottom/right slices wrap to negative indices and hit rows twice. Replaying the same slices
// gives ComfyUI's mask bit for bit.
HostTensor feather_mask(int64_t mh, int64_t mw, int64_t x, int64_t y, int64_t to_h, int64_t to_w,
                        int64_t feather) {
  HostTensor m = ones(Shape{1, 1, mh, mw});
  auto scale_rows = [&](PySlice r, float f) {
    for (int64_t i = r.begin; i < r.end; ++i)
      for (int64_t j = 0; j < mw; ++j) m.f32()[i * mw + j] *= f;
  };
  auto scale_cols = [&](PySlice c, float f) {
    for (int64_t i = 0; i < mh; ++i)
      for (int64_t j = c.begin; j < c.end; ++j) m.f32()[i * mw + j] *= f;
  };
  for (int64_t t = 0; t < feather; ++t) {
    const float f = float((1.0 / double(feather)) * double(t + 1));
    if (y != 0) scale_rows(py_slice(t, t + 1, mh), f);
    if (y + mh < to_h) scale_rows(py_slice(mh - 1 - t, mh - t, mh), f);
    if (x != 0) scale_cols(py_slice(t, t + 1, mw), f);
    if (x + mw < to_w) scale_cols(py_slice(mw - 1 - t, mw - t, mw), f);
  }
  return m;
}

// mask * src + (1 - mask) * dst, each product broadcast as torch does.
Result<HostTensor> masked_mix(const HostTensor& mask, const HostTensor& src,
                              const HostTensor& dst) {
  HR_ASSIGN_OR_RETURN(HostTensor a, latent_broadcast(mask, src, mul));
  HR_ASSIGN_OR_RETURN(HostTensor inv, latent_broadcast(mask, ones(Shape{1, 1, 1, 1}), rsub));
  HR_ASSIGN_OR_RETURN(HostTensor b, latent_broadcast(inv, dst, mul));
  return latent_broadcast(a, b, add);
}

}  // namespace

PySlice py_slice(int64_t start, int64_t stop, int64_t len) {
  auto norm = [len](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + len : i, 0, len); };
  PySlice s{norm(start), norm(stop)};
  s.end = std::max(s.begin, s.end);
  return s;
}

int64_t py_floor_div(int64_t x, int64_t d) {
  int64_t q = x / d;
  return (x % d != 0 && x < 0) ? q - 1 : q;
}

HostTensor latent_rect(const HostTensor& x, PySlice rows, PySlice cols) {
  const Shape& s = x.shape();
  HostTensor o(DType::F32, Shape{s[0], s[1], rows.size(), cols.size()});
  for (int64_t bc = 0; bc < s[0] * s[1]; ++bc)
    for (int64_t y = 0; y < rows.size(); ++y)
      std::memcpy(o.f32() + (bc * rows.size() + y) * cols.size(),
                  x.f32() + (bc * s[2] + rows.begin + y) * s[3] + cols.begin,
                  size_t(cols.size()) * sizeof(float));
  return o;
}

Result<HostTensor> latent_batch_concat(const HostTensor& a, const HostTensor& b) {
  const Shape &sa = a.shape(), &sb = b.shape();
  if (sa.rank != sb.rank || sa.prod(1, sa.rank) != sb.prod(1, sb.rank) ||
      !std::equal(sa.dims + 1, sa.dims + sa.rank, sb.dims + 1))
    return make_error(ErrorCode::INVALID_ARGUMENT, "cannot batch latents of shapes {} and {}",
                      sa.str(), sb.str());
  return tensor_concat0(a, b);
}

HostTensor latent_batch_repeat(const HostTensor& x, int64_t n) {
  Shape os = x.shape();
  os[0] *= n;
  HostTensor o(DType::F32, os);
  for (int64_t i = 0; i < n; ++i) std::memcpy(o.f32() + i * x.numel(), x.f32(), x.bytes());
  return o;
}

HostTensor latent_repeat_to_batch(const HostTensor& x, int64_t batch) {
  const int64_t b = x.shape()[0];
  if (b == batch) return x.clone();
  if (b > batch) return tensor_rows0(x, 0, batch);
  HostTensor r = latent_batch_repeat(x, (batch + b - 1) / b);
  return tensor_rows0(r, 0, batch);
}

HostTensor latent_flip(const HostTensor& x, int dim) {
  const Shape& s = x.shape();
  HostTensor o(DType::F32, s);
  for (int64_t bc = 0; bc < s[0] * s[1]; ++bc)
    for (int64_t y = 0; y < s[2]; ++y)
      for (int64_t i = 0; i < s[3]; ++i) {
        int64_t sy = dim == 2 ? s[2] - 1 - y : y, si = dim == 3 ? s[3] - 1 - i : i;
        o.f32()[(bc * s[2] + y) * s[3] + i] = x.f32()[(bc * s[2] + sy) * s[3] + si];
      }
  return o;
}

// torch.rot90 with dims [3, 2]: k = 1 flips rows then swaps the two axes, k = 3 flips columns
// then swaps, k = 2 flips both.
HostTensor latent_rot90(const HostTensor& x, int k) {
  k = ((k % 4) + 4) % 4;
  if (k == 0) return x.clone();
  if (k == 2) return latent_flip(latent_flip(x, 2), 3);
  const Shape& s = x.shape();
  const int64_t h = s[2], w = s[3];
  HostTensor o(DType::F32, Shape{s[0], s[1], w, h});
  for (int64_t bc = 0; bc < s[0] * s[1]; ++bc)
    for (int64_t i = 0; i < w; ++i)
      for (int64_t j = 0; j < h; ++j) {
        int64_t sy = k == 1 ? h - 1 - j : j, sx = k == 1 ? i : w - 1 - i;
        o.f32()[(bc * w + i) * h + j] = x.f32()[(bc * h + sy) * w + sx];
      }
  return o;
}

Result<HostTensor> latent_broadcast(const HostTensor& a, const HostTensor& b,
                                    const std::function<float(float, float)>& op) {
  const Shape &sa = a.shape(), &sb = b.shape();
  Shape so = sa;
  for (int i = 0; i < 4; ++i) {
    if (sa[i] != sb[i] && sa[i] != 1 && sb[i] != 1)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "latents of shapes {} and {} do not broadcast together", sa.str(),
                        sb.str());
    so[i] = sa[i] == 1 ? sb[i] : sa[i];
  }
  HostTensor o(DType::F32, so);
  for (int64_t n = 0; n < so[0]; ++n)
    for (int64_t c = 0; c < so[1]; ++c)
      for (int64_t y = 0; y < so[2]; ++y)
        for (int64_t x = 0; x < so[3]; ++x)
          o.f32()[offset(so, n, c, y, x)] = op(a.f32()[offset(sa, bcast(n, sa[0]), bcast(c, sa[1]),
                                                              bcast(y, sa[2]), bcast(x, sa[3]))],
                                               b.f32()[offset(sb, bcast(n, sb[0]), bcast(c, sb[1]),
                                                              bcast(y, sb[2]), bcast(x, sb[3]))]);
  return o;
}

Result<HostTensor> latent_reshape_to(const Shape& target, const HostTensor& latent,
                                     bool repeat_batch) {
  const Shape& s = latent.shape();
  HostTensor l = latent.clone();
  if (!std::equal(s.dims + 1, s.dims + 4, target.dims + 1)) {
    HR_ASSIGN_OR_RETURN(l, common_upscale(latent, target[3], target[2], "bilinear", "center"));
  }
  return repeat_batch ? latent_repeat_to_batch(l, target[0]) : std::move(l);
}

Result<HostTensor> latent_composite(const HostTensor& to, const HostTensor& from, int64_t x,
                                    int64_t y, int64_t feather) {
  const int64_t h = to.shape()[2], w = to.shape()[3];
  HostTensor out = to.clone();
  // samples_from[:, :, :H - y, :W - x]
  auto clip = [&](const HostTensor& f) {
    return latent_rect(f, py_slice(0, h - y, f.shape()[2]), py_slice(0, w - x, f.shape()[3]));
  };
  if (feather == 0) {
    const int64_t fh = from.shape()[2], fw = from.shape()[3];
    HR_TRY(latent_paste(out, py_slice(y, y + fh, h), py_slice(x, x + fw, w), clip(from)));
    return out;
  }
  HostTensor src = clip(from);
  const int64_t mh = src.shape()[2], mw = src.shape()[3];
  const PySlice rows = py_slice(y, y + mh, h), cols = py_slice(x, x + mw, w);
  HostTensor mask = feather_mask(mh, mw, x, y, h, w, feather);
  HR_ASSIGN_OR_RETURN(HostTensor mixed, masked_mix(mask, clip(src), latent_rect(to, rows, cols)));
  HR_TRY(latent_paste(out, rows, cols, mixed));
  return out;
}

Result<HostTensor> latent_composite_masked(const HostTensor& dest, const HostTensor& source,
                                           int64_t x, int64_t y, const HostTensor* mask,
                                           bool resize_source) {
  const int64_t h = dest.shape()[2], w = dest.shape()[3];
  HostTensor src = source.clone();
  if (resize_source) {
    HR_ASSIGN_OR_RETURN(src, resample(source, h, w, "bilinear"));
  }
  src = latent_repeat_to_batch(src, dest.shape()[0]);
  const int64_t sh = src.shape()[2], sw = src.shape()[3];
  x = std::max(-sw * 8, std::min(x, w * 8));
  y = std::max(-sh * 8, std::min(y, h * 8));
  const int64_t left = py_floor_div(x, 8), top = py_floor_div(y, 8);
  HostTensor m = ones(Shape{1, 1, sh, sw});
  if (mask) {
    const Shape& ms = mask->shape();
    const int64_t mh = ms[-2], mw = ms[-1];
    if (ms.rank < 2 || mh * mw == 0)
      return make_error(ErrorCode::INVALID_ARGUMENT, "mask of shape {} is not [B, H, W]", ms.str());
    HostTensor m4 = mask->clone().reshaped(Shape{mask->numel() / (mh * mw), 1, mh, mw});
    HR_ASSIGN_OR_RETURN(m, resample(m4, sh, sw, "bilinear"));
    m = latent_repeat_to_batch(m, src.shape()[0]);
  }
  const int64_t vw = w - left + std::min<int64_t>(0, x), vh = h - top + std::min<int64_t>(0, y);
  const PySlice vis_rows = py_slice(0, vh, sh), vis_cols = py_slice(0, vw, sw);
  const PySlice rows = py_slice(top, top + sh, h), cols = py_slice(left, left + sw, w);
  HR_ASSIGN_OR_RETURN(HostTensor mixed, masked_mix(latent_rect(m, vis_rows, vis_cols),
                                                   latent_rect(src, vis_rows, vis_cols),
                                                   latent_rect(dest, rows, cols)));
  HostTensor out = dest.clone();
  HR_TRY(latent_paste(out, rows, cols, mixed));
  return out;
}

}  // namespace hr
