// SDUNet: the UNet as a DiffusionModel (context batching, SDXL's adm vector) and its factory.
#include "models/weight_load.h"
#include "models/sd/sd_unet.h"

#include "models/checkpoint.h"
#include "models/sd/sdxl_adm.h"

namespace hr {

ModelSamplingSpec SDUNet::sampling() const {
  ModelSamplingSpec s = family_->sampling;
  s.prediction = prediction;
  return s;
}

Result<uint64_t> SDUNet::min_device_bytes(Executor& ex, const Shape& latent, int64_t tokens) {
  return unet_min_device_bytes(ex, config, latent[0], latent[2], latent[3], tokens, dtype);
}

Result<HostTensor> sdxl_adm_of(const CondEntry& e, int64_t adm, int64_t batch) {
  const HostTensor* pooled = e.pooled();
  if (!pooled) return make_error(ErrorCode::INVALID_ARGUMENT, "SDXL needs a pooled output");
  const CondExtras& x = e.extras;
  double w = double(x.get_int(kCondWidth).value_or(768));
  double h = double(x.get_int(kCondHeight).value_or(768));
  std::vector<double> v = {h, w, double(x.get_int(kCondCropH).value_or(0)),
                           double(x.get_int(kCondCropW).value_or(0))};
  if (std::optional<double> a = x.get_float(kCondAestheticScore)) {
    v.push_back(*a);
  } else {
    v.push_back(double(x.get_int(kCondTargetHeight).value_or(int64_t(h))));
    v.push_back(double(x.get_int(kCondTargetWidth).value_or(int64_t(w))));
  }
  return sdxl_adm_vector(*pooled, v, adm, batch);
}

Result<HostTensor> SDUNet::run(Executor& ex, WeightSource& weights, const HostTensor& x,
                               const HostTensor& timesteps,
                               std::span<const CondEntry* const> entries) {
  const int64_t per = x.shape()[0] / int64_t(entries.size());
  HostTensor context = cond_context_batch(entries, per);
  const bool adm = config.adm_in_channels > 0;
  HostTensor y;
  for (size_t i = 0; adm && i < entries.size(); ++i) {
    HR_ASSIGN_OR_RETURN(HostTensor yy, sdxl_adm_of(*entries[i], config.adm_in_channels, per));
    y = i == 0 ? std::move(yy) : tensor_concat0(y, yy);
  }
  return unet_run(ex, config, weights, dtype, x, timesteps, context, adm ? &y : nullptr);
}

Result<std::unique_ptr<DiffusionModel>> sd_unet_create(const ComponentLoad& load) {
  const CheckpointInfo& ci = load.info;
  const LoadOptions& options = load.options;
  HR_ASSIGN_OR_RETURN(UNetConfig cfg, unet_config_detect(*load.file, ci.diffusion_prefix));
  // Head layout: caller override, else the settings (config file, metadata), else the
  // detected default (see unet_config_detect).
  std::optional<int> heads = options.num_heads, head_ch = options.num_head_channels;
  if (!heads && !head_ch) {
    heads = ci.settings.unet_num_heads.value;
    head_ch = ci.settings.unet_num_head_channels.value;
  }
  if (heads && *heads > 0) {
    cfg.num_heads = *heads;
    cfg.num_head_channels = -1;
  } else if (head_ch && *head_ch > 0) {
    cfg.num_heads = -1;
    cfg.num_head_channels = *head_ch;
  }
  HR_ASSIGN_OR_RETURN(WeightFormats formats, weight_formats_for(*load.file, ci.diffusion_prefix,
                                                                options.diffusion_weight_dtype));
  if (options.diffusion_fp8_fast) formats = weight_formats_fast(std::move(formats));
  if (formats.any()) {
    cfg.storage = formats.storage;
    cfg.storage_key = weight_storage_key(formats.storage.get());
  }
  auto unet = std::make_unique<SDUNet>(*ci.family, std::move(cfg), options.diffusion_dtype,
                                       ci.prediction);
  HR_TRY(weights_load_prefix(unet->store, load.file, ci.diffusion_prefix, options.diffusion_dtype,
                             &formats)
             .with_context("loading the UNet"));
  if (formats.any()) unet->store.set_storage(formats.storage);
  return std::unique_ptr<DiffusionModel>(std::move(unet));
}

SDUNet* sd_unet(LoadedModel& model) { return dynamic_cast<SDUNet*>(model.diffusion.get()); }

Result<HostTensor> unet_run(Executor& ex, SDUNet& unet, const HostTensor& x,
                            const HostTensor& timesteps, const HostTensor& context,
                            const HostTensor* y) {
  return unet_run(ex, unet.config, unet.store, unet.dtype, x, timesteps, context, y);
}

}  // namespace hr
