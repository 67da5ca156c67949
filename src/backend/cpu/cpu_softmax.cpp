// CPU SOFTMAX over the last dim of (x * alpha): max-subtracted, rows spread over threads.
#include <bit>
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

// See Note [vectorised float loops] in cpu_norm.cpp: same clones, same reason for the pragma.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#include "backend/cpu/cpu_exp.h"  // inside the region on purpose

namespace hr::cpu {
namespace {

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
