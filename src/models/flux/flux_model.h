// The Flux family's diffusion-model component: the DiT (flux_dit.h) as a DiffusionModel, building
// its img / txt / y / guidance / pe inputs from a latent and conditioning entries as ComfyUI's
// model_base.Flux and Flux._forward do.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "models/diffusion_model.h"
#include "models/dit_model.h"
#include "models/flux/flux_dit.h"
#include "models/model_config.h"

namespace hr {

struct LoadedModel;

// One DiT call's inputs on the host, f32: the latent x [B, C, H, W] (any H, W: padded to even
// sizes as ComfyUI does), timesteps [B] (sigma, as the sampler's ModelSampling gives it), txt
// [B, L, context_in_dim], y [B, vec_in_dim] and, for a guidance-distilled model, guidance [B]
// (none: the guidance embedding is skipped, as ComfyUI's forward_orig does for guidance=None).
struct FluxInputs {
  const HostTensor* x = nullptr;
  const HostTensor* timesteps = nullptr;
  const HostTensor* txt = nullptr;
  const HostTensor* y = nullptr;
  const HostTensor* guidance = nullptr;
};

// Runs the DiT for the inputs' shapes (graphs kept per configuration and shape as the UNet's,
// Note [graph reuse] in graph/graph_cache.cpp); returns the model output [B, C, H, W] f32.
Result<HostTensor> flux_dit_run(Executor& ex, const FluxConfig& cfg, WeightSource& weights,
                                DType dtype, const FluxInputs& in);

// Executor::min_device_bytes of the DiT graph for a [B, C, h, w] latent and `tokens` text tokens.
Result<uint64_t> flux_dit_min_device_bytes(Executor& ex, const FluxConfig& cfg, const Shape& latent,
                                           int64_t tokens, DType dtype);

class FluxModel final : public DiTModel<FluxConfig> {
 public:
  using DiTModel::DiTModel;
  Result<uint64_t> min_device_bytes(Executor& ex, const Shape& latent, int64_t tokens) override;
  // Note [flux entries]: entries that ComfyUI would not batch together run one call each.
  Result<HostTensor> run(Executor& ex, WeightSource& weights, const HostTensor& x,
                         const HostTensor& timesteps,
                         std::span<const CondEntry* const> entries) override;
};

// The factory of the flux families: the configuration from the tensors (Fill and other input
// widths refused by name), the weights converted to options.diffusion_dtype (or kept in fp8).
Result<std::unique_ptr<DiffusionModel>> flux_model_create(const ComponentLoad& load);

// Sets cfg.axes_dim from settings.flux_axes_dim when given (Note [flux rope axes]);
// INVALID_ARGUMENT naming `path` and the setting's source when they do not fit the heads.
Status flux_axes_apply(FluxConfig& cfg, const ModelSettings& settings, const std::string& path);

// The DiT of a loaded Flux model, or null.
FluxModel* flux_model(LoadedModel& model);

}  // namespace hr
