// k-diffusion samplers as ComfyUI runs them (comfy/k_diffusion/sampling.py), over host float32
// latents with the model as a callback that returns the (CFG-combined) denoised tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "sampling/model_sampling.h"
#include "sampling/torch_rng.h"

namespace hr {

// x (model space, the sampler's current latent) and sigma -> denoised estimate of x0.
using DenoiseFn = std::function<Result<HostTensor>(const HostTensor& x, float sigma)>;
// Called once per step after its first model call, before the update (ComfyUI's callback).
using StepCallback =
    std::function<void(int step, int total, const HostTensor& x, const HostTensor& denoised)>;
// Polled before every model call; true stops sampling with CANCELLED.
using InterruptFn = std::function<bool()>;

struct SamplerOptions {
  double eta = 1.0;      // ancestral / SDE noise amount (ComfyUI default 1)
  double s_noise = 1.0;  // noise multiplier
  // Source of the ancestral noise (ComfyUI default_noise_sampler: a generator seeded with the
  // sampler seed, one torch.randn(x.shape) per draw). Needed by the samplers that
  // sampler_needs_noise() names.
  NoiseGenerator* noise = nullptr;
  // The KSampler seed (ComfyUI's extra_args["seed"]): entropy of the Brownian tree that
  // dpmpp_sde and dpmpp_2m_sde draw their noise from (Note [SDE noise] in samplers.cpp).
  uint64_t seed = 0;
  // Needed by lcm (noise_scaling); a CONST prediction picks the flow forms of the samplers
  // that have one (Note [flow samplers]); null: not a flow model.
  const ModelSampling* model_sampling = nullptr;
  StepCallback callback;
  InterruptFn interrupted;
};

// The sampler names implemented here, in ComfyUI's order.
const std::vector<std::string>& sampler_names();
bool sampler_is_implemented(std::string_view name);
// Samplers that draw noise from SamplerOptions::noise (the SDE samplers use a Brownian tree
// seeded with SamplerOptions::seed instead).
bool sampler_needs_noise(std::string_view name);

// Samplers whose ComfyUI form differs for flow-matching (CONST) model sampling; sampler_run runs
// that form when SamplerOptions::model_sampling predicts CONST (Note [flow samplers]).
bool sampler_branches_on_flow(std::string_view name);

// Runs sampler `name` from x (already noised: noise_scaling applied) over sigmas; returns the
// final latent. UNSUPPORTED for names not implemented, CANCELLED when interrupted, and any
// error the denoiser returns.
Result<HostTensor> sampler_run(std::string_view name, const DenoiseFn& denoise, HostTensor x,
                               const std::vector<float>& sigmas, const SamplerOptions& options);

// Sigma down / sigma up of an ancestral step (k-diffusion get_ancestral_step), in float32.
struct AncestralStep {
  float down;
  float up;
};
AncestralStep ancestral_step(float sigma_from, float sigma_to, float eta = 1.0f);

}  // namespace hr
