// RoPE cos/sin tables with the reference's dtypes step by step (Note [rope tables]).
#include "models/rope_table.h"

#include <cmath>
#include <vector>

namespace hr {
namespace {

// torch.linspace(start, end, steps) in float64: the symmetric form torch's kernels use.
std::vector<double> linspace(double start, double end, int64_t steps) {
  std::vector<double> v(static_cast<size_t>(steps));
  if (steps == 1) {
    v[0] = start;
    return v;
  }
  const double step = (end - start) / double(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    const double t = i < halfway ? step * double(i) : step * double(steps - i - 1);
    v[size_t(i)] = i < halfway ? start + t : end - t;
  }
  return v;
}

}  // namespace

Result<HostTensor> rope_table_flux(std::span<const float> ids, std::span<const int> axes_dim,
                                   double theta) {
  const int64_t axes = int64_t(axes_dim.size());
  int64_t pairs = 0;
  for (int d : axes_dim) {
    if (d <= 0 || d % 2 != 0)
      return make_error(ErrorCode::INVALID_ARGUMENT, "rope_table_flux: axis dim {} is not a "
                        "positive even number", d);
    pairs += d / 2;
  }
  if (axes == 0 || ids.size() % size_t(axes) != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "rope_table_flux: {} ids are not rows of {} axes", ids.size(), axes);
  const int64_t n = int64_t(ids.size()) / axes;
  // omega per pair, axes concatenated in order.
  std::vector<double> omega;
  std::vector<int64_t> axis_of;
  for (int64_t a = 0; a < axes; ++a) {
    const int d = axes_dim[size_t(a)];
    for (double s : linspace(0.0, double(d - 2) / double(d), d / 2)) {
      omega.push_back(1.0 / std::pow(theta, s));
      axis_of.push_back(a);
    }
  }
  HostTensor t(DType::F32, Shape{n, pairs, 2});
  float* out = t.f32();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < pairs; ++p) {
      const double angle = double(ids[size_t(i * axes + axis_of[size_t(p)])]) * omega[size_t(p)];
      out[(i * pairs + p) * 2] = float(std::cos(angle));
      out[(i * pairs + p) * 2 + 1] = float(std::sin(angle));
    }
  return t;
}

Result<HostTensor> rope_table_llama(std::span<const float> positions, int head_dim, float theta) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "rope_table_llama: head dim {} is not a positive even number", head_dim);
  const int64_t n = int64_t(positions.size()), pairs = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i)
    inv_freq[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
  HostTensor t(DType::F32, Shape{n, pairs, 2});
  float* out = t.f32();
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < pairs; ++i) {
      const float angle = inv_freq[size_t(i)] * positions[size_t(k)];
      out[(k * pairs + i) * 2] = std::cos(angle);
      out[(k * pairs + i) * 2 + 1] = std::sin(angle);
    }
  return t;
}

}  // namespace hr
