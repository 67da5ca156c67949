// CPU SOFTMAX over the last dim of (x * alpha): max-subtracted, rows spread over threads.
#include <bit>
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

// See Note [vectorised float loops] in cpu_norm.cpp: same clones, same reason for the pragma.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

namespace hr::cpu {
namespace {

// exp(x) to ~1 ulp for x in [-87, 88] (clamped outside); branch-free so that it vectorises.
inline float exp_approx(float x) {
  x = x > -87.0f ? x : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  const float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x/ln2)
  float r = x - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((int32_t(fn) + 127) << 23);
}

// y = softmax(x * alpha) for one row; y may alias x.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void softmax_row(const float* x,
                                                                              float* y, int64_t n,
                                                                              float alpha) {
  float m = x[0] * alpha;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = m > x[i] * alpha ? m : x[i] * alpha;
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_approx(x[i] * alpha - m);
    y[i] = e;
    s += e;
  }
  const float inv = 1.0f / s;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

}  // namespace

Status softmax(const OpCall& c) {
  if (c.inputs[0].desc.dtype != DType::F32)
    return make_error(ErrorCode::UNSUPPORTED, "cpu softmax: dtype {} (f32 only)",
                      dtype_name(c.inputs[0].desc.dtype));
  const int64_t n = c.inputs[0].desc.shape[-1];
  if (n == 0) return Status();
  const int64_t rows = c.inputs[0].desc.numel() / n;
  const float alpha = c.params->alpha != 0.0f ? c.params->alpha : 1.0f;
  const float* x = c.inputs[0].as<const float>();
  float* y = c.output.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) softmax_row(x + r * n, y + r * n, n, alpha);
  return Status();
}

}  // namespace hr::cpu

#pragma GCC pop_options
