// ModelSamplingDiscrete (ComfyUI comfy/model_sampling.py): the discrete DDPM noise table,
// sigma <-> timestep, and the EPS / v-prediction input scaling, denoised value and noise scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hr {

// What the network predicts (ComfyUI model_sampling EPS / V_PREDICTION). Named apart from
// models/checkpoint.h Prediction, which describes a checkpoint; the caller maps one to the other.
enum class SamplingPrediction : uint8_t { EPS, V_PREDICTION };

class ModelSamplingDiscrete {
 public:
  // betas = linspace(sqrt(linear_start), sqrt(linear_end), timesteps, float64)^2 (ComfyUI's
  // "linear" schedule), acp = cumprod(1 - betas), sigmas = sqrt((1 - acp) / acp) in float32,
  // log_sigmas = log(float64 sigmas) in float32.
  explicit ModelSamplingDiscrete(SamplingPrediction prediction = SamplingPrediction::EPS,
                                 int timesteps = 1000, double linear_start = 0.00085,
                                 double linear_end = 0.012);

  SamplingPrediction prediction() const { return prediction_; }
  const std::vector<float>& sigmas() const { return sigmas_; }
  const std::vector<float>& log_sigmas() const { return log_sigmas_; }
  float sigma_min() const { return sigmas_.front(); }
  float sigma_max() const { return sigmas_.back(); }
  float sigma_data() const { return 1.0f; }

  // argmin_t |log(sigma) - log_sigmas[t]| (first minimum), as a float the UNet takes.
  float timestep(float sigma) const;
  // t clamped to [0, n-1]; exp of the linear interpolation of log_sigmas.
  float sigma(float timestep) const;
  // ComfyUI percent_to_sigma (0 -> a huge sigma, 1 -> 0).
  float percent_to_sigma(double percent) const;

  // x / sqrt(sigma^2 + sigma_data^2).
  HostTensor calculate_input(const HostTensor& x, float sigma) const;
  // EPS: x - out * sigma; V: x sd^2 / (s^2 + sd^2) - out s sd / sqrt(s^2 + sd^2).
  HostTensor calculate_denoised(float sigma, const HostTensor& model_output,
                                const HostTensor& model_input) const;
  // max_denoise: noise * sqrt(1 + sigma^2) + latent; else noise * sigma + latent.
  HostTensor noise_scaling(float sigma, const HostTensor& noise, const HostTensor& latent,
                           bool max_denoise) const;
  // ComfyUI Sampler.max_denoise: sigma0 is close to sigma_max (rel 1e-5) or above it.
  bool is_max_denoise(float sigma0) const;

 private:
  SamplingPrediction prediction_;
  std::vector<float> sigmas_;
  std::vector<float> log_sigmas_;
};

}  // namespace hr
