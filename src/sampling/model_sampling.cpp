// Model sampling: schedule tables in ComfyUI's precision and the per-sigma arithmetic in float32,
// in the order ComfyUI's tensor expressions evaluate it (Note [model sampling]).
#include "sampling/model_sampling.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace hr {

const char* sampling_prediction_name(SamplingPrediction p) {
  switch (p) {
    case SamplingPrediction::EPS: return "eps";
    case SamplingPrediction::V_PREDICTION: return "v_prediction";
    case SamplingPrediction::CONST: return "const";
  }
  return "?";
}

ModelSamplingDiscrete::ModelSamplingDiscrete(SamplingPrediction prediction, int timesteps,
                                             double linear_start, double linear_end)
    : ModelSampling(prediction) {
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

HostTensor ModelSampling::calculate_input(const HostTensor& x, float sigma) const {
  if (prediction_ == SamplingPrediction::CONST) return x.clone();
  HostTensor out(x.desc());
  const float sd = sigma_data();
  const float denom = std::sqrt(sigma * sigma + sd * sd);
  const float* a = x.f32();
  float* o = out.f32();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] / denom;
  return out;
}

HostTensor ModelSampling::calculate_denoised(float sigma, const HostTensor& model_output,
                                                     const HostTensor& model_input) const {
  assert(model_output.numel() == model_input.numel());
  HostTensor out(model_input.desc());
  const float* m = model_output.f32();
  const float* x = model_input.f32();
  float* o = out.f32();
  const int64_t n = model_input.numel();
  if (prediction_ != SamplingPrediction::V_PREDICTION) {  // EPS and CONST
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

HostTensor ModelSampling::noise_scaling(float sigma, const HostTensor& noise,
                                                const HostTensor& latent, bool max_denoise) const {
  HostTensor out(noise.desc());
  const float* nz = noise.f32();
  const float* l = latent.empty() ? nullptr : latent.f32();
  float* o = out.f32();
  if (prediction_ == SamplingPrediction::CONST) {
    const float keep = 1.0f - sigma;
    for (int64_t i = 0; i < noise.numel(); ++i) o[i] = sigma * nz[i] + keep * (l ? l[i] : 0.0f);
    return out;
  }
  const float scale = max_denoise ? std::sqrt(1.0f + sigma * sigma) : sigma;
  for (int64_t i = 0; i < noise.numel(); ++i) o[i] = nz[i] * scale + (l ? l[i] : 0.0f);
  return out;
}

HostTensor ModelSampling::inverse_noise_scaling(float sigma, HostTensor latent) const {
  if (prediction_ != SamplingPrediction::CONST) return latent;
  const float keep = 1.0f - sigma;
  float* o = latent.f32();
  for (int64_t i = 0; i < latent.numel(); ++i) o[i] = o[i] / keep;
  return latent;
}

bool ModelSampling::is_max_denoise(float sigma0) const {
  const double mx = sigma_max(), s = sigma0;
  // math.isclose(max_sigma, sigma, rel_tol=1e-05) or sigma > max_sigma
  return std::fabs(mx - s) <= 1e-5 * std::max(std::fabs(mx), std::fabs(s)) || s > mx;
}

// Note [flow arithmetic]: ComfyUI's flow schedule is float32 tensor arithmetic with Python
// floats as scalars (cast to float32), evaluated as a t / (1 + (a - 1) t); percent_to_sigma is
// Python float (double) arithmetic.
namespace {
float time_snr_shift_f32(double shift, float t) {
  if (shift == 1.0) return t;
  return float(shift) * t / (1.0f + float(shift - 1.0) * t);
}
}  // namespace

ModelSamplingDiscreteFlow::ModelSamplingDiscreteFlow(double shift, double multiplier,
                                                     SamplingPrediction prediction, int timesteps)
    : ModelSampling(prediction), shift_(shift), multiplier_(multiplier) {
  sigmas_.resize(size_t(timesteps));
  for (int i = 1; i <= timesteps; ++i) {
    // (arange(1, n + 1) / n) * multiplier in float32, then sigma() of it.
    const float t = float(i) / float(timesteps) * float(multiplier);
    sigmas_[size_t(i - 1)] = sigma(t);
  }
}

float ModelSamplingDiscreteFlow::timestep(float sigma) const { return sigma * float(multiplier_); }

float ModelSamplingDiscreteFlow::sigma(float timestep) const {
  return time_snr_shift_f32(shift_, timestep / float(multiplier_));
}

float ModelSamplingDiscreteFlow::percent_to_sigma(double percent) const {
  if (percent <= 0.0) return 1.0f;
  if (percent >= 1.0) return 0.0f;
  const double t = 1.0 - percent;
  if (shift_ == 1.0) return float(t);
  return float(shift_ * t / (1.0 + (shift_ - 1.0) * t));
}

// Note [flux arithmetic]: flux_time_shift(mu, 1, t) = math.exp(mu) / (math.exp(mu) + (1 / t -
// 1) ** 1.0). On a float32 tensor t, a Python float divided by a tensor is the tensor's
// reciprocal times the float (torch's __rtruediv__), the scalars are cast to float32 and ** 1.0
// is the identity; percent_to_sigma gets a Python float and computes in double.
namespace {
float flux_time_shift_f32(double mu, float t) {
  const float e = float(std::exp(mu));
  const float inv_t = 1.0f / t;
  const float denom = e + (inv_t - 1.0f);
  return (1.0f / denom) * e;
}
}  // namespace

ModelSamplingFlux::ModelSamplingFlux(double shift, int timesteps)
    : ModelSampling(SamplingPrediction::CONST), shift_(shift) {
  sigmas_.resize(size_t(timesteps));
  for (int i = 1; i <= timesteps; ++i) {
    // torch.arange(1, n + 1) / n in float32, then sigma() of it.
    sigmas_[size_t(i - 1)] = sigma(float(i) / float(timesteps));
  }
}

float ModelSamplingFlux::timestep(float sigma) const { return sigma; }

float ModelSamplingFlux::sigma(float timestep) const {
  return flux_time_shift_f32(shift_, timestep);
}

float ModelSamplingFlux::percent_to_sigma(double percent) const {
  if (percent <= 0.0) return 1.0f;
  if (percent >= 1.0) return 0.0f;
  const double e = std::exp(shift_);
  return float(e / (e + (1.0 / (1.0 - percent) - 1.0)));
}

double flux_resolution_shift(double max_shift, double base_shift, int64_t width, int64_t height) {
  const double x1 = 256, x2 = 4096;
  const double mm = (max_shift - base_shift) / (x2 - x1);
  const double b = base_shift - mm * x1;
  return (double(width) * double(height) / (8 * 8 * 2 * 2)) * mm + b;
}

std::unique_ptr<ModelSampling> model_sampling_create(const ModelSamplingSpec& spec) {
  switch (spec.kind) {
    case ModelSamplingSpec::Kind::FLOW:
      return std::make_unique<ModelSamplingDiscreteFlow>(spec.shift, spec.multiplier);
    case ModelSamplingSpec::Kind::FLUX:
      return std::make_unique<ModelSamplingFlux>(spec.shift);
    case ModelSamplingSpec::Kind::DISCRETE:
      break;
  }
  return std::make_unique<ModelSamplingDiscrete>(spec.prediction == Prediction::V
                                                     ? SamplingPrediction::V_PREDICTION
                                                     : SamplingPrediction::EPS);
}

}  // namespace hr
