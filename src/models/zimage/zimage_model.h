// The Z-Image family's diffusion-model component: the DiT (zimage_dit.h) as a DiffusionModel,
// taking its caption context from conditioning entries as ComfyUI's model_base.Lumina2 does.
#pragma once

#include <memory>
#include <string>

#include "models/diffusion_model.h"
#include "models/dit_model.h"
#include "models/zimage/zimage_config.h"

namespace hr {

struct LoadedModel;

class ZImageModel final : public DiTModel<ZImageConfig> {
 public:
  using DiTModel::DiTModel;
  Result<uint64_t> min_device_bytes(Executor& ex, const Shape& latent, int64_t tokens) override;
  // Note [z-image entries]: entries whose contexts differ in length run one call each.
  Result<HostTensor> run(Executor& ex, WeightSource& weights, const HostTensor& x,
                         const HostTensor& timesteps,
                         std::span<const CondEntry* const> entries) override;
};

// The factory of the Z-Image family: the configuration from the tensors, the weights converted
// to options.diffusion_dtype (or kept in fp8: UNETLoader's weight_dtype).
Result<std::unique_ptr<DiffusionModel>> zimage_model_create(const ComponentLoad& load);

// The DiT of a loaded Z-Image model, or null.
ZImageModel* zimage_model(LoadedModel& model);

}  // namespace hr
