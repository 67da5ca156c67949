// ModelSamplingDiscrete: schedule tables in ComfyUI's precision and the per-sigma arithmetic
// in float32, in the order ComfyUI's tensor expressions evaluate it.
#include "sampling/model_sampling.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace hr {

ModelSamplingDiscrete::ModelSamplingDiscrete(SamplingPrediction prediction, int timesteps,
                                             double linear_start, double linear_end)
    : prediction_(prediction) {
  const double a = std::sqrt(linear_start), b = std::sqrt(linear_end);
  sigmas_.resize(size_t(timesteps));
  log_sigmas_.resize(size_t(timesteps));
  double acp = 1.0;
  const double step = timesteps > 1 ? (b - a) / double(timesteps - 1) : 0.0;
  const int half = timesteps / 2;
  for (int i = 0; i < timesteps; ++i) {
    // torch.linspace (double): start + i*step in the first half, end - (n-1-i)*step after.
    double s = i < half ? a + step * i : b - step * (timesteps - 1 - i);
    double beta = s * s;
    acp *= 1.0 - beta;
    double sigma = std::sqrt((1.0 - acp) / acp);
    sigmas_[size_t(i)] = float(sigma);
    log_sigmas_[size_t(i)] = float(std::log(sigma));
  }
}

float ModelSamplingDiscrete::timestep(float sigma) const {
  const float ls = std::log(sigma);
  size_t best = 0;
  float best_d = INFINITY;
  for (size_t t = 0; t < log_sigmas_.size(); ++t) {
    float d = std::fabs(ls - log_sigmas_[t]);
    if (d < best_d) {
      best_d = d;
      best = t;
    }
  }
  return float(best);
}

float ModelSamplingDiscrete::sigma(float timestep) const {
  const float hi_t = float(log_sigmas_.size() - 1);
  float t = std::clamp(timestep, 0.0f, hi_t);
  const float lo = std::floor(t), hi = std::ceil(t);
  const float w = t - lo;
  const float ls = (1.0f - w) * log_sigmas_[size_t(lo)] + w * log_sigmas_[size_t(hi)];
  return std::exp(ls);
}

float ModelSamplingDiscrete::percent_to_sigma(double percent) const {
  if (percent <= 0.0) return 999999999.9f;
  if (percent >= 1.0) return 0.0f;
  return sigma(float((1.0 - percent) * 999.0));
}

HostTensor ModelSamplingDiscrete::calculate_input(const HostTensor& x, float sigma) const {
  HostTensor out(x.desc());
  const float sd = sigma_data();
  const float denom = std::sqrt(sigma * sigma + sd * sd);
  const float* a = x.f32();
  float* o = out.f32();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] / denom;
  return out;
}

HostTensor ModelSamplingDiscrete::calculate_denoised(float sigma, const HostTensor& model_output,
                                                     const HostTensor& model_input) const {
  assert(model_output.numel() == model_input.numel());
  HostTensor out(model_input.desc());
  const float* m = model_output.f32();
  const float* x = model_input.f32();
  float* o = out.f32();
  const int64_t n = model_input.numel();
  if (prediction_ == SamplingPrediction::EPS) {
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] - m[i] * sigma;
  } else {
    const float sd = sigma_data();
    const float s2 = sigma * sigma + sd * sd;
    const float cx = sd * sd / s2;
    const float cm = sigma * sd / std::sqrt(s2);
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * cx - m[i] * cm;
  }
  return out;
}

HostTensor ModelSamplingDiscrete::noise_scaling(float sigma, const HostTensor& noise,
                                                const HostTensor& latent, bool max_denoise) const {
  HostTensor out(noise.desc());
  const float scale = max_denoise ? std::sqrt(1.0f + sigma * sigma) : sigma;
  const float* nz = noise.f32();
  const float* l = latent.empty() ? nullptr : latent.f32();
  float* o = out.f32();
  for (int64_t i = 0; i < noise.numel(); ++i) o[i] = nz[i] * scale + (l ? l[i] : 0.0f);
  return out;
}

bool ModelSamplingDiscrete::is_max_denoise(float sigma0) const {
  const double mx = sigma_max(), s = sigma0;
  // math.isclose(max_sigma, sigma, rel_tol=1e-05) or sigma > max_sigma
  return std::fabs(mx - s) <= 1e-5 * std::max(std::fabs(mx), std::fabs(s)) || s > mx;
}

}  // namespace hr
