// The SD families' diffusion-model component: the LDM/SGM UNet with its weights, building SDXL's
// adm vector y from a conditioning entry's pooled output and size extras.
#pragma once

#include <memory>

#include "models/diffusion_model.h"
#include "models/sd/unet.h"

namespace hr {

struct LoadedModel;

class SDUNet final : public DiffusionModel {
 public:
  SDUNet(const ModelFamily& family, UNetConfig config, DType dtype, Prediction prediction)
      : family_(&family), config(std::move(config)), dtype(dtype), prediction(prediction) {}

  const ModelFamily& family() const override { return *family_; }
  WeightSet& weights() override { return store; }
  ModelSamplingSpec sampling() const override;
  Result<uint64_t> min_device_bytes(Executor& ex, const Shape& latent, int64_t tokens) override;
  Result<HostTensor> run(Executor& ex, WeightSource& weights, const HostTensor& x,
                         const HostTensor& timesteps,
                         std::span<const CondEntry* const> entries) override;

 private:
  const ModelFamily* family_;

 public:
  UNetConfig config;
  DType dtype = DType::F32;  // compute dtype
  Prediction prediction = Prediction::EPS;
  WeightSet store;
};

// SDXL's adm vector for one entry, with ComfyUI's defaults (SDXL.encode_adm: 768 x 768, no
// crop, target = size; the refiner form when the entry carries an aesthetic score): [batch, adm].
Result<HostTensor> sdxl_adm_of(const CondEntry& entry, int64_t adm, int64_t batch);

// The family's factory: the UNet's config from the tensors, its heads from the options, the
// settings or detection, its weights converted to options.diffusion_dtype.
Result<std::unique_ptr<DiffusionModel>> sd_unet_create(const ComponentLoad& load);

// The UNet of a loaded SD model, or null (tests, benchmarks and `headroom models`).
SDUNet* sd_unet(LoadedModel& model);
// unet_run on the component (context and y given directly, as the goldens hold them).
Result<HostTensor> unet_run(Executor& ex, SDUNet& unet, const HostTensor& x,
                            const HostTensor& timesteps, const HostTensor& context,
                            const HostTensor* y = nullptr);

}  // namespace hr
