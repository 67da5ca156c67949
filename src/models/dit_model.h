// What the transformer families' diffusion models (Flux, Z-Image) share: the DiffusionModel
// members a DiT holds (its config, compute dtype, weights, file) and the tail of their factories
// (UNETLoader's weight_dtype into the config's storage, the weights loaded under the prefix).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "models/checkpoint.h"
#include "models/diffusion_model.h"
#include "models/family.h"
#include "models/weight_format.h"
#include "models/weight_load.h"

namespace hr {

// A DiT family's model: Config has `storage` and `storage_key` (Note [fp8 weights] in
// graph/graph.h). Subclasses add min_device_bytes and run.
template <class Config>
class DiTModel : public DiffusionModel {
 public:
  DiTModel(const ModelFamily& family, Config config, DType dtype)
      : family_(&family), config(std::move(config)), dtype(dtype) {}

  const ModelFamily& family() const override { return *family_; }
  WeightSet& weights() override { return store; }
  ModelSamplingSpec sampling() const override { return family_->sampling; }

 private:
  const ModelFamily* family_;

 public:
  Config config;
  DType dtype = DType::F32;  // compute dtype
  WeightSet store;
  std::string path;  // the file it was loaded from (messages)
};

// The diffusion weights' formats of `load` (UNETLoader's weight_dtype, fp8 _fast), set into
// cfg's storage when any weight is stored otherwise than in the compute dtype.
template <class Config>
Result<WeightFormats> dit_weight_formats(const ComponentLoad& load, Config& cfg) {
  HR_ASSIGN_OR_RETURN(WeightFormats formats,
                      weight_formats_for(*load.file, load.info.diffusion_prefix,
                                         load.options.diffusion_weight_dtype));
  if (load.options.diffusion_fp8_fast) formats = weight_formats_fast(std::move(formats));
  if (formats.any()) {
    cfg.storage = formats.storage;
    cfg.storage_key = weight_storage_key(formats.storage.get());
  }
  return formats;
}

// Makes the Model (a DiTModel) of `cfg` and loads its weights under the diffusion prefix;
// `what` names it in errors ("the Flux diffusion model").
template <class Model, class Config>
Result<std::unique_ptr<DiffusionModel>> dit_model_load(const ComponentLoad& load, Config cfg,
                                                       const WeightFormats& formats,
                                                       const char* what) {
  auto model =
      std::make_unique<Model>(*load.info.family, std::move(cfg), load.options.diffusion_dtype);
  model->path = load.file->path();
  HR_TRY(weights_load_prefix(model->store, load.file, load.info.diffusion_prefix,
                             load.options.diffusion_dtype, &formats)
             .with_context(std::string("loading ") + what));
  if (formats.any()) model->store.set_storage(formats.storage);
  return std::unique_ptr<DiffusionModel>(std::move(model));
}

}  // namespace hr
