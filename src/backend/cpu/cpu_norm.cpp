// CPU GROUP_NORM (optionally fused with SiLU) and LAYER_NORM: statistics accumulated in double,
// two passes (mean, then squared deviations), then one vectorised affine pass.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

// Note [vectorised float loops]
// The element loops below are plain C++ that GCC vectorises; target_clones builds an AVX2/FMA
// copy next to the baseline one and picks at load time. GCC refuses to if-convert the float
// clamps of the exp polynomial while -ftrapping-math (the default) is on, so this file's own
// functions are compiled without it: they never rely on floating-point exceptions.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#include "backend/cpu/cpu_exp.h"  // inside the region on purpose

namespace hr::cpu {
namespace {

#define HR_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

// Sum and sum of squared deviations from `mean` of x[0, n), float partials per block of
// kBlock summed in double so long rows keep full precision.
constexpr int64_t kBlock = 512;

HR_VECTOR_CLONES double row_sum(const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) s += x[i];
    total += s;
  }
  return total;
}

HR_VECTOR_CLONES double row_sq_dev(const float* x, int64_t n, float mean) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) {
      const float d = x[i] - mean;
      s += d * d;
    }
    total += s;
  }
  return total;
}

// y = (x - mean) * a + b, then SiLU when `silu`. Subtracting the mean first keeps precision
// when |mean| is large against the spread.
HR_VECTOR_CLONES void row_affine(const float* x, float* y, int64_t n, float mean, float a, float b,
                                 bool silu) {
  if (silu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = (x[i] - mean) * a + b;
      y[i] = v / (1.0f + exp_approx(-v));
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * a + b;
  }
}

// y = (x - mean) * rstd * gamma + beta, per element of the row.
HR_VECTOR_CLONES void row_layer_norm(const float* x, float* y, int64_t n, float mean, float rstd,
                                     const float* gamma, const float* beta) {
  if (beta) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * gamma[i];
  }
}

Status check_f32(const OpCall& c, const char* what) {
  for (const TensorRef& t : c.inputs)
    if (t.desc.dtype != DType::F32)
      return make_error(ErrorCode::UNSUPPORTED, "cpu {}: dtype {} (f32 only)", what,
                        dtype_name(t.desc.dtype));
  return Status();
}

}  // namespace

Status group_norm(const OpCall& c) {
  HR_TRY(check_f32(c, "group_norm"));
  const Shape& s = c.inputs[0].desc.shape;
  const int64_t n = s[0], ch = s[1], spatial = s.prod(2, s.rank);
  const int64_t groups = c.params->groups, cg = ch / groups;
  const float* x = c.inputs[0].as<const float>();
  const float* gamma = c.inputs[1].as<const float>();
  const float* beta = c.inputs[2].as<const float>();
  float* y = c.output.as<float>();
  const double eps = c.params->eps;
  const bool silu = c.params->fuse_silu;
  const int64_t tasks = n * groups;
  const int64_t count = cg * spatial;  // a group's elements are contiguous
  if (count == 0) return Status();

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const float* xg = x + t * count;
    float* yg = y + t * count;
    const double mean = row_sum(xg, count) / double(count);
    const double var = row_sq_dev(xg, count, float(mean)) / double(count);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t ci = 0; ci < cg; ++ci) {
      const int64_t chan = (t % groups) * cg + ci;
      const double a = rstd * gamma[chan];
      row_affine(xg + ci * spatial, yg + ci * spatial, spatial, float(mean), float(a),
                 beta[chan], silu);
    }
  }
  return Status();
}

Status layer_norm(const OpCall& c) {
  HR_TRY(check_f32(c, "layer_norm"));
  const int64_t width = c.inputs[0].desc.shape[-1];
  if (width == 0) return Status();
  const int64_t rows = c.inputs[0].desc.numel() / width;
  const float* x = c.inputs[0].as<const float>();
  const float* gamma = c.inputs[1].as<const float>();
  const float* beta = c.inputs.size() > 2 ? c.inputs[2].as<const float>() : nullptr;
  float* y = c.output.as<float>();
  const double eps = c.params->eps;

#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    const double mean = row_sum(xr, width) / double(width);
    const double var = row_sq_dev(xr, width, float(mean)) / double(width);
    const double rstd = 1.0 / std::sqrt(var + eps);
    row_layer_norm(xr, y + r * width, width, float(mean), float(rstd), gamma, beta);
  }
  return Status();
}

}  // namespace hr::cpu

#pragma GCC pop_options
