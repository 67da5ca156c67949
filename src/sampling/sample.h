// The KSampler flow (comfy.sample.sample -> KSampler -> KSAMPLER.sample): noise scaling of the
// initial latent, the ancestral noise generator, the sampler loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "sampling/model_sampling.h"
#include "sampling/samplers.h"
#include "sampling/torch_rng.h"

namespace hr {

struct SampleParams {
  std::string sampler = "euler";
  std::vector<float> sigmas;  // ksampler_sigmas() or calculate_sigmas()
  uint64_t seed = 0;          // the KSampler seed: ancestral noise generator, SDE Brownian tree
  // Device of ComfyUI's latent, which picks the ancestral generator (default_noise_sampler
  // uses torch.Generator(device=x.device)): CPU = mt19937, CUDA = Philox.
  NoiseDevice noise_device = NoiseDevice::CPU;
  CUDAGridLimits cuda_limits;
  double eta = 1.0;
  double s_noise = 1.0;
  StepCallback callback;
  InterruptFn interrupted;
};

// x = noise_scaling(sigmas[0], noise, latent, max_denoise) then the sampler. `latent` is in
// model space (ComfyUI's process_latent_in, i.e. times the latent scale factor, is the caller's
// job; ComfyUI skips it for an all-zero latent) and may be empty (zeros). `noise` is
// prepare_noise(latent shape, seed). Empty sigmas return the latent unchanged. The result is
// in model space, after inverse_noise_scaling(sigmas.back()) (the identity for EPS/V; for a
// flow model / (1 - sigma), which is 1 when the schedule ends at 0).
Result<HostTensor> sample(const ModelSampling& ms, const DenoiseFn& denoise,
                          const HostTensor& noise, const HostTensor& latent,
                          const SampleParams& params);

// Step 2 of the flow alone: the sampler's starting x.
HostTensor sample_initial_x(const ModelSampling& ms, const HostTensor& noise,
                            const HostTensor& latent, float sigma0);

}  // namespace hr
