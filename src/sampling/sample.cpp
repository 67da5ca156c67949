// The KSampler flow over the sampler loops.
#include "sampling/sample.h"

namespace hr {

HostTensor sample_initial_x(const ModelSampling& ms, const HostTensor& noise,
                            const HostTensor& latent, float sigma0) {
  return ms.noise_scaling(sigma0, noise, latent, ms.is_max_denoise(sigma0));
}

Result<HostTensor> sample(const ModelSampling& ms, const DenoiseFn& denoise,
                          const HostTensor& noise, const HostTensor& latent,
                          const SampleParams& params) {
  if (!latent.empty() && latent.shape() != noise.shape()) {
    return make_error(ErrorCode::INVALID_ARGUMENT, "latent {} and noise {} differ in shape",
                      latent.desc().str(), noise.desc().str());
  }
  if (noise.dtype() != DType::F32 || (!latent.empty() && latent.dtype() != DType::F32)) {
    return Status(ErrorCode::INVALID_ARGUMENT, "sampling works on f32 latents");
  }
  if (params.sigmas.empty()) {
    return latent.empty() ? HostTensor(noise.desc()) : latent.clone();
  }
  if (!sampler_is_implemented(params.sampler)) {
    return make_error(ErrorCode::UNSUPPORTED, "sampler '{}' is not implemented", params.sampler);
  }
  HostTensor x = sample_initial_x(ms, noise, latent, params.sigmas[0]);
  // default_noise_sampler(x, seed): a generator of x's device seeded with the KSampler seed.
  // (The ComfyUI revision of the goldens seeds it with the seed itself, so on the CPU its first
  // draw equals the initial noise; check noise.ancestral_draw0_equals_initial_noise.)
  NoiseGenerator gen(params.seed, params.noise_device, params.cuda_limits);
  SamplerOptions opt;
  opt.eta = params.eta;
  opt.s_noise = params.s_noise;
  opt.seed = params.seed;  // the SDE samplers' Brownian tree (Note [SDE noise])
  opt.noise = &gen;
  opt.model_sampling = &ms;
  opt.callback = params.callback;
  opt.interrupted = params.interrupted;
  HR_ASSIGN_OR_RETURN(HostTensor out,
                      sampler_run(params.sampler, denoise, std::move(x), params.sigmas, opt));
  return ms.inverse_noise_scaling(params.sigmas.back(), std::move(out));
}

}  // namespace hr
