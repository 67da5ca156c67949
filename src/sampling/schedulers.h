// ComfyUI's noise schedules (comfy/samplers.py SCHEDULER_HANDLERS) and KSampler's step
// handling (denoise < 1, discarded penultimate sigma, start/end steps).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sampling/model_sampling.h"

namespace hr {

// In ComfyUI's order: simple, sgm_uniform, karras, exponential, ddim_uniform, beta, normal,
// linear_quadratic, kl_optimal.
const std::vector<std::string>& scheduler_names();

// comfy.samplers.calculate_sigmas: float32 sigmas, normally steps + 1 values ending in 0
// (ddim_uniform and beta can give other counts). INVALID_ARGUMENT for an unknown name.
Result<std::vector<float>> calculate_sigmas(const ModelSampling& ms,
                                            std::string_view scheduler, int steps);

// The individual schedules (double inputs as ComfyUI passes Python floats).
std::vector<float> sigmas_karras(int n, double sigma_min, double sigma_max, double rho = 7.0);
std::vector<float> sigmas_exponential(int n, double sigma_min, double sigma_max);
std::vector<float> sigmas_kl_optimal(int n, double sigma_min, double sigma_max);

// The inverse CDF of Beta(alpha, beta) in double precision (scipy.stats.beta.ppf).
double beta_ppf(double p, double alpha, double beta);

// Samplers whose KSampler computes steps + 1 sigmas and drops the second-to-last one.
bool sampler_discards_penultimate_sigma(std::string_view sampler);

// KSampler sigmas (comfy.samplers.KSampler.set_steps + sample): denoise < 1 uses
// calculate_sigmas(int(steps / denoise))[-(steps + 1):]; denoise <= 0 gives no sigmas;
// last_step / start_step / force_full_denoise as KSamplerAdvanced passes them (-1 = unset).
Result<std::vector<float>> ksampler_sigmas(const ModelSampling& ms,
                                           std::string_view scheduler, std::string_view sampler,
                                           int steps, double denoise = 1.0, int start_step = -1,
                                           int last_step = -1, bool force_full_denoise = false);

}  // namespace hr
