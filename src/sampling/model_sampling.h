// Model sampling as a type (ComfyUI comfy/model_sampling.py): how a network's sigma schedule
// maps to timesteps (discrete DDPM table, flow matching with a shift) and how its prediction
// (eps, v, or the flow velocity "CONST") turns into a denoised value. Samplers, schedulers and
// CFG take the abstract ModelSampling; a model family says which one its network needs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "models/family.h"

namespace hr {

// What the network predicts (ComfyUI's EPS / V_PREDICTION / CONST mixins). CONST is rectified
// flow: the model predicts the velocity noise - x0 and x_t = sigma * noise + (1 - sigma) * x0.
// Named apart from models/ Prediction, which describes a checkpoint.
enum class SamplingPrediction : uint8_t { EPS, V_PREDICTION, CONST };
const char* sampling_prediction_name(SamplingPrediction p);  // "eps", "v_prediction", "const"

// Note [model sampling]
// ComfyUI composes a schedule class (ModelSamplingDiscrete, ModelSamplingDiscreteFlow, ...) with
// a prediction mixin. Here the schedule is the subclass (timestep <-> sigma, percent_to_sigma,
// the table the schedulers index) and the prediction a value of the base, whose arithmetic
// (calculate_input, calculate_denoised, noise_scaling, inverse_noise_scaling) follows ComfyUI's
// float32 tensor expressions in their order, so that EPS/V results are bitwise what they were.
class ModelSampling {
 public:
  virtual ~ModelSampling() = default;

  SamplingPrediction prediction() const { return prediction_; }
  // The schedule's sigma table in ascending order (ComfyUI's `sigmas` buffer).
  const std::vector<float>& sigmas() const { return sigmas_; }
  float sigma_min() const { return sigmas_.front(); }
  float sigma_max() const { return sigmas_.back(); }
  float sigma_data() const { return 1.0f; }

  // The network's timestep for sigma, and back.
  virtual float timestep(float sigma) const = 0;
  virtual float sigma(float timestep) const = 0;
  // ComfyUI percent_to_sigma: 0 -> the start of sampling, 1 -> 0.
  virtual float percent_to_sigma(double percent) const = 0;

  // The network's input for x at sigma: EPS/V x / sqrt(sigma^2 + sigma_data^2); CONST x.
  HostTensor calculate_input(const HostTensor& x, float sigma) const;
  // EPS and CONST: x - out * sigma; V: x sd^2 / (s^2 + sd^2) - out s sd / sqrt(s^2 + sd^2).
  HostTensor calculate_denoised(float sigma, const HostTensor& model_output,
                                const HostTensor& model_input) const;
  // EPS/V: noise * (max_denoise ? sqrt(1 + sigma^2) : sigma) + latent;
  // CONST: sigma * noise + (1 - sigma) * latent. An empty latent counts as zeros.
  HostTensor noise_scaling(float sigma, const HostTensor& noise, const HostTensor& latent,
                           bool max_denoise) const;
  // The sampler's last x back to a latent: EPS/V unchanged; CONST latent / (1 - sigma).
  HostTensor inverse_noise_scaling(float sigma, HostTensor latent) const;
  // ComfyUI KSAMPLER.max_denoise: sigma0 is close to sigma_max (rel 1e-5) or above it.
  bool is_max_denoise(float sigma0) const;

 protected:
  explicit ModelSampling(SamplingPrediction prediction) : prediction_(prediction) {}
  std::vector<float> sigmas_;

 private:
  SamplingPrediction prediction_;
};

// ComfyUI ModelSamplingDiscrete: the 1000-step DDPM table of SD1/SD2/SDXL.
class ModelSamplingDiscrete final : public ModelSampling {
 public:
  // betas = linspace(sqrt(linear_start), sqrt(linear_end), timesteps, float64)^2 (ComfyUI's
  // "linear" schedule), acp = cumprod(1 - betas), sigmas = sqrt((1 - acp) / acp) in float32,
  // log_sigmas = log(float64 sigmas) in float32.
  explicit ModelSamplingDiscrete(SamplingPrediction prediction = SamplingPrediction::EPS,
                                 int timesteps = 1000, double linear_start = 0.00085,
                                 double linear_end = 0.012);

  const std::vector<float>& log_sigmas() const { return log_sigmas_; }
  // argmin_t |log(sigma) - log_sigmas[t]| (first minimum), as a float the UNet takes.
  float timestep(float sigma) const override;
  // t clamped to [0, n-1]; exp of the linear interpolation of log_sigmas.
  float sigma(float timestep) const override;
  // 0 -> a huge sigma (999999999.9), 1 -> 0, else sigma((1 - percent) * 999).
  float percent_to_sigma(double percent) const override;

 private:
  std::vector<float> log_sigmas_;
};

// ComfyUI ModelSamplingDiscreteFlow (SD3, AuraFlow, Lumina2/Z-Image, Wan, Qwen-Image): sigma(t) =
// time_snr_shift(shift, t / multiplier) with time_snr_shift(a, t) = a t / (1 + (a - 1) t), and
// timestep(sigma) = sigma * multiplier; the table holds sigma(i / timesteps * multiplier) for
// i = 1..timesteps.
class ModelSamplingDiscreteFlow final : public ModelSampling {
 public:
  explicit ModelSamplingDiscreteFlow(double shift = 1.0, double multiplier = 1000.0,
                                     SamplingPrediction prediction = SamplingPrediction::CONST,
                                     int timesteps = 1000);

  double shift() const { return shift_; }
  double multiplier() const { return multiplier_; }
  float timestep(float sigma) const override;
  float sigma(float timestep) const override;
  // 0 -> 1, 1 -> 0, else time_snr_shift(shift, 1 - percent) in double (Python floats).
  float percent_to_sigma(double percent) const override;

 private:
  double shift_;
  double multiplier_;
};

// ComfyUI ModelSamplingFlux (Flux dev; the ModelSamplingFlux node): sigma(t) =
// flux_time_shift(shift, 1, t) = e^shift / (e^shift + (1 / t - 1)), timestep(sigma) = sigma (the
// DiT scales it by 1000 itself); the table holds sigma(i / 10000) for i = 1..10000.
class ModelSamplingFlux final : public ModelSampling {
 public:
  explicit ModelSamplingFlux(double shift = 1.15, int timesteps = 10000);

  double shift() const { return shift_; }
  float timestep(float sigma) const override;
  float sigma(float timestep) const override;
  // 0 -> 1, 1 -> 0, else flux_time_shift(shift, 1, 1 - percent) in double (Python floats).
  float percent_to_sigma(double percent) const override;

 private:
  double shift_;
};

// ComfyUI's ModelSamplingFlux node: the shift linear in the image's 2x2-patch token count,
// base_shift at 256 tokens and max_shift at 4096 (Python float arithmetic).
double flux_resolution_shift(double max_shift, double base_shift, int64_t width, int64_t height);

// The ModelSampling a family's (or a patched model's) spec names (comfy/model_base.py
// model_sampling): DISCRETE eps / v, FLOW and FLUX with CONST.
std::unique_ptr<ModelSampling> model_sampling_create(const ModelSamplingSpec& spec);

}  // namespace hr
